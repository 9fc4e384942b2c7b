"""The GPUDirect RDMA flush after a network receive (issue 26 round 9, h26f).

NCCL flushes a Simple step received into GPU memory (an RDMA read through the NIC) on sm < 90
with GPUDirect RDMA only (src/graph/paths.cc ncclTopoNeedFlush, src/transport/net.cc:1406 at
v2.26.2-1); zionsim prices it with NCCL's own net post overhead plus one PCIe step latency
(nccl_latency.gdr_flush_s) and adds it where NCCL's tuner adds it, to each Simple network step.
"""

from dataclasses import replace

import pytest

from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology
from zionsim.network import nccl
from zionsim.network.nccl_latency import gdr_flush_s
from zionsim.network.simulate import simulate_collective


def _cluster(topo: str, nodes: int = 2, **overrides) -> Cluster:
    return Cluster.build(load_topology(topo, nodes=nodes, overrides=overrides))


def _setting(c, op="all_reduce", size=2.0**20, algorithm="ring", protocol="Simple"):
    ch = nccl.choose(c, op, c.gpus, size, algorithm=algorithm, protocol=protocol)
    return nccl.cluster_model(c), nccl.setting(c, ch.schedule)


def test_ampere_simple_ring_pays_a_flush_per_network_step():
    """2 x 8 A100 (AMD hosts), ring Simple all_reduce: NCCL's formula (baseLat 8.4, 28 intra
    steps at max(NVLink 3.4, 3 x 2.0 net post), 2 network steps at 14.0, x 1.4) with each
    network step 2.0 (post) + 1.0 (PCIe step) longer."""
    model, st = _setting(_cluster("dgx_a100"))
    assert gdr_flush_s(model, st, "Simple") == pytest.approx(3.0e-6)
    want = (8.4 + 28 * 6.0 + 2 * (14.0 + 3.0)) * 1.4
    assert nccl.latency_s(model, st, "ring", "Simple") == pytest.approx(want * 1e-6, rel=1e-9)


def test_tree_simple_pays_it_on_both_network_hops():
    model, st = _setting(_cluster("dgx_a100"), algorithm="tree")
    want = 8.4 + 2 * (7 * 4.0 + 1 * (14.0 + 3.0))
    assert nccl.latency_s(model, st, "tree", "Simple") == pytest.approx(want * 1e-6, rel=1e-9)


@pytest.mark.parametrize("protocol", ["LL", "LL128"])
def test_no_flush_for_ll_or_ll128(protocol):
    """net.cc:1406 flushes Simple receives only: LL and LL128 lines carry their flags."""
    model, st = _setting(_cluster("dgx_a100"), protocol=protocol)
    assert gdr_flush_s(model, st, protocol) == 0.0


def test_no_flush_on_hopper():
    """ncclTopoNeedFlush: "Flush is required on Ampere and earlier" (compCap >= 90: none)."""
    model, st = _setting(_cluster("dgx_h100"))
    assert gdr_flush_s(model, st, "Simple") == 0.0


def test_no_flush_without_gdr_or_on_one_node():
    """Without GPUDirect RDMA the buffers are host memory (needFlush only with useGdr); one
    node has no network receive."""
    model, st = _setting(_cluster("dgx_a100", **{"scale_out.nic_attach": "host"}))
    assert not st.nic_near_gpu
    assert gdr_flush_s(model, st, "Simple") == 0.0
    model, st = _setting(_cluster("dgx_a100", nodes=1))
    assert gdr_flush_s(model, st, "Simple") == 0.0


def test_all_to_all_posts_a_flush_per_remote_peer():
    """Each remote peer's receive is flushed by the rank's one proxy thread: a post each, and
    one NIC read on the path."""
    c = _cluster("dgx_a100")
    model, st = _setting(c, op="all_to_all", size=2.0**24, algorithm=None, protocol="Simple")
    flush_free = nccl.latency_s(model, replace(st, nic_near_gpu=False), "pxn", "Simple")
    peers = nccl.remote_peers(st)
    assert peers == 8
    got = nccl.latency_s(model, st, "pxn", "Simple") - flush_free
    assert got == pytest.approx((peers * 2.0 + 1.0) * 1e-6, rel=1e-9)


def test_flush_slows_the_executed_ampere_collective_only():
    """The executed time moves with it (the tuner and the execution share latency_s)."""
    a100 = _cluster("dgx_a100")
    r = simulate_collective(a100, "all_reduce", 2**20, algorithm="ring", protocol="Simple")
    model, st = _setting(a100)
    no_flush = nccl.latency_s(model, st, "ring", "Simple") - 2 * 3.0e-6 * 1.4
    assert r.time_s > no_flush
