"""Compute cost models: GEMM roofline, embedding lookups and updates, memory-bound kernels."""

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import zionsim
from zionsim.base.errors import InputError
from zionsim.hardware import compute
from zionsim.hardware.topology import load_topology

HARDWARE_CSV = Path(zionsim.__file__).parent / "data" / "reference" / "hardware.csv"
SIZES = [1, 16, 64, 256, 1024, 4096, 16384]


@pytest.fixture(scope="module")
def gpus():
    """A100 (ZionEX), H100 (DGX H100) and V100 (Big Basin) specs."""
    return {n: load_topology(n).gpu for n in ("zionex", "dgx_h100", "bigbasin")}


@pytest.fixture(scope="module")
def a100(gpus):
    """The ZionEX A100-SXM4-40GB."""
    return gpus["zionex"]


def test_architectures_of_builtins():
    """Every shipped GPU maps to its architecture."""
    expected = {"zionex": "ampere", "dgx_a100": "ampere", "dgx_h100": "hopper"}
    expected |= {"bigbasin": "volta", "zion": "volta"}
    for name, arch in expected.items():
        assert compute.architecture(load_topology(name).gpu) == arch


def test_gemm_efficiency_rises_and_saturates(gpus):
    """Efficiency never falls with size and never exceeds the fitted maximum."""
    model = compute.load_compute_model()
    for gpu in gpus.values():
        effs = [compute.gemm_efficiency(gpu, s, s, s, "fp16", model) for s in SIZES]
        assert effs == sorted(effs)
        assert 0 < effs[0] and effs[-1] <= model.for_gpu(gpu).gemm.eff_max


def test_fit_reproduces_a100_reference(a100):
    """The fitted model is within 15 % of every A100 cuBLASLt FP16 point of hardware.csv."""
    ref = pd.read_csv(HARDWARE_CSV)
    rows = ref[ref["item"].str.startswith("A100 cuBLASLt FP16 m=n=k=")]
    assert len(rows) == 4
    for item, tflops in zip(rows["item"], rows["value"], strict=True):
        s = int(re.search(r"m=n=k=(\d+)", item).group(1))
        got = compute.gemm_flops(s, s, s) / compute.gemm_time_s(a100, s, s, s, "fp16") / 1e12
        assert got == pytest.approx(tflops, rel=0.15)


def test_bigger_gemm_never_faster(gpus):
    """Growing any one dimension never shortens the GEMM, for every dtype."""
    for gpu in gpus.values():
        for dtype in compute.GEMM_DTYPES:
            for a, b in zip(SIZES, SIZES[1:], strict=False):
                t = compute.gemm_time_s(gpu, a, a, a, dtype)
                for shape in ((b, a, a), (a, b, a), (a, a, b)):
                    assert compute.gemm_time_s(gpu, *shape, dtype) >= t


def test_bf16_faster_than_fp32_for_large_gemms(a100):
    """Tensor cores: an 8192^3 BF16 GEMM on A100 is several times faster than FP32."""
    fp32 = compute.gemm_time_s(a100, 8192, 8192, 8192, "fp32")
    assert compute.gemm_time_s(a100, 8192, 8192, 8192, "bf16") < fp32 / 4


def test_memory_floor_dominates_skinny_gemm(a100):
    """A matrix-vector product (m=1) costs its bytes at STREAM bandwidth, not its FLOPs (the
    smooth maximum of assumption 4 adds well under 0.1 % this far from the ridge)."""
    arch = compute.load_compute_model().for_gpu(a100)
    nbytes = compute.gemm_bytes(1, 4096, 4096, "fp16")
    floor = arch.launch_s + nbytes / (a100.hbm_bw_Bps * arch.stream_eff)
    got = compute.gemm_time_s(a100, 1, 4096, 4096, "fp16")
    assert floor <= got <= floor * 1.001


def test_tf32_falls_back_to_fp32_rate(a100):
    """A GPU without a TF32 rate runs TF32 GEMMs at its FP32 rate."""
    no_tf32 = replace(a100, flops={k: v for k, v in a100.flops.items() if k != "tf32"})
    t = compute.gemm_time_s(no_tf32, 2048, 2048, 2048, "tf32")
    assert t == compute.gemm_time_s(no_tf32, 2048, 2048, 2048, "fp32")
    assert compute.gemm_time_s(a100, 2048, 2048, 2048, "tf32") < t


def test_memory_time_is_launch_plus_stream(gpus):
    """Memory-bound kernels: launch overhead plus bytes at STREAM efficiency."""
    for gpu in gpus.values():
        launch = compute.launch_overhead_s(gpu)
        assert compute.memory_time_s(gpu, 0) == launch
        assert 1e-6 <= launch <= 1e-5
        stream = compute.load_compute_model().for_gpu(gpu).stream_eff
        expected = launch + 1e9 / (gpu.hbm_bw_Bps * stream)
        assert compute.memory_time_s(gpu, 1e9) == pytest.approx(expected)


