"""The bandwidth part of an NCCL collective: how its bytes go on the wire.

Wire bytes = payload / protocol efficiency, per-flow rate caps from NCCL's channels (the channels
in use for this size, the per-channel caps of LL128 and tree, LL's cap (across nodes on the
channels NCCL keeps for the size, :func:`ll_cap_GBps`), NVLS's switch
rate and NVLSTree's per-channel cap), the many-connection efficiency of a NIC for point-to-point
traffic (``nccl_p2p.p2p_net_efficiency``), the fluid time of a collective alone
(:func:`bandwidth_s`) and the fill of NVLS and tree LL128 chunk pipelines
(:func:`pipeline_fill_s`).  Constants and their sources: ``zionsim/data/nccl_model.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.base.errors import InputError
from zionsim.base.kept import keep_by_identity
from zionsim.network import nccl_p2p
from zionsim.network.collectives import Schedule
from zionsim.network.nccl_model import (
    FAMILY,
    CollectiveModel,
    Setting,
    comm_channels,
    graph_channels,
    graph_speed_GBps,
    log2i,
    nvls_channels,
    nvls_heads,
    per_generation,
    setting,
    table_column,
)
from zionsim.network.nccl_p2p import crosses_fabric, kept_p2p_efficiency


def phase_routes(cluster, sched: Schedule) -> list:
    """Each phase's routes: a ``phases.ClassRoutes`` where it has flow classes, its own where
    the algorithm routes it, else the router's."""
    return [
        p.classes
        if p.classes is not None
        else p.routes
        if p.routes is not None
        else cluster.router.routes(p.src, p.dst)
        for p in sched.phases
    ]


def _link_load(routes, per_row: np.ndarray, n_links: int) -> np.ndarray:
    """Σ over rows of ``per_row`` on every link each row crosses (× the fraction of a class
    row's members that cross it)."""
    plain_ids, plain_rows, c_ids, c_rows, c_frac = _gathered(routes)
    load = np.bincount(plain_ids, weights=per_row[plain_rows], minlength=n_links)
    load = load.astype(float, copy=False)  # (an empty bincount is of ints)
    if c_ids is not None:
        load += np.bincount(c_ids, weights=per_row[c_rows] * c_frac, minlength=n_links)
    return load


#: what :func:`_link_load` gathers of a routes object (its valid link ids, in order, with
#: each one's row, and of class rows each one's fraction), kept by the object's identity
#: (held: routes are never changed once made; a collective's are shared by every cluster of
#: its layout, ``nccl._scheduled``) up to this many bytes in all; 0: gathered anew each time
KEEP_GATHERED_BYTES = 64 * 2**20
_GATHERED: dict[int, tuple] = {}
_GATHERED_BYTES = [0]


def _gathered(routes) -> tuple:
    """``routes``' link ids (padded ones left out) in row-major order and the row of each,
    then the same of its class rows (rows numbered after the plain ones) with each one's
    fraction (None, None, None without class rows): what ``np.broadcast_to(per_row[:, None],
    shape)[valid]`` and ``routes[valid]`` give, so the sums are the same, term by term."""
    hit = _GATHERED.get(id(routes))
    if hit is not None and hit[0] is routes:
        return hit[1]
    plain = routes if isinstance(routes, np.ndarray) else routes.plain
    valid = plain >= 0
    out = (plain[valid], np.nonzero(valid)[0], None, None, None)
    if not isinstance(routes, np.ndarray) and len(routes.classes):
        c_valid = routes.routes >= 0
        c_rows = len(plain) + np.nonzero(c_valid)[0]
        out = (*out[:2], routes.routes[c_valid], c_rows, routes.frac[c_valid])
    keep_by_identity(_GATHERED, _GATHERED_BYTES, KEEP_GATHERED_BYTES, routes, out)
    return out


@dataclass(frozen=True)
class _Wire:
    wire: np.ndarray  # bytes on the wire per flow
    cap: np.ndarray  # each flow's own rate cap (wire bytes/s)


