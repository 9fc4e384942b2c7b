"""Issue 25: HugeCTR's hierarchical backward copy skips the GPUs that hold no key of a sample's
lookup (stack ``hier_sparse_copy``, ``zionsim/dlrm/stack.py`` item 8h; HugeCTR
``hier_model_backward.cu``, ``IntraModelBackwardOneToOneDesc::need_copy``), while the forward's
intra-node stage writes every bucket; and its pooling kernel writes the node's partial outputs to
the rail GPUs itself (stack ``hier_fused_forward``, item 8i)."""

from __future__ import annotations

import pytest

from zionsim.dlrm.sharding import keyed_fraction
from zionsim.dlrm.stack import load_stack
from zionsim.sim.run import run_point

#: 2 nodes of 4 H100 at MLPerf DCNv2's multi-hot lists under HugeCTR (hier_auto)
TWO_NODES = {
    "topology": "dgx_h100",
    "nodes": 2,
    "gpus_per_node": 4,
    "workload": "mlperf_dlrm_dcnv2",
    "batch_per_gpu": 256,
    "stack": "hugectr",
    "iterations": 2,
    "warmup": 1,
}


def _lowered(stack_overrides: dict | None = None):
    """The TWO_NODES iteration as lowered, its plan, workload and layout."""
    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.planner import named_plan
    from zionsim.dlrm.sharding import layout
    from zionsim.dlrm.stack import apply_stack
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster

    c = Cluster.load("dgx_h100", nodes=2, gpus_per_node=4)
    stack = load_stack("hugectr", stack_overrides or {})
    w = apply_stack(load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=256), stack)
    plan = named_plan("auto", c, w, stack)
    return lower(w, plan, 8, True, 4, stack=stack), plan, w, layout(w, plan, 8, 4)


def _sizes(trace, name: str) -> dict[int, float]:
    """Node → size of the collective behind op ``name`` (the node's first rank's)."""
    out = {}
    for op in trace.ops:
        if op.name == name and op.rank % 4 == 0:
            out[op.rank // 4] = trace.collectives[op.args["coll"]].size_bytes
    return out


def test_keyed_fraction():
    assert keyed_fraction(100, 1) == 1.0
    assert keyed_fraction(3, 8) == pytest.approx(1 - (7 / 8) ** 3)
    assert keyed_fraction(100, 32) == pytest.approx(0.958, abs=1e-3)
    # more keys or fewer GPUs: more likely to hold one
    assert keyed_fraction(2, 8) < keyed_fraction(3, 8) < keyed_fraction(3, 4) < 1.0


def test_layout_sizes_each_tables_copy_by_its_keyed_fraction():
    _, plan, w, lay = _lowered()
    cb = 2  # FP16 exchange under mixed precision
    G = w.batch_per_gpu * 8
    want: dict[int, float] = {}
    for s in plan.shards:
        if s.kind != "TWRW":
            continue
        t = w.tables[s.table]
        for node in {r // 4 for r in s.ranks}:
            want[node] = want.get(node, 0.0) + G * t.dim * cb * keyed_fraction(
                t.pooling, len(s.ranks)
            )
    assert want and lay.twrw_ag.keys() == want.keys()
    for node, size in want.items():
        assert lay.twrw_ag[node] == pytest.approx(size)
        assert lay.twrw_ag[node] < lay.twrw_rs[node]


def test_the_backward_copy_moves_only_the_keyed_gradients():
    """On: each node's backward copy is the layout's sparse size, the forward stage keeps the
    whole size.  Off, or without HugeCTR's hierarchical kernels (NCCL's all-gather moves
    everything): the copy is as large as the forward stage."""
    on, _, _, lay = _lowered({"hier_sparse_copy": True})
    rs, ag = _sizes(on, "twrw_reduce_scatter"), _sizes(on, "twrw_all_gather")
    assert rs and rs.keys() == ag.keys()
    for node in rs:
        assert rs[node] == pytest.approx(lay.twrw_rs[node])
        assert ag[node] == pytest.approx(lay.twrw_ag[node]) and ag[node] < rs[node]
    for overrides in (
        {"hier_sparse_copy": False},
        {"hier_sparse_copy": True, "hierarchical_reduction": False},
    ):
        off = _lowered(overrides)[0]
        assert _sizes(off, "twrw_all_gather") == _sizes(off, "twrw_reduce_scatter")


def test_a_sparser_copy_shortens_the_multi_node_step():
    # at 2,048 samples per GPU the copy is on the step's path; at 256 the network buffer copies
    # (emb_network_bwd, issue 25 round 12) and the rest hide it
    base = {**TWO_NODES, "batch_per_gpu": 2048}
    on = run_point({**base, "stack.hier_sparse_copy": True}).summary["iteration_time_s"]
    off = run_point({**base, "stack.hier_sparse_copy": False}).summary["iteration_time_s"]
    assert on < off


def test_hier_sparse_copy_must_be_a_flag_and_survives_a_trace_file():
    from zionsim.base.errors import InputError
    from zionsim.dlrm.stack import stack_from_dict
    from zionsim.dlrm.trace_file import _stack_from_meta

    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "x", "hier_sparse_copy": "maybe"}, "x.yaml")
    assert "hier_sparse_copy" in str(err.value.field)
    s = load_stack("hugectr", {"hier_sparse_copy": True})
    assert _stack_from_meta(s.to_dict()).hier_sparse_copy
    assert not _stack_from_meta(load_stack("torchrec").to_dict()).hier_sparse_copy


def _rank0(trace) -> dict:
    return {op.name: op for op in trace.ops if op.rank == 0}


def test_the_intra_node_stage_starts_with_the_lookup_when_the_pooling_writes_to_peers():
    """``hier_fused_forward`` (``stack.py`` item 8i; HugeCTR ``intra_forward``): the node's
    partial outputs go to the rail GPUs from the pooling kernel itself, so the intra-node stage
    does not wait for the lookup, and the reduction waits for both; off, it follows the
    lookup."""
    on = _rank0(_lowered({"hier_fused_forward": True})[0])
    e, rs, red = on["emb_fwd"], on["twrw_reduce_scatter"], on["hier_dst_reduction"]
    assert e.id not in rs.deps and set(rs.deps) <= set(e.deps)
    assert {e.id, rs.id} <= set(red.deps)
    off = _rank0(_lowered({"hier_fused_forward": False})[0])
    assert off["emb_fwd"].id in off["twrw_reduce_scatter"].deps
    bare = _rank0(_lowered({"hier_fused_forward": True, "hierarchical_reduction": False})[0])
    assert bare["emb_fwd"].id in bare["twrw_reduce_scatter"].deps


def test_a_fused_forward_shortens_the_multi_node_step():
    """At 2,048 samples per GPU the lookup and the intra-node stage are on the step's chain."""
    big = {**TWO_NODES, "batch_per_gpu": 2048}
    on = run_point({**big, "stack.hier_fused_forward": True}).summary["iteration_time_s"]
    off = run_point({**big, "stack.hier_fused_forward": False}).summary["iteration_time_s"]
    assert on < off


def test_hier_fused_forward_must_be_a_flag_and_survives_a_trace_file():
    from zionsim.base.errors import InputError
    from zionsim.dlrm.stack import stack_from_dict
    from zionsim.dlrm.trace_file import _stack_from_meta

    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "x", "hier_fused_forward": 1}, "x.yaml")
    assert "hier_fused_forward" in str(err.value.field)
    s = load_stack("hugectr", {"hier_fused_forward": True})
    assert _stack_from_meta(s.to_dict()).hier_fused_forward
