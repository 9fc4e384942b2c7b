"""NCCL-like cost model: protocols, latencies, the algorithm/protocol tuner, and execution.

A collective's time is

    overhead[p] + base[a][p] + Σ_phases steps × step[a][hw][p] + (flows of the phase at wire bytes)

for algorithm family ``a`` (ring, tree, nvls, p2p), protocol ``p`` (LL, LL128, Simple) and the
hop class ``hw`` of each step (nvlink, pcie, or net for the steps that cross nodes).  ``base``
and ``step`` are NCCL's own published constants (``src/graph/tuning.cc``); ``overhead`` (launch
and software time NCCL's model leaves out) and the payload ``efficiency`` of each protocol (wire
bytes = payload / efficiency) are fitted to measured nccl-tests curves by
``zionsim.measure.calibration`` — see
``zionsim/data/nccl_model.yaml`` for values and provenance; a topology's
``collectives.protocols`` (e.g. an overlay written by ``zionsim calibrate``) replaces them for
that cluster (:func:`cluster_model`).  Point-to-point operations
(send/recv, all-to-all) pay only the launch floor, the LL overhead.

Without an explicit algorithm the tuner does what NCCL does: estimate every (algorithm, protocol)
it would consider and take the fastest.  The estimate uses the most loaded link of each phase
(contention included, no simulation), the run itself uses the chosen network model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import simpy
import yaml

from zionsim.base.errors import InputError
from zionsim.network.collectives import ALGORITHMS, Schedule, schedule

PROTOCOLS = ("LL", "LL128", "Simple")
FAMILY = {
    "ring": "ring",
    "hierarchical": "ring",
    "tree": "tree",
    "nvls": "nvls",
    "direct": "p2p",
    "pxn": "p2p",
}
#: algorithms NCCL itself chooses among (hierarchical 2D is zionsim's, used only when asked)
AUTO = {
    "all_reduce": ("ring", "tree", "nvls"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring",),
    "all_to_all": ("pxn",),
    "send_recv": ("direct",),
}
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "nccl_model.yaml"


@dataclass(frozen=True)
class CollectiveModel:
    """Latency and protocol-efficiency parameters of the NCCL-like model (SI units)."""

    base_s: dict[str, dict[str, float]]
    step_s: dict[str, dict[str, dict[str, float]]]
    overhead_s: dict[str, float]
    efficiency: dict[str, float]

    def protocols(self, algorithm: str) -> tuple[str, ...]:
        """The protocols (of LL, LL128, Simple) that ``algorithm``'s family has latencies for."""
        return tuple(p for p in PROTOCOLS if p in self.base_s[FAMILY[algorithm]])

    def with_fit(self, overhead_s: dict[str, float], efficiency: dict[str, float]):
        """The same latencies with other per-protocol overheads (s) and efficiencies (0–1]."""
        return CollectiveModel(self.base_s, self.step_s, dict(overhead_s), dict(efficiency))

    def scaled(self, factor: float) -> CollectiveModel:
        """Every software latency × ``factor`` (the topology's ``collectives.latency_scale``)."""
        if factor == 1.0:
            return self
        return CollectiveModel(
            {a: {p: v * factor for p, v in d.items()} for a, d in self.base_s.items()},
            {
                a: {hw: {p: v * factor for p, v in d.items()} for hw, d in t.items()}
                for a, t in self.step_s.items()
            },
            {p: v * factor for p, v in self.overhead_s.items()},
            self.efficiency,
        )


@lru_cache(maxsize=4)
def load_model(path: str | None = None) -> CollectiveModel:
    """The collective model in ``path`` (default: the built-in calibrated one)."""
    data = yaml.safe_load(Path(path or MODEL_FILE).read_text())
    us = 1e-6
    return CollectiveModel(
        base_s={a: {p: v * us for p, v in d.items()} for a, d in data["base_latency_us"].items()},
        step_s={
            a: {hw: {p: v * us for p, v in d.items()} for hw, d in t.items()}
            for a, t in data["step_latency_us"].items()
        },
        overhead_s={p: v * us for p, v in data["fitted"]["overhead_us"].items()},
        efficiency=dict(data["fitted"]["efficiency"]),
    )


def fitted_model(cluster, model: CollectiveModel | None = None) -> CollectiveModel:
    """``model`` (default: the built-in one) with the topology's ``collectives.protocols``."""
    m, spec = model or load_model(), cluster.spec
    if not (spec.collective_overhead_s or spec.collective_efficiency):
        return m
    return m.with_fit(
        {**m.overhead_s, **spec.collective_overhead_s},
        {**m.efficiency, **spec.collective_efficiency},
    )