def phase_wire(cluster, model, st: Setting, algorithm: str, protocol: str, phase, routes) -> _Wire:
    """Wire bytes and per-flow rate caps of one phase (NCCL's protocol and channel limits), the
    same for the tuner and the execution: the graph's channels (:func:`graph_channels`) and, for
    tree all_reduce, NCCL's medium-size derating (:func:`tree_correction`)."""
    t = model.table
    fam = FAMILY[algorithm]
    gen = st.generation
    col = table_column(st.nodes)
    extra = model.efficiency.get(protocol, 1.0)
    n_flows = len(phase.nbytes)
    cap = np.full(n_flows, np.inf)
    if fam == "p2p":
        eff = t["protocol_efficiency"]["other"][protocol] * extra
        eff = eff * kept_p2p_efficiency(cluster, t, phase, routes)
        cap = np.minimum(cap, host_staged_cap(cluster, t, st, protocol, phase, routes) / eff)
        return _Wire(phase.nbytes / eff, cap)
    # flows per sending rank: a rank's payload rate (bus bandwidth) is shared by its flows
    per_src = _per_src(phase)
    if fam == "collnet":  # CollNet Direct's derating on sm90+ (T:340-350)
        eff = t["protocol_efficiency"]["other"][protocol] * extra
        return _Wire(phase.nbytes / (eff * per_generation(t, "collnet_efficiency", gen)), cap)
    if fam in ("nvls", "nvls_tree"):
        return _nvls_wire(cluster, t, st, fam, phase, extra)
    nc = graph_channels(model, st)
    if fam == "ring":
        eff = t["protocol_efficiency"]["ring"][protocol]
        if protocol == "LL":
            busbw = ll_cap_GBps(t, st, "ring", nc) * 1e9
        elif protocol == "LL128":
            busbw = nc * per_generation(t, "per_channel_ring_ll128_bw", gen) * 1e9
        else:
            busbw = np.inf
    else:  # tree
        eff = t["protocol_efficiency"]["tree"][protocol]
        if protocol == "LL128" and st.nodes > 1:
            eff = t["protocol_efficiency"]["tree_multinode_LL128"]
        if protocol == "LL":
            busbw = ll_cap_GBps(t, st, "tree", nc) * 1e9
        elif protocol == "LL128":
            busbw = nc * per_generation(t, "per_channel_tree_ll128_bw", gen)[col] * 1e9
        else:
            busbw = nc * per_generation(t, "per_channel_tree_bw", gen)[col] * 1e9
        # NCCL derates the tree's bandwidth after its caps (ncclTopoGetAlgoTime, T:634-640), so
        # the correction slows a capped tree too: on the wire (efficiency) and on the cap
        corr = tree_correction(model, st, algorithm, protocol)
        eff *= corr
        busbw *= corr
    eff *= extra
    cap = np.minimum(cap, busbw / per_src / eff)
    cap = np.minimum(cap, host_staged_cap(cluster, t, st, protocol, phase, routes) / eff)
    return _Wire(phase.nbytes / eff, cap)


#: phases of more flows than this are not kept (:func:`_per_src`: an entry holds its phase)
KEEP_MAX_FLOWS = 65_536
#: per phase (by identity, held), its flows per sending rank (:func:`_per_src`)
_PER_SRC: dict[int, tuple] = {}


def _per_src(phase) -> np.ndarray:
    """Each flow's count of flows from its sending rank in ``phase``, remembered per phase
    while ``nccl_p2p.REUSE_P2P`` (a phase is weighed once per protocol and cluster); read only."""
    keep = nccl_p2p.REUSE_P2P and len(phase.src) <= KEEP_MAX_FLOWS
    hit = _PER_SRC.get(id(phase)) if keep else None
    if hit is not None and hit[0] is phase:
        return hit[1]
    at = np.searchsorted(np.unique(phase.src), phase.src)
    out = np.bincount(at)[at].astype(float)
    if keep:
        out.flags.writeable = False
        if len(_PER_SRC) >= nccl_p2p.KEEP_P2P:
            _PER_SRC.clear()
        _PER_SRC[id(phase)] = (phase, out)
    return out


