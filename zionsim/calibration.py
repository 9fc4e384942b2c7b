"""Fitting model parameters to measurements (pure: data in, parameters and fit quality out).

:func:`calibrate` is what ``zionsim calibrate`` runs: it refits the NCCL protocol parameters to
parsed nccl-tests logs (``nccl_logs.fit_from_nccl_logs``) and the compute model to measured
kernel times (``kernel_times.fit_compute``), and returns the topology overlay that holds only the
fitted fields, with a fit report (``docs/calibration.md``).

:func:`fit_protocols` fits the two free parameters of each NCCL protocol — the per-collective
overhead NCCL's own cost model leaves out, and the payload efficiency — to measured nccl-tests
points, keeping NCCL's published base and per-hop latencies fixed.  The protocol used at each size
is the one the tuner picks with the candidate parameters, as NCCL would.  The objective is the
sum of squared log errors of bus bandwidth, so every size counts the same, plus a steep penalty on
any error beyond 6 %, so that no single size is left far off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize

from zionsim import compute, nccl
from zionsim.collectives import busbw_factor


@dataclass(frozen=True)
class Fit:
    model: nccl.CollectiveModel
    sizes: np.ndarray
    measured_GBps: np.ndarray
    simulated_GBps: np.ndarray
    protocols: list[str]

    @property
    def error_pct(self) -> np.ndarray:
        return 100.0 * (self.simulated_GBps / self.measured_GBps - 1.0)


def predicted_busbw(
    cluster, op: str, sizes: np.ndarray, model: nccl.CollectiveModel, algorithm: str | None = None
) -> tuple[np.ndarray, list[str]]:
    """Tuner-chosen estimate of busbw (GB/s) at each size, and the protocol chosen."""
    n = len(cluster.gpus)
    out, protos = [], []
    for s in sizes:
        ch = nccl.choose(cluster, op, cluster.gpus, float(s), model, algorithm)
        out.append(s / ch.estimate_s / 1e9 * busbw_factor(op, n))
        protos.append(ch.protocol)
    return np.array(out), protos


def fit_protocols(
    cluster, op: str, sizes, busbw_GBps, base: nccl.CollectiveModel, algorithm: str | None = "ring"
) -> Fit:
    """Fit overhead and efficiency of LL, LL128 and Simple to measured busbw points."""
    cluster = bare_cluster(cluster)  # the candidates, not the topology's own protocols, are run
    sizes, meas = np.asarray(sizes, dtype=float), np.asarray(busbw_GBps, dtype=float)
    protos = nccl.PROTOCOLS

    def model_of(x: np.ndarray) -> nccl.CollectiveModel:
        with np.errstate(over="ignore"):  # a simplex vertex far out: an infinite overhead
            over = dict(zip(protos, np.exp(x[:3]) * 1e-6, strict=True))
        eff = dict(zip(protos, 1.0 / (1.0 + np.exp(-x[3:])), strict=True))
        return base.with_fit(over, eff)

    def loss(x: np.ndarray) -> float:
        sim, _ = predicted_busbw(cluster, op, sizes, model_of(x), algorithm)
        err = np.log(sim / meas)
        return float(np.sum(err**2) + 20.0 * np.sum(np.maximum(0.0, np.abs(err) - 0.06) ** 2))

    best = None
    for start in ([20.0, 60.0, 150.0, 0.5, 0.7, 0.95], [10.0, 30.0, 60.0, 0.4, 0.8, 0.9]):
        x0 = np.concatenate(
            [np.log(start[:3]), np.log(np.array(start[3:]) / (1 - np.array(start[3:])))]
        )
        res = minimize(
            loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-8}
        )
        if best is None or res.fun < best.fun:
            best = res
    model = model_of(best.x)
    sim, chosen = predicted_busbw(cluster, op, sizes, model, algorithm)
    return Fit(model, sizes, meas, sim, chosen)


def fit_gemm(
    gpu,
    model: compute.ComputeModel,
    points,
    eff_max: float | None = None,
    exponent_max: float = 1.0,
) -> compute.GemmFit:
    """The GEMM efficiency curve of ``gpu``'s architecture fitted to measured times.

    ``points`` are ``(m, n, k, dtype, time_s)``; ``half_time`` and ``exponent`` (and ``eff_max``
    unless given) minimise the squared log error of :func:`compute.gemm_time_s` (launch and
    memory floor included).  ``exponent`` is bounded by ``exponent_max`` (see
    ``tools/calibrate_compute.py`` for why 1).
    """
    arch = compute.architecture(gpu)
    pts = [(int(m), int(n), int(k), str(dt), float(t)) for m, n, k, dt, t in points]

    def fit_of(x) -> compute.GemmFit:
        return compute.GemmFit(eff_max if eff_max is not None else x[2], 10 ** x[0], x[1])

    def residuals(x) -> list[float]:
        mod = model.with_gemm(arch, fit_of(x))
        return [math.log(t / compute.gemm_time_s(gpu, m, n, k, dt, mod)) for m, n, k, dt, t in pts]

    x0, lo, hi = [-5.5, 0.5], [-8.0, 0.1], [-3.0, exponent_max]
    if eff_max is None:
        best = max(compute.gemm_flops(m, n, k) / t / compute.peak_flops(gpu, dt)
                   for m, n, k, dt, t in pts)  # fmt: skip
        x0, lo, hi = x0 + [min(max(best, 0.31), 1.0)], lo + [0.3], hi + [1.0]
    return fit_of(least_squares(residuals, x0, bounds=(lo, hi)).x)


def bare_cluster(cluster):
    """``cluster`` without its topology's fitted protocol and compute parameters."""
    spec = cluster.spec
    spec = replace(
        spec,
        collective_overhead_s={},
        collective_efficiency={},
        gpu=replace(spec.gpu, compute={}),
    )
    return replace(cluster, spec=spec)


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
    from zionsim.kernel_times import check_gpu, fit_compute
    from zionsim.nccl_logs import fit_from_nccl_logs

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
        from zionsim.errors import InputError

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
