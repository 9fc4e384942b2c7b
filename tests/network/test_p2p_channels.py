"""NCCL's channels per point-to-point peer across nodes, the multiple of NCCL_P2P_LL_THRESHOLD up
to which a send runs LL (src/graph/paths.cc:758-829 and src/enqueue.cc:779 at v2.26.2-1):
2 per network peer, halved while 2 x nRanks > 4 x p2pnChannels (issue 26, round 9)."""

import numpy as np
import pytest

from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule
from zionsim.network.nccl_model import comm_channels, p2p_channels_per_peer, pow2_up


def _setting(topology: str, nodes: int, op: str = "all_to_all", size: float = 2**20):
    c = Cluster.load(topology, nodes=nodes)
    sched = schedule(c, op, c.gpus, size, "pxn" if op == "all_to_all" else "direct")
    return c, nccl.setting(c, sched)


def test_pow2_up():
    assert [pow2_up(x) for x in (0, 1, 2, 3, 16, 17, 24)] == [1, 1, 2, 4, 16, 32, 32]


@pytest.mark.parametrize(
    ("nodes", "expected"),
    # DGX H100 across nodes: 8 graph channels (8 NDR NICs at 48 GB/s, not duplicated on Hopper
    # with > 4 channels) doubled at connection: 16 p2p channels.  16 and 32 ranks keep 2
    # (2 x 32 = 64 is not > 4 x 16: the "16 p2p channels, 2 p2p channels per peer" of a 32-rank
    # log), 64 ranks get 1.
    [(2, 2), (4, 2), (8, 1), (16, 1)],
)
def test_channels_per_net_peer_fall_with_scale(nodes, expected):
    c, st = _setting("dgx_h100", nodes)
    model = nccl.cluster_model(c)
    assert comm_channels(model, st) == 16
    assert p2p_channels_per_peer(model, st) == expected


def test_one_node_keeps_the_yaml_value():
    c, st = _setting("dgx_h100", 1)
    model = nccl.cluster_model(c)
    assert p2p_channels_per_peer(model, st) == model.table["p2p_channels"]["hopper"]


def test_ll_threshold_follows_the_channels_per_peer():
    """24 KiB to each peer: under 2 x 16 KiB on 2 nodes (LL may run), over 1 x 16 KiB on 8
    nodes (Simple only, as NCCL: its LL threshold is channels-per-peer x 16 KiB)."""
    c2 = Cluster.load("dgx_h100", nodes=2)
    c8 = Cluster.load("dgx_h100", nodes=8)
    per_pair = 24 * 1024
    for c, allowed in ((c2, ("LL", "Simple")), (c8, ("Simple",))):
        sched = schedule(c, "all_to_all", c.gpus, per_pair * len(c.gpus), "pxn")
        model = nccl.cluster_model(c)
        assert nccl._protocols(model, "pxn", sched, c) == allowed
    assert np.isfinite(nccl.choose(c8, "all_to_all", c8.gpus, per_pair * 64).estimate_s)