def host_staged_cap(cluster, t: dict, st: Setting, protocol: str, phase, routes) -> np.ndarray:
    """Payload rate (B/s) each flow of ``phase`` may reach where GPUDirect RDMA is off: NCCL
    stages a GPU's network traffic through host memory when its NIC is not behind the GPU's
    PCIe switches (``Setting.nic_near_gpu`` false: NCCL_NET_GDR_LEVEL PXB, paths.cc:511-528,
    844-853; buffers in host memory, net.cc:917-936, 1101-1111), at the rate NVIDIA's maintainers
    give for that path (``host_staged_net_GBps``, nccl_model.yaml), of host-buffer bytes: LL's
    16-byte lines carry 8 bytes of payload, so LL gets half of it in payload (the protocol's
    ``protocol_efficiency.other``), which keeps LL from overtaking Simple at large sizes by
    a path both share.  Each GPU has that rate in each direction, shared by its flows of the
    phase that cross the fabric (sending and receiving side, the busier one).  Infinite for
    flows inside a node, on one node and with GPUDirect RDMA (there LL's network buffers are
    in host memory too, net.cc:917, but NCCL's llMaxBw already caps LL, and capping it by this
    figure as well moved the held-out multi-node HugeCTR runs 1-2 % further from their
    measurements: not done)."""
    n = len(phase.nbytes)
    out = np.full(n, np.inf)
    rate = float(t.get("host_staged_net_GBps", 0.0)) * 1e9
    if st.nic_near_gpu or st.nodes <= 1 or rate <= 0.0 or not n:
        return out
    # the host copy moves the protocol's buffer bytes: LL's 16-byte lines carry 8 of payload
    rate *= t["protocol_efficiency"]["other"][protocol]
    crosses = crosses_fabric(cluster, routes, n)
    if not crosses.any():
        return out
    src, dst = np.asarray(phase.src)[crosses], np.asarray(phase.dst)[crosses]
    _, s_inv, s_cnt = np.unique(src, return_inverse=True, return_counts=True)
    _, d_inv, d_cnt = np.unique(dst, return_inverse=True, return_counts=True)
    share = np.maximum(s_cnt[s_inv], d_cnt[d_inv]).astype(float)
    out[crosses] = rate / share
    return out


def _nvls_wire(cluster, t: dict, st: Setting, fam: str, phase, extra: float) -> _Wire:
    """NVLS legs (to and from an NVSwitch) at nvlsEfficiency; NVLSTree's flows across nodes
    no faster than NCCL's bus bandwidth of heads x perChMaxNVLSTreeBw (T:306-324,
    :func:`nvls_heads`: 8 on DGX H100, not the 16 NVLS CTAs).

    Across nodes the NVLS legs keep NCCL's bus bandwidth, not its algorithm bandwidth: NCCL
    rates NVLS and NVLSTree per node and converts bus to algorithm bandwidth by ``nRanks /
    nsteps`` = ``n / 2(n-1)`` (T:306-322, T:379), so ``n`` ranks over nodes of ``g`` GPUs get
    ``(n/(n-1)) / (g/(g-1))`` of the one-node algorithm bandwidth (0.933 on 2 nodes of 8;
    nccl-tests 309 and the OCI runs measure 0.90-0.91)."""
    gen, cap = st.generation, np.full(len(phase.nbytes), np.inf)
    switches = _switch_devices(cluster)
    leg = np.isin(phase.src, switches) | np.isin(phase.dst, switches)
    nvls_eff = per_generation(t, "nvls_efficiency", gen)
    if nvls_eff <= 0.0:  # nccl._available offers NVLS only where NCCL has it (sm90 on)
        raise InputError(
            f"NVLS needs a Hopper or later GPU (NCCL has no NVLS on {gen})",
            field="--algorithm",
            allowed="ring, tree (and hierarchical, direct, pxn)",
        )
    if st.nodes > 1 and st.ppn > 1 and st.n > st.ppn:
        nvls_eff *= (st.n / (st.n - 1)) / (st.ppn / (st.ppn - 1))
    eff = np.where(leg, nvls_eff, 1.0) * extra
    wire = phase.nbytes / eff
    if fam == "nvls_tree" and st.nodes > 1:
        per_ch = per_generation(t, "per_channel_nvls_tree_bw", gen)[table_column(st.nodes)] * 1e9
        if per_ch > 0:
            # NCCL's busBw = graphs[NVLS]->nChannels x perChMaxNVLSTreeBw (T:306-324), the NVLS
            # graph's channels being its heads (nvls_heads); as time: nBytes x nsteps / nRanks
            # / busBw (T:379).  Every flow across nodes takes at least that long.
            busbw = per_ch * nvls_heads(t, st)
            floor_s = st.nbytes * 2.0 * (st.n - 1) / st.n / busbw
            cap = np.where(~leg & (wire > 0), wire / floor_s, cap)
    return _Wire(wire, cap)


