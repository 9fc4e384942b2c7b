"""Refit the GEMM efficiency curves, the embedding access overhead and the gather latency bound
in compute_model.yaml.

    python tools/calibrate_compute.py      # prints the fits, rewrites the `fitted:` block

GEMM, per architecture: ``eff = eff_max * x / (1 + x)``, ``x = (2mnk / (peak * half_time))^a``,
inside the full ``gemm_time_s`` (launch and memory floor included); ``half_time`` and ``a``
minimise the squared log error of the time over square FP16/BF16 GEMMs.  ``a`` is bounded by 1:
with few output tiles, efficiency grows with the tiles in flight (~mn), not faster than the work.
An unbounded fit of the H100 points (whose 1024^3 time, ~12 us, is close to an eager PyTorch
dispatch) takes ``a`` ~ 3 and makes small GEMMs slower on H100 than on A100.

* ampere: the four "A100 cuBLASLt FP16 m=n=k" rows of zionsim/data/reference/hardware.csv
  (Azure AI-benchmarking-guide, ND_A100_v4) on `dgx_a100`'s GPU; ``eff_max`` = the row
  "A100 BF16 matmul maximum achievable" / 312 TFLOP/s (stas00/ml-engineering).
* hopper: ``eff_max`` = the row "H100 BF16 matmul maximum achievable" / 989 TFLOP/s; sizes from
  zzc0721/torch-performance-test-data issue 79 (H100 80GB HBM3, torch.matmul BF16) on
  `dgx_h100`'s GPU.
* volta: no maximum-achievable figure, so ``eff_max`` is fitted too; sizes from
  zzc0721/torch-performance-test-data issue 140 (Tesla V100-SXM2-16GB, torch.matmul FP16) on
  `bigbasin`'s GPU (same 125 TFLOP/s and 900 GB/s as the 16 GB part).

* blackwell: ``eff_max`` fitted too; pytorch/ao PR 2427, benchmarks/float8/bench_matmul.py on an
  NVIDIA B200 (`dgx_b200`'s GPU), torch.bfloat16 square matmuls 1024-8192 (0.19-0.67 of the
  2.25 PFLOP/s peak; 0.63-0.65 from 4096 up).  Kernel measurements characterise the hardware;
  no end-to-end H200/Blackwell run is fitted.  Its knee runs to the lower bound (0.01 us): above
  the 4 us launch the measured efficiency is flat (0.19 of peak at 1024^3 is the launch;
  Hopper's knee, 3.7 us, would make it 0.09), so the curve is a plateau at ``eff_max``.

GEMM per dtype (compute.py assumption 2): a dtype whose math differs from the FP16/BF16 tensor
cores (CUDA-core FP32 SGEMM; TF32 tensor cores) gets its own curve where public measurements of
it exist on the architecture's GPU, from zionsim/data/reference/gemm_kernels_dtype.csv; every
other (architecture, dtype) keeps the architecture's curve:

* volta fp32 (also what ``tf32`` runs as on Volta): DeepBench's V100 FP32 training GEMMs
  (``deepbench_v100`` rows, DGX-1) whose three dimensions are all >= 128 (training shapes; the
  16-64 wide rows are inference and RNN-step shapes, latency-bound), ``eff_max`` fitted.  The
  square torch.matmul FP32 points of torchperf_140 stay held out (kernel case
  ``v100_gemm_fp32_8192``).
* ampere fp32: the cuBLAS column of triton-lang/triton issue 2491 (A100 80GB PCIe, CUDA-core FP32,
  the same 19.5 TFLOP/s FP32 peak as the SXM part), ``eff_max`` fitted.
* hopper fp32 and tf32: the FP32 and TF32 rows of torchperf_79 (H100 80GB HBM3 SXM), ``eff_max``
  fitted.
* ampere tf32: no public TF32 GEMM sweep of an A100 SXM was found, so Ampere TF32 keeps the
  Ampere curve at the TF32 peak.  Printed as a check, not written: the same-run TF32 / FP16
  efficiency ratio (each over its own peak) of torchperf_108 (A100 PCIe, a 250 W part) is 0.85
  and 0.90 at 2048 and 4096 but 0.99 at 8192 and 10240, where its power cap throttles both, and
  the H100 SXM's (torchperf_79, TF32 / BF16) is 0.93-1.05, about 1.  A ratio that moves with the
  power cap is not taken as a property of the SXM part.

GEMM math/memory overlap (compute.py assumption 4): the exponent ``q`` of the smooth maximum of
math and memory time on the architectures marked ``gemm_overlap`` (Volta, Ampere, Blackwell),
fitted (squared log error of time, the curves held) on DeepBench's V100 FP16 training GEMMs
(``deepbench_v100`` FP16 rows with every dimension >= 128: 76 shapes, many of them a tall
matrix times a narrow one, near the V100's ridge of ~160 FLOP/B; no curve is fitted on them).
The curves and ``q`` are fitted in turn, twice, from the plain roofline (square GEMMs far from
the ridge hardly move ``q``).  The A100 skinny GEMM of Azure's benchmark (kernel case
``a100_gemm_fp16_802816x192x768``) and two B200 skinny GEMMs (``b200_gemm_*``) are held out to
check it.  The FP32 rows cannot inform it: on a V100 every FP32 training shape is far above
the ridge (~20 FLOP/B).

Embedding access overhead: the per-access bytes ``c`` such that the time per useful byte of
``ceil32(b) + c`` over ``b`` reproduces TorchRec's planner penalties for FP32 rows (relative to
128-dim = 512-byte rows): 1.15 at 64 dims (256 B), 1.75 at 32 dims (128 B).

Gather latency bound (compute.py assumption 6): ``smooth_min(stream, sm_count x Q / latency, p)``,
fitted on H100 SXM (`dgx_h100`'s GPU: 132 SMs, 353.5 ns, STREAM 0.887 x 3350 GB/s) only:

* ``p``: pegainfer-project/pegainfer PR 488 / issue 484, the same bf16 embedding gather of
  10000 rows of 5 KB on H100 with 2-byte and with 16-byte loads and stores: 904 and 2644 GB/s.
  Assumption: the two keep the same loads outstanding per thread, so the 2-byte kernel has 1/8
  of the 16-byte kernel's bytes in flight; ``p`` and that kernel's ``Q`` reproduce both points.
* ``Q``: the FBGEMM gather_along_first_dim peak on H100 SXM5, 2646.4 GB/s (pytorch/FBGEMM PR
  3993): the bytes in flight per SM of a vectorised production gather, with ``p`` fixed.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zionsim.hardware import compute  # noqa: E402
from zionsim.hardware.topology import load_topology  # noqa: E402
from zionsim.measure import fitting  # noqa: E402

MODEL_PATH = ROOT / "zionsim/data/compute_model.yaml"
HARDWARE_CSV = ROOT / "zionsim/data/reference/hardware.csv"
TOPOLOGY = {
    "volta": "bigbasin",
    "ampere": "dgx_a100",
    "hopper": "dgx_h100",
    "blackwell": "dgx_b200",
}
#: (m=n=k, TFLOP/s) measured outside hardware.csv, with their sources (see the docstring)
EXTRA_POINTS = {
    "hopper": ("bf16", [(1024, 176.62), (2048, 676.59), (4096, 788.72), (8192, 797.51)]),
    "volta": ("fp16", [(1024, 57.30), (2048, 78.23), (4096, 95.73), (8192, 97.36)]),
    "blackwell": (
        "bf16",
        [(1024, 423.0), (1536, 921.0), (2048, 1130.0), (3072, 1510.0), (4096, 1410.0),
         (6144, 1450.0), (8192, 1420.0)],
    ),
}  # fmt: skip
#: H100 gathers (GB/s): the 2-byte and 16-byte embedding gathers of pegainfer PR 488 (102.4 MB
#: read and written in 113.25 and 38.73 us) and FBGEMM's gather_along_first_dim (PR 3993)
GATHER_SCALAR_GBPS = 102.4e6 / 113.25e-6 / 1e9
GATHER_VECTOR_GBPS = 102.4e6 / 38.73e-6 / 1e9
GATHER_FBGEMM_GBPS = 2646.431
#: bytes in flight of the 16-byte kernel over the 2-byte one (assumption: the same loads
#: outstanding per thread)
GATHER_VECTOR_RATIO = 8.0
#: provenance written above the fitted values
FIT_NOTES = {
    "ampere": "hardware.csv 'A100 cuBLASLt FP16 m=n=k' rows; eff_max = A100 max achievable/312",
    "hopper": "zzc0721/torch-performance-test-data#79 BF16; eff_max = H100 max achievable/989",
    "volta": "zzc0721/torch-performance-test-data#140 FP16 (V100-SXM2); eff_max fitted",
    "blackwell": "pytorch/ao#2427 BF16 torch.matmul on B200 (kernel data); eff_max fitted",
}
#: not fitted, printed as a check after the per-dtype fits: torchperf_140's V100 FP32 squares
CROSS_CHECK = {
    "volta": ("fp32", [(1024, 10.56), (2048, 12.71), (4096, 13.85), (8192, 14.38)]),
}
DTYPE_CSV = ROOT / "zionsim/data/reference/gemm_kernels_dtype.csv"
#: per-dtype curves fitted on their own measurements: (arch, dtype) -> (csv source, csv gpu)
DTYPE_FITS = {
    ("volta", "fp32"): ("deepbench_v100", "V100-SXM2"),
    ("ampere", "fp32"): ("triton_2491", "A100-PCIE-80GB"),
    ("hopper", "fp32"): ("torchperf_79", "H100-SXM5"),
    ("hopper", "tf32"): ("torchperf_79", "H100-SXM5"),
}
#: DeepBench rows fitted: training shapes, every dimension at least this
DEEPBENCH_MIN_DIM = 128
#: a printed check, not fitted: the same-run TF32 / FP16 efficiency ratio of torchperf_108
#: (A100 PCIe), sizes from this up, over the A100's TF32 and FP16 peaks (hardware.csv)
TF32_RATIO_SOURCE, TF32_RATIO_MIN_SIZE = "torchperf_108", 2048
A100_PEAK_TFLOPS = {"tf32": 156.0, "fp16": 312.0}
DTYPE_NOTES = {
    ("volta", "fp32"): "DeepBench V100 FP32 GEMMs, all dims >= 128; eff_max fitted",
    ("ampere", "fp32"): "triton-lang/triton#2491 cuBLAS FP32 (A100 PCIe); eff_max fitted",
    ("hopper", "fp32"): "torchperf_79 FP32 (H100 SXM); eff_max fitted",
    ("hopper", "tf32"): "torchperf_79 TF32 (H100 SXM); eff_max fitted",
}
#: the rows the overlap exponent is fitted on: (csv source, csv gpu, dtype); DeepBench rows with
#: every dimension at least DEEPBENCH_MIN_DIM
OVERLAP_ROWS = ("deepbench_v100", "V100-SXM2", "fp16")
#: rounds of (curves, overlap exponent) fits
OVERLAP_ROUNDS = 2
#: TorchRec planner penalties: row bytes (FP32 rows) -> time per byte relative to 512-byte rows
TORCHREC_PENALTY = {512: 1.0, 256: 1.15, 128: 1.75}


def reference_points() -> dict[str, tuple[str, list[tuple[int, float]], float | None]]:
    """Per architecture: (dtype, [(size, TFLOP/s)], eff_max or None when it is fitted)."""
    ref = pd.read_csv(HARDWARE_CSV)
    a100 = ref[ref["item"].str.startswith("A100 cuBLASLt FP16 m=n=k=")]
    sizes = [int(re.search(r"m=n=k=(\d+)", s).group(1)) for s in a100["item"]]

    def value(prefix: str) -> float:
        return float(ref.loc[ref["item"].str.startswith(prefix), "value"].iloc[0])

    return {
        "ampere": ("fp16", list(zip(sizes, a100["value"], strict=True)), value("A100 BF16") / 312),
        "hopper": (*EXTRA_POINTS["hopper"], value("H100 BF16 matmul") / 989),
        "volta": (*EXTRA_POINTS["volta"], None),
        "blackwell": (*EXTRA_POINTS["blackwell"], None),
    }


def measured_tflops(model, gpu, dtype: str, size: int) -> float:
    """TFLOP/s the model gives a square GEMM of ``size``."""
    return (
        compute.gemm_flops(size, size, size)
        / compute.gemm_time_s(gpu, size, size, size, dtype, model)
        / 1e12
    )


def fit_gemm(model, arch: str, dtype: str, points, eff_max: float | None):
    """The GemmFit of ``arch`` minimising squared log error of time over square ``points``."""
    gpu = load_topology(TOPOLOGY[arch]).gpu
    timed = [
        (s, s, s, dtype, compute.gemm_flops(s, s, s) / (tflops * 1e12)) for s, tflops in points
    ]
    return fitting.fit_gemm(gpu, model, timed, eff_max), gpu


def dtype_points(source: str, gpu: str, dtype: str) -> list[tuple[int, int, int, str, float]]:
    """``(m, n, k, dtype, time_s)`` rows of gemm_kernels_dtype.csv fitted for one curve."""
    ref = pd.read_csv(DTYPE_CSV)
    rows = ref[(ref["source"] == source) & (ref["gpu"] == gpu) & (ref["dtype"] == dtype)]
    if source == "deepbench_v100":
        rows = rows[rows[["m", "n", "k"]].min(axis=1) >= DEEPBENCH_MIN_DIM]
    return [
        (int(r.m), int(r.n), int(r.k), dtype, float(r.time_ms) * 1e-3) for r in rows.itertuples()
    ]


def tf32_ratio() -> float:
    """Geometric mean of (TF32 / its peak) / (FP16 / its peak) over the same-run square sizes of
    torchperf_108 from TF32_RATIO_MIN_SIZE up."""
    ref = pd.read_csv(DTYPE_CSV)
    rows = ref[(ref["source"] == TF32_RATIO_SOURCE) & (ref["m"] >= TF32_RATIO_MIN_SIZE)]
    eff = {
        dt: rows[rows["dtype"] == dt].set_index("m")["tflops"] / A100_PEAK_TFLOPS[dt]
        for dt in ("tf32", "fp16")
    }
    ratios = (eff["tf32"] / eff["fp16"]).dropna()
    return float(math.exp(sum(math.log(r) for r in ratios) / len(ratios)))


def fit_dtype_gemms(model) -> tuple[object, list[str]]:
    """``model`` with the per-dtype curves fitted, and the YAML lines of ``fitted.gemm_dtype``."""
    fits: dict[str, dict[str, compute.GemmFit]] = {}
    for (arch, dtype), (source, csv_gpu) in DTYPE_FITS.items():
        gpu = load_topology(TOPOLOGY[arch]).gpu
        pts = dtype_points(source, csv_gpu, dtype)
        fit = fitting.fit_gemm(gpu, model, pts, None)  # one curve, fitted on this dtype alone
        model = model.with_gemm(arch, fit, dtype)
        fits.setdefault(arch, {})[dtype] = fit
        errs = [
            math.log(compute.gemm_time_s(gpu, m, n, k, dt, model) / t) for m, n, k, dt, t in pts
        ]
        worst = max(errs, key=abs)
        print(f"{arch} {dtype}: {fit}  ({len(pts)} points, rms log {_rms(errs):.3f}, "
              f"worst {math.exp(worst) - 1:+.1%})")  # fmt: skip
    r = tf32_ratio()
    print(f"ampere tf32: the ampere curve (check: same-run TF32/FP16 efficiency ratio of the "
          f"A100 PCIe, torchperf_108, from {TF32_RATIO_MIN_SIZE} up: {r:.3f})")  # fmt: skip
    lines = ["  gemm_dtype:"]
    lines += [f"    # {a} {d}: {DTYPE_NOTES[(a, d)]}" for a, d in sorted(DTYPE_NOTES)]
    for arch in sorted(fits):
        lines.append(f"    {arch}:")
        for dtype, f in sorted(fits[arch].items()):
            lines.append(
                f"      {dtype}: {{eff_max: {f.eff_max:.4f}, half_time_us: "
                f"{f.half_time_s * 1e6:.3f}, exponent: {f.exponent:.4f}}}"
            )
    return model, lines


def _rms(xs: list[float]) -> float:
    return math.sqrt(sum(x * x for x in xs) / len(xs))


def fit_gather_latency(model) -> tuple[float, float]:
    """``(p, Q)`` of the gather latency bound on `dgx_h100`'s GPU (see the docstring)."""
    from scipy.optimize import brentq

    gpu = load_topology(TOPOLOGY["hopper"]).gpu
    a = model.for_gpu(replace(gpu, compute={}, sm_count=0, memory_latency_s=0.0))
    arch = model.arch["hopper"]
    stream = a.stream_eff * gpu.hbm_bw_Bps / 1e9
    sms = gpu.sm_count or arch.sm_count
    latency = gpu.memory_latency_s or arch.memory_latency_s

    def bound(measured: float, p: float) -> float:
        """The latency bound (GB/s) that ``measured`` implies under exponent ``p``."""
        return (measured ** (-p) - stream ** (-p)) ** (-1.0 / p)

    def miss(p: float) -> float:
        vec = GATHER_VECTOR_RATIO * bound(GATHER_SCALAR_GBPS, p)
        return compute.smooth_min(stream, vec, p) - GATHER_VECTOR_GBPS

    p = brentq(miss, 0.5, 20.0)
    q = bound(GATHER_FBGEMM_GBPS, p) * 1e9 * latency / sms
    return p, q


