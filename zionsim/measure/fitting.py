"""Fitting primitives (pure): model parameters fitted to measured points.

:func:`fit_protocols` fits the two free parameters of each NCCL protocol — the per-collective
overhead NCCL's own cost model leaves out, and the payload efficiency — to measured nccl-tests
points, keeping NCCL's published base and per-hop latencies fixed.  The protocol used at each size
is the one the tuner picks with the candidate parameters, as NCCL would.  The objective is the
sum of squared log errors of bus bandwidth, so every size counts the same, plus a steep penalty on
any error beyond 6 %, so that no single size is left far off.

:func:`fit_gemm` fits the GEMM efficiency curve of one GPU architecture to measured kernel times.
``calibration``, ``nccl_logs`` and ``kernel_times`` build on these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares, minimize

from zionsim.hardware import compute
from zionsim.network import nccl
from zionsim.network.collectives import busbw_factor


@dataclass(frozen=True)
class Fit:
    """A fitted collective model and, per size (bytes), the measured and simulated busbw (GB/s)
    and the protocol the tuner picked."""

    model: nccl.CollectiveModel
    sizes: np.ndarray
    measured_GBps: np.ndarray
    simulated_GBps: np.ndarray
    protocols: list[str]

    @property
    def error_pct(self) -> np.ndarray:
        """Simulated against measured busbw, in percent (positive: the model is too fast)."""
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