def ll_cap_GBps(t: dict, st: Setting, family: str, nc: int) -> float:
    """NCCL's LL bus bandwidth of ring or tree (``family``) for a collective of ``st.nbytes``, on
    the channels NCCL runs it on.  NCCL's tuner rates LL at ``min(llMaxBw, nChannels × bw ×
    f)``, ``bw`` a channel's graph speed and ``f`` 1/2 (ring) or 1/3.8 (tree) (T:327, T:332), on
    every channel of the graph; after choosing, it drops channels while nBytes < nc × nt ×
    threadThreshold (enqueue.cc, the ring/tree channel tuning: nt = NCCL_LL_MAX_NTHREADS, the
    threshold NCCL_LL_THREAD_THRESHOLD, × nRanks for rings, init.cc).  So a small LL collective
    runs on ``used = clamp(nBytes / (nt × threshold), 1, C)`` of the communicator's ``C``
    channels (the graph's ``nc`` doubled at connection, connect.cc:452, at most MAXCHANNELS),
    each carrying ``f`` × half its NIC's graph speed (the two copies a connection makes of a
    graph channel share it): the cap is ``min(llMaxBw, used × f × speed / 2)``.  Continuous in
    the bytes, so that a larger buffer never runs faster, and growing with the NIC's speed.
    Where NCCL's search also duplicates channels (ncclTopoDupChannels, from 25 GB/s a channel)
    it halves each one's speed, so by its tuner's numbers a small collective on a 250 Gb/s NIC
    would run slower than on a 200 Gb/s one; zionsim keeps the undivided speed there, so that
    a faster link never slows a collective (issue 26's property); no latency case of
    validation/cases.yaml has such a NIC (none duplicates at 200 Gb/s, nor Hopper's 8 × 400).

    Across nodes only: there the graph's speed is the NIC's (:func:`graph_speed_GBps`); on one
    node zionsim has no per-channel NVLink speed of NCCL's graph (the links carry the flows)
    and keeps LL's total cap, as round 4 of issue 26 did (docs/validation.md)."""
    cap = _ll_max(t, st)
    if st.nodes <= 1:
        return cap
    ll = t["ll_channel_tuning"]
    ranks = st.n if family == "ring" else 1
    per_channel = ll["max_threads"] * ll["thread_threshold_bytes"] * ranks
    total = float(min(ll["connect_duplication"] * nc, ll["max_channels"]))
    used = min(total, max(1.0, st.nbytes / per_channel))
    f = t["protocol_efficiency"][family]["LL"]
    per_comm_channel = graph_speed_GBps(t, st) / ll["connect_duplication"]
    return min(cap, used * f * per_comm_channel)


def _ll_max(t: dict, st: Setting) -> float:
    if st.nodes <= 1:
        return per_generation(t, "ll_max_bw", st.generation)[0]
    return t["ll_max_bw_multinode"][st.vendor][table_column(st.nodes)]


def _switch_devices(cluster) -> np.ndarray:
    nodes = cluster.spec.nodes
    try:
        return np.array([cluster.router.local("nvswitch", k) for k in range(nodes)])
    except (KeyError, InputError, ValueError, IndexError):
        return np.zeros(0, dtype=np.int64)


