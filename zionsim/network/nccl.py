"""NCCL's cost structure: protocols, latencies, channels, the algorithm tuner, and execution.

A collective's time follows NCCL's own model (``src/graph/tuning.cc``, constants and provenance in
``zionsim/data/nccl_model.yaml``):

    time = max(G × launch, overhead[p] + latency(a, p) + bandwidth part)

* ``latency(a, p)`` is NCCL's formula for algorithm ``a`` and protocol ``p``: base latency plus
  per-step hardware latencies by link class — a ring pays ``nsteps`` steps, of which the steps
  that cross nodes pay the network latency and the others at least NCCL's net post overhead
  (for LL and LL128 the crossings of the slowest chunk's chain, each at the tree's exposed
  network latency, :func:`nccl_latency.ring_net_crossings`; issue 26 round 10); a
  tree pays ``2((ppn−1)·intra + log2(nodes)·net)``; NVLS, NVLSTree and CollNet their own terms;
  with one GPU per node the network latency is the tree's; below sm90 with GPUDirect RDMA a
  Simple network step also pays NCCL's GDR flush (:func:`nccl_latency.gdr_flush_s`)
  (:func:`latency_s`).  Point-to-point operations (send/recv, all-to-all) have no NCCL cost
  model: they pay one launch of the kernel (the ring base latency) and one hop of the slowest
  link class they cross; across nodes also NCCL's network post overhead once per remote peer,
  as a ring pays it once per step: NCCL's
  all-to-all is grouped send/recv whose every remote peer is a network send and receive the
  rank's proxy thread posts in turn (:func:`nccl_latency.remote_peers`).
* the bandwidth part is the algorithm's flows on the network (``flows.py``) at wire bytes =
  payload / protocol efficiency (LL 1/2, LL128 0.92, Simple 1; tree and NVLS their own; tree
  all_reduce also NCCL's medium-size derating), each flow capped by what NCCL's channels can
  carry: the graph's channels × the per-channel caps of LL128 and tree, LL's total cap (across
  nodes NCCL's LL rate on the channels NCCL keeps for the size, ``nccl_wire.ll_cap_GBps``), and
  the NVSwitch's reduction rate for NVLS (:func:`prepare`).  Contention with other traffic comes
  from the network model, so NCCL's per-channel ``bw`` numbers are not used: the links are.
  Point-to-point flows that cross the network (all-to-all) also pay the many-connection
  efficiency of a NIC (:func:`p2p_net_efficiency`; fitted, see the YAML).
* ``launch`` is the host time to launch one kernel, fitted per GPU generation; ``G`` is how many
  GPUs one thread launches for (nccl-tests ``-g``; 1 in training, one process per GPU).  Kernels
  launched back to back overlap the launches, hence the max.
* ``overhead`` and an extra payload efficiency per protocol are 0 and 1 in the built-in model;
  a topology's ``collectives.protocols`` (e.g. written by ``zionsim calibrate``) sets them for
  its cluster (:func:`cluster_model`).

Without an explicit algorithm the tuner estimates every (algorithm, protocol) NCCL would consider
on this system — latency plus bytes over the most loaded link of each phase (contention
included, no simulation), launch excluded as in NCCL — and takes the fastest.  It ranks them by
the time they take as executed (:func:`estimate_s`, what :func:`execute` then runs), not by a
separate view: NCCL's tuner ignores the channels it drops for small sizes and the NVLS chunk
pipeline's fill, and choosing on a model the execution contradicts made a larger message or a
faster link give a shorter or a longer time (issue 26).  So the automatic time is
non-decreasing in size and non-increasing in any link's capacity
(``tests/network/test_monotone.py``); where NCCL's view and the execution differ, zionsim may
pick another candidate than NCCL would (docs/validation.md).

Where it lives: the constants, :class:`Setting` and the latency formula in ``nccl_model``; wire
bytes, rate caps, the fluid time and pipeline fill in ``nccl_wire``; here the tuner
(:func:`choose`) and the execution of a chosen collective (:func:`prepare`, :func:`execute`).
The model's public names are re-exported here, so callers use ``nccl.<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from zionsim.base.errors import InputError
from zionsim.network import point_to_point
from zionsim.network.collectives import ALGORITHMS, Schedule, schedule
from zionsim.network.layout_key import layout_of
from zionsim.network.nccl_latency import latency_s, remote_peers  # noqa: F401 - re-exported
from zionsim.network.nccl_model import (  # noqa: F401 - re-exported: callers use nccl.<name>
    FAMILY,
    GENERATIONS,
    MODEL_FILE,
    NVLS_GENERATIONS,
    PROTOCOLS,
    CollectiveModel,
    Setting,
    cluster_model,
    fitted_model,
    generation,
    graph_channels,
    ll128_enabled,
    load_model,
    nvls_channels,
    nvls_heads,
    p2p_channels_per_peer,
    per_generation,
    setting,
)
from zionsim.network.nccl_p2p import p2p_net_efficiency  # noqa: F401 - re-exported
from zionsim.network.nccl_wire import (  # noqa: F401 - re-exported: callers use nccl.<name>
    _link_load,
    bandwidth_s,
    nvls_chunk_bytes,
    phase_routes,
    phase_wire,
    pipeline_fill_s,
    tree_correction,
)
from zionsim.network.peer_bytes import OuterSum

#: algorithms NCCL itself chooses among (hierarchical 2D is zionsim's, used only when asked)
AUTO = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "collnet_direct"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring",),
    "all_to_all": ("pxn",),
    "send_recv": ("direct",),
}


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` picked: the schedule (with its algorithm), the protocol, and the
    model's estimate of its time in seconds."""

    schedule: Schedule
    protocol: str
    estimate_s: float
    #: each phase's routes as :func:`choose` computed them (reused by :func:`prepare`)
    routes: tuple | None = field(default=None, compare=False, repr=False)


