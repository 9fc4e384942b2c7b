"""The tuner picks what NCCL picks at named points (NVIDIA/nccl src/graph/tuning.cc at 5067397c,
"T:line"; maintainers' statements in NVIDIA/nccl issues)."""

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule
from zionsim.network.simulate import simulate_collective


def _choice(topology: str, nodes: int, size: float, op: str = "all_reduce", overrides=()):
    c = Cluster.load(topology, nodes=nodes, overrides=list(overrides))
    ch = nccl.choose(c, op, c.gpus, size)
    return ch.schedule.algorithm, ch.protocol


@pytest.mark.parametrize("size", [8, 1024, 16384, 65536])
def test_small_all_reduce_on_one_a100_node_is_ring_ll(size):
    """One 8×A100 NVSwitch node, <= 64 KiB: Ring/LL.  NCCL's tuner on one node: ring LL and
    tree LL have the same latency (T:150-176, T:412-417: 6.6+14×0.6 vs 6.8+2×7×0.6 us) but tree
    LL's bandwidth is /3.8 and halved (T:331, T:374-380) and derated at medium sizes (T:620-644),
    so ring wins; the channels dropped for small sizes (enqueue.cc) are not in its table."""
    assert _choice("dgx_a100", 1, size) == ("ring", "LL")


def test_large_all_reduce_on_one_a100_node_is_ring_simple():
    """One 8×A100 node, 1 GiB: Ring/Simple (LL caps at llMaxBw, T:327; LL128 at 0.92, T:328-329;
    NVLS needs NVSwitch 3)."""
    assert _choice("dgx_a100", 1, 2**30) == ("ring", "Simple")


def test_large_all_reduce_on_one_h100_node_is_nvls():
    """One 8×H100 node (NVSwitch 3), 1 GiB: NVLS/Simple — NVLS is enabled on one node without
    CollNet (T:501-506) and its bus bandwidth is 2 × nvlsEfficiency × NVLink (T:306-318)."""
    assert _choice("dgx_h100", 1, 2**30) == ("nvls", "Simple")


def test_multinode_small_all_reduce_uses_tree():
    """16 DGX A100 nodes, 8 B–64 KiB: Tree/LL — its latency grows with log2(nodes) where the
    ring's grows with 2(nodes−1) network steps (T:405-417); "a flat ring (high latency, best
    bandwidth) and a tree (low latency, ok bandwidth)" (sjeaugey, NVIDIA/nccl issue 471)."""
    for size in (8, 4096, 65536):
        assert _choice("dgx_a100", 16, size) == ("tree", "LL")


def test_multinode_largest_all_reduce_uses_ring_beyond_two_nodes():
    """8 DGX A100 nodes, 8 GiB: Ring/Simple (best bandwidth, issue 471)."""
    assert _choice("dgx_a100", 8, 2**33) == ("ring", "Simple")


def test_two_node_tree_keeps_large_sizes_only_with_channels_to_spare():
    """Two nodes (issue 26 item 3): NCCL rates a tree at half its per-channel bus bandwidth,
    capped at perChMaxTreeBw x channels (23.6 GB/s on Ampere's 2-node column, T:279-316,
    T:374-380), and a ring at nRanks/nsteps of its channels' bandwidth.  Across nodes a graph
    has one channel per NIC at 24 GB/s on 200 Gb/s NICs, doubled on 400 Gb/s (search.cc
    1036-1061): on 8 HDR NICs the ring wins from 2 GiB and the tree no longer runs at the NVLink
    rate; with 400 Gb/s NICs the doubled channels keep tree ("on many platforms, NCCL should use
    Tree on 2 nodes for large sizes", sjeaugey, NVIDIA/nccl issue 946)."""
    for size in (2**31, 2**32, 2**33):
        assert _choice("dgx_a100", 2, size) == ("ring", "Simple")
    hdr = Cluster.load("dgx_a100", nodes=2)
    assert simulate_collective(hdr, "all_reduce", 2**30).busbw_GBps < 200
    fast = ["scale_out.nic_bw=400Gbps"]
    assert _choice("dgx_a100", 2, 2**33, overrides=fast)[0] == "tree"


