"""LL across nodes on the channels NCCL runs a small collective on (issue 26, round 6).

NCCL rates LL at ``min(llMaxBw, nChannels × bw × 1/2 or 1/3.8)`` on every channel of its graph
(tuning.cc) but, once it has chosen, runs a small collective on fewer channels: one fewer while
nBytes < nc × nt × threadThreshold (enqueue.cc).  zionsim applies NCCL's rate to the channels in
use (``nccl_wire.ll_cap_GBps``), continuously in the size."""

from dataclasses import replace

import numpy as np
import pytest

from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule
from zionsim.network.nccl_wire import ll_cap_GBps
from zionsim.network.simulate import simulate_collective


def _every_channel(model):
    """The model with every size on all of the communicator's channels (before round 6)."""
    table = dict(model.table)
    tuning = {**table["ll_channel_tuning"], "max_threads": 1e-9, "thread_threshold_bytes": 1.0}
    return replace(model, table={**table, "ll_channel_tuning": tuning})


def _setting(cluster, size, algorithm="tree"):
    return nccl.setting(cluster, schedule(cluster, "all_reduce", cluster.gpus, size, algorithm))


def test_small_tree_ll_runs_on_the_channels_nccl_keeps():
    """2x8 H100, 8 NDR NICs: the graph's 8 channels (48 GB/s each) doubled to 16 at connection;
    tree/LL with 512 threads x 8 B per channel: 8 KiB runs on 2 of 16 channels, each with half a
    NIC's 48 GB/s at LL's 1/3.8: 12.6 GB/s, below the 39 GB/s cap; from 64 KiB on all 16."""
    c = Cluster.load("dgx_h100", nodes=2)
    model = nccl.cluster_model(c, None)
    t = model.table
    st8 = _setting(c, 8192)
    nc = nccl.graph_channels(model, st8)
    assert nc == 8
    assert ll_cap_GBps(t, st8, "tree", nc) == pytest.approx(2 * (8 * 48.0 / 16) / 3.8, rel=1e-3)
    assert ll_cap_GBps(t, _setting(c, 65536), "tree", nc) == pytest.approx(39.0)
    # so 8 KiB takes longer than on every channel, 64 KiB as long
    old = _every_channel(model)
    for size, slower in ((8192, True), (65536, False)):
        new_s = simulate_collective(c, "all_reduce", size, algorithm="tree", protocol="LL").time_s
        old_s = simulate_collective(
            c, "all_reduce", size, algorithm="tree", protocol="LL", model=old
        ).time_s
        assert (new_s > old_s * 1.01) if slower else new_s == pytest.approx(old_s, rel=1e-12)


def test_ring_threshold_counts_every_rank():
    """Rings drop channels at nRanks x 8 B per thread (init.cc): a 2x8 ring keeps one channel up
    to 64 KiB, so its LL cap there is one channel's."""
    c = Cluster.load("dgx_h100", nodes=2)
    model = nccl.cluster_model(c, None)
    st = _setting(c, 65536, "ring")
    nc = nccl.graph_channels(model, st)
    one = 0.5 * 8 * 48.0 / 16
    assert ll_cap_GBps(model.table, st, "ring", nc) == pytest.approx(one, rel=1e-3)


def test_one_node_keeps_lls_total_cap():
    c = Cluster.load("dgx_h100", nodes=1)
    model = nccl.cluster_model(c, None)
    st = _setting(c, 1024, "ring")
    assert ll_cap_GBps(model.table, st, "ring", 24) == pytest.approx(141.0)


@pytest.mark.parametrize("topology, nodes", [("dgx_a100", 2), ("dgx_a100", 4), ("dgx_h100", 2)])
def test_ll_cap_grows_with_size_and_nic_rate(topology, nodes):
    """The cap never falls as the buffer or the NIC rate grows, also across the NIC speeds where
    NCCL's search doubles its channels (from 25 GB/s a channel before Hopper: 250 Gb/s on
    Ampere), where NCCL's tuner halves each channel's speed; and a faster NIC never slows a
    small collective (it would with llMaxBw spread over the channels, or the halved speed)."""
    sizes = np.geomspace(8, 2**22, 60)
    caps, prev = [], None
    for nic in ("100Gbps", "200Gbps", "250Gbps", "300Gbps", "400Gbps", "800Gbps"):
        c = Cluster.load(topology, nodes=nodes, overrides=[f"scale_out.nic_bw={nic}"])
        model = nccl.cluster_model(c, None)
        row = []
        for s in sizes:
            st = _setting(c, s)
            row.append(ll_cap_GBps(model.table, st, "tree", nccl.graph_channels(model, st)))
        caps.append(row)
        assert np.all(np.diff(row) >= 0)
        times = [simulate_collective(c, "all_reduce", s).time_s for s in (1024, 8192, 65536)]
        if prev is not None:
            assert all(a <= b * (1 + 1e-12) for a, b in zip(times, prev, strict=True)), nic
        prev = times
    caps = np.array(caps)
    assert np.all(np.diff(caps, axis=0) >= -1e-12)
