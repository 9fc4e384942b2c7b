"""Fused (FBGEMM TBE) against native (per-table nn.EmbeddingBag + torch.optim) embeddings on one
ZionEX node: the embedding work per iteration and the end-to-end iteration (issue 24, item 4)."""

import pytest

from zionsim.dlrm.planner import named_plan
from zionsim.dlrm.stack import apply_stack, resolve_stack
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology
from zionsim.sim.engine import op_durations
from zionsim.sim.run import build_trace, simulate_run

EMBEDDING_OPS = ("emb_fwd", "emb_bwd", "emb_opt")


def _embedding_s(cluster, trace) -> float:
    """Seconds of the embedding ops (forward, backward, native optimizer pass) on the busiest
    rank."""
    d = op_durations(cluster, trace)
    per_rank: dict[int, float] = {}
    for op in trace.ops:
        if op.name in EMBEDDING_OPS:
            per_rank[op.rank] = per_rank.get(op.rank, 0.0) + float(d[op.id])
    return max(per_rank.values())


@pytest.mark.parametrize("name", ["mlperf_dlrm", "mlperf_dlrm_dcnv2", "neo_model_i"])
def test_fused_faster_than_native_on_the_op_and_end_to_end(name):
    """SGD (mlperf_dlrm), Adagrad (DCNv2), row-wise Adagrad (Neo model I), one plan for both:
    the embedding op and the iteration are faster fused; the native optimizer pass shows in
    ``optimizer``."""
    cluster = Cluster.build(load_topology("zionex", nodes=1))
    stack = resolve_stack(None)
    w = apply_stack(load_workload(name), stack)
    plan = named_plan("auto", cluster, w, stack)
    op_s, iter_s, optimizer_s = {}, {}, {}
    for fused in (True, False):
        trace, _ = build_trace(cluster, w, plan, fused, None, stack)
        op_s[fused] = _embedding_s(cluster, trace)
        run = simulate_run(cluster, w, plan, fused=fused, stack=stack, iterations=2)
        iter_s[fused] = run.summary["iteration_time_s"]
        optimizer_s[fused] = run.summary["breakdown_s"]["optimizer"]
    assert op_s[True] < op_s[False]
    assert iter_s[True] < iter_s[False]
    assert optimizer_s[False] > optimizer_s[True]