def test_nvls_across_nodes_needs_sharp():
    """NVLS spans nodes only with CollNet (SHARP) enabled (T:503-506): 4 DGX H100 nodes at 256 MiB
    use NVLSTree without it and NVLS with ``collectives.sharp``."""
    assert _choice("dgx_h100", 4, 2**28) == ("nvls_tree", "Simple")
    sharp = _choice("dgx_h100", 4, 2**28, overrides=["collectives.sharp=true"])
    assert sharp == ("nvls", "Simple")


def test_small_all_reduce_across_h100_nodes_avoids_nvls_tree():
    """Small sizes across H100 nodes: not NVLSTree, whose fixed latency is highest (issue 1362:
    "for small message size, the latency of Ring LL algorithm is lower than that of NVLSTree")."""
    assert _choice("dgx_h100", 4, 1024)[0] != "nvls_tree"


def test_collnet_direct_chosen_only_with_sharp_on_nvswitch_nodes():
    """CollNet Direct needs CollNet (SHARP) enabled and an NVSwitch system (T:503-509): 16
    DGX A100 nodes with ``collectives.sharp`` run all_reduce as CollNet Direct — at 1 GiB and,
    since its latency (2·(3.7 + 7·0.4) + 31 us, T:418-421) is below the tree's (6.8 + 2·(7·0.6 +
    4·5.0) us), at 8 B too; without SHARP, or with PCIe-only nodes, never."""
    on = ["collectives.sharp=true"]
    assert _choice("dgx_a100", 16, 2**30, overrides=on)[0] == "collnet_direct"
    assert _choice("dgx_a100", 16, 8, overrides=on)[0] == "collnet_direct"
    assert _choice("dgx_a100", 16, 2**30)[0] != "collnet_direct"
    pcie_only = [*on, "scale_up={kind: none}"]
    pcie = _choice("tests/data/tiny_cluster.yaml", 4, 2**30, overrides=pcie_only)
    assert pcie[0] != "collnet_direct"


def test_in_network_reduction_sends_each_slice_once_through_each_nic():
    """CollNet Direct on 4 A100 nodes (8 NICs each): every NIC carries the 1/8 slice once up and
    once down, half of what a ring puts on it (2(n−1)/n of the slice), and each leaf switch
    forwards one reduced stream per rail, not one per node (NVIDIA/nccl issue 457: "2*S
    intra-node and S inter-node")."""
    c = Cluster.load("dgx_a100", nodes=4, overrides=["collectives.sharp=true"])
    size = 2.0**30
    sched = schedule(c, "all_reduce", c.gpus, size, "collnet_direct")
    (phase,) = sched.phases
    r = c.router
    load = np.bincount(
        phase.routes[phase.routes >= 0],
        weights=np.broadcast_to(phase.nbytes[:, None], phase.routes.shape)[phase.routes >= 0],
        minlength=len(r.capacity_Bps),
    )
    nic_up = [i for i, (u, v) in enumerate(r.edge_names) if "/nic" in u and v.startswith("leaf")]
    nic_down = [i for i, (u, v) in enumerate(r.edge_names) if u.startswith("leaf") and "/nic" in v]
    assert len(nic_up) == 32
    assert load[nic_up] == pytest.approx(np.full(32, size / 8))
    assert load[nic_down] == pytest.approx(np.full(32, size / 8))
    ring = schedule(c, "all_reduce", c.gpus, size, "ring").phases[0]
    ring_routes = r.routes(ring.src, ring.dst)
    ring_load = np.bincount(
        ring_routes[ring_routes >= 0],
        weights=np.broadcast_to(ring.nbytes[:, None], ring_routes.shape)[ring_routes >= 0],
        minlength=len(r.capacity_Bps),
    )
    assert ring_load[nic_up].max() == pytest.approx(2 * 31 / 32 * size / 8)
    fabric = [i for i, (u, v) in enumerate(r.edge_names) if u.startswith("leaf") and "t2" in v]
    assert load[fabric].max() <= 8 * size / 8 + 1  # one reduced stream per rail and leaf


