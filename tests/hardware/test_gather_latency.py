"""The latency bound of random-row gathers (compute.py assumption 6); the Blackwell generation."""

from dataclasses import replace

import pytest

from zionsim.base.errors import InputError
from zionsim.hardware import compute
from zionsim.hardware.topology import GpuSpec, load_topology


@pytest.fixture(scope="module")
def model():
    return compute.load_compute_model()


@pytest.fixture(scope="module")
def h100():
    return load_topology("dgx_h100", nodes=1).gpu


def _gather(gpu, model):
    return compute.gather_bandwidth_Bps(gpu, model)


def test_large_in_flight_reduces_to_stream(h100, model):
    """With (almost) unlimited bytes in flight the gather moves at the STREAM rate."""
    wide = replace(model, gather_bytes_in_flight=1e12)
    stream = model.for_gpu(h100).stream_eff * h100.hbm_bw_Bps
    assert _gather(h100, wide) == pytest.approx(stream, rel=1e-6)
    # ... and never above it, whatever is in flight
    for q in (1e3, 1e4, 1e5, 1e6):
        assert _gather(h100, replace(model, gather_bytes_in_flight=q)) < stream


def test_little_law_bound_when_little_in_flight(h100, model):
    """With few bytes in flight the gather is the latency bound, sm_count x Q / latency."""
    narrow = replace(model, gather_bytes_in_flight=64.0)
    arch = model.arch["hopper"]
    bound = compute.latency_bound_Bps(h100.sm_count or arch.sm_count, 64.0,
                                      h100.memory_latency_s or arch.memory_latency_s)  # fmt: skip
    assert _gather(h100, narrow) == pytest.approx(bound, rel=1e-3)


def test_monotone_in_hbm_bandwidth(h100, model):
    """More HBM bandwidth never slows a gather, but helps less than it helps a stream."""
    bws = [1e12, 2e12, 3.35e12, 4.8e12, 8e12, 16e12]
    got = [_gather(replace(h100, hbm_bw_Bps=bw), model) for bw in bws]
    assert got == sorted(got) and len(set(got)) == len(got)
    assert got[-1] / got[2] < bws[-1] / bws[2]


def test_more_sms_or_less_latency_never_slower(h100, model):
    gpu = replace(h100, sm_count=132, memory_latency_s=353.5e-9)
    base = _gather(gpu, model)
    assert base == pytest.approx(_gather(h100, model))  # the hopper defaults are H100 SXM's
    assert _gather(replace(gpu, sm_count=264), model) > base
    assert _gather(replace(gpu, memory_latency_s=200e-9), model) > base
    assert _gather(replace(gpu, memory_latency_s=700e-9), model) < base


def test_h100_reproduces_its_fitted_gather(h100, model):
    """The fit reproduces FBGEMM's H100 gather_along_first_dim (2646.4 GB/s), and the H200 and
    B200 gain less over H100 than their HBM bandwidth (4.8 and 7.672 TB/s over 3.35)."""
    assert _gather(h100, model) == pytest.approx(2646.4e9, rel=0.01)
    h200 = load_topology("dgx_h100", nodes=1, overrides=["gpu=h200"]).gpu
    b200 = load_topology("dgx_b200", nodes=1).gpu
    for gpu in (h200, b200):
        gain = _gather(gpu, model) / _gather(h100, model)
        assert 1.0 < gain < gpu.hbm_bw_Bps / h100.hbm_bw_Bps


def test_embedding_time_follows_the_gather_bound(h100, model):
    """The TBE forward slows down when the latency bound tightens."""
    args = (1e6, 512.0, 26, True, 26 * 512.0 * 1e4)
    fast = compute.embedding_forward_time_s(h100, *args, model=model)
    slow = compute.embedding_forward_time_s(replace(h100, sm_count=33), *args, model=model)
    assert slow > 1.5 * fast


