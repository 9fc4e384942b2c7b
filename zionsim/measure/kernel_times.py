"""Measured kernel times: the CSV format, the compute model's prediction, and refitting it.

Pure: text in, data out (:func:`read_kernel_csv` is the one wrapper that opens a file).

The CSV (``docs/calibration.md``) has a header row and one row per measured kernel; blank lines
and lines starting with ``#`` are skipped.  Columns:

* ``kind``: ``gemm``, ``embedding_fwd`` or ``embedding_bwd``;
* GEMM ``C[m,n] = A[m,k] @ B[k,n]``: ``m``, ``n``, ``k``, ``dtype`` (fp32, tf32, fp16, bf16,
  int8);
* embedding bags (one fused TBE kernel over ``tables`` tables): ``dim`` (row width), ``pooling``
  (lookups per bag), ``batch`` (bags per table), ``tables``, ``dtype`` (row type: fp32, fp16,
  bf16, int8); optional ``rows`` (rows per table: recorded, not used, since every lookup is
  modelled as a random HBM access), ``fused`` (true/false, default true; false: native, one
  ``nn.EmbeddingBag`` kernel per table forward, and a backward row is the ``torch.optim`` step
  over the materialised sparse gradient, as ``compute`` models it) and, for the backward,
  ``optimizer`` (default rowwise_adagrad);
* the time of one kernel: ``time_s`` or ``time_us``;
* optional ``gpu`` (the GPU's name, e.g. ``NVIDIA A100-SXM4-40GB``): its architecture must be
  the cluster's.

An embedding row becomes ``lookups = batch × pooling × tables`` random row accesses of ``dim ×
dtype`` bytes, and the pooled output ``batch × tables × dim × dtype`` bytes; the backward updates
rows in place with the optimizer state of ``STATE_BYTES_PER_ROW`` (as the engine does).
"""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from zionsim.base import bounds
from zionsim.base.errors import InputError
from zionsim.hardware import compute
from zionsim.hardware.topology import GpuSpec

KINDS = ("gemm", "embedding_fwd", "embedding_bwd")
REQUIRED = {
    "gemm": ("m", "n", "k", "dtype"),
    "embedding_fwd": ("dim", "pooling", "batch", "tables", "dtype"),
    "embedding_bwd": ("dim", "pooling", "batch", "tables", "dtype"),
}
#: optimizer state bytes per row of the embedding backward (row-wise Adagrad: one fp32), as
#: ``engine._duration`` uses
STATE_BYTES_PER_ROW = 4.0