def estimate_s(
    cluster,
    sched: Schedule,
    protocol: str,
    model: CollectiveModel,
    routes: list[np.ndarray] | None = None,
) -> float:
    """The collective's time alone, as it executes: latency + each phase's bytes over its most
    loaded link or flow cap (+ the chunk-pipeline fill of NVLS and tree LL128,
    :func:`pipeline_fill_s`).  The tuner (:func:`choose`) ranks candidates by this same number."""
    st = setting(cluster, sched)
    bw_s = bandwidth_s(cluster, sched, protocol, model, routes)
    fill = pipeline_fill_s(model, st, sched.algorithm, bw_s, protocol)
    return latency_s(model, st, sched.algorithm, protocol) + bw_s + fill


def check_gpus(cluster) -> None:
    """InputError on a topology of CPU trainers (``gpu.architecture: cpu``): NCCL needs GPUs."""
    if generation(cluster) == "cpu":
        raise InputError(
            "NCCL collectives need GPUs: this topology's trainers are CPU hosts",
            field="gpu.architecture",
            allowed="a GPU topology (zionex, dgx_a100, ...); CPU trainers sync through EASGD "
            "servers (--sync shadow-easgd) and parameter servers (--plan ps)",
        )


def estimate_together_s(
    cluster, choices: list[Choice], model: CollectiveModel | None = None
) -> list[float]:
    """:func:`estimate_s` of each of ``choices``, collectives that run at the same time (the
    copies of one step on every rail or node), with each phase's links loaded by that phase of
    all of them: a link two copies cross carries both copies' bytes.  Copies on disjoint links
    (one per node inside the node) come out as they do alone."""
    model = cluster_model(cluster, model)
    cap = cluster.router.capacity_Bps
    parts = []  # per choice: its setting and, per phase, (link load, per-flow time at own cap)
    for ch in choices:
        sched, proto = ch.schedule, ch.protocol
        st = setting(cluster, sched)
        routes = ch.routes if ch.routes is not None else phase_routes(cluster, sched)
        phases = []
        for p, r in zip(sched.phases, routes, strict=True):
            w = phase_wire(cluster, model, st, sched.algorithm, proto, p, r)
            with np.errstate(divide="ignore", invalid="ignore"):
                own = np.where(w.wire > 0, w.wire / w.cap, 0.0)
            load = _link_load(r, w.wire, len(cap)) if len(w.wire) else np.zeros(len(cap))
            phases.append((load, float(own.max()) if len(own) else 0.0))
        parts.append((st, phases))
    depth = max(len(ph) for _, ph in parts)
    total = [sum(ph[k][0] for _, ph in parts if k < len(ph)) for k in range(depth)]
    out = []
    for ch, (st, phases) in zip(choices, parts, strict=True):
        bw_s = 0.0
        for k, (load, own) in enumerate(phases):
            mine = load > 0
            worst = float((total[k][mine] / cap[mine]).max()) if mine.any() else 0.0
            bw_s += max(worst, own)
        alg = ch.schedule.algorithm
        fill = pipeline_fill_s(model, st, alg, bw_s, ch.protocol)
        out.append(latency_s(model, st, alg, ch.protocol) + bw_s + fill)
    return out


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
    check_gpus(cluster)
    model = cluster_model(cluster, model)
    if op not in ALGORITHMS:
        raise InputError(f"unknown collective {op!r}", field="--op", allowed=", ".join(ALGORITHMS))
    _, per_node = np.unique(cluster.node_of(np.asarray(ranks)), return_counts=True)
    n_nodes, local = len(per_node), int(per_node.min()) if len(per_node) else 0
    candidates = (
        [algorithm]
        if algorithm
        else [a for a in AUTO[op] if _available(cluster, a, n_nodes, local)]
    )
    best, best_s = None, np.inf
    for alg in candidates:
        sched, routes = _scheduled(cluster, op, ranks, size_bytes, alg, matrix)
        protos = _protocols(model, alg, sched, cluster, matrix)
        if protocol is not None:
            if protocol not in model.protocols(alg):
                raise InputError(
                    f"protocol {protocol!r} is not used by {alg}",
                    field="--protocol",
                    allowed=", ".join(model.protocols(alg)),
                )
            protos = (protocol,)
        for proto in protos:
            t = estimate_s(cluster, sched, proto, model, routes)
            if best is None or t < best_s:
                best, best_s = (sched, proto, routes), t
    sched, proto, routes = best
    return Choice(sched, proto, best_s, tuple(routes))


