"""The sweep's fast paths change no number (issue 29): the planner's walk on flat per-op lists
equals the op-object walk, what it keeps per lowered trace (op seconds, streams, rank classes)
gives what building them anew gives, rank templates that take a copied rank's class from the
lowering's ``alike`` equal those built op by op, and collectives prepared from the planner's
remembered NCCL choices run as freshly chosen ones do."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.dlrm.test_speed_exact import _candidates
from zionsim.dlrm import estimate, lowering
from zionsim.sim import engine, templates

CASES = [
    {"workload": "mlperf_dlrm", "nodes": 4},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "topology": "dgx_h100", "stack": "hugectr"},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 4, "sync": "foreground-ma", "sync_every": 2},
    {"workload": "mlperf_dlrm", "nodes": 2, "fused": False, "stack": "nvidia_pytorch_dlrm"},
    {"workload": "neo_model_i", "nodes": 1, "batch_per_gpu": 256},  # UVM: host transfers
    {"workload": "tiny", "nodes": 2, "stack": "tensorflow_sok"},
]


def _estimates(inputs, cluster, plans) -> list[float]:
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    return [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]


@pytest.mark.parametrize("options", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_the_flat_walk_and_what_it_keeps_give_the_object_walks_times(options, monkeypatch):
    inputs, cluster, plans = _candidates(options)
    with monkeypatch.context() as m:  # the long way: op objects, nothing kept
        m.setattr(estimate, "FLAT", False)
        m.setattr(estimate, "REUSE", False)
        slow = _estimates(inputs, cluster, plans)
    monkeypatch.setattr(estimate, "_SHAPES", estimate._ByTrace())
    monkeypatch.setattr(estimate, "_DURATIONS", estimate._ByTrace())
    cold = _estimates(inputs, cluster, plans)
    warm = _estimates(inputs, cluster, plans)  # shapes and op seconds from the first pass
    assert cold == slow
    assert warm == slow
    assert len(estimate._SHAPES.entries) > 0


def test_a_kept_shape_is_not_used_for_other_op_seconds(monkeypatch):
    """The same lowered trace on a GPU of other rates: new op seconds, a new shape."""
    monkeypatch.setattr(estimate, "_SHAPES", estimate._ByTrace())
    monkeypatch.setattr(estimate, "_DURATIONS", estimate._ByTrace())
    a100 = _candidates({"workload": "mlperf_dlrm", "nodes": 2})
    h100 = _candidates({"workload": "mlperf_dlrm", "nodes": 2, "topology.gpu": "h100"})
    fast = [_estimates(*c) for c in (a100, h100)]
    monkeypatch.setattr(estimate, "REUSE", False)
    assert fast == [_estimates(*c) for c in (a100, h100)]
    assert fast[0] != fast[1]


def test_the_trace_memo_checks_every_op():
    """A trace with the same first op and op count but another op is not the kept one."""
    inputs, cluster, plans = _candidates({"workload": "tiny", "nodes": 1})
    trace = _lower(inputs, cluster, plans[0])
    memo = estimate._ByTrace()
    memo.put(trace, "x", 1)
    assert memo.get(trace, "x") == 1
    assert memo.get(trace, "y") is None
    other = replace(trace, ops=[*trace.ops[:-1], replace(trace.ops[-1], name="changed")])
    assert memo.get(other, "x") is None


def test_the_trace_memo_is_bounded_by_ops(monkeypatch):
    inputs, cluster, plans = _candidates({"workload": "tiny", "nodes": 1})
    a, b = (_lower(inputs, cluster, p) for p in plans[:2])
    memo = estimate._ByTrace()
    monkeypatch.setattr(estimate, "KEEP_OPS", max(len(a.ops), len(b.ops)) + 1)
    memo.put(a, "x", 1)
    memo.put(b, "x", 2)
    assert memo.get(a, "x") is None and memo.get(b, "x") == 2  # the older one dropped
    monkeypatch.setattr(estimate, "KEEP_OPS", len(a.ops) - 1)
    memo.put(a, "y", 3)
    assert memo.get(a, "y") is None  # larger than the bound: not kept


def _lower(inputs, cluster, plan):
    fused = inputs.options["fused"] and inputs.stack.fused_embedding
    w = inputs.workload
    g = cluster.spec.gpus_per_node
    return lowering.lower(w, plan, len(cluster.gpus), fused, g, w.zipf_alpha, inputs.sync,
                          inputs.stack)  # fmt: skip


@pytest.mark.parametrize("options", CASES[:4], ids=lambda c: "-".join(str(v) for v in c.values()))
def test_templates_from_copied_ranks_equal_those_built_op_by_op(options):
    inputs, cluster, plans = _candidates(options)
    g = cluster.spec.gpus_per_node
    for plan in plans:
        trace = _lower(inputs, cluster, plan)
        assert trace.alike is not None
        durations = engine.op_durations(cluster, trace)
        noisy = durations.copy()
        copied = [r for r, src in enumerate(trace.alike) if src != r]
        if copied:  # a copied rank whose GPU runs slower is a class of its own
            noisy[[op.id for op in trace.by_rank()[copied[-1]]]] *= 1.5
        for d in (durations, noisy):
            fast = templates.templates(trace, d, False, g)
            slow = templates.templates(replace(trace, alike=None), d, False, g)
            assert fast.rep_of.tolist() == slow.rep_of.tolist()
            assert fast.members == slow.members
            assert fast.member_ops.keys() == slow.member_ops.keys()
            assert all(
                np.array_equal(fast.member_ops[k], slow.member_ops[k]) for k in fast.member_ops
            )
        if copied:
            slow_rank = copied[-1]
            assert templates.templates(trace, noisy, False, g).rep_of[slow_rank] == slow_rank


def _records(rec) -> tuple:
    cols = rec.ops.columns()
    colls = sorted(
        (k, c.start_s, c.end_s, c.algorithm, c.protocol) for k, c in rec.collectives.items()
    )
    return [np.asarray(c).tolist() for c in cols], colls, rec.sim_time_s


@pytest.mark.parametrize("options", CASES[:3], ids=lambda c: "-".join(str(v) for v in c.values()))
def test_collectives_prepared_from_kept_choices_run_as_fresh_ones(options, monkeypatch):
    inputs, cluster, plans = _candidates(options)
    _estimates(inputs, cluster, plans)  # the planner's choices are remembered
    trace = _lower(inputs, cluster, plans[0])
    warm = engine.simulate_trace(cluster, trace, iterations=2)
    again = engine.simulate_trace(cluster, trace, iterations=2)  # prepared ones kept
    monkeypatch.setattr(engine, "KEEP_PREPARED", 0)
    monkeypatch.setattr(estimate, "_CHOICES", {})
    monkeypatch.setattr(estimate, "MEMO_CHOICES", 0)
    fresh = engine.simulate_trace(cluster, trace, iterations=2)
    assert _records(warm) == _records(fresh) == _records(again)


def test_op_seconds_shared_across_traces_equal_fresh_ones(monkeypatch):
    """Op seconds kept by (kind, arguments) per GPU and compute model and shared across the
    candidates' traces (``estimate._seconds_of``) equal each trace's seconds priced alone, and
    ``Trace.by_rank``'s slices equal its ops grouped one by one."""
    from zionsim.dlrm.op_costs import op_durations

    monkeypatch.setattr(estimate, "_DURATIONS", estimate._ByTrace())
    monkeypatch.setattr(estimate, "_SECONDS", estimate.OrderedDict())
    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 2})
    w, stack = inputs.workload, inputs.stack
    g = cluster.spec.gpus_per_node
    traces = [
        lowering.lower(w, p, len(cluster.gpus), stack.fused_embedding, g, w.zipf_alpha,
                       inputs.sync, stack)
        for p in plans
    ]  # fmt: skip
    for trace in traces:
        model = estimate._compute_model(cluster, trace.stack or estimate.BARE)
        kept = estimate.op_seconds(cluster, trace)
        assert np.array_equal(kept, op_durations(cluster, trace, model))
        grouped = [[op for op in trace.ops if op.rank == r] for r in range(trace.ranks)]
        assert trace.by_rank() == grouped
    assert sum(map(len, estimate._SECONDS.values())) > 0
