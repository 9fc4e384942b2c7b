"""Issue 25: HugeCTR's pipeline (streams joined every iteration, the bottom MLP after the lookup),
GPU presets carrying their own kernel measurements, RoCE link entries."""

from __future__ import annotations

import pytest

from zionsim.dlrm.stack import load_stack
from zionsim.hardware.topology import load_topology
from zionsim.sim.run import run_point

BASE = {
    "topology": "dgx_h100",
    "nodes": 1,
    "gpus_per_node": 4,
    "workload": "mlperf_dlrm_dcnv2",
    "batch_per_gpu": 256,
    "stack": "hugectr",
    "iterations": 3,
    "warmup": 1,
}


def _ops(options: dict):
    ev = run_point(options).events
    return ev[ev["rank"] == 0].set_index(["iteration", "name"])


def test_hugectr_stack_states_its_pipeline():
    s = load_stack("hugectr")
    assert s.iteration_join and s.dense_waits_lookup and s.embedding_stream
    assert not load_stack("torchrec").iteration_join


def test_joined_iteration_starts_its_lookup_after_the_previous_step():
    """With iteration_join the next lookup waits for the dense update; without, it runs ahead."""
    joined = _ops(BASE)
    assert joined.loc[(2, "emb_fwd"), "start_s"] >= joined.loc[(1, "dense_opt"), "end_s"] - 1e-12
    free = _ops({**BASE, "stack.iteration_join": False})
    assert free.loc[(2, "emb_fwd"), "start_s"] < free.loc[(1, "dense_opt"), "end_s"]


def _waits_for_lookup(options: dict) -> bool:
    ops = [op for op in run_point(options).trace.ops if op.rank == 0]
    lookup = next(op.id for op in ops if op.name == "emb_fwd")
    return lookup in next(op.deps for op in ops if op.name == "bottom_fwd0")


def test_bottom_mlp_waits_for_the_lookup_only_where_the_stack_says_so():
    waits = _ops(BASE)
    assert waits.loc[(2, "bottom_fwd0"), "start_s"] >= waits.loc[(2, "emb_fwd"), "end_s"] - 1e-12
    assert _waits_for_lookup(BASE)
    assert not _waits_for_lookup({**BASE, "stack.dense_waits_lookup": False})


def test_gpu_preset_brings_its_own_kernel_parameters_unless_the_topology_has_them(tmp_path):
    h200 = load_topology("dgx_h100", nodes=1, overrides=["gpu=h200"]).gpu
    assert 0.8 < h200.compute["stream_eff"] < 0.9
    assert load_topology("dgx_b200", nodes=1, overrides=["gpu=h100"]).gpu.compute == {}
    own = load_topology(
        "dgx_h100", nodes=1, overrides=["gpu=h200", "compute.stream_efficiency=0.5"]
    )
    assert own.gpu.compute["stream_eff"] == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["dgx_a100", "dgx_h100", "dgx_b200"])
def test_roce_link_is_the_infiniband_one_with_rocev2_headers(name):
    spec = load_topology(name, nodes=2, overrides=["scale_out.kind=roce"])
    ib = load_topology(name, nodes=2).links["infiniband"]
    assert spec.scale_out.kind == "roce"
    assert spec.links["roce"].efficiency == pytest.approx(ib.efficiency * 0.980 / 0.994, abs=1e-3)


def test_gb200_nvl72_is_one_nvlink_domain_with_a_nic_per_gpu():
    spec = load_topology("gb200_nvl72", nodes=1)
    assert spec.gpus_per_node == 72 and spec.scale_out.nics_per_node == 72
    assert spec.scale_up.kind == "nvswitch" and spec.scale_up.links_per_gpu == 18
    assert spec.pcie.switches == 18  # a tray: 4 GPUs and 4 NICs