#: schedules with their routes remembered for clusters of the same layout
#: (``layout_key.layout_of``), at most this many (a sweep over link rates meets the same
#: collectives on every cluster);
#: 0: never remembered
MEMO_SCHEDULES = 4096
_SCHEDULES: dict[tuple, tuple[Schedule, list]] = {}


def _scheduled(cluster, op, ranks, size_bytes, alg, matrix) -> tuple[Schedule, list]:
    """``schedule`` of ``op`` with ``alg`` and its phases' routes, remembered per cluster
    layout: both read only the layout (the spec's node, GPU and NIC counts and scale-up, the
    router's device numbering and paths), never a link's rate, so clusters that differ only
    in rates share them (as ``choose``'s callers share a cluster's choices, they are never
    changed once made).  The key holds the algorithm's function and the flow-class switches
    of ``point_to_point``, which change a schedule too."""
    layout = layout_of(cluster) if MEMO_SCHEDULES else None
    key = None
    if layout is not None:
        ranks = np.asarray(ranks)
        switches = (ALGORITHMS.get(op, {}).get(alg), point_to_point.CLASSES,
                    point_to_point.CLASSES_FROM)  # fmt: skip
        key = (layout, switches, op, ranks.dtype.str, ranks.tobytes(), float(size_bytes), alg,
               matrix_key(matrix))  # fmt: skip
        hit = _SCHEDULES.get(key)
        if hit is not None:
            return hit
    sched = schedule(cluster, op, ranks, size_bytes, alg, matrix)
    out = (sched, phase_routes(cluster, sched))
    if key is not None:
        if len(_SCHEDULES) >= MEMO_SCHEDULES:
            _SCHEDULES.clear()
        _SCHEDULES[key] = out
    return out


def matrix_key(m) -> tuple | None:
    """A byte matrix as a key: its values (a dense array, or an outer sum's vectors)."""
    if m is None:
        return None
    if isinstance(m, OuterSum):
        return ("outer", m.row.tobytes(), m.col.tobytes())
    m = np.asarray(m)
    return ("dense", m.shape, str(m.dtype), m.tobytes())


def _protocols(
    model: CollectiveModel, alg: str, sched: Schedule, cluster, matrix=None
) -> tuple[str, ...]:
    """Protocols the tuner weighs.  Collectives: every protocol of the algorithm, less LL128
    where NCCL does not enable it (:func:`ll128_enabled`, T:517-535).  Point-to-point: NCCL uses
    LL up to 16 KiB per peer per channel, else Simple (enqueue.cc:859,931-933); zionsim also
    weighs Simple below that threshold and keeps the faster, so that the choice never makes a
    larger message faster (with LL alone the time would drop where Simple takes over).  NCCL
    decides per send, on that send's own bytes, before PXN routes it through a relay GPU, so
    under PXN the test is on the largest pair's bytes, not on a node's aggregated flow."""
    if FAMILY[alg] != "p2p":
        protos = model.protocols(alg)
        if "LL128" in protos and not ll128_enabled(setting(cluster, sched)):
            protos = tuple(p for p in protos if p != "LL128")
        return protos
    if alg == "pxn":
        biggest = _largest_pair(sched, matrix)
    else:
        biggest = max(
            (float((p.nbytes / p.members()).max()) for p in sched.phases if len(p.nbytes)),
            default=0.0,
        )
    per_peer = p2p_channels_per_peer(model, setting(cluster, sched))
    small = biggest <= model.table["p2p_ll_threshold"] * per_peer
    return ("LL", "Simple") if small else ("Simple",)


