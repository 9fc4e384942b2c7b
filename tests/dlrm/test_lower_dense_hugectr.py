"""Issue 25 (h25x): HugeCTR's dense kernels as its source runs them: the concat and
MultiCrossLayer element-wise kernels of a DCN (``dcn_kernels: multicross``) and the dense
update with FP32 master weights (``dense_master_weights``)."""

from __future__ import annotations

import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.lower_dense import dense_update_bytes, multicross_bytes
from zionsim.dlrm.stack import load_stack
from zionsim.dlrm.workload import load_workload
from zionsim.sim.run import run_point

B = 256
BASE = {
    "topology": "dgx_h100",
    "nodes": 1,
    "gpus_per_node": 4,
    "workload": "mlperf_dlrm_dcnv2",
    "batch_per_gpu": B,
    "stack": "hugectr",
    "iterations": 2,
    "warmup": 1,
}


def _rank0(options: dict) -> list:
    return [op for op in run_point(options).trace.ops if op.rank == 0]


def _width() -> int:
    return load_workload("mlperf_dlrm_dcnv2").interaction_input_width


def test_multicross_bytes_follow_the_kernels():
    """Forward: 2 concat copies, 3 activations for the first layer's x0 .* h + x0, 4 after;
    backward: zeroed accumulator, 6 per layer's fused multiply/FMA, 3 for the final sum, 2 for
    the concat's split."""
    act = 10 * 20 * 2
    got = multicross_bytes(10, 20, 3, 2)
    assert got["fwd_concat"] == 2 * act
    assert [got[f"fwd_l{i}_mul"] for i in range(3)] == [3 * act, 4 * act, 4 * act]
    assert got["bwd_zero"] == act and got["bwd_sum"] == 3 * act and got["bwd_split"] == 2 * act
    assert all(got[f"bwd_l{i}_mul"] == 6 * act for i in range(3))
    fwd = sum(v for k, v in got.items() if k.startswith("fwd"))
    bwd = sum(v for k, v in got.items() if k.startswith("bwd"))
    assert (fwd, bwd) == (13 * act, 24 * act)  # 4L + 1 and 6L + 6 activations


def test_hugectr_stack_runs_multicross_and_master_weights():
    s = load_stack("hugectr")
    assert s.dcn_kernels == "multicross" and s.dense_master_weights
    t = load_stack("torchrec")
    assert t.dcn_kernels == "generic" and not t.dense_master_weights


def _interaction_memory(ops) -> dict:
    return {op.name: op.args for op in ops if op.category == "interaction" and op.kind == "memory"}


def test_lowered_multicross_moves_the_bytes_of_its_kernels():
    ops = _rank0(BASE)
    mem = _interaction_memory(ops)
    want = multicross_bytes(B, _width(), 3, 2)  # FP16 under HugeCTR's mixed precision
    for key, nbytes in want.items():
        assert mem[f"interaction_{key}"]["nbytes"] == pytest.approx(nbytes)
    assert mem["interaction_fwd_concat"]["launches"] == 2
    assert mem["interaction_bwd_split"]["launches"] == 2


def test_generic_dcn_is_unchanged_and_moves_less():
    """The generic form: per layer 3 activations forward, 6 backward, no concat copies."""
    ops = _rank0({**BASE, "stack.dcn_kernels": "generic"})
    mem = _interaction_memory(ops)
    act = B * _width() * 2
    dcn = sum(a["nbytes"] for n, a in mem.items() if n.endswith("_mul"))
    assert dcn == pytest.approx(27 * act)
    assert not any("concat" in n for n in mem)
    hugectr = sum(a["nbytes"] for a in _interaction_memory(_rank0(BASE)).values())
    assert hugectr > dcn + 9 * act


def test_multicross_gemms_keep_the_flops_and_run_after_the_fused_kernel():
    """Two GEMMs a layer forward, four backward (dH, dV, dU, dY), each of B x w x rank FLOPs;
    the backward's fused multiply/FMA kernel of a layer comes before that layer's GEMMs."""
    ops = _rank0(BASE)
    w, rank = _width(), 512
    gemms = [op for op in ops if op.category == "interaction" and op.kind == "gemm"]
    fwd = [op for op in gemms if op.name.startswith("interaction_fwd")]
    bwd = [op for op in gemms if op.name.startswith("interaction_bwd")]
    assert (len(fwd), len(bwd)) == (6, 12)
    for op in gemms:
        a = op.args
        assert a["m"] * a["n"] * a["k"] == B * w * rank
    ids = {op.name: op.id for op in ops}
    for layer in range(3):
        first = min(ids[f"interaction_bwd_l{layer}_{g}"] for g in ("v0", "w0", "v1", "w1"))
        assert ids[f"interaction_bwd_l{layer}_mul"] < first
    dv = next(op for op in bwd if op.name == "interaction_bwd_l0_w0").args
    assert (dv["m"], dv["n"], dv["k"]) == (rank, w, B)  # dV = XU^T S0


def test_dense_update_bytes():
    """Generic Adagrad: FP32 weight, gradient and accumulator, 20 B per parameter.  Master
    weights under FP16: 2 (zeroed wgrad) + 6 (FP32 read, FP16 copy) at the start, and the
    update 4 + 2 + 4 + 4 + 4; SGD writes the copy in its update; FP32 zeroes 4 B of wgrad."""
    assert dense_update_bytes(10, "adagrad", "fp32", False) == (0.0, 200.0)
    assert dense_update_bytes(10, "adagrad", "fp16", True) == (80.0, 180.0)
    assert dense_update_bytes(10, "sgd", "fp16", True) == (20.0, 120.0)
    assert dense_update_bytes(10, "adagrad", "fp32", True) == (40.0, 200.0)
    assert dense_update_bytes(10, "adam", "bf16", True) == (80.0, 26 * 10.0)


def test_lowered_dense_update_under_master_weights():
    params = load_workload("mlperf_dlrm_dcnv2").dense_params
    ops = {op.name: op for op in _rank0(BASE)}
    cast = ops["dense_weight_cast"]
    assert cast.args["nbytes"] == pytest.approx(8.0 * params) and cast.args["launches"] == 2
    assert ops["dense_opt"].args["nbytes"] == pytest.approx(18.0 * params)
    assert cast.id < ops["bottom_fwd0"].id and cast.id in ops["bottom_fwd0"].deps
    plain = {op.name: op for op in _rank0({**BASE, "stack.dense_master_weights": False})}
    assert "dense_weight_cast" not in plain
    assert plain["dense_opt"].args["nbytes"] == pytest.approx(20.0 * params)


@pytest.mark.parametrize(
    ("key", "value"), [("dcn_kernels", "fused"), ("dense_master_weights", "maybe")]
)
def test_bad_dense_kernel_keys_are_input_errors(key, value):
    with pytest.raises(InputError) as err:
        load_stack("hugectr", overrides=[f"{key}={value}"])
    assert key in str(err.value)
