"""NVIDIA's PyTorch DLRM stack: DeepLearningExamples' README runs replay the step as a CUDA graph
(``--cuda_graphs``, ``stacks/nvidia_pytorch_dlrm.yaml`` [dle_graphs]), so the stack dispatches no
kernel eagerly; the MLPerf v0.7 submission's eager loop is stated by its case."""

from __future__ import annotations

import pytest

from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.stack import load_stack
from zionsim.dlrm.workload import load_workload
from zionsim.measure.validate import load_cases

V07 = "a100x8_dlrm_pytorch_v07"


def _stack_sets(case) -> list[str]:
    """The case's ``stack.PATH`` options as ``--set`` strings (as tools/calibrate_stacks.py)."""
    opts = case.params["options"]
    return [f"{k[len('stack.') :]}={v}" for k, v in opts.items() if k.startswith("stack.")]


def _pytorch_dlrm_cases() -> dict:
    return {
        c.id: c
        for c in load_cases()
        if c.family == "end_to_end" and c.params["options"].get("stack") == "nvidia_pytorch_dlrm"
    }


def _host_ops(stack):
    w = load_workload("tiny")
    plan = Plan("x", tuple(Shard(t.index, "TW", (1 + t.index % 3,)) for t in w.tables))
    return [o for o in lower(w, plan, 4, stack=stack).ops if o.stream == "host"]


def test_the_stack_replays_a_graph_with_a_synchronised_loop():
    """No eager dispatch (the graph's launch is host.per_step); the loop still synchronises
    every step (no overlap); the GPU-side gap per kernel is the graph-replay figure."""
    s = load_stack("nvidia_pytorch_dlrm")
    assert s.host_dispatch_s == 0.0
    assert s.host_overlap is False and s.host_per_step_s > 0
    assert s.kernel_launch_s == pytest.approx(2e-6)


def test_under_the_graph_the_host_only_prepares_the_batch():
    """Each rank's host stream holds its batch preparation and no launch op; with the eager
    6 us of the v0.7 case every run of GPU ops gets its launch."""
    graph = _host_ops(load_stack("nvidia_pytorch_dlrm"))
    assert graph and {o.name for o in graph} == {"input_pipeline"}
    eager = _host_ops(load_stack("nvidia_pytorch_dlrm", _stack_sets(_pytorch_dlrm_cases()[V07])))
    launches = [o for o in eager if o.name.startswith("launch_")]
    assert launches and all(o.args["seconds"] > 0 for o in launches)


def test_only_the_eager_v07_case_dispatches():
    """The v0.7 case (NGC 20.06, eager) sets 6 us per kernel and runs ahead of the GPU; the
    DeepLearningExamples README cases keep the stack's graph replay."""
    cases = _pytorch_dlrm_cases()
    assert V07 in cases and len(cases) >= 7
    for cid, case in cases.items():
        s = load_stack("nvidia_pytorch_dlrm", _stack_sets(case) or None)
        if cid == V07:
            assert s.host_dispatch_s == pytest.approx(6e-6) and s.host_overlap is True
        else:
            assert s.host_dispatch_s == 0.0 and s.host_overlap is False, cid
