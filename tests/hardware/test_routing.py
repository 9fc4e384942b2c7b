"""Routing: NVLink preferred, GPUs relay only as NCCL does (NVB), node templates shift correctly."""

import numpy as np

from zionsim.hardware.cluster import Cluster


def test_intra_node_uses_nvswitch(zionex1):
    """GPU to GPU in a node goes over the NVSwitch, not PCIe."""
    g = zionex1.gpus
    assert zionex1.router.path_names(g[0], g[5]) == ["n0/gpu0", "n0/nvswitch", "n0/gpu5"]


def test_inter_node_leaves_through_nearest_nic(tiny_cluster):
    """A GPU uses the NIC on its own PCIe switch on both ends."""
    g = tiny_cluster.gpus
    path = tiny_cluster.router.path_names(g[1], g[3])
    assert path[:3] == ["n0/gpu1", "n0/pcie1", "n0/nic1"]
    assert path[-3:] == ["n1/nic1", "n1/pcie1", "n1/gpu1"]


def test_gpus_without_nvlink_relay_through_one_gpu_over_nvlink():
    """In Big Basin's cube mesh, two GPUs with no NVLink of their own talk over NVLink through
    exactly one intermediate GPU (NCCL's PATH_NVB), never over PCIe and the CPUs; GPUs with a
    direct NVLink use it, and a path to a NIC never relays through a GPU."""
    c = Cluster.load("bigbasin", nodes=1)
    g, graph = c.gpus, c.graph
    for a in g:
        for b in g:
            if a == b:
                continue
            names = c.router.path_names(a, b)
            kinds = [graph.edges[u, v]["kind"] for u, v in zip(names, names[1:], strict=False)]
            assert set(kinds) == {"nvlink"}, (names, kinds)
            direct = graph.has_edge(names[0], names[-1])
            assert len(names) == (2 if direct else 3)
    nic = c.router.local("nic", 0)
    for a in g:
        assert not any("gpu" in x for x in c.router.path_names(a, nic)[1:-1])


def test_vectorised_routes_match_single_routes(tiny_cluster):
    """Routes built in bulk equal routes built one by one."""
    g = tiny_cluster.gpus
    src, dst = np.repeat(g, len(g)), np.tile(g, len(g))
    bulk = tiny_cluster.router.routes(src, dst)
    for i, (a, b) in enumerate(zip(src, dst, strict=True)):
        one = tiny_cluster.router.routes(np.array([a]), np.array([b]))[0]
        assert list(one[one >= 0]) == list(bulk[i][bulk[i] >= 0])


def test_tied_paths_are_counted_and_picked_in_a_fixed_order():
    """Tied shortest paths are numbered in sorted order without listing them all, and every
    edge weighs at least 1 (1 + 1 GB/s / bw, bandwidths bounded at load), so a Dijkstra
    predecessor map has no cycle to recurse into."""
    from zionsim.hardware.routing import _nth_path, _path_count, _weight

    pred = {"d": ["b", "a"], "b": ["s"], "a": ["s"], "s": []}
    assert _path_count(pred, "s", "d", {}) == 2
    assert [_nth_path(pred, "s", "d", k, {}) for k in (0, 1)] == [["s", "a", "d"], ["s", "b", "d"]]
    assert _weight({"bw_Bps": 1e30}) >= 1.0


def test_no_gpudirect_rdma_through_a_cpu_stages_in_host_memory():
    """NCCL enables GPUDirect RDMA only up to PCIe switches (NCCL_NET_GDR_LEVEL=PXB): on Zion
    the NIC hangs off a CPU, so GPU traffic to the network detours through that CPU's DRAM
    (GPU writes the host buffer, the NIC reads it); ZionEX's GPU and NIC share a switch."""
    zion = Cluster.load("zion", nodes=2).router
    path = zion.path_names(zion.device("n0/gpu3"), zion.device("n1/gpu3"))
    assert path[:6] == ["n0/gpu3", "n0/pcie1", "n0/cpu2", "n0/dram2", "n0/cpu2", "n0/nic1"]
    assert path[-5:] == ["n1/cpu2", "n1/dram2", "n1/cpu2", "n1/pcie1", "n1/gpu3"]
    zionex = Cluster.load("zionex", nodes=2).router
    direct = zionex.path_names(zionex.device("n0/gpu3"), zionex.device("n1/gpu3"))
    assert not any("dram" in name or "cpu" in name for name in direct)