def test_small_rows_waste_bandwidth(a100):
    """Gather efficiency rises with row size and stays below the large-row figure."""
    effs = [compute.gather_efficiency(a100, b, None) for b in (4, 32, 64, 128, 256, 512, 4096)]
    assert effs == sorted(effs)
    assert effs[-1] < compute.load_compute_model().for_gpu(a100).gather_eff
    assert compute.gather_efficiency(a100, 33) < compute.gather_efficiency(a100, 32)


def test_embedding_time_linear_in_lookups(a100):
    """For large counts, doubling the lookups adds a constant amount of time."""
    t = [compute.embedding_forward_time_s(a100, n, 512, 8, True, 0.0) for n in (1e6, 2e6, 4e6)]
    assert t[2] - t[1] == pytest.approx(2 * (t[1] - t[0]))
    b = [
        compute.embedding_backward_time_s(a100, n, 512, 8, True, "rowwise_adagrad", 4)
        for n in (1e6, 2e6, 4e6)
    ]
    assert b[2] - b[1] == pytest.approx(2 * (b[1] - b[0]))


def _native_s(gpu, lookups, row, tables, optimizer, state, out, unique=None):
    """Seconds of the native path as the trace lowers it: per-table forward, the materialised
    gradient (a memory op of one kernel per table), then the separate optimizer pass."""
    grad = compute.embedding_gradient_bytes(lookups, row, out, 8)
    return (
        compute.embedding_forward_time_s(gpu, lookups, row, tables, False, out)
        + compute.memory_time_s(gpu, grad)
        + (tables - 1) * compute.launch_overhead_s(gpu)
        + compute.embedding_backward_time_s(
            gpu, lookups, row, tables, False, optimizer, state, unique_rows=unique
        )
    )


def _fused_s(gpu, lookups, row, tables, optimizer, state, out, unique=None):
    fwd = compute.embedding_forward_time_s(gpu, lookups, row, tables, True, out)
    return fwd + compute.embedding_backward_time_s(
        gpu, lookups, row, tables, True, optimizer, state, unique_rows=unique
    )


@pytest.mark.parametrize("optimizer", compute.OPTIMIZERS)
def test_fused_faster_than_native(gpus, optimizer):
    """TBE (one forward kernel, the optimizer inside one backward, no gradient written) beats
    per-table nn.EmbeddingBag + a materialised gradient + a torch.optim pass from 4 tables up,
    for every optimizer and size; the forward alone is never slower fused."""
    for gpu in gpus.values():
        for tables in (4, 8, 100):
            for lookups in (1e3, 1e5, 1e7):
                args = (gpu, lookups, 256, tables, optimizer, 512, lookups * 64, lookups / 3)
                assert _fused_s(*args) < _native_s(*args)
                fwd = [
                    compute.embedding_forward_time_s(gpu, lookups, 256, tables, f, 1e6)
                    for f in (True, False)
                ]
                assert fwd[0] <= fwd[1]


def test_one_small_sgd_table_is_not_faster_fused(a100):
    """The crossover, as the kernels count it: one table of 1,000 lookups under SGD is 4 native
    kernels (forward, index_select, the lr-scaled copy, index_add_) against TBE's forward and 8
    backward kernels (index sort setup included); Adagrad's coalesce and elementwise kernels keep
    fused ahead."""
    args = (a100, 1e3, 256, 1, "sgd", 0, 64e3)
    assert _native_s(*args) < _fused_s(*args)
    args = (a100, 1e3, 256, 1, "adagrad", 1024, 64e3)
    assert _fused_s(*args) < _native_s(*args)


def test_native_per_table_work_scales_with_tables(a100):
    """At fixed lookups, each extra table adds the native path's per-table kernels (forward 1,
    gradient 1, the optimizer's: SGD 2 (the lr-scaled copy and index_add_), Adagrad coalesce + 8,
    Adam coalesce + 18) and nothing to
    the fused path, whose kernel count does not depend on the tables."""
    launch = compute.launch_overhead_s(a100)
    coalesce = compute.load_compute_model().coalesce_kernels
    per_table = {"sgd": 2, "adagrad": coalesce + 8, "rowwise_adagrad": coalesce + 8}
    per_table["adam"] = coalesce + 18
    for opt, kernels in per_table.items():
        t = [_native_s(a100, 1e5, 256, n, opt, 512, 1e6, 3e4) for n in (10, 20, 40)]
        assert t[1] - t[0] == pytest.approx(10 * (2 + kernels) * launch)
        assert t[2] - t[1] == pytest.approx(20 * (2 + kernels) * launch)
        f = [_fused_s(a100, 1e5, 256, n, opt, 512, 1e6, 3e4) for n in (10, 20, 40)]
        assert f[0] == f[1] == f[2]


