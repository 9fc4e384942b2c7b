"""Refit the NCCL protocol parameters to parsed nccl-tests logs (``nccl_logs``).

Pure: frames in (``nccl_logs.parse_nccl_tests``), a fitted :class:`~zionsim.network.nccl.
CollectiveModel` and a per-point report out; what it fits on what is in
:func:`fit_from_nccl_logs` and ``docs/calibration.md``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from zionsim.base.errors import InputError
from zionsim.measure.fitting import bare_cluster, fit_protocols, predicted_busbw
from zionsim.network import nccl
from zionsim.network.collectives import OPS, busbw_factor

RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def fit_from_nccl_logs(
    cluster,
    frames: list[pd.DataFrame],
    base: nccl.CollectiveModel | None = None,
    algorithm: str = "ring",
    min_bytes: float = 1024,
) -> tuple[nccl.CollectiveModel, pd.DataFrame]:
    """Refit the protocol overheads and efficiencies to parsed nccl-tests logs.

    ``base`` defaults to the cluster's model (its topology's ``collectives.protocols`` over the
    built-in one).  The out-of-place busbw of every size ≥ ``min_bytes`` is the measurement
    (sizes whose busbw prints as 0.00 are left out).  The fitted operation is all_reduce if a
    log has it, else the first ring-family operation (reduce_scatter, all_gather):
    :func:`fitting.fit_protocols` fits it with ``algorithm``, then :func:`_refine` searches
    the same objective exactly (see there) and the better of the two is kept.  Every other log
    is *held out*: predicted with the fitted model and reported, not fitted.  all_to_all runs
    NCCL's point-to-point kernels, which in zionsim's model (``nccl.latency_s``) depend
    only on the Simple efficiency and the LL overhead (the launch floor); it is evaluated with
    ``pxn`` when the cluster spans nodes and ``direct`` inside one, and fitted (those two
    parameters only) when no ring-family log is given.  Operations zionsim does not model are
    skipped, with a note in ``report.attrs["notes"]``.

    Returns the model and a report, one row per point: ``source``, ``op``, ``role`` (fit /
    held_out), ``size_bytes``, ``measured_GBps``, ``simulated_GBps``, ``error_pct``,
    ``algorithm``, ``protocol``.
    """
    base = base or nccl.fitted_model(cluster)  # the cluster's own fitted protocols, if any
    cluster = bare_cluster(cluster)  # candidates are not overridden by the topology's
    notes: list[str] = []
    pts = _usable_points(frames, len(cluster.gpus), min_bytes, notes)
    ops = list(dict.fromkeys(pts["op"]))
    fitted = "all_reduce" if "all_reduce" in ops else next((o for o in ops if o in RING_OPS), None)
    p2p_alg = "pxn" if cluster.spec.nodes > 1 else "direct"
    alg_of = {o: (p2p_alg if o == "all_to_all" else algorithm) for o in ops}
    fitted = fitted or "all_to_all"
    mine = pts[pts["op"] == fitted]
    sizes, meas = mine["size_bytes"].to_numpy(float), mine["busbw_GBps"].to_numpy(float)
    start = base
    if fitted != "all_to_all":
        start = fit_protocols(cluster, fitted, sizes, meas, base, alg_of[fitted]).model
    else:
        notes.append("all_to_all fitted alone: only the Simple efficiency and LL overhead move")
    model = _refine(cluster, fitted, sizes, meas, start, alg_of[fitted])
    if not _finite_fit((model.overhead_s, model.efficiency)):
        raise InputError(
            f"the {fitted} points do not determine the protocol parameters (the fit diverged)",
            file=", ".join(sorted(set(pts["source"]))),
            allowed="logs covering small and large sizes (nccl-tests -b 8 -e 8G)",
        )
    out = _fit_report(cluster, pts, model, fitted, alg_of)
    out.attrs["notes"] = notes
    return model, out


def _usable_points(
    frames: list[pd.DataFrame], n: int, min_bytes: float, notes: list
) -> pd.DataFrame:
    """(op, size_bytes, busbw_GBps, source) of every modelled operation's sizes ≥ ``min_bytes``
    with a printed busbw > 0; checks each log's rank count against the cluster's ``n`` GPUs and
    notes the operations skipped."""
    points = []
    for df in frames:
        source = df.attrs.get("source", "<log>")
        ranks = df["ranks"].iloc[0] if "ranks" in df and len(df) else np.nan
        if not np.isnan(ranks) and int(ranks) != n:
            raise InputError(
                f"the log has {int(ranks)} ranks but the cluster has {n} GPUs",
                file=source,
                field="# Rank lines",
                allowed=f"a cluster of {int(ranks)} GPUs",
            )
        for op, part in df.groupby("op", sort=False):
            if op not in OPS or op == "send_recv":
                notes.append(f"{source}: {op} skipped (zionsim does not model it as a group op)")
                continue
            keep = (part["size_bytes"] >= min_bytes) & (part["busbw_GBps"] > 0)
            points.append(part.loc[keep, ["op", "size_bytes", "busbw_GBps"]].assign(source=source))
    pts = pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    if pts.empty:
        raise InputError(
            "no usable nccl-tests points to fit",
            field="frames",
            allowed=f"rows of a modelled collective with size >= {min_bytes:g} B and busbw > 0",
        )
    return pts


def _fit_report(cluster, pts: pd.DataFrame, model, fitted: str, alg_of: dict) -> pd.DataFrame:
    """Measured against simulated busbw (GB/s) of every point, by log and operation; ``role`` is
    ``fit`` for the fitted operation, ``held_out`` for the rest."""
    report = []
    for (source, op), part in pts.groupby(["source", "op"], sort=False):
        s = part["size_bytes"].to_numpy(float)
        sim, protos = predicted_busbw(cluster, op, s, model, alg_of[op])
        report.append(
            pd.DataFrame(
                {
                    "source": source,
                    "op": op,
                    "role": "fit" if op == fitted else "held_out",
                    "size_bytes": s.astype(np.int64),
                    "measured_GBps": part["busbw_GBps"].to_numpy(float),
                    "simulated_GBps": sim,
                    "algorithm": alg_of[op],
                    "protocol": protos,
                }
            )
        )
    out = pd.concat(report, ignore_index=True)
    out.insert(6, "error_pct", 100.0 * (out["simulated_GBps"] / out["measured_GBps"] - 1.0))
    return out


def _objective(err: np.ndarray) -> float:
    """``fitting.fit_protocols``' objective of log errors (its 6 % penalty included)."""
    return float(np.sum(err**2) + 20.0 * np.sum(np.maximum(0.0, np.abs(err) - 0.06) ** 2))