def fit_overlap(model) -> float:
    """The GEMM overlap exponent ``q`` (compute.py assumption 4) minimising the squared log
    error of time over OVERLAP_ROWS, the curves of ``model`` held."""
    from scipy.optimize import minimize_scalar

    arch = "volta"
    gpu = load_topology(TOPOLOGY[arch]).gpu
    pts = dtype_points(*OVERLAP_ROWS)

    def loss(log_q: float) -> float:
        mod = replace(model, gemm_overlap_exponent=math.exp(log_q))
        return sum(
            math.log(compute.gemm_time_s(gpu, m, n, k, dt, mod) / t) ** 2 for m, n, k, dt, t in pts
        )

    res = minimize_scalar(loss, bounds=(0.0, math.log(64.0)), method="bounded",
                          options={"xatol": 1e-6})  # fmt: skip
    q = math.exp(res.x)
    plain = loss(math.log(64.0))
    print(f"gemm overlap exponent: {q:.3f} ({len(pts)} {OVERLAP_ROWS[0]} {OVERLAP_ROWS[2]} "
          f"points, rms log {math.sqrt(res.fun / len(pts)):.3f}; at 64, ~the plain maximum: "
          f"{math.sqrt(plain / len(pts)):.3f})")  # fmt: skip
    return q


