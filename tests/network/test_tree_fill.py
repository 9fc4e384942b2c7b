"""Tree LL128 all_reduce across nodes fills a chunk pipeline over its network hops (issue 26,
round 9): NCCL's chunk (src/enqueue.cc:1860-1864, 1902-1909 at v2.26.2-1) waits once per
store-and-forward network hop, 2 x log2(nodes) of them up and down the tree."""

import pytest

from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule
from zionsim.network.nccl_model import comm_channels
from zionsim.network.nccl_wire import tree_correction, tree_ll128_chunk_bytes


def _tree(nodes: int, size: float, topology: str = "dgx_h100"):
    c = Cluster.load(topology, nodes=nodes)
    sched = schedule(c, "all_reduce", c.gpus, size, "tree")
    return c, sched, nccl.setting(c, sched)


@pytest.mark.parametrize(
    ("nodes", "size", "chunk"),
    # by hand from enqueue.cc: step 120 x 640 x 8 B = 614400 B, 15/16 data = 576000; 16
    # channels, ppn 8; 2 nodes nsteps 2.8 (thresholds 22.4 and 5.6), 8 nodes 4.8 (38.4, 9.6)
    [
        (2, 2**21, 18000),  # 128 KiB a channel: 576000 -> 72000, then -> 36000 -> 18000
        (2, 2**22, 36000),
        (2, 2**24, 72000),  # 1 MiB a channel: 14 chunks >= 5.6
        (8, 2**23, 36000),  # 512 KiB a channel: 7 < 9.6 -> 36000 (14)
        (8, 2**24, 72000),
        (8, 2**30, 576000),  # 64 MiB a channel: 116 chunks >= 38.4, nothing halved
    ],
)
def test_chunk_is_nccls(nodes, size, chunk):
    c, _, st = _tree(nodes, size)
    model = nccl.cluster_model(c)
    assert comm_channels(model, st) == 16
    assert tree_ll128_chunk_bytes(model.table, st, 16) == chunk


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_fill_is_a_chunk_time_per_network_hop(nodes):
    size = 2**24
    c, sched, st = _tree(nodes, size)
    model = nccl.cluster_model(c)
    bw_s = nccl.bandwidth_s(c, sched, "LL128", model)
    fill = nccl.pipeline_fill_s(model, st, "tree", bw_s, "LL128")
    chunk_time = 16 * 72000 / size * bw_s * tree_correction(model, st, "tree", "LL128")
    hops = {2: 2, 4: 4, 8: 6}[nodes]
    assert fill == pytest.approx((hops - 1) * chunk_time)
    assert fill > 0
    # the executed time carries it: the estimate is latency + fluid time + fill
    lat = nccl.latency_s(model, st, "tree", "LL128")
    assert nccl.estimate_s(c, sched, "LL128", model) == pytest.approx(lat + bw_s + fill)


def test_no_fill_on_one_node_nor_for_other_protocols():
    c, sched, st = _tree(1, 2**24)
    model = nccl.cluster_model(c)
    assert nccl.pipeline_fill_s(model, st, "tree", 1e-3, "LL128") == 0.0
    c, sched, st = _tree(2, 2**24)
    for proto in ("LL", "Simple", None):
        assert nccl.pipeline_fill_s(model, st, "tree", 1e-3, proto) == 0.0


def test_fill_grows_with_size():
    c = Cluster.load("dgx_h100", nodes=8)
    model = nccl.cluster_model(c)
    last = 0.0
    for k in range(16, 31):
        sched = schedule(c, "all_reduce", c.gpus, 2.0**k, "tree")
        t = nccl.estimate_s(c, sched, "LL128", model)
        assert t > last
        last = t


@pytest.mark.parametrize(("nodes", "stages"), [(2, 4), (3, 4), (4, 6), (8, 8)])
def test_nvls_tree_fills_one_stage_per_tree_level(nodes, stages):
    """NVLSTree: scatter and gather on the node plus one stage per level of the tree up and
    down (each level's GPU receives a whole step, reduces and sends it on; all_reduce.h:527-640
    at v2.26.2-1): 2 + 2 x log2i(nodes) stages, the fill (stages - 1) loop-times."""
    size = 2**28
    c = Cluster.load("dgx_h100", nodes=nodes)
    model = nccl.cluster_model(c)
    sched = schedule(c, "all_reduce", c.gpus, size, "nvls_tree")
    st = nccl.setting(c, sched)
    loop = 16 * 8 * nccl.nvls_chunk_bytes(model.table, st, "nvls_tree")
    fill = nccl.pipeline_fill_s(model, st, "nvls_tree", 1e-3, "Simple")
    assert fill == pytest.approx((stages - 1) * loop / size * 1e-3)
