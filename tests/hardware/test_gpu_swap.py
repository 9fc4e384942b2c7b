"""GPU swaps at equal compute (issue 25, round 9): what the compute model lets change when only
the memory changes (H100 SXM -> H200), and where a HugeCTR DCNv2 step's simulated gain comes from.
Physics properties, not points: each fails if a later change breaks the invariant."""

import pytest

from zionsim.hardware import compute
from zionsim.hardware.topology import load_topology


@pytest.fixture(scope="module")
def model():
    return compute.load_compute_model()


@pytest.fixture(scope="module")
def gpus():
    return {
        "h100": load_topology("dgx_h100", nodes=1).gpu,
        "h200": load_topology("dgx_h100", nodes=1, overrides=["gpu=h200"]).gpu,
    }


def _sms_latency(gpu, model):
    """The SM count and memory latency the model uses for ``gpu`` (its own, else its
    architecture's: dgx_h100 states none and takes Hopper's)."""
    a = model.for_gpu(gpu)
    return gpu.sm_count or a.sm_count, gpu.memory_latency_s or a.memory_latency_s


def test_h200_is_h100_compute_with_more_memory(gpus, model):
    """The spec facts the swap rests on: the same SMs, latency and peak FLOP/s, more HBM."""
    h100, h200 = gpus["h100"], gpus["h200"]
    assert _sms_latency(h200, model) == _sms_latency(h100, model)
    assert _sms_latency(h100, model)[0] == 132
    assert all(h200.flops[d] == v for d, v in h100.flops.items())
    assert h200.hbm_bw_Bps / h100.hbm_bw_Bps == pytest.approx(4800 / 3350)


def test_gemms_do_not_gain_from_memory_alone(gpus, model):
    """A compute-bound GEMM of the DCNv2 top MLP takes the same time on both (plain roofline on
    Hopper, math bound)."""
    shape = (6912, 1024, 1024)
    t100 = compute.gemm_time_s(gpus["h100"], *shape, "fp16", model)
    t200 = compute.gemm_time_s(gpus["h200"], *shape, "fp16", model)
    assert t200 == pytest.approx(t100, rel=1e-12)


def test_gather_gains_less_than_stream_and_stream_less_than_peak(gpus, model):
    """Same SMs and latency: the latency bound of a random-row gather does not move, so the
    gather's gain is below the streams' gain, which is at most the HBM peak ratio (H200's
    STREAM fraction, 4.15/4.8, is below H100's, 2.97/3.35)."""
    h100, h200 = gpus["h100"], gpus["h200"]
    peak = h200.hbm_bw_Bps / h100.hbm_bw_Bps
    stream = (model.for_gpu(h200).stream_eff * h200.hbm_bw_Bps) / (
        model.for_gpu(h100).stream_eff * h100.hbm_bw_Bps
    )
    gather = compute.gather_bandwidth_Bps(h200, model) / compute.gather_bandwidth_Bps(h100, model)
    assert 1.0 < gather < stream < peak
    sms, latency = _sms_latency(h100, model)
    bound = compute.latency_bound_Bps(sms, model.gather_bytes_in_flight, latency)
    assert compute.gather_bandwidth_Bps(h200, model) < bound


def test_embedding_gain_between_gather_and_stream_gain(gpus, model):
    """A fused lookup mixes gathered rows and streamed indices/outputs: its H100 -> H200 speed-up
    lies between the two (launch overhead aside)."""
    h100, h200 = gpus["h100"], gpus["h200"]
    args = (1.5e6, 512.0, 26, True, 6912 * 26 * 256.0)
    ratio = compute.embedding_forward_time_s(
        h100, *args, model=model
    ) / compute.embedding_forward_time_s(h200, *args, model=model)
    gather = compute.gather_bandwidth_Bps(h200, model) / compute.gather_bandwidth_Bps(h100, model)
    stream = (
        model.for_gpu(h200).stream_eff
        * h200.hbm_bw_Bps
        / (model.for_gpu(h100).stream_eff * h100.hbm_bw_Bps)
    )
    assert gather * 0.99 < ratio < stream


@pytest.fixture(scope="module")
def busy():
    """Busy seconds per category of the HugeCTR DCNv2 single-node case (h200x8_dcnv2_hugectr_v40's
    options) on dgx_h100 with each GPU."""
    from zionsim.sim.run import run_point

    out = {}
    for gpu in ("h100", "h200"):
        options = {
            "topology": "dgx_h100",
            "nodes": 1,
            "workload": "mlperf_dlrm_dcnv2",
            "global_batch": 55296,
            "stack": "hugectr",
            "topology.gpu": gpu,
            "stack.planner.mem_comm_bw_ratio.auto": 11,
        }
        out[gpu] = run_point(options).summary["busy_s"]
    return out


def test_swap_moves_only_memory_bound_work(busy):
    """H100 -> H200 in the HugeCTR DCNv2 step: GEMM, NVLink collective and fixed per-step time
    do not change (same plan, same compute, same NVLink); every memory-bound category gains,
    and none by more than the HBM peak ratio."""
    h100, h200 = busy["h100"], busy["h200"]
    # busy time includes the interference slowdown of kernels that start under NCCL kernels,
    # which lasts as long as they overlap (stack.slowed_s): equal within that, not exactly
    for c in ("gemm", "all_to_all", "all_reduce", "reduce_scatter", "all_gather", "framework"):
        assert h200[c] == pytest.approx(h100[c], rel=0.01), c
    for c in ("embedding", "optimizer"):
        assert h100[c] / 4800 * 3350 < h200[c] < h100[c], c
    # the interaction holds GEMMs (unchanged) and element-wise kernels (faster)
    assert h200["interaction"] < h100["interaction"]