def test_collnet_needs_two_nodes():
    """Asking for CollNet on one node is an input error (CollNet node threshold 2)."""
    c = Cluster.load("dgx_a100", nodes=1)
    with pytest.raises(InputError, match="2 or more nodes"):
        schedule(c, "all_reduce", c.gpus, 2**20, "collnet_direct")


@pytest.mark.parametrize(
    "size, chunk",
    [(4 * 2**20, 16384), (16 * 2**20, 32768), (64 * 2**20, 65536), (2**30, 131072)],
)
def test_nvls_chunk_size_follows_nccls_thresholds(size, chunk):
    """enqueue.cc:2258-2275 with 16 channels x 8 heads: 16 KiB below 8 MiB, 32 KiB below
    64 MiB, 64 KiB below 1 GiB, else NCCL_NVLS_CHUNKSIZE (128 KiB)."""
    c = Cluster.load("dgx_h100", nodes=1)
    model = nccl.cluster_model(c, None)
    st = nccl.setting(c, schedule(c, "all_reduce", c.gpus, size, "nvls"))
    assert nccl.nvls_chunk_bytes(model.table, st) == chunk


@pytest.mark.parametrize(
    "nodes, algorithm, size, chunk, loops",
    [(1, "nvls", 64 * 2**20, 65536, 2), (2, "nvls_tree", 256 * 2**20, 131072, 3)],
)
def test_nvls_pipeline_fill_in_the_estimate_and_the_tuner(nodes, algorithm, size, chunk, loops):
    """NVLS (three warp groups) and NVLSTree (four) take two and three loop-times (16 ch x 8
    heads x chunk) more than latency + fluid time, in the estimate the tuner ranks by and in the
    simulation; ring has none."""
    c = Cluster.load("dgx_h100", nodes=nodes)
    model = nccl.cluster_model(c, None)
    sched = schedule(c, "all_reduce", c.gpus, size, algorithm)
    st = nccl.setting(c, sched)
    bw = nccl.bandwidth_s(c, sched, "Simple", model)
    run_s = nccl.latency_s(model, st, algorithm, "Simple") + bw + loops * 16 * 8 * chunk / size * bw
    assert nccl.estimate_s(c, sched, "Simple", model) == pytest.approx(run_s)
    simulated = simulate_collective(c, "all_reduce", size, algorithm=algorithm).time_s
    assert simulated == pytest.approx(run_s, rel=1e-6)
    ring = schedule(c, "all_reduce", c.gpus, size, "ring")
    assert nccl.pipeline_fill_s(model, nccl.setting(c, ring), "ring", 1.0) == 0.0


def test_nvls_tree_keeps_nccls_bus_bandwidth_across_nodes():
    """NCCL rates NVLS per node and converts bus to algorithm bandwidth by nRanks/nsteps: 16
    ranks on 2 nodes of 8 run their NVLink legs at (16/15)/(8/7) = 0.933 of one node's NVLS
    efficiency; without the conversion the flow model would keep algbw flat."""
    c = Cluster.load("dgx_h100", nodes=2)
    model = nccl.cluster_model(c)
    sched = schedule(c, "all_reduce", c.gpus, 8 * 2**30, "nvls_tree")
    st = nccl.setting(c, sched)
    routes = nccl.phase_routes(c, sched)
    (phase,), (r,) = sched.phases, routes
    w = nccl.phase_wire(c, model, st, "nvls_tree", "Simple", phase, r)
    switches = [c.router.local("nvswitch", k) for k in range(2)]
    leg = np.isin(phase.src, switches) | np.isin(phase.dst, switches)
    eff = phase.nbytes[leg] / w.wire[leg]
    nvls_eff = model.table["nvls_efficiency"]["hopper"]
    assert eff == pytest.approx(nvls_eff * (16 / 15) / (8 / 7), rel=1e-9)


