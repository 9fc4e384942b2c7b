"""Faults (``hardware/faults.py``): routes avoid failed components, uplinks lose their share,
fault texts are checked."""

from __future__ import annotations

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.faults import JobStopped, apply, parse_fault


def test_faulted_routes_avoid_failed_links():
    cluster = Cluster.load("zionex", nodes=2)
    faulted = apply(cluster, [parse_fault("nic=n1:0")])
    r = faulted.router
    g = cluster.gpus
    rows = r.routes(np.repeat(g, len(g)), np.tile(g, len(g)))
    assert not np.append(r.failed, False)[rows].any()
    path = r.path_names(int(g[0]), int(g[8]))  # n0/gpu0 to n1/gpu0, whose NIC failed
    assert "n1/nic0" not in path and path[-1] == "n1/gpu0"


def test_uplink_fault_takes_its_share_of_the_leaf():
    cluster = Cluster.load("zionex", nodes=16)
    faulted = apply(cluster, [parse_fault("uplink=leaf0:3")])
    e = cluster.router.graph.edge_id["leaf0", "t2.0"]
    count = cluster.router.graph.edges[e][2]["count"]
    ratio = faulted.router.capacity_Bps[e] / cluster.router.capacity_Bps[e]
    assert ratio == pytest.approx((count - 1) / count)


@pytest.mark.parametrize("text", ["nic=n1", "nic:n1:0", "link=x", "uplink=spine0:1", "gpu=3"])
def test_bad_fault_text_is_refused(text):
    with pytest.raises(InputError, match="fault"):
        parse_fault(text)


def test_failed_switch_with_every_nic_of_a_node_stops_routes():
    """On a fabric where a node's NICs all hang off one leaf, losing that leaf leaves no
    proxy: routing to the node stops the job."""
    cluster = Cluster.load("zionex", nodes=2)
    r = cluster.router
    leaf = r.graph.edges[int(r.nic_up_edges()[0])][1]  # node 0's first NIC's leaf
    faulted = apply(cluster, [parse_fault(f"switch={leaf}")])
    g = cluster.gpus
    with pytest.raises(JobStopped, match="no route"):
        faulted.router.routes(np.array([g[0]]), np.array([g[8]]))


def test_node_fault_stops_the_job():
    with pytest.raises(JobStopped, match="n1"):
        apply(Cluster.load("zionex", nodes=2), [parse_fault("node=n1")])