def cluster_model(cluster, model: CollectiveModel | None = None) -> CollectiveModel:
    """``model`` as ``cluster`` runs it: :func:`fitted_model`, latencies × ``latency_scale``."""
    return fitted_model(cluster, model).scaled(cluster.spec.collective_latency_scale)


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` picked: the schedule (with its algorithm), the protocol, and the
    model's estimate of its time in seconds."""

    schedule: Schedule
    protocol: str
    estimate_s: float


def phase_hw(cluster, phase, routes: np.ndarray) -> tuple[str, float]:
    """(hop class inside nodes, fraction of the phase's flows that cross nodes).

    NCCL charges the network hop latency only on the steps that leave a node and the intra-node
    latency (NVLink, or PCIe where a flow has no NVLink) on the others; the fraction of flows
    that cross nodes is that share of a ring's or tree's steps.
    """
    nodes = cluster.node_of
    crossing = nodes(phase.src) != nodes(phase.dst)
    intra = routes[~crossing]
    kinds = set(cluster.router.edge_kind[np.unique(intra[intra >= 0])])
    hw = "pcie" if kinds & {"pcie", "upi"} or (kinds and "nvlink" not in kinds) else "nvlink"
    return hw, float(crossing.mean()) if len(crossing) else 0.0


def fixed_latency_s(
    model: CollectiveModel, algorithm: str, protocol: str, phases_hw: list[tuple[int, str, float]]
) -> tuple[float, list[float]]:
    """(overhead + base latency, per-phase step latency) of one collective.

    ``phases_hw`` holds (steps, intra-node hop class, fraction of steps that cross nodes).
    """
    fam = FAMILY[algorithm]
    # the fitted overheads belong to the pipelined ring/tree kernels they were measured on;
    # point-to-point operations pay the launch floor only (the LL overhead: smallest messages)
    over = model.overhead_s["LL"] if fam == "p2p" else model.overhead_s[protocol]
    start = over + model.base_s[fam][protocol]
    step = model.step_s[fam]
    return start, [
        steps * (frac * step["net"][protocol] + (1 - frac) * step[hw][protocol])
        for steps, hw, frac in phases_hw
    ]


def _latencies(
    cluster, sched: Schedule, protocol: str, model: CollectiveModel, routes: list[np.ndarray]
) -> tuple[float, list[float]]:
    return fixed_latency_s(
        model,
        sched.algorithm,
        protocol,
        [(p.steps, *phase_hw(cluster, p, r)) for p, r in zip(sched.phases, routes, strict=True)],
    )


def _phase_routes(cluster, sched: Schedule):
    return [cluster.router.routes(p.src, p.dst) for p in sched.phases]


def estimate_s(
    cluster,
    sched: Schedule,
    protocol: str,
    model: CollectiveModel,
    routes: list[np.ndarray] | None = None,
) -> float:
    """Time estimate from the most loaded link of each phase (contention-aware, no events)."""
    routes = routes if routes is not None else _phase_routes(cluster, sched)
    cap = cluster.router.capacity_Bps
    eff = model.efficiency[protocol]
    start, steps = _latencies(cluster, sched, protocol, model, routes)
    total = start
    for phase, r, lat in zip(sched.phases, routes, steps, strict=True):
        valid = r >= 0
        load = np.bincount(
            r[valid],
            weights=np.broadcast_to((phase.nbytes / eff)[:, None], r.shape)[valid],
            minlength=len(cap),
        )
        total += float((load / cap).max()) + lat if valid.any() else lat
    return total


def choose(
    cluster,
    op: str,
    ranks: np.ndarray,
    size_bytes: float,
    model: CollectiveModel | None = None,
    algorithm: str | None = None,
    protocol: str | None = None,
    matrix: np.ndarray | None = None,
) -> Choice:
    """The (algorithm, protocol) NCCL would use — or the one asked for — with its estimate."""
    model = cluster_model(cluster, model)
    if op not in ALGORITHMS:
        raise InputError(f"unknown collective {op!r}", field="--op", allowed=", ".join(ALGORITHMS))
    candidates = [algorithm] if algorithm else [a for a in AUTO[op] if _available(cluster, a)]
    best = None
    for alg in candidates:
        sched = schedule(cluster, op, ranks, size_bytes, alg, matrix)
        routes = _phase_routes(cluster, sched)
        protos = model.protocols(alg)
        if protocol is not None:
            if protocol not in protos:
                raise InputError(
                    f"protocol {protocol!r} is not used by {alg}",
                    field="--protocol",
                    allowed=", ".join(protos),
                )
            protos = (protocol,)
        for proto in protos:
            est = estimate_s(cluster, sched, proto, model, routes)
            if best is None or est < best.estimate_s:
                best = Choice(sched, proto, est)
    return best


def _available(cluster, algorithm: str) -> bool:
    su = cluster.spec.scale_up
    if algorithm == "nvls":
        return su.kind == "nvswitch" and su.nvswitch_generation >= 3
    return True


@dataclass(frozen=True)
class Prepared:
    """A chosen collective ready to execute: start latency and, per phase, the flows."""

    start_s: float
    phases: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None], ...]
    algorithm: str
    protocol: str


def prepare(cluster, choice: Choice, model: CollectiveModel | None = None) -> Prepared:
    """Routes, wire bytes and step latencies of a chosen collective (reusable across runs)."""
    model = cluster_model(cluster, model)
    sched, proto = choice.schedule, choice.protocol
    routes = _phase_routes(cluster, sched)
    start, steps = _latencies(cluster, sched, proto, model, routes)
    eff = model.efficiency[proto]
    phases = tuple(
        (r, p.nbytes / eff, np.full(len(p.nbytes), lat), p.weight)
        for p, r, lat in zip(sched.phases, routes, steps, strict=True)
    )
    return Prepared(start, phases, sched.algorithm, proto)


def execute(env: simpy.Environment, net, prepared: Prepared, tag: object = None):
    """simpy process: run a prepared collective on ``net``; returns its end time."""
    if prepared.start_s > 0:
        yield env.timeout(prepared.start_s)
    for routes, wire, lat, weight in prepared.phases:
        yield net.transfer(routes, wire, lat, weight=weight, tag=tag)
    return env.now


def run(
    env: simpy.Environment,
    net,
    cluster,
    choice: Choice,
    model: CollectiveModel | None = None,
    tag: object = None,
):
    """simpy process: execute a chosen collective on ``net``; returns its end time."""
    return (yield from execute(env, net, prepare(cluster, choice, model), tag))