@pytest.mark.parametrize("nodes, cap_GBps", [(2, 8 * 57.7), (4, 8 * 45.5), (8, 8 * 45.5)])
def test_nvls_tree_bus_bandwidth_is_heads_times_per_channel_cap(nodes, cap_GBps):
    """NCCL's NVLSTree busBw is the NVLS graph's channels x perChMaxNVLSTreeBw (T:306-324); that
    graph's channels are its heads, one GPU per NIC across nodes (search.cc:625-640, :975), 8 on
    DGX H100 (8 NDR NICs), not the 16 NVLS CTAs.  2 x 8 H100 at 8 GiB: 8 x 57.7 = 462 GB/s
    (nccl-tests issue 309 measures 466-469, OCI 465; the flows alone gave 484); from 3 nodes
    8 x 45.5 = 364.  Forced NVLSTree stays at or below it and close to it at 8 GiB."""
    c = Cluster.load("dgx_h100", nodes=nodes)
    st = nccl.setting(c, schedule(c, "all_reduce", c.gpus, 2**20, "nvls_tree"))
    assert nccl.nvls_heads(nccl.load_model().table, st) == 8
    r = simulate_collective(c, "all_reduce", 8 * 2**30, algorithm="nvls_tree")
    assert r.busbw_GBps <= cap_GBps * 1.0001
    assert r.busbw_GBps >= 0.97 * cap_GBps


def test_nvls_heads_follow_the_nics():
    """Four NICs for eight GPUs: four heads across nodes (each NIC's local GPU); one node: every
    GPU heads (no NIC to pair)."""
    t = nccl.load_model().table
    c = Cluster.load("dgx_h100", nodes=2, overrides=["scale_out.nics_per_node=4"])
    st = nccl.setting(c, schedule(c, "all_reduce", c.gpus, 2**20, "nvls_tree"))
    assert nccl.nvls_heads(t, st) == 4
    one = Cluster.load("dgx_h100", nodes=1)
    st_one = nccl.setting(one, schedule(one, "all_reduce", one.gpus, 2**20, "nvls"))
    assert nccl.nvls_heads(t, st_one) == 8


@pytest.mark.parametrize(
    "nodes, size, chunk",
    [(2, 16 * 2**20, 65536), (2, 256 * 2**20, 131072), (4, 64 * 2**20, 65536),
     (4, 4 * 2**20, 32768)],
)  # fmt: skip
def test_nvls_tree_chunk_size_follows_nccl(nodes, size, chunk):
    """NVLSTree chunks (enqueue.cc:2276-2285, nvls.cc:226-231 at 5067397c): at most 128 KiB, 64
    KiB from 4 nodes on, halved below 4 and 1 x (16 channels x 8 heads x chunk)."""
    c = Cluster.load("dgx_h100", nodes=nodes)
    model = nccl.cluster_model(c, None)
    st = nccl.setting(c, schedule(c, "all_reduce", c.gpus, size, "nvls_tree"))
    assert nccl.nvls_chunk_bytes(model.table, st, "nvls_tree") == chunk


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_all_to_all_pays_the_net_post_overhead_per_remote_peer(nodes):
    """NCCL's all-to-all is grouped send/recv: every remote peer is a network operation the
    proxy posts (getNetOverhead, T:225-233: 2 us on AMD hosts such as DGX A100), so a small
    all-to-all's latency grows with the ranks off the node; inside one node none is paid."""
    c = Cluster.load("dgx_a100", nodes=nodes)
    model = nccl.cluster_model(c, None)
    sched = schedule(c, "all_to_all", c.gpus, 1024, "pxn")
    st = nccl.setting(c, sched)
    hop = model.step_s["p2p"]["net" if nodes > 1 else "nvlink"]["LL"]
    expected = model.base_s["p2p"]["LL"] + hop + 8 * (nodes - 1) * 2e-6
    assert nccl.remote_peers(st) == 8 * (nodes - 1)
    assert nccl.latency_s(model, st, "pxn", "LL") == pytest.approx(expected)
    assert simulate_collective(c, "all_to_all", 1024).time_s >= expected


