"""Calibration (pure: data in, parameters and fit quality out).

:func:`calibrate` is what ``zionsim calibrate`` runs: it refits the NCCL protocol parameters to
parsed nccl-tests logs (``nccl_fit.fit_from_nccl_logs``) and the compute model to measured
kernel times (``kernel_times.fit_compute``), and returns the topology overlay that holds only the
fitted fields, with a fit report (``docs/calibration.md``).  The fits themselves are in
``fitting``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from zionsim.measure.fitting import bare_cluster, predicted_busbw
from zionsim.network import nccl


@dataclass(frozen=True)
class Calibration:
    """What ``zionsim calibrate`` produces: the overlay's fitted fields and the fit quality.

    ``fields`` are topology fields (``collectives.protocols``, ``compute``); ``points`` has one
    row per measurement (``source``, ``kind`` (op or kernel kind), ``role``, ``x``, ``measured``,
    ``before``, ``after``, ``unit``, ``error_pct``, ``before_error_pct``); ``summary`` one row per
    source and role.
    """

    fields: dict
    points: pd.DataFrame
    summary: list[dict]
    notes: list[str]


def calibrate(cluster, nccl_frames=(), kernels: pd.DataFrame | None = None) -> Calibration:
    """Refit protocol parameters to nccl-tests logs and compute parameters to kernel times."""
    from zionsim.measure.kernel_times import check_gpu, fit_compute
    from zionsim.measure.nccl_fit import fit_from_nccl_logs

    fields, parts, notes = {}, [], []
    if nccl_frames:
        model, report = fit_from_nccl_logs(cluster, list(nccl_frames))
        before = _busbw_before(cluster, report)
        parts.append(
            pd.DataFrame(
                {
                    "source": report["source"],
                    "kind": report["op"],
                    "role": report["role"],
                    "x": report["size_bytes"].astype(float),
                    "measured": report["measured_GBps"],
                    "before": before,
                    "after": report["simulated_GBps"],
                    "unit": "busbw_GBps",
                }
            )
        )
        notes += report.attrs.get("notes", [])
        moved = _protocol_fields(model, nccl.fitted_model(cluster))
        if moved:
            fields["collectives"] = {"protocols": moved}
    if kernels is not None and len(kernels):
        source = kernels.attrs.get("source", "<kernels>")
        check_gpu(cluster.spec.gpu, kernels, source)
        fitted, report = fit_compute(cluster.spec.gpu, kernels)
        parts.append(
            pd.DataFrame(
                {
                    "source": source,
                    "kind": report["kind"],
                    "role": "fit",
                    "x": report["line"].astype(float),
                    "measured": report["measured_us"],
                    "before": report["before_us"],
                    "after": report["after_us"],
                    "unit": "time_us",
                }
            )
        )
        fields["compute"] = _compute_fields(fitted)
    if not parts:
        from zionsim.base.errors import InputError

        raise InputError("nothing to fit: give nccl-tests logs and/or a kernel CSV")
    points = pd.concat(parts, ignore_index=True)
    points["error_pct"] = 100.0 * (points["after"] / points["measured"] - 1.0)
    points["before_error_pct"] = 100.0 * (points["before"] / points["measured"] - 1.0)
    return Calibration(fields, points, fit_summary(points), notes)


def _busbw_before(cluster, report: pd.DataFrame) -> np.ndarray:
    """busbw (GB/s) the cluster's current model predicts at each point of a log-fit report."""
    start = nccl.fitted_model(cluster)
    out = np.empty(len(report))
    bare = bare_cluster(cluster)
    for (op, alg), part in report.groupby(["op", "algorithm"], sort=False):
        sizes = part["size_bytes"].to_numpy(float)
        out[part.index.to_numpy()] = predicted_busbw(bare, op, sizes, start, alg)[0]
    return out


def fit_summary(points: pd.DataFrame) -> list[dict]:
    """Per source and role: points, rms and max |error| (%) before and after the fit."""
    rows = []
    for (source, role), part in points.groupby(["source", "role"], sort=False):
        before, after = part["before_error_pct"], part["error_pct"]
        rows.append(
            {
                "source": source,
                "role": role,
                "kinds": ",".join(dict.fromkeys(part["kind"])),
                "points": len(part),
                "rms_error_pct_before": _round(float(np.sqrt(np.mean(before**2)))),
                "rms_error_pct_after": _round(float(np.sqrt(np.mean(after**2)))),
                "max_error_pct_after": _round(float(after.abs().max())),
            }
        )
    return rows


def _round(x: float, digits: int = 6) -> float:
    """``x`` to ``digits`` significant digits (fitted values are written readable and stable)."""
    return float(f"{x:.{digits}g}")


def _protocol_fields(model: nccl.CollectiveModel, start: nccl.CollectiveModel) -> dict:
    """``collectives.protocols`` of the parameters the fit moved from ``start`` (µs strings)."""
    out: dict = {}
    for p in nccl.PROTOCOLS:
        fields = {}
        if model.overhead_s[p] != start.overhead_s[p]:
            us = model.overhead_s[p] * 1e6
            fields["overhead"] = f"{_round(us) if us > 1e-6 else 0} us"
        if model.efficiency[p] != start.efficiency[p]:
            fields["efficiency"] = _round(model.efficiency[p])
        if fields:
            out[p] = fields
    return out


def _compute_fields(fitted: dict) -> dict:
    """``compute:`` topology fields of ``kernel_times.fit_compute``'s result."""
    out: dict = {}
    if "gemm" in fitted:
        g = fitted["gemm"]
        out["gemm"] = {
            "eff_max": _round(g["eff_max"]),
            "half_time": f"{_round(g['half_time_s'] * 1e6)} us",
            "exponent": _round(g["exponent"]),
        }
    if "gather_eff" in fitted:
        out["gather_efficiency"] = _round(fitted["gather_eff"])
    return out


def overlay(cal: Calibration, base: str, provenance: dict) -> dict:
    """The overlay mapping ``zionsim calibrate`` writes: base, fitted fields, fit, provenance."""
    return {"base": base, **cal.fields, "fit": cal.summary, "provenance": provenance}


def fitted_rows(fields: dict, prefix: str = "") -> list[dict]:
    """The fitted fields as ``{"field": dotted path, "value": ...}`` rows."""
    rows = []
    for key, value in fields.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += fitted_rows(value, path + ".")
        else:
            rows.append({"field": path, "value": value})
    return rows