def bandwidth_s(
    cluster,
    sched: Schedule,
    protocol: str,
    model: CollectiveModel,
    routes: list[np.ndarray] | None = None,
) -> float:
    """Fluid time of a collective alone: each phase's wire bytes over its most loaded link or
    its flows' own rate cap, summed over phases."""
    routes = routes if routes is not None else phase_routes(cluster, sched)
    st = setting(cluster, sched)
    cap = cluster.router.capacity_Bps
    bw_s = 0.0
    for phase, r in zip(sched.phases, routes, strict=True):
        w = phase_wire(cluster, model, st, sched.algorithm, protocol, phase, r)
        worst = 0.0
        if len(w.wire):
            worst = float((_link_load(r, w.wire, len(cap)) / cap).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            own = np.where(w.wire > 0, w.wire / w.cap, 0.0)
        bw_s += max(worst, float(own.max()) if len(own) else 0.0)
    return bw_s


def nvls_chunk_bytes(t: dict, st: Setting, algorithm: str = "nvls") -> int:
    """NCCL's chunk size of an NVLS (one node) or NVLSTree all_reduce, at NVIDIA/nccl 5067397c.

    NVLS: ``NCCL_NVLS_CHUNKSIZE`` (128 KiB, src/transport/nvls.cc:160) halved for smaller
    buffers relative to the ``nChannels x nHeads`` concurrent chunks (src/enqueue.cc:2258-2275).
    NVLSTree: at most the tree's maximum chunk (the NVLS chunk, 64 KiB from 4 nodes on;
    nvls.cc:226-231), halved the same way with its own thresholds (enqueue.cc:2276-2285)."""
    chunk = int(t["nvls_chunk_bytes"])
    ops = nvls_channels(t, st) * st.ppn  # channels x heads: every GPU heads its slice
    if algorithm == "nvls_tree":
        chunk = min(chunk, 65536 if st.nodes >= 4 else chunk)
        steps = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))
    else:
        steps = ((64, 65536), (8, 32768), (2, 16384))
    for factor, floor in steps:
        if st.nbytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def tree_ll128_chunk_bytes(t: dict, st: Setting, channels: int) -> int:
    """NCCL's chunk (payload bytes) of a tree LL128 all_reduce on ``channels`` channels, at
    v2.26.2-1: the LL128 step (DEFAULT_LL128_BUFFSIZE = 120 elements x 640 threads x
    NCCL_STEPS 8 x 8 B, src/init.cc:607, over NCCL_STEPS; src/include/device.h:24,81-86), 15 of
    each 16 elements data (src/enqueue.cc:1862-1864), halved while nBytes / (channels x chunk)
    < nsteps x 64 / ppn and the chunk > 128 KiB, then while < nsteps x 16 / ppn and > 32 KiB,
    nsteps = 1 + log2i(nodes) + 0.1 ppn (enqueue.cc:1902-1909; the same at 5067397c)."""
    c = t["tree_ll128_chunking"]
    chunk = c["elems_per_thread"] * c["max_threads"] * 8  # one step: NCCL_STEPS cancels
    chunk = chunk // c["line_elems"] * (c["line_elems"] - 1)
    ppn = st.n / max(1, st.nodes)
    nsteps = 1 + log2i(st.nodes) + 0.1 * ppn
    per = max(1, int(channels))
    for factor, floor in ((64, 131072), (16, 32768)):
        while int(st.nbytes) // (per * chunk) < nsteps * factor / ppn and chunk > floor:
            chunk //= 2
    return int(chunk)


