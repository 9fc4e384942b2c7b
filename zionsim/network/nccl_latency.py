"""NCCL's latency of a collective (``src/graph/tuning.cc`` at v2.26.2-1, "T:" below): the
base and per-step latencies of each algorithm and protocol, the proxy's network posts, the GDR
flush after a network receive, and the crossings of a ring's slowest chunk across nodes.

The model's constants and :class:`~zionsim.network.nccl_model.Setting` (what NCCL's tuner knows
of a collective) are in ``nccl_model``; ``nccl`` re-exports :func:`latency_s` and
:func:`remote_peers` for its callers.
"""

from __future__ import annotations

from zionsim.base.errors import InputError
from zionsim.network.nccl_model import FAMILY, CollectiveModel, Setting, log2i, per_generation


def remote_peers(st: Setting) -> int:
    """Peers on other nodes a rank exchanges with in a point-to-point operation: every rank off
    its node for an all-to-all (n - ppn), the one peer of a send/recv across nodes."""
    if st.nodes <= 1:
        return 0
    return st.n - st.ppn if st.op == "all_to_all" else 1


def _net_post_s(t: dict, st: Setting, protocol: str, scale: float) -> float:
    """NCCL's network post overhead (getNetOverhead, T:225-233: 1 us Intel, 2 us AMD; x3 for
    Simple, T:404-410): the proxy thread's cost to launch one network operation."""
    return t["net_overhead_us"][st.vendor] * 1e-6 * scale * (3 if protocol == "Simple" else 1)


def gdr_flush_s(model: CollectiveModel, st: Setting, protocol: str) -> float:
    """The GPUDirect RDMA flush after a network receive (0 where NCCL does none).

    With GDR the NIC writes a Simple step straight into GPU memory, and before the proxy tells
    the GPU the step has arrived it makes the data visible with a flush: an RDMA read of one
    byte through a loopback queue pair of the same NIC (net_ib.cc ncclIbIflush, :2250-2280 at
    v2.26.2-1), posted and tested by the proxy thread (net.cc:1386-1440), "an extra round-trip
    to the NIC" (NVIDIA/nccl issue 683, sjeaugey, 2022-05-25).  NCCL flushes only Simple
    receives (net.cc:1406: ``p == NCCL_PROTO_SIMPLE && needFlush``), only with GDR (net.cc:253,
    :1402; LL and LL128 buffers are read by the GPU with flags, no flush), and only below sm90
    (paths.cc:476-486, ncclTopoNeedFlush: "Flush is required on Ampere and earlier"; C2C hosts
    and NCCL_NET_FORCE_FLUSH aside; NCCL_GDR_FLUSH_DISABLE=1 turns it off, net_ib.cc:1657).
    NCCL's own tuner adds it as one more network latency to a Simple step (tuning.cc:303-304,
    "Also add the flush extra latency"), of the size the net plugin reports, 0 for InfiniBand
    (net_ib.cc:782).  zionsim prices it as one network operation of the proxy (NCCL's net post
    overhead, getNetOverhead) plus the NIC's read of GPU memory, taken as NCCL's latency of one
    step over PCIe (hwLat[PCI], the ring LL entry): both NCCL's own figures, nothing fitted
    (``gdr_flush`` in the YAML; issue 26 round 9, h26f)."""
    t = model.table
    spec = t.get("gdr_flush")
    if (
        spec is None
        or protocol != "Simple"
        or st.nodes <= 1
        or not st.nic_near_gpu
        or st.generation not in spec["generations"]
    ):
        return 0.0
    pcie = model.step_s["ring"]["pcie"][spec["pcie_read_like"]]
    return _net_post_s(t, st, "LL", model.latency_scale) + pcie