def test_all_reduce_runs_in_issue_order_with_the_exchanges_on_one_communicator():
    """HugeCTR's all-to-alls and grouped all-reduce share one NCCL communicator, which runs its
    kernels in issue order: with no data-parallel table (the all-reduce then waits for no
    embedding work) it still starts only after this iteration's gradient all-to-all; a stack
    without one_communicator lets it start beside the exchange."""
    opts = {**BASE, "batch_per_gpu": 2048, "stack.planner.dp_sharding_threshold.auto": 0}
    one = _ops(opts)
    assert one.loc[(2, "allreduce0"), "stream"] == "a2a"
    assert one.loc[(2, "allreduce0"), "start_s"] >= one.loc[(2, "grad_a2a"), "end_s"] - 1e-12
    apart = _ops({**opts, "stack.one_communicator": False})
    assert apart.loc[(2, "allreduce0"), "stream"] == "allreduce"
    assert apart.loc[(2, "allreduce0"), "start_s"] < apart.loc[(2, "grad_a2a"), "end_s"]


def _emb_bwd_args(options: dict) -> dict:
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import trace_of

    trace, _, _ = trace_of(resolve_inputs(options))
    return next(op.args for op in trace.ops if op.rank == 0 and op.name == "emb_bwd")


def test_local_reduce_reads_the_fp16_gradient_of_the_fp32_rows():
    """HugeCTR's embedding collection (stack ``local_reduce``) reduces each lookup's gradient
    from the exchange buffer in the communication precision: FP16 under its mixed precision,
    half of the FP32 row; a stack without it leaves the gradient at the row's width."""
    assert load_stack("hugectr").local_reduce and not load_stack("torchrec").local_reduce
    args = _emb_bwd_args(BASE)
    assert args["row_bytes"] == 512.0 and args["grad_bytes"] == 256.0
    assert "grad_bytes" not in _emb_bwd_args({**BASE, "stack.local_reduce": False})
    fp32 = _emb_bwd_args({**BASE, "stack.precision.communication": "fp32"})
    assert fp32["grad_bytes"] == 512.0


def test_local_reduce_makes_the_backward_cheaper_per_lookup():
    """Under FP16 exchange, where keys repeat, the local reduce's backward is faster than one
    reading FP32 gradients (the reduced-gradient buffer streams fewer bytes than the halved
    random reads save).  Keys repeat under independent Zipf ids; MLPerf's fixed multi-hot lists
    at 256 samples per GPU hardly repeat a row, and the buffer then costs more than it saves."""
    rep = {**BASE, "workload.multi_hot": "independent"}
    with_lr = _ops(rep).loc[(2, "emb_bwd"), "duration_s"]
    without = _ops({**rep, "stack.local_reduce": False}).loc[(2, "emb_bwd"), "duration_s"]
    assert with_lr < without


def test_local_reduce_must_be_a_flag():
    from zionsim.base.errors import InputError
    from zionsim.dlrm.stack import stack_from_dict

    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "x", "local_reduce": "yes"}, "x.yaml")
    assert "local_reduce" in str(err.value.field)


TWO_NODES = {**BASE, "nodes": 2, "gpus_per_node": 2, "batch_per_gpu": 64, "iterations": 2}


def _lowered(stack_overrides: dict | None = None):
    """The 2-node (2 GPUs each) HugeCTR iteration of TWO_NODES as lowered, its layout and the
    GPUs per node."""
    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.planner import named_plan
    from zionsim.dlrm.sharding import layout
    from zionsim.dlrm.stack import apply_stack
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster

    c = Cluster.load("dgx_h100", nodes=2, gpus_per_node=2)
    stack = load_stack("hugectr", stack_overrides or {})
    w = apply_stack(load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64), stack)
    plan = named_plan("auto", c, w, stack)
    return lower(w, plan, 4, True, 2, stack=stack), layout(w, plan, 4, 2), 2