def pipeline_fill_s(
    model: CollectiveModel, st: Setting, algorithm: str, bw_s: float, protocol: str | None = None
) -> float:
    """Time a collective's chunk pipeline takes to fill, on top of the fluid time ``bw_s`` of
    its bytes.

    NVLS all_reduce (one node) and NVLSTree all_reduce: the kernel's warp groups are pipeline
    stages that each work on one loop of ``nChannels x nHeads x chunk`` bytes at a time
    (``loopCount = nHeads * chunkSize`` per channel): NVLS has three (scatter to the NVLS buffer,
    multimem reduce + multicast, gather; src/device/all_reduce.h:410-457), NVLSTree scatter and
    gather on the node and, across nodes, one stage per level of the tree up (receive from the
    children, reduce, send to the parent) and one per level down (all_reduce.h:527-640): each
    level's GPU waits for a whole step before it sends on, so 2 + 2 x log2i(nodes) stages, 4 on
    two nodes (issue 26 round 9 added the levels past the first; before, the further network
    hops added nothing).  The last loop leaves the last stage ``stages - 1`` loop-times after
    the fluid model would have it done; a loop-time is the loop's share of ``bw_s``.

    Tree LL128 all_reduce across nodes (issue 26 round 9): LL128 forwards inside a node line by
    line (a 128-byte line carries its own flag), but a network hop moves whole steps: the
    proxy posts a step once every line of it is written (src/transport/net.cc, sendProxyProgress)
    and NCCL puts one chunk in a step (enqueue.cc:1860).  A chunk so waits once per network hop,
    up the tree and back down: 2 x log2i(nodes) store-and-forward stages, each a chunk-time
    (the chunk's share of the channel's fluid time), the last of them in ``bw_s``.  The chunk
    is NCCL's (:func:`tree_ll128_chunk_bytes`), on the communicator's channels; the
    chunk-time is taken before NCCL's medium-size derating (:func:`tree_correction`, which
    ``bw_s`` includes), so that the fill grows with the size and shrinks with any link's rate.
    0 for other algorithms and protocols (their per-step pipelining is in NCCL's per-hop
    latencies) and for NVLS across nodes (in-network reduction)."""
    if st.nbytes <= 0 or bw_s <= 0:
        return 0.0
    t = model.table
    if FAMILY[algorithm] == "tree":
        if protocol != "LL128" or st.nodes <= 1 or st.op != "all_reduce":
            return 0.0
        stages = 2 * log2i(st.nodes)
        nc = comm_channels(model, st)
        loop = nc * tree_ll128_chunk_bytes(t, st, nc)
        uncorrected = bw_s * tree_correction(model, st, algorithm, protocol)
        return (stages - 1) * min(1.0, loop / st.nbytes) * uncorrected
    stages = int(t["nvls_pipeline_stages"].get(algorithm, 0))
    if algorithm == "nvls_tree":
        stages += 2 * log2i(st.nodes)
    if stages < 2 or (algorithm == "nvls" and st.nodes != 1):
        return 0.0
    loop = nvls_channels(t, st) * st.ppn * nvls_chunk_bytes(t, st, algorithm)
    return (stages - 1) * min(1.0, loop / st.nbytes) * bw_s


def tree_correction(model: CollectiveModel, st: Setting, algorithm: str, protocol: str) -> float:
    """NCCL's derating of tree all_reduce bandwidth at medium sizes ("Trees are not perfectly
    sticking to the model for medium sizes", treeCorrectionFactor, T:620-644): a factor per
    protocol and power of two of ``nBytes/64`` for 64 B .. 256 MiB (index < 23), 1 elsewhere.

    NCCL's comment says the factor describes how trees run, so zionsim applies it to the
    execution as well as to the choice.  NCCL steps it at powers of two; here it is the table's
    value at every power of two (where nccl-tests measures) and linear in log2(size) between
    them, so that a larger buffer never runs faster: the table never rises by more than a third
    from one power of two to the next, less than the doubling of the bytes."""
    if FAMILY[algorithm] != "tree" or st.op != "all_reduce" or st.nbytes < 64:
        return 1.0
    row = model.table["tree_correction_factor"][protocol]
    x = float(np.log2(st.nbytes / 64.0))
    k = int(np.floor(x))
    last = 22  # NCCL applies the table for logSize < 23 (T:636)

    def at(i: int) -> float:
        return float(row[i]) if i <= last else 1.0

    if k > last:
        return 1.0
    return at(k) + (x - k) * (at(k + 1) - at(k))