def read_kernel_csv(path: str | Path) -> pd.DataFrame:
    """:func:`parse_kernel_csv` of the file at ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=str(path)) from None
    return parse_kernel_csv(text, str(path))


def parse_kernel_csv(text: str, source: str = "<kernels>") -> pd.DataFrame:
    """One row per measured kernel, validated; ``time_s`` in seconds, ``line`` its line number.

    Bad text raises :class:`InputError` naming ``source``, the line and the column.
    """
    numbered = [
        (i, line) for i, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]  # fmt: skip
    if len(numbered) < 2:
        raise InputError("no kernel rows (a header and at least one row)", file=source)
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in numbered)))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as exc:
        raise InputError(f"not a readable CSV header ({exc})", file=source) from None
    if "kind" not in header or not {"time_s", "time_us"} & set(header):
        raise InputError(
            f"header {header} needs kind and time_s or time_us",
            file=source,
            field=f"line {numbered[0][0]}",
        )
    try:
        records = list(reader)
    except csv.Error as exc:  # e.g. a cell beyond csv's field size limit (131,072 characters)
        raise InputError(f"not a readable CSV ({exc})", file=source) from None
    rows = []
    for (number, _), raw in zip(numbered[1:], records, strict=True):
        if None in raw:  # csv puts the cells beyond the header under the key None
            raise InputError(
                f"{len(header) + len(raw[None])} fields, the header has {len(header)}",
                file=source,
                field=f"line {number}",
            )
        raw = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        rows.append(_row(raw, source, f"line {number}"))
    out = pd.DataFrame(rows).astype(object)  # integers stay integers beside missing cells
    out["time_s"] = out["time_s"].astype(float)
    out.attrs["source"] = source
    return out


def _row(raw: dict, source: str, where: str) -> dict:
    """One validated kernel row."""

    def err(column: str, problem: str, allowed: str | None = None) -> InputError:
        return InputError(problem, file=source, field=f"{where}: {column}", allowed=allowed)

    kind = raw.get("kind", "")
    if kind not in KINDS:
        raise err("kind", f"unknown kernel kind {kind!r}", ", ".join(KINDS))
    row = {"kind": kind, "line": int(where.split()[-1]), "gpu": raw.get("gpu", "")}
    for col in REQUIRED[kind]:
        if not raw.get(col):
            raise err(col, f"missing for a {kind} row")
        if col != "dtype":
            row[col] = _positive_int(raw[col], col, lambda p, a=None, c=col: err(c, p, a))
    dtype = raw["dtype"].lower()
    if dtype not in compute.ELEMENT_BYTES:
        raise err("dtype", f"unknown dtype {dtype!r}", ", ".join(compute.GEMM_DTYPES))
    row["dtype"] = dtype
    if kind != "gemm":
        row["fused"] = _flag(raw.get("fused") or "true", lambda p: err("fused", p))
        row["optimizer"] = raw.get("optimizer") or "rowwise_adagrad"
        if row["optimizer"] not in compute.OPTIMIZERS:
            raise err("optimizer", f"unknown {row['optimizer']!r}", ", ".join(compute.OPTIMIZERS))
    row["time_s"] = _time_s(raw, err)
    return row


def _positive_int(text: str, column: str, err) -> int:
    """A whole number >= 1 within the bound of ``column`` (``base.bounds``)."""
    try:
        value = float(text)
    except ValueError:
        raise err(f"expected an integer, got {text!r}") from None
    try:
        return bounds.count(value, column)
    except InputError as exc:
        raise err(f"{exc.problem}, got {text!r}", exc.allowed) from None


def _flag(text: str, err) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise err(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


def _time_s(raw: dict, err) -> float:
    column = "time_s" if raw.get("time_s") else "time_us"
    try:
        value = float(raw.get(column, ""))
    except ValueError:
        raise err(column, f"expected a number, got {raw.get(column)!r}") from None
    seconds = value * (1e-6 if column == "time_us" else 1.0)
    if not 0 < seconds <= bounds.DIMENSIONS["time"].high:
        raise err(column, f"must be > 0 and at most an hour, got {raw.get(column)!r}")
    return seconds


def kernel_time_s(gpu: GpuSpec, row, model: compute.ComputeModel | None = None) -> float:
    """The compute model's seconds for one kernel row (see the module docstring)."""
    if row["kind"] == "gemm":
        return compute.gemm_time_s(gpu, row["m"], row["n"], row["k"], row["dtype"], model)
    elem = compute.ELEMENT_BYTES[row["dtype"]]
    row_bytes = float(row["dim"] * elem)
    lookups = float(row["batch"] * row["pooling"] * row["tables"])
    if row["kind"] == "embedding_fwd":
        out_bytes = float(row["batch"] * row["tables"]) * row_bytes
        return compute.embedding_forward_time_s(
            gpu, lookups, row_bytes, row["tables"], row["fused"], out_bytes, model
        )
    return compute.embedding_backward_time_s(
        gpu,
        lookups,
        row_bytes,
        row["tables"],
        row["fused"],
        row["optimizer"],
        STATE_BYTES_PER_ROW,
        model,
    )


def predicted_times_s(gpu: GpuSpec, kernels: pd.DataFrame, model=None) -> np.ndarray:
    """:func:`kernel_time_s` of every row of ``kernels``."""
    return np.array([kernel_time_s(gpu, row, model) for _, row in kernels.iterrows()])


