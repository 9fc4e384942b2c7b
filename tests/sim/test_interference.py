"""Interference of NCCL kernels with compute (``dlrm/stack.py`` item 6): a kernel that starts
while its rank's collectives run is slowed by the stack's factor only until they end
(``stack.slowed_s``), in the engine and in the planner's walk alike."""

from __future__ import annotations

import pytest

from tests.dlrm.test_hugectr_dp_overlap import BASE as OVERLAP
from zionsim.dlrm import estimate
from zionsim.dlrm.stack import load_stack, slowed_s
from zionsim.hardware.cluster import Cluster
from zionsim.sim import engine
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.run import trace_of

#: HugeCTR on 4 H100 (the dp_local_reduce tests' case): the model-parallel embedding backward
#: (~1.6 ms) starts beside the grouped all-reduce (~0.25 ms), which ends long before it
BASE = {k: v for k, v in OVERLAP.items() if k not in ("iterations", "warmup")}


def test_slowed_s_pro_rates_the_overlap():
    assert slowed_s(1.0, 0.0, 0.2) == 1.0
    assert slowed_s(1.0, 5.0, 0.2) == pytest.approx(1.2)
    # 0.6 s under NCCL does 0.5 s of the work; the other 0.5 s at full speed
    assert slowed_s(1.0, 0.6, 0.2) == pytest.approx(1.1)
    assert slowed_s(1.0, 0.3, 0.2) < slowed_s(1.0, 0.6, 0.2) < slowed_s(1.0, 1.2, 0.2)


@pytest.fixture(scope="module")
def run():
    inputs = resolve_inputs(BASE)
    trace, _, cluster = trace_of(inputs, Cluster.build(inputs.cluster))
    rec = engine.simulate_trace(cluster, trace, iterations=2)
    return trace, cluster, rec


def test_a_long_kernel_is_slowed_only_while_the_all_reduce_runs(run):
    trace, cluster, rec = run
    seconds = estimate.op_seconds(cluster, trace)
    slow = load_stack("hugectr").compute_slowdown
    ops = {op.id: op for op in trace.ops}
    ends = {(it, i): (start, end) for it, i, _, start, end in rec.ops.rows}
    emb = next(op for op in trace.ops if op.rank == 0 and op.name == "emb_bwd")
    ar = next(op for op in trace.ops if op.rank == 0 and op.name == "allreduce0")
    (s, e), (a0, a1) = ends[1, emb.id], ends[1, ar.id]
    assert a0 <= s < a1 < e  # it starts under the all-reduce, which ends well before it
    took, alone = e - s, seconds[emb.id]
    assert took == pytest.approx(slowed_s(alone, a1 - s, slow), rel=1e-9)
    assert alone < took < alone * (1 + slow) - 0.5 * slow * alone
    assert ops[emb.id].kind != "host"


def test_the_clock_ends_with_the_last_op_not_a_spare_timeout(run):
    """A slowed kernel woken early leaves its full-length timeout behind: it must not move the
    simulated end (what link utilisation divides by)."""
    _, _, rec = run
    last = max(end for *_, end in rec.ops.rows)
    assert rec.sim_time_s == pytest.approx(last, rel=1e-12)