def test_native_sgd_updates_every_lookup_and_adagrad_each_row(a100):
    """SGD adds the uncoalesced gradient (index_add_, duplicates not merged): the distinct-row
    count does not change it; Adagrad coalesces first, so fewer distinct rows cost less."""
    sgd = [
        compute.embedding_optimizer_time_s(a100, 1e6, 256, 4, "sgd", 0, unique_rows=u)
        for u in (1e4, 1e6)
    ]
    ada = [
        compute.embedding_optimizer_time_s(a100, 1e6, 256, 4, "adagrad", 1024, unique_rows=u)
        for u in (1e4, 1e6)
    ]
    assert sgd[0] == sgd[1] and ada[0] < ada[1]


def test_native_gradient_bytes_by_hand():
    """index_select(0, offset2bag): 8 B index + a 512 B row written per lookup, the bags'
    output gradients read once: 1000 lookups in 250 bags of 512 B."""
    assert compute.embedding_gradient_bytes(1000, 512, 250 * 512, 8) == 1000 * 520 + 128000


def test_backward_not_faster_than_forward(gpus):
    """The update reads and writes every row it gathered: backward >= forward."""
    for gpu in gpus.values():
        for row in (16, 128, 512, 2048):
            for opt in compute.OPTIMIZERS:
                fwd = compute.embedding_forward_time_s(gpu, 1e6, row, 4, True, 1e5 * row)
                assert compute.embedding_backward_time_s(gpu, 1e6, row, 4, True, opt, 4) >= fwd


def test_sgd_keeps_no_state(a100):
    """SGD moves no optimizer state; row-wise Adagrad pays its 4-byte momentum."""
    sgd = [compute.embedding_backward_time_s(a100, 1e6, 512, 1, True, "sgd", s) for s in (0, 4)]
    assert sgd[0] == sgd[1]
    assert compute.embedding_backward_time_s(a100, 1e6, 512, 1, True, "rowwise_adagrad", 4) > sgd[0]


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda g: compute.gemm_time_s(g, 8, 8, 8, "fp64"), "dtype"),
        (lambda g: compute.gemm_time_s(g, 0, 8, 8, "fp16"), "m"),
        (lambda g: compute.embedding_backward_time_s(g, 1, 64, 1, True, "lamb", 4), "optimizer"),
        (lambda g: compute.embedding_forward_time_s(g, -1, 64, 1, True, 0), "lookups"),
        (lambda g: compute.embedding_forward_time_s(g, 1, 64, 0, True, 0), "tables"),
        (lambda g: compute.gemm_time_s(replace(g, model="MI250X"), 8, 8, 8, "fp16"), "gpu.model"),
        (
            lambda g: compute.gemm_time_s(replace(g, flops={"fp32": 1e12}), 8, 8, 8, "fp16"),
            "gpu.flops.fp16",
        ),
    ],
)
def test_bad_input_names_the_field(a100, call, field):
    """Unknown dtype, optimizer or GPU family, and bad sizes, raise InputError naming the field."""
    with pytest.raises(InputError) as err:
        call(a100)
    assert err.value.field == field


def test_local_reduce_reads_the_gradient_at_its_width_and_streams_its_buffer(gpus):
    """HugeCTR's local reduce (``grad_bytes``): each lookup's gradient is one random access of
    ``grad_bytes`` (not of the row), and each distinct row adds ``2 x grad_bytes`` streamed (the
    reduced gradient written, then read by the update); the row and state updates are as before.
    """
    h100 = gpus["dgx_h100"]
    m = compute.load_compute_model()
    a = m.for_gpu(h100)
    lookups, rows, row, state, grad = 1e6, 3e5, 512.0, 512.0, 256.0
    base = compute.embedding_backward_time_s(h100, lookups, row, 4, True, "adagrad", state, m, rows)
    got = compute.embedding_backward_time_s(
        h100, lookups, row, 4, True, "adagrad", state, m, rows, grad_bytes=grad
    )
    acc = compute.access_bytes
    scattered = lookups * acc(grad, m) + rows * (2 * acc(row, m) + 2 * acc(state, m))
    streamed = lookups * m.backward_index_bytes + rows * 2 * grad
    want = m.backward_kernels * a.launch_s
    want += (scattered / a.gather_eff + streamed / a.stream_eff) / h100.hbm_bw_Bps
    assert got == pytest.approx(want, rel=1e-12)
    # an FP16 gradient of an FP32 row saves more random bytes than its buffer streams
    assert got < base
    no_reuse = compute.embedding_backward_time_s(
        h100, lookups, row, 4, True, "adagrad", state, m, lookups, grad_bytes=row
    )
    assert no_reuse > compute.embedding_backward_time_s(
        h100, lookups, row, 4, True, "adagrad", state, m, lookups
    )
    with pytest.raises(InputError) as err:
        compute.embedding_backward_time_s(h100, 1, 64, 1, True, "sgd", 0, m, None, grad_bytes=0)
    assert err.value.field == "grad_bytes"