def _refine(
    cluster, op: str, sizes, meas, start: nccl.CollectiveModel, algorithm: str
) -> nccl.CollectiveModel:
    """The best model found by an exact search of ``fit_protocols``' objective, or ``start``.

    NCCL's cost model is affine in each protocol's overhead and inverse efficiency: with the
    algorithm fixed, the estimate of protocol ``p`` at size ``s`` is ``k·o[p] + C[p](s) +
    B[p](s)/e[p]`` (``k`` the cluster's latency scale), and the tuner takes the fastest
    protocol.  ``C`` and ``B`` are read off ``nccl.choose`` at two efficiencies.  For a given
    assignment of sizes to protocols the fit of (o, 1/e) is linear least squares in relative
    time error; every contiguous assignment (LL, then LL128, then Simple as sizes grow) is
    tried, each refined by reassigning sizes to the protocol the tuner picks, and the best
    polished by Nelder–Mead.  ``fit_protocols`` alone can stop in a local minimum where the
    tuner never picks a protocol (a protocol with no points keeps ``start``'s values).
    """
    f = _AffineFit(cluster, op, sizes, meas, start, algorithm)
    if f.rule is not None:  # point-to-point: protocols by size, one shared overhead
        best = f.fit_p2p()
        return start.with_fit(*best) if f.loss(*best) < f.loss(*_params(start)) else start
    best = f.best_assignment()
    # degenerate logs (a handful of points, one protocol) can drive the search to overflow:
    # only finite parameters with a finite loss are candidates
    found = [c for c in (best, f.polish(best)) if _finite_fit(c) and np.isfinite(f.loss(*c))]
    if not found:
        return start
    best = min(found, key=lambda c: f.loss(*c))
    if f.loss(*best) >= f.loss(start.overhead_s, start.efficiency):
        return start
    return start.with_fit(*best)


