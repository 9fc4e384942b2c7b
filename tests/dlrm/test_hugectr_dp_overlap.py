"""Issue 25: HugeCTR's grouped all-reduce waits for the replicated (DP) tables' local reduce, not
for the model-parallel tables' backward, which runs beside it (stack ``dp_local_reduce``,
``zionsim/dlrm/stack.py`` item 8g; HugeCTR ``model_pipeline.cpp``,
``create_train_pipeline_with_ebc``)."""

from __future__ import annotations

import pytest

from zionsim.dlrm.stack import load_stack
from zionsim.sim.run import run_point

#: 4 H100 at the per-GPU batch of the MLPerf runs under HugeCTR's planner (auto, 0.008 GB):
#: its small tables are replicated
BASE = {
    "topology": "dgx_h100",
    "nodes": 1,
    "gpus_per_node": 4,
    "workload": "mlperf_dlrm_dcnv2",
    "batch_per_gpu": 8192,
    "stack": "hugectr",
    "iterations": 3,
    "warmup": 1,
}
OFF = {**BASE, "stack.dp_local_reduce": False}
NO_DP = {**BASE, "stack.planner.dp_sharding_threshold.auto": 0}


def _rank0(options: dict) -> dict:
    """Rank 0's ops of the lowered iteration, by name."""
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import trace_of

    trace, _, _ = trace_of(resolve_inputs(options))
    return {op.name: op for op in trace.ops if op.rank == 0}


def _events(options: dict):
    ev = run_point(options).events
    return ev[ev["rank"] == 0].set_index(["iteration", "name"])


def test_hugectr_stack_reduces_replicated_tables_apart():
    assert load_stack("hugectr").dp_local_reduce
    assert not load_stack("torchrec").dp_local_reduce


def test_all_reduce_waits_for_the_replicated_tables_local_reduce_only():
    ops = _rank0(BASE)
    dp, mp, ar = ops["emb_dp_bwd"], ops["emb_bwd"], ops["allreduce0"]
    assert dp.id in ar.deps and mp.id not in ar.deps
    # the local reduce needs no exchange: it waits for the interaction's backward only
    assert ops["grad_a2a"].id not in dp.deps and ops["grad_a2a"].id in mp.deps
    assert dp.stream == mp.stream == "embedding"
    # the dense update still waits for both the all-reduce and the model-parallel backward
    assert {ar.id, mp.id} <= set(ops["dense_opt"].deps)


def test_without_it_the_all_reduce_waits_for_the_whole_embedding_backward():
    ops = _rank0(OFF)
    assert "emb_dp_bwd" not in ops
    assert ops["emb_bwd"].id in ops["allreduce0"].deps


def test_split_keeps_the_ranks_lookups_rows_and_tables():
    whole = _rank0(OFF)["emb_bwd"].args
    ops = _rank0(BASE)
    dp, mp = ops["emb_dp_bwd"].args, ops["emb_bwd"].args
    assert dp["lookups"] > 0 and mp["lookups"] > 0
    assert dp["lookups"] + mp["lookups"] == pytest.approx(whole["lookups"])
    assert dp["tables"] + mp["tables"] == whole["tables"]
    assert dp["unique_rows"] + mp["unique_rows"] == pytest.approx(whole["unique_rows"])
    row_bytes = dp["lookups"] * dp["row_bytes"] + mp["lookups"] * mp["row_bytes"]
    assert row_bytes == pytest.approx(whole["lookups"] * whole["row_bytes"])
    assert dp["grad_bytes"] == mp["grad_bytes"] == 256.0  # FP16 exchange of FP32 rows


def test_all_reduce_overlaps_the_model_parallel_backward():
    """Simulated: with the flag the all-reduce starts before the model-parallel backward ends
    (the two run side by side); without it, only after."""
    on = _events(BASE)
    assert on.loc[(2, "allreduce0"), "start_s"] < on.loc[(2, "emb_bwd"), "end_s"]
    off = _events(OFF)
    assert off.loc[(2, "allreduce0"), "start_s"] >= off.loc[(2, "emb_bwd"), "end_s"] - 1e-12


def test_overlap_shortens_the_step_at_the_same_fixed_cost():
    on = run_point(BASE).summary["iteration_time_s"]
    off = run_point(OFF).summary["iteration_time_s"]
    assert on < off


def test_a_plan_without_replicated_tables_is_unchanged():
    ops = _rank0(NO_DP)
    assert "emb_dp_bwd" not in ops
    assert (
        run_point(NO_DP).summary["iteration_time_s"]
        == run_point({**NO_DP, "stack.dp_local_reduce": False}).summary["iteration_time_s"]
    )


def test_dp_local_reduce_must_be_a_flag():
    from zionsim.base.errors import InputError
    from zionsim.dlrm.stack import stack_from_dict

    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "x", "dp_local_reduce": "maybe"}, "x.yaml")
    assert "dp_local_reduce" in str(err.value.field)
