"""NCCL's cost structure: protocols, latencies, channels, the algorithm tuner, and execution.

A collective's time follows NCCL's own model (``src/graph/tuning.cc``, constants and provenance in
``zionsim/data/nccl_model.yaml``):

    time = max(G × launch, overhead[p] + latency(a, p) + bandwidth part)

* ``latency(a, p)`` is NCCL's formula for algorithm ``a`` and protocol ``p``: base latency plus
  per-step hardware latencies by link class — a ring pays ``nsteps`` steps, of which the steps
  that cross nodes pay the network latency and the others at least NCCL's net post overhead; a
  tree pays ``2((ppn−1)·intra + log2(nodes)·net)``; NVLS, NVLSTree and CollNet their own terms;
  with one GPU per node the network latency is the tree's (:func:`latency_s`).  Point-to-point
  operations (send/recv, all-to-all) have no NCCL cost model: they pay one launch of the kernel
  (the ring base latency) and one hop of the slowest link class they cross.
* the bandwidth part is the algorithm's flows on the network (``flows.py``) at wire bytes =
  payload / protocol efficiency (LL 1/2, LL128 0.92, Simple 1; tree and NVLS their own), each
  flow capped by what NCCL's channels can carry: the channels in use for this size (NCCL drops
  channels for small sizes) × the per-channel caps of LL128 and tree, LL's total cap, and the
  NVSwitch's reduction rate for NVLS (:func:`prepare`).  Contention with other traffic comes
  from the network model, so NCCL's per-channel ``bw`` numbers are not used: the links are.
  Point-to-point flows that cross the network (all-to-all) also pay the many-connection
  efficiency of a NIC (:func:`p2p_net_efficiency`; fitted, see the YAML).
* ``launch`` is the host time to launch one kernel, fitted per GPU generation; ``G`` is how many
  GPUs one thread launches for (nccl-tests ``-g``; 1 in training, one process per GPU).  Kernels
  launched back to back overlap the launches, hence the max.
* ``overhead`` and an extra payload efficiency per protocol are 0 and 1 in the built-in model;
  a topology's ``collectives.protocols`` (e.g. written by ``zionsim calibrate``) sets them for
  its cluster (:func:`cluster_model`).

Without an explicit algorithm the tuner does what NCCL does: estimate every (algorithm, protocol)
NCCL would consider on this system — latency plus bytes over the most loaded link of each phase
(contention included, no simulation), launch excluded as in NCCL — and take the fastest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import simpy

from zionsim.base.config import safe_load
from zionsim.base.errors import InputError
from zionsim.network.collectives import ALGORITHMS, Schedule, schedule

PROTOCOLS = ("LL", "LL128", "Simple")
FAMILY = {
    "ring": "ring",
    "hierarchical": "ring",
    "tree": "tree",
    "nvls": "nvls",
    "nvls_tree": "nvls_tree",
    "collnet_direct": "collnet",
    "direct": "p2p",
    "pxn": "p2p",
}
#: algorithms NCCL itself chooses among (hierarchical 2D is zionsim's, used only when asked)
AUTO = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "collnet_direct"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring",),
    "all_to_all": ("pxn",),
    "send_recv": ("direct",),
}
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "nccl_model.yaml"
GENERATIONS = ("volta", "ampere", "hopper")


@dataclass(frozen=True)
class CollectiveModel:
    """NCCL's cost-model constants and the fitted parameters (SI units; see the YAML)."""

    base_s: dict[str, dict[str, float]]
    step_s: dict[str, dict[str, dict[str, float]]]
    overhead_s: dict[str, float]
    efficiency: dict[str, float]
    table: dict = field(default_factory=dict, compare=False, repr=False)
    launch_s: dict[str, float] = field(default_factory=dict)
    latency_scale: float = 1.0

    def protocols(self, algorithm: str) -> tuple[str, ...]:
        """The protocols (of LL, LL128, Simple) that ``algorithm``'s family has latencies for."""
        return tuple(p for p in PROTOCOLS if p in self.base_s[FAMILY[algorithm]])

    def with_fit(self, overhead_s: dict[str, float], efficiency: dict[str, float]):
        """The same latencies with other per-protocol overheads (s) and efficiencies (0–1]."""
        return CollectiveModel(
            self.base_s,
            self.step_s,
            dict(overhead_s),
            dict(efficiency),
            self.table,
            self.launch_s,
            self.latency_scale,
        )

    def with_launch(self, launch_s: dict[str, float]) -> CollectiveModel:
        """The same model with other kernel-launch times (s) per GPU generation."""
        return CollectiveModel(
            self.base_s,
            self.step_s,
            self.overhead_s,
            self.efficiency,
            self.table,
            dict(launch_s),
            self.latency_scale,
        )

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
            self.table,
            {g: v * factor for g, v in self.launch_s.items()},
            self.latency_scale * factor,
        )

    def launch(self, generation: str) -> float:
        """Kernel launch time of ``generation`` (the Ampere fit where none is fitted)."""
        return self.launch_s.get(generation, self.launch_s.get("ampere", 0.0))