def _finite_fit(candidate: tuple[dict, dict]) -> bool:
    """Every overhead and efficiency of a (overheads, efficiencies) candidate is finite, the
    efficiencies in (0, 1]."""
    over, eff = candidate
    return all(np.isfinite(v) and v >= 0 for v in over.values()) and all(
        np.isfinite(v) and 0 < v <= 1 for v in eff.values()
    )


class _AffineFit:
    """:func:`_refine`'s search: per-protocol times ``k·o[p] + C[p](s) + B[p](s)/e[p]`` against the
    measured times ``t_meas`` (s) of ``op`` at ``sizes``, and fits of (overheads, efficiencies)."""

    def __init__(self, cluster, op, sizes, meas, start: nccl.CollectiveModel, algorithm: str):
        gpus, self.k = cluster.gpus, cluster.spec.collective_latency_scale
        self.sizes, self.start = sizes, start
        self.protos = start.protocols(algorithm)
        family_p2p = nccl.FAMILY[algorithm] == "p2p"
        self.okey = {p: "LL" if family_p2p else p for p in self.protos}
        zero = {p: 0.0 for p in nccl.PROTOCOLS}
        t1, t2 = (
            _estimates(cluster, op, sizes, start.with_fit(zero, dict.fromkeys(zero, e)), algorithm)
            for e in (1.0, 0.5)
        )
        self.B = t2 - t1
        self.C = t1 - self.B
        self.t_meas = sizes * busbw_factor(op, len(gpus)) / (np.asarray(meas) * 1e9)
        #: point-to-point kernels take their protocol by size, not the fastest (nccl._protocols)
        self.rule = None
        if family_p2p:
            picks = [nccl.choose(cluster, op, gpus, float(x), start, algorithm) for x in sizes]
            self.rule = np.array([self.protos.index(c.protocol) for c in picks])

    def times(self, over: dict, eff: dict) -> np.ndarray:
        """Estimated seconds, one row per size, one column per protocol."""
        o = np.array([self.k * over[self.okey[p]] for p in self.protos])
        w = np.array([1.0 / eff[p] for p in self.protos])
        return o + self.C + self.B * w

    def loss(self, over: dict, eff: dict) -> float:
        """The objective of the log errors of the protocol NCCL runs: the tuner's pick (the
        fastest), or for point-to-point the one its size rule gives."""
        t = self.times(over, eff)
        t = t.min(axis=1) if self.rule is None else t[np.arange(len(t)), self.rule]
        return _objective(np.log(self.t_meas / t))

    def fit_p2p(self) -> tuple[dict, dict]:
        """Point-to-point kernels (all_to_all): least squares of the one overhead every size pays
        (the LL one, ``nccl.latency_s``) and of the Simple efficiency, each size with the
        protocol NCCL's size rule gives it; LL's efficiency is kept, as its few small sizes
        cannot tell it from the overhead (overhead ≥ 0, efficiency ≤ 1)."""
        over, eff = _params(self.start)
        rows, simple = np.arange(len(self.sizes)), self.protos.index("Simple")
        b, c = self.B[rows, self.rule], self.C[rows, self.rule]
        is_simple = self.rule == simple
        w_kept = np.array([1.0 / eff[self.protos[j]] for j in self.rule])
        a = np.c_[np.full(len(rows), self.k), np.where(is_simple, b, 0.0)] / self.t_meas[:, None]
        y = 1.0 - (c + np.where(is_simple, 0.0, b * w_kept)) / self.t_meas
        if not is_simple.any():
            over["LL"] = max(0.0, float(y @ a[:, 0] / (a[:, 0] @ a[:, 0])))
            return over, eff
        (o, w), *_ = np.linalg.lstsq(a, y, rcond=None)
        if o < 0:
            o, w = 0.0, float(y @ a[:, 1] / (a[:, 1] @ a[:, 1]))
        over["LL"], eff["Simple"] = float(o), 1.0 / max(1.0, float(w))
        return over, eff

    def fit_assignment(self, pick: np.ndarray) -> tuple[dict, dict]:
        """Least-squares (overhead, 1/efficiency) of each protocol from the sizes ``pick`` gives
        it (overhead ≥ 0, efficiency ≤ 1); a protocol with no sizes keeps ``start``'s values."""
        k, B, C, t_meas, okey = self.k, self.B, self.C, self.t_meas, self.okey
        over, eff = dict(self.start.overhead_s), dict(self.start.efficiency)
        for j, p in enumerate(self.protos):
            sel = pick == j
            if not sel.any():
                continue
            a = np.c_[np.full(sel.sum(), k), B[sel, j]] / t_meas[sel, None]
            y = 1.0 - C[sel, j] / t_meas[sel]
            if sel.sum() == 1:
                w = max(1.0, float((y - a[:, 0] * over[okey[p]]) @ a[:, 1] / (a[:, 1] @ a[:, 1])))
                eff[p] = 1.0 / w
                continue
            (o, w), *_ = np.linalg.lstsq(a, y, rcond=None)
            if o < 0:
                o = 0.0
                w = float(y @ a[:, 1] / (a[:, 1] @ a[:, 1]))
            over[okey[p]], eff[p] = float(o), 1.0 / max(1.0, float(w))
        return over, eff

    def best_assignment(self) -> tuple[dict, dict]:
        """The best of ``start`` and every contiguous assignment of sizes to protocols (in size
        order), then reassigned to the tuner's pick until that stops improving."""
        n, m = len(self.sizes), len(self.protos)
        order = np.argsort(self.sizes)
        candidates = [(dict(self.start.overhead_s), dict(self.start.efficiency))]
        cuts = list(itertools.combinations_with_replacement(range(n + 1), m - 1))
        for cut in cuts:
            pick = np.empty(n, dtype=int)
            pick[order] = np.searchsorted(np.array(cut, dtype=int), np.arange(n), side="right")
            candidates.append(self.fit_assignment(pick))
        best = min(candidates, key=lambda c: self.loss(*c))
        for _ in range(20):  # reassign to the tuner's pick until stable
            again = self.fit_assignment(self.times(*best).argmin(axis=1))
            if self.loss(*again) >= self.loss(*best) - 1e-15:
                break
            best = again
        return best

    def polish(self, best: tuple[dict, dict]) -> tuple[dict, dict]:
        """``best`` moved by Nelder–Mead over log overheads and logit efficiencies."""
        protos, okey, m = self.protos, self.okey, len(self.protos)
        x0 = np.r_[
            [np.log(max(best[0][okey[p]], 1e-9)) for p in protos],
            [np.log(best[1][p] / (1 - best[1][p] + 1e-12)) for p in protos],
        ]

        def unpack(x):
            over, eff = dict(best[0]), dict(best[1])
            for j, p in enumerate(protos):
                over[okey[p]] = float(np.exp(x[j]))
                eff[p] = float(1.0 / (1.0 + np.exp(-x[m + j])))
            return over, eff

        options = {"maxiter": 4000, "xatol": 1e-6, "fatol": 1e-12}
        res = minimize(lambda x: self.loss(*unpack(x)), x0, method="Nelder-Mead", options=options)
        return unpack(res.x)


def _params(model: nccl.CollectiveModel) -> tuple[dict, dict]:
    """Copies of ``model``'s per-protocol overheads and efficiencies."""
    return dict(model.overhead_s), dict(model.efficiency)


def _estimates(cluster, op, sizes, model, algorithm) -> np.ndarray:
    """``nccl.choose`` estimates (s), one row per size, one column per protocol."""
    rows = []
    for s in sizes:
        choices = [
            nccl.choose(cluster, op, cluster.gpus, float(s), model, algorithm, p)
            for p in model.protocols(algorithm)
        ]
        rows.append([c.estimate_s for c in choices])
    return np.array(rows)