def fit_curves(model) -> tuple[object, list[str]]:
    """``model`` with every architecture's curve and the per-dtype curves fitted, and the YAML
    lines of ``fitted.gemm`` and ``fitted.gemm_dtype``."""
    lines = ["  gemm:", *[f"    # {arch}: {note}" for arch, note in FIT_NOTES.items()]]
    for arch, (dtype, points, eff_max) in reference_points().items():
        fit, gpu = fit_gemm(model, arch, dtype, points, eff_max)
        model = model.with_gemm(arch, fit)
        print(f"{arch}: {fit}")
        for size, t in points:
            got = measured_tflops(model, gpu, dtype, size)
            print(f"  {dtype} {size:>5d}^3  measured {t:7.1f}  model {got:7.1f}  "
                  f"{got / t - 1:+6.1%}")  # fmt: skip
        lines.append(
            f"    {arch}: {{eff_max: {fit.eff_max:.4f}, half_time_us: {fit.half_time_s * 1e6:.3f}, "
            f"exponent: {fit.exponent:.4f}}}"
        )
    model, dtype_lines = fit_dtype_gemms(model)
    return model, lines + dtype_lines


def fit_access_overhead(sector: float) -> float:
    """Per-access bytes ``c`` reproducing TorchRec's block penalties (least squares in log)."""

    def ratio(b, c):
        return ((math.ceil(b / sector) * sector + c) / b) / ((512 + c) / 512)

    res = least_squares(
        lambda x: [math.log(ratio(b, x[0]) / p) for b, p in TORCHREC_PENALTY.items()],
        [100.0],
        bounds=([0.0], [2048.0]),
    )
    return float(res.x[0])