@lru_cache(maxsize=4)
def load_model(path: str | None = None) -> CollectiveModel:
    """The collective model in ``path`` (default: the built-in one)."""
    data = safe_load(Path(path or MODEL_FILE).read_text())
    us = 1e-6
    return CollectiveModel(
        base_s={a: {p: v * us for p, v in d.items()} for a, d in data["base_latency_us"].items()},
        step_s={
            a: {hw: {p: v * us for p, v in d.items()} for hw, d in t.items()}
            for a, t in data["step_latency_us"].items()
        },
        overhead_s={p: v * us for p, v in data["fitted"]["overhead_us"].items()},
        efficiency=dict(data["fitted"]["efficiency"]),
        table=data,
        launch_s={g: v * us for g, v in data["fitted"]["launch_us"].items()},
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
    #: each phase's routes as :func:`choose` computed them (reused by :func:`prepare`)
    routes: tuple | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Setting:
    """What NCCL's model needs to know of a collective's system."""

    op: str
    n: int
    nodes: int
    ppn: int
    generation: str
    vendor: str
    intra: str  # nvlink or pcie
    nbytes: float  # NCCL's nBytes: the buffer (all_reduce) or the total (gather, scatter)


def setting(cluster, sched: Schedule) -> Setting:
    """What NCCL's tuner sees of a collective: op, ranks, nodes, GPUs per node, GPU generation,
    CPU vendor, intra-node link kind and bytes."""
    nodes = cluster.node_of(sched.ranks)
    n_nodes = len(np.unique(nodes))
    su = cluster.spec.scale_up
    return Setting(
        sched.op,
        len(sched.ranks),
        n_nodes,
        max(1, len(sched.ranks) // max(1, n_nodes)),
        generation(cluster),
        cluster.spec.collective_cpu_vendor,
        "pcie" if su.kind == "none" else "nvlink",
        sched.size_bytes,
    )


def generation(cluster) -> str:
    """The cluster GPU's architecture (``volta``/``ampere``/``hopper``); Ampere if unknown."""
    from zionsim.hardware.compute import architecture

    try:
        return architecture(cluster.spec.gpu)
    except InputError:
        return "ampere"


def _col(nodes: int) -> int:
    """NCCL's bandwidth-table column: 1 node, 2 nodes, 3 or more (tuning.cc:267)."""
    return 0 if nodes <= 1 else (1 if nodes == 2 else 2)


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def latency_s(model: CollectiveModel, st: Setting, algorithm: str, protocol: str) -> float:
    """NCCL's latency of ``algorithm``/``protocol`` (tuning.cc:384-435), overhead included."""
    fam = FAMILY[algorithm]
    # a fitted overhead of point-to-point kernels is the LL one (their launch floor)
    base = model.base_s[fam][protocol] + model.overhead_s.get(
        "LL" if fam == "p2p" else protocol, 0.0
    )
    step = model.step_s[fam]
    intra = step[st.intra][protocol]
    if fam == "p2p":
        return base + (step["net"][protocol] if st.nodes > 1 else intra)
    t = model.table
    scale = model.latency_scale
    net_family = "tree" if (st.ppn == 1 and fam == "ring") else fam
    inter = model.step_s[net_family]["net"][protocol]
    if fam == "ring":
        steps = 2 * (st.n - 1) if st.op == "all_reduce" else st.n - 1
        if algorithm == "hierarchical" and st.nodes > 1:
            n_inter = 2 * (st.nodes - 1)
            return base + 2 * (st.ppn - 1) * intra + n_inter * inter
        if st.nodes == 1:
            return base + steps * intra
        n_inter = 2 * (st.nodes - 1) if st.op == "all_reduce" else st.nodes - 1
        post = t["net_overhead_us"][st.vendor] * 1e-6 * scale * (3 if protocol == "Simple" else 1)
        lat = base + (steps - n_inter) * max(intra, post) + n_inter * inter
        channels = t["channels"].get(st.generation, 12)
        if protocol == "Simple" and st.op == "all_reduce" and st.nbytes / (channels * st.n) >= 64:
            lat *= t["ring_plateau_factor"] if st.generation != "volta" else 1.9
        return lat
    if fam == "tree":
        return base + 2 * ((st.ppn - 1) * intra + _log2i(st.nodes) * inter)
    if fam == "nvls":
        return base + intra + (inter if st.nodes > 1 else 0.0)
    if fam == "nvls_tree":
        return base + intra + 2 * _log2i(st.nodes) * inter
    if fam == "collnet":  # CollNet Direct, with its 0.4 us arity serialisation
        arity = t["collnet_arity_us"] * 1e-6 * scale
        return base + 2 * (min(1, st.ppn - 1) * intra + (st.ppn - 1) * arity) + inter
    raise InputError(f"no latency model for {algorithm!r}", field="--algorithm")


def channels_for(model: CollectiveModel, st: Setting, algorithm: str, protocol: str) -> int:
    """Channels NCCL runs for this size (enqueue.cc:2093-2096) out of the graph's channels."""
    t = model.table
    nc = int(t["channels"].get(st.generation, 12))
    thr = t["max_threads"][protocol] * t["thread_threshold"][protocol]
    if FAMILY[algorithm] == "ring" and protocol == "LL":
        thr *= st.n
    while nc >= 2 and st.nbytes < nc * thr:
        nc -= 1
    return nc


def fixed_latency_s(
    model: CollectiveModel, algorithm: str, protocol: str, st: Setting
) -> tuple[float, list[float]]:
    """(latency, []) of one collective: NCCL's latency, paid before its flows start."""
    return latency_s(model, st, algorithm, protocol), []


def _phase_routes(cluster, sched: Schedule):
    return [
        p.routes if p.routes is not None else cluster.router.routes(p.src, p.dst)
        for p in sched.phases
    ]


@dataclass(frozen=True)
class _Wire:
    wire: np.ndarray  # bytes on the wire per flow
    cap: np.ndarray  # each flow's own rate cap (wire bytes/s)


def _phase_wire(
    cluster, model, st: Setting, algorithm: str, protocol: str, phase, routes, tuning=False
) -> _Wire:
    """Wire bytes and per-flow rate caps of one phase (NCCL's protocol and channel limits).

    ``tuning``: as NCCL's tuner sees it, with every channel of the graph (its bandwidth table
    does not know that fewer channels will run small sizes: enqueue.cc drops them after the
    algorithm is chosen)."""
    t = model.table
    fam = FAMILY[algorithm]
    gen = st.generation
    col = _col(st.nodes)
    extra = model.efficiency.get(protocol, 1.0)
    n_flows = len(phase.nbytes)
    cap_link = np.append(cluster.router.capacity_Bps, np.inf)
    bottleneck = (
        cap_link[np.where(routes >= 0, routes, len(cap_link) - 1)].min(axis=1)
        if routes.shape[1]
        else np.full(n_flows, np.inf)
    )
    cap = np.full(n_flows, np.inf)
    if fam == "p2p":
        eff = t["protocol_efficiency"]["other"][protocol] * extra
        return _Wire(phase.nbytes / (eff * p2p_net_efficiency(cluster, t, phase, routes)), cap)
    # flows per sending rank: a rank's payload rate (bus bandwidth) is shared by its flows
    per_src = np.bincount(np.searchsorted(np.unique(phase.src), phase.src))[
        np.searchsorted(np.unique(phase.src), phase.src)
    ].astype(float)
    if fam == "collnet":  # CollNet Direct's derating on sm90+ (T:340-350)
        eff = t["protocol_efficiency"]["other"][protocol] * extra
        return _Wire(phase.nbytes / (eff * t["collnet_efficiency"].get(gen, 1.0)), cap)
    if fam in ("nvls", "nvls_tree"):
        return _nvls_wire(cluster, t, st, fam, phase, extra, per_src)
    nc_max = int(t["channels"].get(gen, 12))
    nc = nc_max if tuning else channels_for(model, st, algorithm, protocol)
    cap = bottleneck * nc / nc_max  # the channels in use for this size
    if fam == "ring":
        eff = t["protocol_efficiency"]["ring"][protocol]
        if protocol == "LL":
            busbw = _ll_max(t, st) * 1e9
        elif protocol == "LL128":
            busbw = nc * t["per_channel_ring_ll128_bw"].get(gen, 20.0) * 1e9
        else:
            busbw = np.inf
    else:  # tree
        eff = t["protocol_efficiency"]["tree"][protocol]
        if protocol == "LL128" and st.nodes > 1:
            eff = t["protocol_efficiency"]["tree_multinode_LL128"]
        if protocol == "LL":
            busbw = _ll_max(t, st) * 1e9
        elif protocol == "LL128":
            busbw = nc * t["per_channel_tree_ll128_bw"].get(gen, [20.0] * 3)[col] * 1e9
        else:
            busbw = nc * t["per_channel_tree_bw"].get(gen, [24.0] * 3)[col] * 1e9
    eff *= extra
    cap = np.minimum(cap, busbw / per_src / eff)
    return _Wire(phase.nbytes / eff, cap)


def p2p_net_efficiency(cluster, t: dict, phase, routes: np.ndarray) -> np.ndarray:
    """Fraction of its fair network rate each point-to-point flow of ``phase`` reaches: 1 for
    flows that stay inside a node, ``1 / (1 + c·(1 − 1/k))`` for flows that cross the scale-out
    fabric, where ``k`` is the number of sender→receiver connections (a PXN flow's ``weight``)
    that share the busier of the flow's sending and receiving NIC, and ``c`` is
    ``p2p_net_peer_overhead`` (nccl_model.yaml).  One connection per NIC (send/recv) runs at the
    link's rate; an all-to-all's many connections per NIC lose up to ``c/(1+c)`` of it."""
    ones = np.ones(len(phase.nbytes))
    c = float(t.get("p2p_net_peer_overhead", 0.0))
    if c == 0.0 or routes.shape[1] == 0 or not len(ones):
        return ones
    router = cluster.router
    # fabric edges, and False at index -1 for the routes' padding
    on_net = np.append(router.edge_kind == cluster.spec.scale_out.kind, False)[routes]
    crosses = on_net.any(axis=1)
    if not crosses.any():
        return ones
    rows = np.arange(len(routes))
    egress = routes[rows, np.argmax(on_net, axis=1)]  # NIC → fabric: the first fabric edge
    ingress = routes[rows, routes.shape[1] - 1 - np.argmax(on_net[:, ::-1], axis=1)]
    pairs = ones if phase.weight is None else np.asarray(phase.weight, dtype=float)
    n_edges = len(router.capacity_Bps)
    k_out = np.bincount(egress[crosses], weights=pairs[crosses], minlength=n_edges)[egress]
    k_in = np.bincount(ingress[crosses], weights=pairs[crosses], minlength=n_edges)[ingress]
    k = np.maximum(np.maximum(k_out, k_in), 1.0)
    return np.where(crosses, 1.0 / (1.0 + c * (1.0 - 1.0 / k)), 1.0)


def _nvls_wire(cluster, t: dict, st: Setting, fam: str, phase, extra: float, per_src) -> _Wire:
    """NVLS legs (to and from an NVSwitch) at nvlsEfficiency; NVLSTree's flows across nodes
    capped at its per-channel bus bandwidth (T:306-318).

    Across nodes the NVLS legs keep NCCL's bus bandwidth, not its algorithm bandwidth: NCCL
    rates NVLS and NVLSTree per node and converts bus to algorithm bandwidth by ``nRanks /
    nsteps`` = ``n / 2(n-1)`` (T:306-322, T:379), so ``n`` ranks over nodes of ``g`` GPUs get
    ``(n/(n-1)) / (g/(g-1))`` of the one-node algorithm bandwidth (0.933 on 2 nodes of 8;
    nccl-tests 309 and the OCI runs measure 0.90-0.91)."""
    gen, cap = st.generation, np.full(len(phase.nbytes), np.inf)
    switches = _switch_devices(cluster)
    leg = np.isin(phase.src, switches) | np.isin(phase.dst, switches)
    nvls_eff = t["nvls_efficiency"].get(gen, 0.0) or 1.0
    if st.nodes > 1 and st.ppn > 1 and st.n > st.ppn:
        nvls_eff *= (st.n / (st.n - 1)) / (st.ppn / (st.ppn - 1))
    eff = np.where(leg, nvls_eff, 1.0) * extra
    if fam == "nvls_tree" and st.nodes > 1:
        per_ch = t["per_channel_nvls_tree_bw"].get(gen, [0, 0, 0])[_col(st.nodes)] * 1e9
        if per_ch > 0:
            busbw = per_ch * min(t["nvls_channels"], t["channels"].get(gen, 16))
            cap = np.where(~leg, busbw / per_src, cap)
    return _Wire(phase.nbytes / eff, cap)


def _ll_max(t: dict, st: Setting) -> float:
    if st.nodes <= 1:
        return t["ll_max_bw"].get(st.generation, t["ll_max_bw"]["ampere"])[0]
    return t["ll_max_bw_multinode"][st.vendor][_col(st.nodes)]


def _switch_devices(cluster) -> np.ndarray:
    nodes = cluster.spec.nodes
    try:
        return np.array([cluster.router.local("nvswitch", k) for k in range(nodes)])
    except (KeyError, InputError, ValueError, IndexError):
        return np.zeros(0, dtype=np.int64)


def estimate_s(
    cluster,
    sched: Schedule,
    protocol: str,
    model: CollectiveModel,
    routes: list[np.ndarray] | None = None,
    tuning: bool = False,
) -> float:
    """NCCL-style estimate: latency + each phase's bytes over its most loaded link or flow cap
    (+ the runtime's chunk-pipeline fill, :func:`pipeline_fill_s`).

    ``tuning``: NCCL's tuner's view, which picks the algorithm — every channel of the graph and
    its derating of trees (:func:`_tree_correction`), no pipeline fill (the tuner's model is
    latency + size / bandwidth); else the collective as it runs (the channels in use for this
    size), which is what :class:`Choice` reports."""
    st = setting(cluster, sched)
    bw_s = bandwidth_s(cluster, sched, protocol, model, routes, tuning)
    fill = 0.0 if tuning else pipeline_fill_s(model, st, sched.algorithm, bw_s)
    return latency_s(model, st, sched.algorithm, protocol) + bw_s + fill


def bandwidth_s(
    cluster,
    sched: Schedule,
    protocol: str,
    model: CollectiveModel,
    routes: list[np.ndarray] | None = None,
    tuning: bool = False,
) -> float:
    """Fluid time of a collective alone: each phase's wire bytes over its most loaded link or
    its flows' own rate cap, summed over phases (``tuning``: see :func:`estimate_s`)."""
    routes = routes if routes is not None else _phase_routes(cluster, sched)
    st = setting(cluster, sched)
    cap = cluster.router.capacity_Bps
    slow = _tree_correction(model, st, sched.algorithm, protocol) if tuning else 1.0
    bw_s = 0.0
    for phase, r in zip(sched.phases, routes, strict=True):
        w = _phase_wire(cluster, model, st, sched.algorithm, protocol, phase, r, tuning)
        valid = r >= 0
        worst = 0.0
        if valid.any():
            load = np.bincount(
                r[valid],
                weights=np.broadcast_to(w.wire[:, None], r.shape)[valid],
                minlength=len(cap),
            )
            worst = float((load / cap).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            own = np.where(w.wire > 0, w.wire / w.cap, 0.0)
        bw_s += max(worst, float(own.max()) if len(own) else 0.0) / slow
    return bw_s


def nvls_chunk_bytes(t: dict, st: Setting, algorithm: str = "nvls") -> int:
    """NCCL's chunk size of an NVLS (one node) or NVLSTree all_reduce, at NVIDIA/nccl 5067397c.

    NVLS: ``NCCL_NVLS_CHUNKSIZE`` (128 KiB, src/transport/nvls.cc:160) halved for smaller
    buffers relative to the ``nChannels x nHeads`` concurrent chunks (src/enqueue.cc:2258-2275).
    NVLSTree: at most the tree's maximum chunk (the NVLS chunk, 64 KiB from 4 nodes on;
    nvls.cc:226-231), halved the same way with its own thresholds (enqueue.cc:2276-2285)."""
    chunk = int(t["nvls_chunk_bytes"])
    ops = t["nvls_channels"] * st.ppn  # channels x heads: every GPU heads its slice
    if algorithm == "nvls_tree":
        chunk = min(chunk, 65536 if st.nodes >= 4 else chunk)
        steps = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))
    else:
        steps = ((64, 65536), (8, 32768), (2, 16384))
    for factor, floor in steps:
        if st.nbytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def pipeline_fill_s(model: CollectiveModel, st: Setting, algorithm: str, bw_s: float) -> float:
    """Time the chunk pipeline of an NVLS all_reduce (one node) or NVLSTree all_reduce takes to
    fill, on top of the fluid time ``bw_s`` of its bytes.  The kernel's warp groups are pipeline
    stages that each work on one loop of ``nChannels x nHeads x chunk`` bytes at a time
    (``loopCount = nHeads * chunkSize`` per channel): NVLS has three (scatter to the NVLS buffer,
    multimem reduce + multicast, gather; src/device/all_reduce.h:410-457), NVLSTree four
    (scatter, reduce and send up the tree, receive down the tree and multicast, gather;
    all_reduce.h:527-640).  The last loop leaves the last stage ``stages - 1`` loop-times after
    the fluid model would have it done; a loop-time is the loop's share of ``bw_s``.  The
    network hops between NVLSTree's stages add no fill of their own here (a lower bound).  0 for
    other algorithms (their per-step pipelining is in NCCL's per-hop latencies) and for NVLS
    across nodes (in-network reduction)."""
    stages = int(model.table["nvls_pipeline_stages"].get(algorithm, 0))
    if stages < 2 or st.nbytes <= 0 or bw_s <= 0 or (algorithm == "nvls" and st.nodes != 1):
        return 0.0
    t = model.table
    loop = t["nvls_channels"] * st.ppn * nvls_chunk_bytes(t, st, algorithm)
    return (stages - 1) * min(1.0, loop / st.nbytes) * bw_s


def _tree_correction(model: CollectiveModel, st: Setting, algorithm: str, protocol: str) -> float:
    """NCCL's tuner derates tree all_reduce bandwidth at medium sizes by a static factor per
    protocol and power of two of ``nBytes/64`` (treeCorrectionFactor, tuning.cc:620-644); 1 for
    other algorithms and sizes."""
    if FAMILY[algorithm] != "tree" or st.op != "all_reduce" or st.nbytes < 64:
        return 1.0
    row = model.table["tree_correction_factor"][protocol]
    log_size = _log2i(int(st.nbytes) >> 6)
    return row[log_size] if log_size < len(row) - 1 else 1.0


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
    n_nodes = len(np.unique(cluster.node_of(np.asarray(ranks))))
    candidates = (
        [algorithm] if algorithm else [a for a in AUTO[op] if _available(cluster, a, n_nodes)]
    )
    best, best_view = None, np.inf
    for alg in candidates:
        sched = schedule(cluster, op, ranks, size_bytes, alg, matrix)
        routes = _phase_routes(cluster, sched)
        protos = _protocols(model, alg, sched, cluster)
        if protocol is not None:
            if protocol not in model.protocols(alg):
                raise InputError(
                    f"protocol {protocol!r} is not used by {alg}",
                    field="--protocol",
                    allowed=", ".join(model.protocols(alg)),
                )
            protos = (protocol,)
        for proto in protos:
            view = estimate_s(cluster, sched, proto, model, routes, tuning=True)
            if best is None or view < best_view:
                best, best_view = (sched, proto, routes), view
    sched, proto, routes = best
    return Choice(sched, proto, estimate_s(cluster, sched, proto, model, routes), tuple(routes))


def _protocols(model: CollectiveModel, alg: str, sched: Schedule, cluster) -> tuple[str, ...]:
    """Protocols NCCL would use: point-to-point is LL up to 16 KiB per peer per channel, else
    Simple (enqueue.cc:859,931-933); collectives try every protocol of the algorithm."""
    if FAMILY[alg] != "p2p":
        return model.protocols(alg)
    biggest = max((float(p.nbytes.max()) for p in sched.phases if len(p.nbytes)), default=0.0)
    per_peer = model.table["p2p_channels"].get(generation(cluster), 2)
    return ("LL",) if biggest <= model.table["p2p_ll_threshold"] * per_peer else ("Simple",)


def _available(cluster, algorithm: str, n_nodes: int) -> bool:
    """NCCL's algorithm conditions (enqueue.cc:2000-2008, tuning.cc:501-509): NVLS needs an
    NVSwitch of generation ≥ 3 and, across nodes, CollNet (SHARP); NVLSTree needs more than one
    node; CollNet Direct needs SHARP (``collectives.sharp``), an NVSwitch system (T:508-509)
    and 2 or more nodes (NCCL_COLLNET_NODE_THRESHOLD, init.cc:857,1469-1476)."""
    su = cluster.spec.scale_up
    nvls = su.kind == "nvswitch" and su.nvswitch_generation >= 3
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
    routes = choice.routes if choice.routes is not None else _phase_routes(cluster, sched)
    st = setting(cluster, sched)
    start = latency_s(model, st, sched.algorithm, proto)
    if sched.algorithm in ("nvls", "nvls_tree"):  # the chunk pipeline's fill, paid once
        bw_s = bandwidth_s(cluster, sched, proto, model, routes)
        start += pipeline_fill_s(model, st, sched.algorithm, bw_s)
    phases = []
    for p, r in zip(sched.phases, routes, strict=True):
        w = _phase_wire(cluster, model, st, sched.algorithm, proto, p, r)
        phases.append((r, w.wire, np.zeros(len(p.nbytes)), p.weight, w.cap))
    floor = launch_gpus * model.launch(st.generation)
    return Prepared(start, tuple(phases), sched.algorithm, proto, floor)


def execute(env: simpy.Environment, net, prepared: Prepared, tag: object = None):
    """simpy process: run a prepared collective on ``net``; returns its end time."""
    t0 = env.now
    if prepared.start_s > 0:
        yield env.timeout(prepared.start_s)
    for routes, wire, lat, weight, cap in prepared.phases:
        yield net.transfer(routes, wire, lat, weight=weight, tag=tag, cap=cap)
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
