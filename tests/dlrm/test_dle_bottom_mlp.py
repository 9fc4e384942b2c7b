"""NVIDIA DeepLearningExamples' PyTorch DLRM: its device mapping (zionsim/dlrm/dle_plan.py) and
its model-parallel bottom MLP (stack ``bottom_mlp: first_rank``, zionsim/dlrm/stack.py item 13)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.dle_plan import buckets, device_mapping
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.stack import BARE, load_stack, stack_from_dict
from zionsim.dlrm.workload import load_workload

FIRST = dataclasses.replace(BARE, bottom_mlp="first_rank")


def test_buckets_follow_dles_greedy_by_hand():
    """Sizes 9, 7, 5, 3, 1 in 2 buckets of at most 3: 9 -> A; 7 -> B (A=9 is fuller);
    5 -> B (7 < 9); 3 -> A (12 < 9); A [0, 3] = 12, B [1, 2] = 12, tie kept in order: 1 -> A,
    which closes at 3 tables."""
    assert buckets([9, 7, 5, 3, 1], 2) == [[0, 3, 4], [1, 2]]


def test_above_four_gpus_the_first_holds_no_tables():
    """mlperf_dlrm's 26 tables on 8 GPUs: GPU 0 none, the others at most ceil(26 / 7) = 4,
    every table once; on 4 GPUs GPU 0 holds tables too."""
    rows = [t.rows for t in load_workload("mlperf_dlrm").tables]
    m = device_mapping(rows, 8)
    assert m[0] == [] and max(len(b) for b in m) == 4
    assert sorted(i for b in m for i in b) == list(range(26))
    assert device_mapping(rows, 4)[0]


def _tw_plan(w, ranks, owner):
    return Plan("x", tuple(Shard(t.index, "TW", (owner(t.index),)) for t in w.tables))


def test_first_rank_runs_the_bottom_mlp_for_the_global_batch():
    """Rank 0 runs every bottom-MLP GEMM with m = 4 x 32 samples, the other ranks none; the
    pooled all-to-all carries rank 0's 16-wide output (32 x 16 x 4 B to each rank) on top of the
    tables' and the gradient all-to-all is its transpose; the bottom MLP's parameters are not
    all-reduced."""
    w = load_workload("tiny")  # 32 samples per GPU, bottom 8-32-16
    plan = _tw_plan(w, 4, lambda i: 1 + i % 3)  # rank 0 holds no tables
    dp, mp = lower(w, plan, 4), lower(w, plan, 4, stack=FIRST)
    by_rank = mp.by_rank()
    bottom = [o for o in by_rank[0] if o.name.startswith("bottom_")]
    assert len(bottom) == 5 and {o.args["m"] for o in bottom if "fwd" in o.name} == {128}
    assert not any(o.name.startswith("bottom_") for r in (1, 2, 3) for o in by_rank[r])
    a2a_dp = [c for c in dp.collectives if c.op == "all_to_all"]  # input, pooled, gradient
    a2a_mp = [c for c in mp.collectives if c.op == "all_to_all"]
    extra = np.asarray(a2a_mp[1].matrix) - np.asarray(a2a_dp[1].matrix)
    assert extra[0, 1:].tolist() == [32 * 16 * 4] * 3 and not extra[1:].any()
    assert np.array_equal(np.asarray(a2a_mp[2].matrix), np.asarray(a2a_mp[1].matrix).T)
    ar_dp, ar_mp = (next(c for c in t.collectives if c.op == "all_reduce") for t in (dp, mp))
    assert ar_dp.size_bytes - ar_mp.size_bytes == (8 * 32 + 32 + 32 * 16 + 16) * 4


def test_the_pooled_exchange_waits_for_the_bottom_mlp_and_its_backward_for_the_gradients():
    """On rank 0 the pooled all-to-all depends on the last bottom forward GEMM, and the bottom
    backward starts from the gradient all-to-all."""
    w = load_workload("tiny")
    tr = lower(w, _tw_plan(w, 4, lambda i: 1 + i % 3), 4, stack=FIRST)
    ops = {o.name: o for o in tr.by_rank()[0]}
    assert ops["bottom_fwd1"].id in ops["pooled_a2a"].deps
    assert ops["grad_a2a"].id in ops["bottom_wgrad1"].deps


def test_one_gpu_keeps_its_own_bottom_mlp():
    """On one rank ``first_rank`` changes nothing."""
    w = load_workload("tiny")
    plan = _tw_plan(w, 1, lambda i: 0)
    a, b = lower(w, plan, 1), lower(w, plan, 1, stack=FIRST)
    assert [(o.name, o.args) for o in a.ops] == [(o.name, o.args) for o in b.ops]


def test_the_dle_stack_states_it_and_a_bad_value_is_named():
    s = load_stack("nvidia_pytorch_dlrm")
    assert (s.bottom_mlp, s.planner) == ("first_rank", "dle")
    with pytest.raises(InputError, match="bottom_mlp"):
        stack_from_dict({"name": "x", "bottom_mlp": "rank0"})