def test_measured_gather_efficiency_replaces_the_bound(h100, model):
    """A topology's compute.gather_efficiency (measured) is used as is."""
    own = replace(h100, compute={"gather_eff": 0.5})
    assert compute.gather_bandwidth_Bps(own, model) == pytest.approx(0.5 * h100.hbm_bw_Bps)


@pytest.mark.parametrize("bad", [0, -4, 2.5, "many", True, 5000])
def test_bad_sm_count_is_an_input_error(bad):
    with pytest.raises(InputError, match="sm_count"):
        load_topology("dgx_h100", nodes=1, overrides=[f"gpu.sm_count={bad}"])


@pytest.mark.parametrize("bad", ["0 ns", "-300 ns", "300", "1 s"])
def test_bad_memory_latency_is_an_input_error(bad):
    with pytest.raises(InputError, match="memory_latency"):
        load_topology("dgx_h100", nodes=1, overrides=[f"gpu.memory_latency={bad}"])


def test_bad_sm_count_in_a_built_spec_is_an_input_error(h100, model):
    with pytest.raises(InputError, match="sm_count"):
        compute.gather_bandwidth_Bps(replace(h100, sm_count=-1), model)


def test_user_topology_without_the_fields_takes_the_architecture_default(model):
    gpu = GpuSpec("H100 SXM (mine)", {"bf16": 989e12}, 80e9, 3.35e12)
    assert gpu.sm_count == 0 and gpu.memory_latency_s == 0.0
    h100 = load_topology("dgx_h100", nodes=1).gpu
    assert compute.gather_bandwidth_Bps(gpu, model) == pytest.approx(
        compute.gather_bandwidth_Bps(h100, model)
    )


@pytest.mark.parametrize(
    "name, arch",
    [("B200", "blackwell"), ("NVIDIA B200 180GB", "blackwell"), ("GB200-B200-186GB", "blackwell"),
     ("b100-sxm", "blackwell"), ("GH200 480GB", "hopper"), ("H200-SXM5-141GB", "hopper")],
)  # fmt: skip
def test_blackwell_resolves_from_model_names(name, arch):
    gpu = GpuSpec(name, {"bf16": 1e15}, 80e9, 8e12)
    assert compute.architecture(gpu) == arch


def test_blackwell_presets(model):
    """B200 (and GB200, built on the b200 preset) run with the blackwell parameters: their own
    STREAM efficiency and GEMM curve, fitted on B200 kernel measurements."""
    for topo in ("dgx_b200", "gb200_nvl72"):
        gpu = load_topology(topo, nodes=1).gpu
        assert compute.architecture(gpu) == "blackwell" and gpu.sm_count == 148
        a = model.for_gpu(gpu)
        assert a.gemm == model.arch["blackwell"].gemm != model.arch["hopper"].gemm
        assert a.stream_eff == model.arch["blackwell"].stream_eff


def test_h200_has_its_own_stream_efficiency(model):
    """H200's STREAM triad, 4.15 of 4.8 TB/s (Azure ND H200 v5), not H100's fraction."""
    h200 = load_topology("dgx_h100", nodes=1, overrides=["gpu=h200"]).gpu
    assert model.for_gpu(h200).stream_eff == pytest.approx(4.15 / 4.8, abs=1e-3)
    assert compute.memory_time_s(h200, 4.15e9, model) == pytest.approx(1e-3, rel=0.01)


def test_gather_and_stream_kernel_cases_simulate():
    """The built-in gather and H200/B200 stream cases of validation/cases.yaml run (the gather
    kind, ``set:`` on memory kinds) and the calibrated ones reproduce their points."""
    from zionsim.measure import validate

    cases = [c for c in validate.load_cases() if c.kind in ("gather", "memory")]
    assert {"gather", "memory"} == {c.kind for c in cases}
    for c in cases:
        err = validate.simulate_case(c) / c.measured - 1.0
        assert abs(err) < (0.02 if c.calibrated else 0.10), c.id
