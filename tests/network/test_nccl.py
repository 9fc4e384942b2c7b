"""The tuner picks what NCCL picks at named points (NVIDIA/nccl src/graph/tuning.cc at 5067397c,
"T:line"; maintainers' statements in NVIDIA/nccl issues)."""

import pytest

from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl


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
    """8 DGX A100 nodes, 8 GiB: Ring/Simple (best bandwidth, issue 471); on 2 nodes Tree keeps
    large sizes: "on many platforms, NCCL should use Tree on 2 nodes for large sizes"
    (sjeaugey, NVIDIA/nccl issue 946)."""
    assert _choice("dgx_a100", 8, 2**33) == ("ring", "Simple")
    assert _choice("dgx_a100", 2, 2**33)[0] == "tree"


def test_nvls_across_nodes_needs_sharp():
    """NVLS spans nodes only with CollNet (SHARP) enabled (T:503-506): 4 DGX H100 nodes at 1 GiB
    use NVLSTree without it and NVLS with ``collectives.sharp``."""
    assert _choice("dgx_h100", 4, 2**30) == ("nvls_tree", "Simple")
    sharp = _choice("dgx_h100", 4, 2**30, overrides=["collectives.sharp=true"])
    assert sharp == ("nvls", "Simple")


def test_small_all_reduce_across_h100_nodes_avoids_nvls_tree():
    """Small sizes across H100 nodes: not NVLSTree, whose fixed latency is highest (issue 1362:
    "for small message size, the latency of Ring LL algorithm is lower than that of NVLSTree")."""
    assert _choice("dgx_h100", 4, 1024)[0] != "nvls_tree"
