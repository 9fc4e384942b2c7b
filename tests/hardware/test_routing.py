"""Routing: NVLink preferred, GPUs never transit, node templates shift correctly."""

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


def test_no_route_transits_a_gpu():
    """In Big Basin's cube mesh, GPUs without a direct NVLink never relay through a third GPU."""
    c = Cluster.load("bigbasin", nodes=1)
    g = c.gpus
    for a in g:
        for b in g:
            if a != b:
                middle = c.router.path_names(a, b)[1:-1]
                assert not any("gpu" in x for x in middle)


def test_vectorised_routes_match_single_routes(tiny_cluster):
    """Routes built in bulk equal routes built one by one."""
    g = tiny_cluster.gpus
    src, dst = np.repeat(g, len(g)), np.tile(g, len(g))
    bulk = tiny_cluster.router.routes(src, dst)
    for i, (a, b) in enumerate(zip(src, dst, strict=True)):
        one = tiny_cluster.router.routes(np.array([a]), np.array([b]))[0]
        assert list(one[one >= 0]) == list(bulk[i][bulk[i] >= 0])


def test_all_paths_is_iterative_and_cycle_safe():
    """Every shortest path in sorted order; a predecessor map with a cycle (only possible with
    degenerate weights) ends instead of recursing without end."""
    from zionsim.hardware.routing import _all_paths

    pred = {"d": ["b", "a"], "b": ["s"], "a": ["s"], "s": []}
    assert _all_paths(pred, "s", "d") == [["s", "a", "d"], ["s", "b", "d"]]
    cyclic = {"d": ["b"], "b": ["d", "s"], "s": []}
    assert _all_paths(cyclic, "s", "d") == [["s", "b", "d"]]