def main() -> None:
    # every fit starts from the plain roofline, so that a rerun reproduces the file
    model = replace(compute.load_compute_model(str(MODEL_PATH)), gemm_overlap_exponent=math.inf)
    for _ in range(OVERLAP_ROUNDS):
        model, curve_lines = fit_curves(model)
        model = replace(model, gemm_overlap_exponent=fit_overlap(model))
    model, curve_lines = fit_curves(model)
    lines = ["fitted:", *curve_lines]
    lines += [
        "  # smooth maximum of GEMM math and memory time, fitted on DeepBench's V100 FP16"
        " training GEMMs",
        f"  gemm_overlap_exponent: {model.gemm_overlap_exponent:.3f}",
    ]
    for arch, (dtype, pts) in CROSS_CHECK.items():
        gpu = load_topology(TOPOLOGY[arch]).gpu
        for size, t in pts:
            got = measured_tflops(model, gpu, dtype, size)
            print(f"  {arch} {dtype} {size:>5d}^3  measured {t:7.1f}  model {got:7.1f}  "
                  f"{got / t - 1:+6.1%}")  # fmt: skip
    c = fit_access_overhead(model.sector_bytes)
    for b, p in TORCHREC_PENALTY.items():
        got = ((math.ceil(b / 32) * 32 + c) / b) / ((512 + c) / 512)
        print(f"  row {b:>4d} B  torchrec penalty {p:.2f}  model {got:.3f}")
    lines.append(
        "  # per-access overhead fitted to TorchRec's HALF/QUARTER_BLOCK_PENALTY (1.15, 1.75)"
    )
    lines.append(f"  access_overhead_bytes: {c:.1f}")
    p, q = fit_gather_latency(model)
    model = replace(model, gather_smoothness=p, gather_bytes_in_flight=q)
    h100 = load_topology(TOPOLOGY["hopper"]).gpu
    print(f"gather latency bound: p {p:.3f}, Q {q:.0f} B per SM")
    for name, topo in TOPOLOGY.items():
        g = load_topology(topo).gpu
        bw = compute.gather_bandwidth_Bps(g, model) / 1e9
        print(f"  {name:9s} {g.model:16s} gather {bw:7.1f} GB/s ({bw * 1e9 / g.hbm_bw_Bps:.3f})")
    print(f"  H100 gather {compute.gather_bandwidth_Bps(h100, model) / 1e9:.1f} GB/s, measured "
          f"{GATHER_FBGEMM_GBPS} (FBGEMM) and {GATHER_VECTOR_GBPS:.1f} (pegainfer)")  # fmt: skip
    lines += [
        "  # random-row gather latency bound, fitted on H100 only: smoothness to the scalar"
        " (2-byte) and",
        "  # vector (16-byte) embedding gathers of [pegainfer488], bytes in flight to [fbgemm3993]",
        f"  gather_smoothness: {p:.3f}",
        f"  gather_bytes_in_flight_per_sm: {q:.0f}",
    ]
    block = "\n".join(lines) + "\n"
    text = re.sub(r"fitted:\n(  .*\n)+", block, MODEL_PATH.read_text())
    MODEL_PATH.write_text(text)
    print(block)


if __name__ == "__main__":
    main()