def test_ll128_only_where_nccl_enables_it():
    """NCCL enables LL128 by default only over NVLink inside a node and, across nodes, with the
    NIC next to the GPU (path <= PXB, T:517-535): DGX A100 (NICs on the GPUs' PCIe switches)
    uses it at 128 MiB across nodes; the same nodes with host-attached NICs never do, though
    it can still be asked for (NCCL_PROTO)."""
    near = Cluster.load("dgx_a100", nodes=4)
    far = Cluster.load("dgx_a100", nodes=4, overrides=["scale_out.nic_attach=host"])
    sizes = [2.0**k for k in range(10, 31, 2)]
    assert "LL128" in {nccl.choose(near, "all_reduce", near.gpus, s).protocol for s in sizes}
    assert "LL128" not in {nccl.choose(far, "all_reduce", far.gpus, s).protocol for s in sizes}
    forced = nccl.choose(far, "all_reduce", far.gpus, 2**20, algorithm="ring", protocol="LL128")
    assert forced.protocol == "LL128"


@pytest.mark.parametrize(
    "topology, nodes, overrides, channels",
    [("dgx_a100", 1, [], 12), ("dgx_a100", 2, [], 8), ("dgx_h100", 2, [], 8),
     ("dgx_h100", 2, ["scale_out.nics_per_node=4"], 8),
     ("dgx_a100", 2, ["scale_out.nic_bw=400Gbps"], 16)],
)  # fmt: skip
def test_graph_channels_follow_nccls_search(topology, nodes, overrides, channels):
    """One node: the NVLink graph's channels.  Across nodes one channel per NIC at 24 GB/s
    (200 Gb/s) or 48 (400 Gb/s), doubled at >= 25 GB/s except on Hopper below 50 with more than
    4 channels (search.cc:1036-1061): 4 NDR NICs on H100 give 8, the 16 trees of NVIDIA/nccl
    issue 1357 once connect.cc doubles them again."""
    c = Cluster.load(topology, nodes=nodes, overrides=overrides)
    model = nccl.cluster_model(c, None)
    st = nccl.setting(c, schedule(c, "all_reduce", c.gpus, 2**20, "ring"))
    assert nccl.graph_channels(model, st) == channels


def test_copies_priced_together_share_the_links_they_share():
    """``estimate_together_s``: a collective priced with itself alone is ``estimate_s``; copies
    inside two different nodes share no link and cost what each does alone; two copies over the
    same GPUs' NICs take well over one and at most two times as long (a large all-reduce is
    mostly bandwidth; per-flow caps and latency do not double)."""
    c = Cluster.load("zionex", nodes=2)
    size = 256 * 2**20
    node0 = nccl.choose(c, "all_reduce", c.gpus[:8], size)
    node1 = nccl.choose(c, "all_reduce", c.gpus[8:], size)
    assert nccl.estimate_together_s(c, [node0]) == pytest.approx([node0.estimate_s], rel=1e-9)
    apart = nccl.estimate_together_s(c, [node0, node1])
    assert apart == pytest.approx([node0.estimate_s, node1.estimate_s], rel=1e-9)
    both = nccl.choose(c, "all_reduce", c.gpus, size)
    shared = nccl.estimate_together_s(c, [both, both])
    assert 1.5 * both.estimate_s < shared[0] <= 2 * both.estimate_s * (1 + 1e-9)


def test_pxn_all_to_all_picks_ll_on_each_sends_own_bytes():
    """NCCL decides LL per send (16 KiB x channels per peer), before PXN bundles a node's sends
    to one rail peer: 128 GPUs each sending 4 KiB per peer run LL although a node's aggregate
    to a rail peer (32 KiB) is past the threshold; 64 KiB per peer runs Simple."""
    c = Cluster.load("dgx_h100", nodes=16)
    ranks = np.asarray(c.gpus)
    small = nccl.choose(c, "all_to_all", ranks, 4096 * len(ranks))
    assert small.schedule.algorithm == "pxn" and small.protocol == "LL"
    big = nccl.choose(c, "all_to_all", ranks, 65536 * len(ranks))
    assert big.protocol == "Simple"
