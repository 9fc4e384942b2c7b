"""Fitting model parameters to measurements (pure: data in, parameters and fit quality out).

:func:`fit_protocols` fits the two free parameters of each NCCL protocol — the per-collective
overhead NCCL's own cost model leaves out, and the payload efficiency — to measured nccl-tests
points, keeping NCCL's published base and per-hop latencies fixed.  The protocol used at each size
is the one the tuner picks with the candidate parameters, as NCCL would.  The objective is the
sum of squared log errors of bus bandwidth, so every size counts the same, plus a steep penalty on
any error beyond 6 %, so that no single size is left far off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from zionsim import nccl
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
    sizes, meas = np.asarray(sizes, dtype=float), np.asarray(busbw_GBps, dtype=float)
    protos = nccl.PROTOCOLS

    def model_of(x: np.ndarray) -> nccl.CollectiveModel:
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