def ring_net_crossings(st: Setting, steps: int) -> int:
    """Network crossings on the slowest chunk's path through a ring of ``steps`` steps across
    nodes (issue 26 round 10, h26s).

    NCCL's ring visits each node's GPUs in one block, entered and left through a NIC, so a lap
    of ``n`` ranks crosses the network ``nodes`` times, once every ``ppn`` hops (src/graph/
    search.cc builds the inter-node ring per node; connect.cc links the blocks).  Its ring
    kernels move chunk ``c`` one hop a step (src/device/all_reduce.h runRing at v2.26.2-1:
    step 0 sends chunk ``ringIx - 1``, every later step passes on the chunk just received), so
    chunk ``c`` travels ``steps`` consecutive edges from its own start: 2(n - 1) for
    all_reduce (reduce-scatter then all-gather, two laps less two edges), n - 1 for
    reduce_scatter and all_gather.  The chunk whose start lies just before a node boundary
    crosses the most: ceil(steps / ppn), at most every step.  A collective ends when its last
    chunk does, so that chunk's crossings are all on the critical path.  That is 2 x nodes for
    all_reduce from 3 GPUs a node on (NCCL's own count, ``nInterSteps = 2*nNodes``, in
    tuning.cc of 2.16 to 2.22; 2.23 lowered it to 2(nodes - 1)), 2 x nodes - 1 with 2, nodes for
    reduce_scatter/all_gather (NCCL: nodes - 1), and with one GPU a node every step
    (NCCL's count there too).  Only the chunks that carry data count: a message smaller than
    one 16-byte chunk per rank (NCCL 2.19+'s last-loop chunk, ``alignUp(divUp(count, nranks),
    16/sizeof(T))``) fills fewer chunks, and its chain may cross once less; zionsim keeps the
    worst chunk for every size (a size-independent latency, so the tuner stays monotone)."""
    return int(min(steps, -(-steps // max(1, st.ppn))))


def latency_s(model: CollectiveModel, st: Setting, algorithm: str, protocol: str) -> float:
    """NCCL's latency of ``algorithm``/``protocol`` (tuning.cc:384-435), overhead included;
    a flat ring across nodes in :func:`_ring_across_s` (one departure from NCCL, for LL/LL128)."""
    fam = FAMILY[algorithm]
    # a fitted overhead of point-to-point kernels is the LL one (their launch floor)
    base = model.base_s[fam][protocol] + model.overhead_s.get(
        "LL" if fam == "p2p" else protocol, 0.0
    )
    step = model.step_s[fam]
    intra = step[st.intra][protocol]
    t = model.table
    scale = model.latency_scale
    if fam == "p2p":
        if st.nodes <= 1:
            return base + intra
        peers = remote_peers(st)
        lat = base + step["net"][protocol] + peers * _net_post_s(t, st, protocol, scale)
        flush = gdr_flush_s(model, st, protocol)
        if flush > 0.0:
            # the proxy posts each remote peer's flush in turn (one network operation each);
            # the NIC's reads of GPU memory overlap, one is on the path
            post = _net_post_s(t, st, "LL", scale)
            lat += peers * post + (flush - post)
        return lat
    net_family = "tree" if (st.ppn == 1 and fam == "ring") else fam
    # NCCL adds the flush to the network latency of every Simple step (tuning.cc:303-304)
    inter = model.step_s[net_family]["net"][protocol] + gdr_flush_s(model, st, protocol)
    if fam == "ring":
        steps = 2 * (st.n - 1) if st.op == "all_reduce" else st.n - 1
        if algorithm == "hierarchical" and st.nodes > 1:
            n_inter = 2 * (st.nodes - 1)
            return base + 2 * (st.ppn - 1) * intra + n_inter * inter
        if st.nodes == 1:
            return base + steps * intra
        return _ring_across_s(model, st, protocol, base, intra, inter, steps)
    if fam == "tree":
        return base + 2 * ((st.ppn - 1) * intra + log2i(st.nodes) * inter)
    if fam == "nvls":
        return base + intra + (inter if st.nodes > 1 else 0.0)
    if fam == "nvls_tree":
        return base + intra + 2 * log2i(st.nodes) * inter
    if fam == "collnet":  # CollNet Direct, with its 0.4 us arity serialisation
        arity = t["collnet_arity_us"] * 1e-6 * scale
        return base + 2 * (min(1, st.ppn - 1) * intra + (st.ppn - 1) * arity) + inter
    raise InputError(f"no latency model for {algorithm!r}", field="--algorithm")


def _ring_across_s(
    model: CollectiveModel,
    st: Setting,
    protocol: str,
    base: float,
    intra: float,
    inter: float,
    steps: int,
) -> float:
    """A flat ring's latency across nodes: NCCL's ``nInterSteps`` network steps at ``inter``,
    the other steps at least NCCL's net post overhead, x the plateau factor for Simple.

    One departure, for the protocols of the YAML's ``ring_chain_protocols`` (LL and LL128,
    whose receivers poll flags in the data, so a hop costs its latency and no step's transfer):
    their network steps are the crossings of the slowest chunk's chain
    (:func:`ring_net_crossings`), each at the network latency NCCL gives a ring whose
    latencies are "fully exposed" (the tree's, tuning.cc:300-301, which NCCL uses for one GPU
    per node).  A chunk's data cross the network on its own path, with nothing to hide the hop
    behind: the other ranks' steps run beside it, not in its path.  With one GPU a node this is
    NCCL's formula exactly (issue 26 round 10, h26s; docs/validation.md)."""
    t = model.table
    n_inter = 2 * (st.nodes - 1) if st.op == "all_reduce" else st.nodes - 1
    if protocol in t["ring_chain_protocols"]:
        n_inter = ring_net_crossings(st, steps)
        inter = model.step_s["tree"]["net"][protocol] + gdr_flush_s(model, st, protocol)
    post = _net_post_s(t, st, protocol, model.latency_scale)
    lat = base + (steps - n_inter) * max(intra, post) + n_inter * inter
    channels = per_generation(t, "channels", st.generation)
    if protocol == "Simple" and st.op == "all_reduce" and st.nbytes / (channels * st.n) >= 64:
        # NCCL: minCompCap < 80 ? 1.9 : 1.4 (Ampere, Hopper and Blackwell alike)
        lat *= t["ring_plateau_factor"] if st.generation != "volta" else 1.9
    return lat