def _largest_pair(sched: Schedule, matrix=None) -> float:
    """Bytes of the largest single send of an all_to_all(v): ``matrix``'s largest off-diagonal
    entry (bounded above by its row and column maxima for an ``OuterSum``), else the uniform
    ``size / n``."""
    n = len(sched.ranks)
    if matrix is None:
        return float(sched.size_bytes) / max(n, 1)
    if isinstance(matrix, OuterSum):
        return float(matrix.row.max() + matrix.col.max()) if n else 0.0
    m = np.array(matrix, dtype=float, copy=True)
    np.fill_diagonal(m, 0.0)
    return float(m.max()) if m.size else 0.0


def _available(cluster, algorithm: str, n_nodes: int, local: int = 2) -> bool:
    """NCCL's algorithm conditions (enqueue.cc:2000-2008, tuning.cc:501-509): NVLS needs an
    NVSwitch of generation ≥ 3, a Hopper or later GPU (search.cc, ncclTopoCompute: no NVLS
    graph below sm90), at least 2 GPUs of the communicator on a node (``local``, the fewest on
    any of its nodes: ncclNvlsInit leaves NVLS off for a node topology of fewer than 2 GPUs,
    src/transport/nvls.cc:262 at 5067397c, so one GPU per node never runs NVLS or NVLSTree)
    and, across nodes, CollNet (SHARP); NVLSTree needs more than one node;
    CollNet Direct needs SHARP (``collectives.sharp``), an NVSwitch system (T:508-509) and 2 or
    more nodes (NCCL_COLLNET_NODE_THRESHOLD, init.cc:857,1469-1476)."""
    su = cluster.spec.scale_up
    nvls = (
        su.kind == "nvswitch"
        and su.nvswitch_generation >= 3
        and generation(cluster) in NVLS_GENERATIONS
        and local >= 2
    )
    if algorithm == "collnet_direct":
        return cluster.spec.collective_sharp and su.kind == "nvswitch" and n_nodes > 1
    if algorithm == "nvls":
        return nvls and (n_nodes == 1 or cluster.spec.collective_sharp)
    if algorithm == "nvls_tree":
        return nvls and n_nodes > 1
    return True


@dataclass(frozen=True)
class Prepared:
    """A chosen collective ready to execute: start latency, per phase the flows, launch floor."""

    start_s: float
    phases: tuple[tuple, ...]  # (routes, wire bytes, tail latency, weight, rate cap)
    algorithm: str
    protocol: str
    floor_s: float = 0.0


def prepare(
    cluster, choice: Choice, model: CollectiveModel | None = None, launch_gpus: int = 1
) -> Prepared:
    """Routes, wire bytes, rate caps and latency of a chosen collective (reusable across runs).

    ``launch_gpus`` is how many GPUs one host thread launches the collective on (nccl-tests
    ``-g``): the collective takes at least that many kernel launches.
    """
    model = cluster_model(cluster, model)
    sched, proto = choice.schedule, choice.protocol
    routes = choice.routes if choice.routes is not None else phase_routes(cluster, sched)
    st = setting(cluster, sched)
    start = latency_s(model, st, sched.algorithm, proto)
    if sched.algorithm in ("nvls", "nvls_tree", "tree"):  # the chunk pipeline's fill, paid once
        bw_s = bandwidth_s(cluster, sched, proto, model, routes)
        start += pipeline_fill_s(model, st, sched.algorithm, bw_s, proto)
    phases = []
    for p, r in zip(sched.phases, routes, strict=True):
        w = phase_wire(cluster, model, st, sched.algorithm, proto, p, r)
        phases.append((r, w.wire, np.zeros(len(p.nbytes)), p.weight, w.cap))
    floor = launch_gpus * model.launch(st.generation)
    return Prepared(start, tuple(phases), sched.algorithm, proto, floor)


def execute(
    env: simpy.Environment, net, prepared: Prepared, tag: object = None, coalesce: bool = False
):
    """simpy process: run a prepared collective on ``net``; returns its end time.
    ``coalesce``: its transfers share a rate solve with others started at the same instant
    (copies of a collective on other nodes, ``sim/templates.py``)."""
    t0 = env.now
    if prepared.start_s > 0:
        yield env.timeout(prepared.start_s)
    extra = {"coalesce": True} if coalesce else {}
    for routes, wire, lat, weight, cap in prepared.phases:
        yield net.transfer(routes, wire, lat, weight=weight, tag=tag, cap=cap, **extra)
    if env.now < t0 + prepared.floor_s:
        yield env.timeout(t0 + prepared.floor_s - env.now)
    return env.now


def run(
    env: simpy.Environment,
    net,
    cluster,
    choice: Choice,
    model: CollectiveModel | None = None,
    tag: object = None,
    launch_gpus: int = 1,
):
    """simpy process: execute a chosen collective on ``net``; returns its end time."""
    return (yield from execute(env, net, prepare(cluster, choice, model, launch_gpus), tag))