def test_hierarchical_reduction_reads_every_partial_of_the_node():
    """HugeCTR's hierarchical exchange (stack ``hierarchical_reduction``, HugeCTR
    ``IntraModelForward::dst_reduction``): after the node's reduce-scatter-sized stage each rank
    reads the ``g`` partials of its rail (the node's TWRW size) and writes one, before the rail
    all-to-all; nothing of the kind without the flag or on one node."""
    assert load_stack("hugectr").hierarchical_reduction
    assert not load_stack("torchrec").hierarchical_reduction
    trace, lay, g = _lowered()
    ops = [op for op in trace.ops if op.rank == 0]
    names = [op.name for op in ops]
    red = ops[names.index("hier_dst_reduction")]
    size = lay.twrw_rs[0]
    intra = 2.0 * lay.hier_intra[:g].sum() if lay.hier_intra is not None else 0.0
    assert size > 0 and red.args["nbytes"] == pytest.approx(size * (1 + 1 / g) + intra)
    assert names.index("twrw_reduce_scatter") < names.index("hier_dst_reduction")
    assert names.index("hier_dst_reduction") < names.index("twrw_a2a")
    assert red.stream == "embedding"
    off, _, _ = _lowered({"hierarchical_reduction": False})
    assert not any(op.name == "hier_dst_reduction" for op in off.ops)
    one = run_point({**BASE, "batch_per_gpu": 64, "iterations": 2}).trace
    assert not any(op.name == "hier_dst_reduction" for op in one.ops)


def test_hierarchical_reduction_lengthens_the_multi_node_step():
    """The reduction sits on the forward exchange's chain (lookups, intra-node stage, reduction,
    rail all-to-all, interaction): the 2-node step is longer with it."""
    on = run_point(TWO_NODES).summary["iteration_time_s"]
    off = run_point({**TWO_NODES, "stack.hierarchical_reduction": False}).summary
    assert on > off["iteration_time_s"]


def test_hierarchical_reduction_survives_a_trace_file():
    """A trace file's stack keeps the flag (a replay reduces as the run did)."""
    from zionsim.dlrm.trace_file import _stack_from_meta

    s = load_stack("hugectr")
    assert _stack_from_meta(s.to_dict()).hierarchical_reduction
    assert not _stack_from_meta(load_stack("torchrec").to_dict()).hierarchical_reduction


def test_hierarchical_reduction_of_table_wise_shards_reads_and_writes_what_arrives():
    """Under ``auto`` on several nodes (TW/RW shards exchanged hierarchically) a rank's
    reduction reads what its node's holders wrote to it and writes as much: twice the node's
    per-peer intra-node bytes (plus any TWRW node's share)."""
    trace, lay, g = _lowered({"planner.sharding_plan.multi_node": "auto"})
    assert lay.hier_intra is not None and lay.hier_intra.any()
    for r in range(trace.ranks):
        node = r // g
        want = 2.0 * lay.hier_intra[node * g : (node + 1) * g].sum()
        want += lay.twrw_rs.get(node, 0.0) * (1 + 1 / g)
        got = [op for op in trace.ops if op.rank == r and op.name == "hier_dst_reduction"]
        assert len(got) == 1 and got[0].args["nbytes"] == pytest.approx(want)


def test_hierarchical_intra_node_stages_are_kernels_outside_the_communicators_order():
    """HugeCTR's intra-node stages of the hierarchical exchange (``intra_forward``,
    ``intra_model_backward``) are kernels of its embedding stream, not NCCL calls: the grouped
    all-reduce, issued after the gradient all-to-all on the one communicator, starts once that
    exchange has ended, beside the intra-node gradient copy (sharing NVLink with it), not after
    it. TorchRec's TWRW stages are NCCL's reduce-scatter and all-gather and stay in order."""
    trace, _, _ = _lowered()
    ops = {op.name: op for op in trace.ops if op.rank == 0}
    assert ops["twrw_reduce_scatter"].stream == "intra"
    assert ops["twrw_all_gather"].stream == "intra"
    assert ops["allreduce0"].stream == "a2a"
    ev = run_point({**TWO_NODES, "batch_per_gpu": 1024, "iterations": 3, "warmup": 1}).events
    r0 = ev[ev["rank"] == 0].set_index(["iteration", "name"])
    start = r0.loc[(2, "allreduce0"), "start_s"]
    assert start >= r0.loc[(2, "twrw_a2a_bwd"), "end_s"] - 1e-12
    assert start < r0.loc[(2, "twrw_all_gather"), "end_s"]
    tr = _lowered({"hierarchical_reduction": False})[0]
    assert {op.stream for op in tr.ops if op.name.startswith("twrw_")} == {"a2a"}
