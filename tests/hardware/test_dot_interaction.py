"""DeepLearningExamples' custom dot interaction (``compute.dot_interaction_time_s``): the
kernel form a stack states, the CUDA-core FP32 kernel's shared-memory wavefronts on Volta and
the unchanged GEMM pricing of its tensor-core forms."""

import dataclasses

import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import default_plan
from zionsim.dlrm.stack import BARE, load_stack, stack_from_dict
from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict
from zionsim.dlrm.workload import load_workload, with_precision
from zionsim.hardware import compute
from zionsim.hardware.topology import load_topology

#: the MLPerf / DLE DLRM interaction: 26 embeddings + the bottom MLP output, 128 wide
F, D = 27, 128


@pytest.fixture(scope="module")
def gpus():
    return {n: load_topology(n).gpu for n in ("bigbasin", "dgx_a100")}


def test_wavefronts_follow_the_kernels_addressing():
    """Three features, rows 512 bytes apart (same banks): the 3 pairs (1,0), (2,0), (2,1) sit in
    one 8-thread group of a float4 load; rows {1, 2} and columns {0, 1} are two distinct
    addresses in one bank each, so 2 + 2 wavefronts per float4 step, 32 steps.  Backward: 4
    warps x 3 rows x 2 other rows x 2 conflict-free loads."""
    assert compute.dot_simt_wavefronts(3, 128, "fwd") == (2 + 2) * 32
    assert compute.dot_simt_wavefronts(3, 128, "bwd") == 4 * 3 * 2 * 2
    # rows 36 floats apart start in different 16-byte bank groups: no conflict
    assert compute.dot_simt_wavefronts(3, 36, "fwd") == (1 + 1) * 9
    # 3 floats wide: no float4 path, 32-bit loads of 32 threads, rows in distinct banks
    assert compute.dot_simt_wavefronts(3, 3, "fwd") == (1 + 1) * 3


def test_dlrm_interaction_forward_is_bank_conflict_bound():
    """The 27-feature forward: 351 pairs in 11 warp passes of 32 float4 steps; mostly 8 distinct
    columns (rows of the sample) per 8-thread group, so about 37 wavefronts a step instead of 8
    without conflicts."""
    fwd = compute.dot_simt_wavefronts(F, D, "fwd")
    assert fwd == 13024
    assert fwd / (11 * 32) == pytest.approx(37.0)
    assert compute.dot_simt_wavefronts(F, D, "bwd") == 4 * F * (F - 1) * 2


def test_volta_fp32_runs_the_cuda_core_kernel(gpus):
    """On V100 an FP32 (or TF32, which Volta runs as FP32) interaction of 8192 samples costs its
    shared-memory time (80 SMs x 128 B/clock at 1530 MHz), above the old one-GEMM price; the
    backward kernel is split over the lowering's two ops."""
    v100, m = gpus["bigbasin"], 8192 * F
    fwd = compute.dot_interaction_time_s(v100, m, F, D, "fp32", "dot_based_interact_fwd")
    launch = compute.launch_overhead_s(v100)
    expect = 8192 * 13024 / (80 * 1530e6)
    assert fwd - launch == pytest.approx(expect, rel=1e-9)
    assert fwd > 3 * compute.gemm_time_s(v100, m, F, D, "fp32")
    bwd = compute.dot_interaction_time_s(v100, m, F, D, "tf32", "dot_based_interact_bwd")
    assert 2 * (bwd - launch) == pytest.approx(8192 * 5616 / (80 * 1530e6), rel=1e-9)


TENSOR_CORE = [
    ("dgx_a100", "tf32"),
    ("dgx_a100", "fp32"),
    ("dgx_a100", "fp16"),
    ("bigbasin", "fp16"),
]


@pytest.mark.parametrize(("gpu", "dtype"), TENSOR_CORE)
def test_tensor_core_forms_keep_the_gemm_price(gpus, gpu, dtype):
    """FP16 inputs (WMMA FP16) and 32-bit inputs on a GPU with TF32 (WMMA TF32) keep the GEMM
    price of one GEMM over every sample's rows."""
    g, m = gpus[gpu], 8192 * F
    for kernel in compute.DOT_KERNELS:
        got = compute.dot_interaction_time_s(g, m, F, D, dtype, kernel)
        assert got == compute.gemm_time_s(g, m, F, D, dtype)


def test_unknown_kernel_and_missing_clock_are_input_errors(gpus, tmp_path):
    with pytest.raises(InputError, match="dot_based_interact_fwd"):
        compute.dot_interaction_time_s(gpus["bigbasin"], 27, F, D, "fp32", "cutlass")
    model = compute.load_compute_model()
    volta = dataclasses.replace(model.arch["volta"], sm_clock_Hz=0.0)
    bare = dataclasses.replace(model, arch={**model.arch, "volta": volta})
    with pytest.raises(InputError, match="sm_clock_mhz"):
        compute.dot_interaction_time_s(
            gpus["bigbasin"], 27, F, D, "fp32", "dot_based_interact_fwd", bare
        )


def _interaction_ops(stack):
    w = with_precision(load_workload("mlperf_dlrm", batch_per_gpu=256), {"dense": "fp32"})
    trace = lower(w, default_plan(w, 2), 2, stack=stack)
    return trace, [o for o in trace.ops if o.rank == 0 and o.name.startswith("interaction_")]


def test_stacks_state_the_interaction_kernel():
    """DLE's PyTorch and TF2 stacks (and SOK's benchmark) run dot_based_interact; the default is
    a GEMM, whose ops carry no kernel argument (traces as before)."""
    assert load_stack("nvidia_pytorch_dlrm").interaction_kernel == "dot_based_interact"
    assert load_stack("tensorflow_sok").interaction_kernel == "dot_based_interact"
    assert load_stack("torchrec").interaction_kernel == "gemm"
    _, plain = _interaction_ops(BARE)
    assert plain and all("kernel" not in o.args for o in plain)
    stack = dataclasses.replace(BARE, interaction_kernel="dot_based_interact")
    trace, ops = _interaction_ops(stack)
    assert [o.args["kernel"] for o in ops] == [
        "dot_based_interact_fwd",
        "dot_based_interact_bwd",
        "dot_based_interact_bwd",
    ]
    back = trace_from_dict(trace_to_dict(trace))
    assert [o.args for o in back.ops] == [o.args for o in trace.ops]


def test_bad_interaction_kernel_is_named(gpus):
    with pytest.raises(InputError, match="interaction_kernel"):
        stack_from_dict({"name": "x", "interaction_kernel": "bmm"})
    trace, _ = _interaction_ops(dataclasses.replace(BARE, interaction_kernel="dot_based_interact"))
    data = trace_to_dict(trace)
    op = next(o for o in data["ops"] if o["name"] == "interaction_fwd0")
    op["args"]["kernel"] = "cutlass"
    with pytest.raises(InputError, match="kernel"):
        trace_from_dict(data)
