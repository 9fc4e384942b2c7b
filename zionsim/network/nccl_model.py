"""NCCL's cost-model constants and the system it sees: the model (``zionsim/data/nccl_model.yaml``
with a topology's fitted overrides), what NCCL's tuner knows of a collective (:class:`Setting`),
and NCCL's channel counts (``src/graph/search.cc``, ``src/graph/tuning.cc``, ``src/enqueue.cc``).

NCCL's latency formula is in ``nccl_latency``, the bandwidth part of a collective's time in
``nccl_wire``; the tuner and the execution of a chosen collective in ``nccl``, which re-exports
the names of these modules that callers use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from zionsim.base.config import safe_load
from zionsim.base.errors import InputError
from zionsim.base.kept import Registry, kept_for
from zionsim.network.collectives import Schedule

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
MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "nccl_model.yaml"
#: GPU generations with rows in the model's per-generation tables (NCCL's compCapIndex: sm70,
#: sm80, sm90, sm100); ``cpu`` trainers have none (``nccl.check_gpus``)
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
#: generations with NVLink SHARP (NVLS): NCCL searches no NVLS graph below sm90 (search.cc,
#: ncclTopoCompute: ``ccMin < 90`` returns no channels)
NVLS_GENERATIONS = ("hopper", "blackwell")


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
        """Kernel launch time of ``generation``: its own fit, else the fit its row of the YAML's
        ``launch_fit_of`` names (the launch is host work: nccl_model.yaml says why every
        generation takes the Ampere fit); InputError for a generation the model has no row for."""
        if generation in self.launch_s:
            return self.launch_s[generation]
        fit_of = self.table.get("launch_fit_of", {})
        source = fit_of.get(generation)
        if source not in self.launch_s:
            raise InputError(
                f"no kernel-launch time for GPU generation {generation!r}",
                file=str(MODEL_FILE),
                field="fitted.launch_us / launch_fit_of",
                allowed=", ".join(sorted(set(self.launch_s) | set(fit_of))),
            )
        return self.launch_s[source]


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
    nic_near_gpu: bool = True  # GPU and NIC share a PCIe switch (NCCL's path type <= PXB)
    nics: int = 1  # NICs per node
    nic_GBps: float = 25.0  # one NIC's line rate, GB/s (NCCL's NET bandwidth)


#: remember :func:`setting` per cluster (and its spec) and schedule, both by identity (held):
#: the tuner and the estimates ask for a schedule's setting once per protocol and phase;
#: False: made each time (the tests comparing the two)
REUSE_SETTINGS = True
#: settings remembered per cluster, at most; clusters above this many GPUs keep none (an entry
#: holds its schedule, whose arrays grow with the cluster)
KEEP_SETTINGS = 4096
KEEP_MAX_GPUS = 4096
_SETTINGS: Registry = {}


def setting(cluster, sched: Schedule) -> Setting:
    """What NCCL's tuner sees of a collective: op, ranks, nodes, GPUs per node, GPU generation,
    CPU vendor, intra-node link kind, bytes and whether the NICs sit next to the GPUs (kept
    per cluster, its spec and the schedule while :data:`REUSE_SETTINGS`: all it reads)."""
    if not REUSE_SETTINGS or cluster.spec.nodes * cluster.spec.gpus_per_node > KEEP_MAX_GPUS:
        return _setting(cluster, sched)
    memo = kept_for(_SETTINGS, cluster)
    hit = memo.get(id(sched))
    if hit is not None and hit[0] is sched and hit[1] is cluster.spec:
        return hit[2]
    st = _setting(cluster, sched)
    if len(memo) >= KEEP_SETTINGS:
        memo.clear()
    memo[id(sched)] = (sched, cluster.spec, st)  # held: their identities stay theirs
    return st


def _setting(cluster, sched: Schedule) -> Setting:
    """:func:`setting`, made."""
    nodes = cluster.node_of(sched.ranks)
    n_nodes = len(np.unique(nodes))
    su, so = cluster.spec.scale_up, cluster.spec.scale_out
    ppn = max(1, len(sched.ranks) // max(1, n_nodes))
    return Setting(
        sched.op,
        len(sched.ranks),
        n_nodes,
        ppn,
        generation(cluster),
        cluster.spec.collective_cpu_vendor,
        "pcie" if su.kind == "none" else "nvlink",
        sched.size_bytes,
        so.nic_attach == "pcie_switch",
        so.nics_per_node,
        so.nic_bw_Bps / 1e9,
    )


def generation(cluster) -> str:
    """The cluster GPU's architecture: one of :data:`GENERATIONS`, or ``cpu`` for CPU trainers
    (which :func:`nccl.check_gpus` refuses).  A GPU whose generation the NCCL model has no
    constants for is an InputError (no silent stand-in: NCCL's tables differ per generation)."""
    from zionsim.hardware.compute import architecture

    arch = architecture(cluster.spec.gpu)  # InputError: a model naming no known GPU family
    if arch not in GENERATIONS and arch != "cpu":
        raise InputError(
            f"the NCCL model has no constants for GPU architecture {arch!r}",
            field="gpu.architecture",
            allowed=", ".join(GENERATIONS),
        )
    return arch


def per_generation(t: dict, key: str, generation: str):
    """Row ``generation`` of the YAML's per-generation table ``key``; InputError where the
    table has none (never another generation's row)."""
    rows = t[key]
    if generation not in rows:
        raise InputError(
            f"no {generation!r} row in the NCCL model's {key}",
            file=str(MODEL_FILE),
            field=key,
            allowed=", ".join(rows),
        )
    return rows[generation]


def nvls_channels(t: dict, st: Setting) -> int:
    """NCCL's NVLS channels: 16 on Hopper; on Blackwell 24 inside one node (NVLink domain) and
    32 across nodes (nvls.cc ``NVLS_NCHANNELS_SM100_NVL`` / ``NVLS_NCHANNELS_SM100``)."""
    one, multi = per_generation(t, "nvls_channels", st.generation)
    return int(one if st.nodes <= 1 else multi)


def nvls_heads(t: dict, st: Setting) -> int:
    """Channels of NCCL's NVLS graph, the count its tuner multiplies NVLS and NVLSTree per-channel
    bandwidths by (``busBw = graphs[a]->nChannels * bw``, T:306-324): its heads, one GPU per
    channel (search.cc at v2.26.2-1: ``maxChannels = min(NCCL_MAX_NVLS_ARITY, ngpus)``, :975;
    across nodes the search only pairs each NIC with its local GPU, no GPU twice, :625-640;
    connect.cc:75-85 at HEAD takes the heads from it).  Across nodes ``min(NICs, GPUs per
    node)``, on one node the node's GPUs, at most ``nvls_max_arity``.  Not the NVLS kernels'
    CTAs (:func:`nvls_channels`, 16 on Hopper): those each run every head's slice."""
    heads = st.ppn if st.nodes <= 1 else min(max(1, st.nics), st.ppn)
    return int(min(heads, t["nvls_max_arity"]))


def table_column(nodes: int) -> int:
    """NCCL's bandwidth-table column: 1 node, 2 nodes, 3 or more (tuning.cc:267)."""
    return 0 if nodes <= 1 else (1 if nodes == 2 else 2)


def log2i(x: int) -> int:
    """``floor(log2(x))`` for ``x >= 1``, 0 below (NCCL's ``log2i``)."""
    return max(0, int(x).bit_length() - 1)


def graph_channels(model: CollectiveModel, st: Setting) -> int:
    """Channels of the graph NCCL's tuner rates a ring or tree by (``graphs[a]->nChannels``,
    T:315).  On one node the NVLink graph's channels (the YAML's ``channels``).  Across nodes
    NCCL's topology search (src/graph/search.cc at 5067397c) gives each NIC one channel at the
    highest speed of its table the NIC carries (speedArrayInter, sm90SpeedArrayInter,
    search.cc:1051-1061; 24 GB/s on a 200 Gb/s NIC, 48 on 400 Gb/s), then doubles the channels
    (ncclTopoDupChannels, search.cc:1036-1049) unless that speed is below 25 GB/s, or, from
    Hopper on, below 50 GB/s with more than 4 channels: 8 HDR NICs give 8 channels, 4 NDR NICs
    on Hopper 8 (the 16 trees of NVIDIA/nccl issue 1357's log are those 8 doubled again at
    connection, connect.cc).

    NCCL drops channels for small sizes only after the algorithm is chosen (enqueue.cc
    2093-2096) and its tuner does not model that; zionsim rates every size on the graph's
    channels in the tuner and in the execution alike, so that the two agree (with the drop, a
    larger buffer on more channels could finish before a smaller one).  The exception is LL
    across nodes, whose rate zionsim takes on the channels in use, continuously in the size, in
    the tuner and the execution alike (``nccl_wire.ll_cap_GBps``, issue 26 round 6)."""
    t = model.table
    nc = int(per_generation(t, "channels", st.generation))
    if st.nodes <= 1:
        return nc
    bw = graph_speed_GBps(t, st)
    n = max(1, st.nics)
    hopper_on = st.generation not in ("volta", "ampere")  # NCCL's ccMin > 80
    if bw >= 25.0 and not (hopper_on and bw < 50.0 and n > 4):
        n *= 2
    return min(n, int(t["max_graph_channels"]))


def graph_speed_GBps(t: dict, st: Setting) -> float:
    """The speed (GB/s) NCCL's topology search gives each NIC's channel across nodes: the
    highest of its table (speedArrayInter, sm90SpeedArrayInter, search.cc:1051-1061) the NIC
    carries, the table's lowest if none (before duplication, :func:`graph_channels`)."""
    table = per_generation(t, "search_inter_speeds_GBps", st.generation)
    fits = [v for v in table if v <= st.nic_GBps]
    return max(fits) if fits else min(table)


def ll128_enabled(st: Setting) -> bool:
    """NCCL enables LL128 by default (T:517-535) only where the intra-node path is NVLink (path
    type <= NVB) and, across nodes, where the NIC is near the GPU: up to PXB (a shared PCIe
    switch) before Hopper, up to PXN on Hopper and later (``NCCL_LL128_C2C`` 1 by default,
    T:235), which on these topologies is the same condition: a NIC on the host bridge (PHB) or
    the other socket (SYS) disables it.  One GPU per node has no intra-node path (LOC)."""
    if st.ppn > 1 and st.intra != "nvlink":
        return False
    return st.nodes <= 1 or st.nic_near_gpu


def comm_channels(model: CollectiveModel, st: Setting) -> int:
    """The communicator's collective channels: the graph's (:func:`graph_channels`) doubled at
    connection (src/graph/connect.cc:452), at most MAXCHANNELS (the YAML's
    ``ll_channel_tuning``)."""
    ll = model.table["ll_channel_tuning"]
    return int(min(ll["connect_duplication"] * graph_channels(model, st), ll["max_channels"]))


def pow2_up(x: int) -> int:
    """The smallest power of two >= ``x`` (NCCL's ``pow2Up``), 1 for ``x`` <= 1."""
    return 1 << max(0, int(x) - 1).bit_length()


def p2p_channels_per_peer(model: CollectiveModel, st: Setting) -> int:
    """NCCL's channels per point-to-point peer (``comm->p2pnChannelsPerPeer``), the multiple of
    NCCL_P2P_LL_THRESHOLD up to which a send runs LL (enqueue.cc:779 at v2.26.2-1).

    Across nodes: the fewest of any peer, a network peer's (ncclTopoGetNchannels,
    src/graph/paths.cc:758-793 at v2.26.2-1): 2, halved while ``2 x nRanks > 4 x
    p2pnChannels`` (p2pnChannels the communicator's channels rounded up to a power of two,
    paths.cc:802-829), and at least the NICs needed to match the GPU's bandwidth
    (getLocalNetCountByBw, topo.cc:1430): 1 on every built-in topology (one NIC per GPU at
    most; zionsim does not describe which NICs share a GPU's PCIe switch).  At most
    p2pnChannels.  On one node the YAML's ``p2p_channels`` (NCCL gives NVLink peers 2 x the
    links between them; zionsim keeps its earlier 2 there, docs/validation.md round 9)."""
    t = model.table
    if st.nodes <= 1:
        return int(per_generation(t, "p2p_channels", st.generation))
    p2p_n = pow2_up(comm_channels(model, st))
    n = int(t["p2p_net_channels_per_peer"])
    while n * st.n > p2p_n * t["p2p_net_peer_channel_budget"] and n > 1:
        n //= 2
    return max(1, min(pow2_up(n), p2p_n))
