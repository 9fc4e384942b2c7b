"""The automatic choice is monotone (issue 26, item 4): the tuner ranks candidates by the time they
take as executed, so a larger message never takes less time and a faster link never makes a
collective slower.  Two clusters where it did not hold at main 6dadec8 (``tests/data``), and a
hypothesis property over random small clusters, sizes and links."""

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DATA
from tests.network.test_fidelity import random_cluster
from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule
from zionsim.network.simulate import simulate_collective

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
#: powers of two from 8 B to 64 MiB and a size between each two
SIZES = sorted({int(2**k) for k in range(3, 27)} | {int(1.5 * 2**k) for k in range(3, 26)})


def _times(cluster, op: str, sizes=SIZES) -> np.ndarray:
    return np.array([simulate_collective(cluster, op, s).time_s for s in sizes])


def _non_decreasing(t: np.ndarray) -> bool:
    """Each time at least the one before, up to float rounding (1e-12 relative): a rate that
    grows in proportion to the bytes (NCCL's channels at small sizes, nccl_wire.ll_channel_share)
    gives a flat time that rounds either way in the last bit."""
    return bool(np.all(np.diff(t) >= -1e-12 * t[1:]))


def test_six_node_three_nic_all_reduce_is_monotone_in_size():
    """6 nodes x 2 GPUs, 3 NICs: 64 KiB took 160.9 us and 256 KiB 137.9 us (ring/LL on the
    channels NCCL keeps for small sizes); now every size takes at least as long as the smaller."""
    c = Cluster.load(str(DATA / "six_node_three_nic.yaml"))
    t = _times(c, "all_reduce")
    assert _non_decreasing(t), t
    at = dict(zip(SIZES, t, strict=True))
    assert at[65536] < at[262144] < at[524288]


@pytest.mark.parametrize("op", ["all_gather", "all_reduce", "reduce_scatter"])
def test_three_node_ethernet_is_monotone_in_size_and_nic_rate(op):
    """3 nodes x 2 GPUs, one Ethernet NIC each: all_gather 128 KiB took 46.7 us at 50 Gb/s and
    56.9 us at 100 Gb/s (LL128 -> LL); now doubling the NIC rate never slows a size down, and
    time grows with size at either rate."""
    path = str(DATA / "three_node_ethernet.yaml")
    slow = _times(Cluster.load(path), op)
    fast = _times(Cluster.load(path, overrides=["scale_out.nic_bw=100Gbps"]), op)
    assert _non_decreasing(slow) and _non_decreasing(fast)
    assert np.all(fast <= slow * (1 + 1e-12))


def test_choice_reports_the_time_it_was_chosen_on():
    """The estimate the tuner ranks by is the one the choice reports, and the simulation of the
    collective alone takes that time (plus no launch floor at this size)."""
    c = Cluster.load(str(DATA / "three_node_ethernet.yaml"))
    ch = nccl.choose(c, "all_gather", c.gpus, 65536)
    others = [nccl.choose(c, "all_gather", c.gpus, 65536, protocol=p).estimate_s for p in
              ("LL", "LL128", "Simple")]  # fmt: skip
    assert ch.estimate_s == min(others)
    sim = simulate_collective(c, "all_gather", 65536)
    assert sim.time_s == pytest.approx(ch.estimate_s, rel=1e-6)


@settings(
    max_examples=60,
    database=None,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(OPS),
    log_size=st.floats(3.0, 28.0),
    grow=st.floats(1.05, 1.6),
    faster=st.floats(1.05, 3.0),
)
def test_auto_time_monotone_in_size_and_link_bandwidth(seed, op, log_size, grow, faster):
    """On a random small cluster (test_fidelity's generator, every GPU generation of the NCCL
    model), the automatically chosen
    collective's simulated time is non-decreasing in message size and non-increasing in the
    capacity of any one link."""
    c = random_cluster(np.random.default_rng(seed), nccl.GENERATIONS)
    if len(c.gpus) < 2:
        return
    sizes = [round(2.0**log_size * grow**k) for k in range(8)]
    t = np.array([simulate_collective(c, op, s).time_s for s in sizes])
    assert np.all(np.diff(t) >= -1e-9 * t[1:]), (sizes, t)
    edge = int(np.random.default_rng(seed + 1).integers(len(c.router.capacity_Bps)))
    quicker = copy.deepcopy(c)
    quicker.router.capacity_Bps[edge] *= faster
    for s, before in zip(sizes[::3], t[::3], strict=True):
        assert simulate_collective(quicker, op, s).time_s <= before * (1 + 1e-9), (s, edge)


@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_tree_correction_is_nccls_table_at_powers_of_two_and_keeps_time_growing(protocol):
    """treeCorrectionFactor (tuning.cc:620-644) at every power of two from 64 B to 256 MiB, 1
    from 512 MiB and below 64 B; between powers of two bytes / factor still grows."""
    c = Cluster.load("dgx_a100", nodes=4)
    model = nccl.cluster_model(c, None)
    row = model.table["tree_correction_factor"][protocol]

    def factor(size):
        sched = schedule(c, "all_reduce", c.gpus, size, "tree")
        return nccl.tree_correction(model, nccl.setting(c, sched), "tree", protocol)

    for k in range(23):
        assert factor(64 * 2**k) == pytest.approx(row[k])
    assert factor(32) == factor(2**29) == 1.0
    sizes = np.geomspace(64, 2**30, 400)
    per_byte = sizes / np.array([factor(s) for s in sizes])
    assert np.all(np.diff(per_byte) > 0)


def test_tree_correction_slows_a_capped_tree_too():
    """NCCL derates the tree's bandwidth after its caps (ncclTopoGetAlgoTime, T:634-640): on 2x8
    DGX H100 a 64 KiB tree/LL all_reduce is held by LL's total cap (39 GB/s on 2 nodes), and
    its bandwidth part is the cap's time / the correction (0.6 at 64 KiB), not the cap's time."""
    c = Cluster.load("dgx_h100", nodes=2)
    model = nccl.cluster_model(c, None)
    size = 65536
    sched = schedule(c, "all_reduce", c.gpus, size, "tree")
    st_ = nccl.setting(c, sched)
    corr = nccl.tree_correction(model, st_, "tree", "LL")
    assert corr == pytest.approx(0.6)
    bw_s = nccl.bandwidth_s(c, sched, "LL", model)
    ll_cap = model.table["ll_max_bw_multinode"][st_.vendor][1] * 1e9
    own_s = 0.0  # each phase at the cap: a rank's share of it, split over the rank's flows
    for p in sched.phases:
        _, rank, flows = np.unique(p.src, return_inverse=True, return_counts=True)
        own_s += float((p.nbytes * flows[rank]).max()) / ll_cap
    assert bw_s == pytest.approx(own_s / corr, rel=1e-9)