def check_gpu(gpu: GpuSpec, kernels: pd.DataFrame, source: str) -> None:
    """Every row's ``gpu`` (where given) is of the cluster GPU's architecture."""
    arch = compute.architecture(gpu)
    for _, row in kernels.iterrows():
        if not row.get("gpu"):
            continue
        named = replace(gpu, model=row["gpu"])
        try:
            theirs = compute.architecture(named)
        except InputError:
            theirs = None
        if theirs != arch:
            raise InputError(
                f"measured on {row['gpu']!r}, but the cluster's GPU is {gpu.model!r} ({arch})",
                file=source,
                field=f"line {row['line']}: gpu",
                allowed=f"a {arch} GPU, or a topology with the measured GPU",
            )


def fit_compute(
    gpu: GpuSpec, kernels: pd.DataFrame, base: compute.ComputeModel | None = None
) -> tuple[dict, pd.DataFrame]:
    """Refit the compute-model parameters of ``gpu`` to measured kernel times.

    ``gpu``'s own fitted parameters (``GpuSpec.compute``) over ``base`` are the starting point
    and the "before" of the report.  GEMM rows fit the efficiency curve (``eff_max``,
    ``half_time_s``, ``exponent``: :func:`fitting.fit_gemm`); embedding rows fit the gather
    efficiency (:func:`fit_gather`).  Launch overhead and stream efficiency keep their values.

    Returns the fitted fields in ``GpuSpec.compute`` keys and a report, one row per kernel:
    ``kind``, ``line``, ``measured_us``, ``before_us``, ``after_us``, ``error_pct`` (after) and
    ``before_error_pct``.
    """
    from zionsim.measure.fitting import fit_gemm

    base = base or compute.load_compute_model()
    arch = compute.architecture(gpu)
    start = replace(base, arch={**base.arch, arch: base.for_gpu(gpu)})
    bare = replace(gpu, compute={})
    fitted, model = {}, start
    gemm = kernels[kernels["kind"] == "gemm"]
    if len(gemm):
        cols = [gemm[c] for c in ("m", "n", "k", "dtype", "time_s")]
        points = list(zip(*cols, strict=True))
        fit = fit_gemm(bare, model, points)
        model = model.with_gemm(arch, fit)
        fitted["gemm"] = {"eff_max": fit.eff_max, "half_time_s": fit.half_time_s,
                          "exponent": fit.exponent}  # fmt: skip
    emb = kernels[kernels["kind"] != "gemm"]
    if len(emb):
        eff = fit_gather(bare, model, emb)
        model = replace(model, arch={**model.arch, arch: replace(model.arch[arch], gather_eff=eff)})
        fitted["gather_eff"] = eff
    report = kernels[["kind", "line"]].copy()
    report["measured_us"] = kernels["time_s"].to_numpy() * 1e6
    report["before_us"] = predicted_times_s(bare, kernels, start) * 1e6
    report["after_us"] = predicted_times_s(bare, kernels, model) * 1e6
    report["error_pct"] = 100.0 * (report["after_us"] / report["measured_us"] - 1.0)
    report["before_error_pct"] = 100.0 * (report["before_us"] / report["measured_us"] - 1.0)
    return fitted, report


def fit_gather(gpu: GpuSpec, model: compute.ComputeModel, emb: pd.DataFrame) -> float:
    """The gather efficiency minimising the squared log error of embedding kernel times."""
    arch = compute.architecture(gpu)
    measured = emb["time_s"].to_numpy(float)

    def residuals(x):
        a = replace(model.arch[arch], gather_eff=float(x[0]))
        m = replace(model, arch={**model.arch, arch: a})
        return np.log(predicted_times_s(gpu, emb, m) / measured)

    x0 = min(max(model.arch[arch].gather_eff, 0.02), 1.0)
    return float(least_squares(residuals, [x0], bounds=([0.01], [1.0]), xtol=1e-12).x[0])
