"""Ring LL/LL128 latency across nodes: the slowest chunk's chain (issue 26 round 10, h26s).

NCCL's ring kernels move chunk ``c`` one hop a step along a ring whose nodes are contiguous
blocks of ``ppn`` ranks (src/device/all_reduce.h runRing; src/graph/search.cc).  The collective
ends with its slowest chunk, and every network crossing of that chunk is on the critical path.
``nccl_latency.ring_net_crossings`` counts them in closed form; the reference below walks NCCL's
schedule step by step instead, so the two are derived independently.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology
from zionsim.network import nccl
from zionsim.network.nccl_latency import ring_net_crossings
from zionsim.network.nccl_model import Setting
from zionsim.network.simulate import simulate_collective


def _walked_crossings(op: str, nodes: int, ppn: int, offset: int = 0) -> int:
    """The most network edges any chunk crosses in NCCL's ring schedule, walked step by step.

    Ring index ``i`` is rank ``i``'s place in the ring; a node's block starts every ``ppn``
    indices, shifted by ``offset`` (where rank 0 sits in its block).  At step ``s`` index ``i``
    sends the chunk it holds to ``i + 1``: in runRing, index ``i`` starts (step 0) with chunk
    ``i - 1``, and each later step forwards what it received, for 2(n-1) steps (all_reduce:
    reduce-scatter, then all-gather) or n-1 steps (reduce_scatter, all_gather)."""
    n = nodes * ppn
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    worst = 0
    for chunk in range(n):
        at = (chunk + 1) % n  # the index that sends this chunk at step 0
        crossed = 0
        for _ in range(steps):
            nxt = (at + 1) % n
            if (nxt + offset) % ppn == 0:  # the edge into a node's first rank: the network
                crossed += 1
            at = nxt
        worst = max(worst, crossed)
    return worst


def _setting(op: str, nodes: int, ppn: int) -> Setting:
    return Setting(op, nodes * ppn, nodes, ppn, "ampere", "amd", "nvlink", 8.0)


@given(
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]),
    nodes=st.integers(2, 9),
    ppn=st.integers(1, 8),
    offset=st.integers(0, 7),
)
@settings(max_examples=150, deadline=None)
def test_closed_form_matches_nccl_schedule(op, nodes, ppn, offset):
    n = nodes * ppn
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    got = ring_net_crossings(_setting(op, nodes, ppn), steps)
    assert got == _walked_crossings(op, nodes, ppn, offset % ppn)


@pytest.mark.parametrize(
    "op, nodes, ppn, want",
    [
        ("all_reduce", 2, 8, 4),  # NCCL 2.16-2.22: 2 x nNodes; 2.23+: 2(nNodes - 1) = 2
        ("all_reduce", 4, 8, 8),
        ("all_reduce", 2, 2, 3),
        ("all_reduce", 2, 1, 2),  # one GPU a node: every step, NCCL's own count
        ("all_gather", 2, 8, 2),  # NCCL: nNodes - 1 = 1
        ("reduce_scatter", 3, 4, 3),
    ],
)
def test_crossings_of_the_slowest_chunk(op, nodes, ppn, want):
    n = nodes * ppn
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    assert ring_net_crossings(_setting(op, nodes, ppn), steps) == want


def _cluster(topology: str, nodes: int, gpus_per_node: int | None = None) -> Cluster:
    return Cluster.build(load_topology(topology, nodes=nodes, gpus_per_node=gpus_per_node))


def _ring_latency_us(c: Cluster, protocol: str, op: str = "all_reduce") -> float:
    ch = nccl.choose(c, op, c.gpus, 8.0, algorithm="ring", protocol=protocol)
    st_ = nccl.setting(c, ch.schedule)
    return nccl.latency_s(nccl.cluster_model(c), st_, "ring", protocol) * 1e6


def test_ll128_ring_two_h100_nodes():
    """2 x 8 H100 (Intel hosts: net post 1 us < NVLink LL128 1.9): LL128's base 14 + 26 x 1.9
    + 4 crossings at the tree's LL128 network latency 8.5 (NCCL 2.23+: 28 x 1.9 + 2 x 4.0)."""
    c = _cluster("dgx_h100", 2)
    assert _ring_latency_us(c, "LL128") == pytest.approx(14.0 + 26 * 1.9 + 4 * 8.5, rel=1e-9)


def test_simple_ring_keeps_nccl_formula():
    """Simple is not in ``ring_chain_protocols``: NCCL's 2(nNodes - 1) network steps at its
    ring latency (14 us + the A100 GDR flush 2 + 1 us), 28 others at max(3.4, 3 x 2.0 AMD post),
    x 1.4 for a multi-node all_reduce above 64 B a channel per rank."""
    c = _cluster("dgx_a100", 2)
    ch = nccl.choose(c, "all_reduce", c.gpus, 2.0**20, algorithm="ring", protocol="Simple")
    st_ = nccl.setting(c, ch.schedule)
    lat = nccl.latency_s(nccl.cluster_model(c), st_, "ring", "Simple") * 1e6
    assert lat == pytest.approx((8.4 + 28 * 6.0 + 2 * (14.0 + 3.0)) * 1.4, rel=1e-9)


def test_one_gpu_per_node_is_nccl_formula_unchanged():
    """With one GPU a node every ring step crosses, at the tree's latency: NCCL's own formula
    (tuning.cc:300-301), which the chain rule reproduces: 4 x 1 A100 all_reduce, LL: 6.6 +
    6 x 5.0."""
    c = _cluster("dgx_a100", 4, 1)
    assert _ring_latency_us(c, "LL") == pytest.approx(6.6 + 6 * 5.0, rel=1e-9)


def test_one_node_ring_untouched():
    """Inside one node no step crosses the network: 8 x A100 ring LL is 6.6 + 14 x 0.6."""
    c = _cluster("dgx_a100", 1)
    assert _ring_latency_us(c, "LL") == pytest.approx(6.6 + 14 * 0.6, rel=1e-9)


def test_two_node_ring_time_and_choice():
    """The forced-ring 8 B all_reduce on 2 x 8 A100 (case a100_2x8_ring_8B_time) runs LL at
    6.6 + 26 x 2.0 + 4 x 5.0 = 78.6 us (68.0 before this round; nccl 812 measured 93.1), and
    the automatic choice at 8 B stays below it (NCCL's tree)."""
    c = _cluster("dgx_a100", 2)
    ring = simulate_collective(c, "all_reduce", 8.0, algorithm="ring")
    assert ring.protocol == "LL"
    assert ring.time_s * 1e6 == pytest.approx(78.6, rel=1e-3)  # + 8 B of bandwidth time
    auto = simulate_collective(c, "all_reduce", 8.0)
    assert auto.time_s < ring.time_s
