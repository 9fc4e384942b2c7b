"""Sensitivity studies of the GPU-swap what-ifs (issue 25, round 9, h25s).  NOT part of the
model: each patches the compute model in its own process only (op pricing afresh,
``estimate.REUSE`` off), refits hugectr's ``gpu_per_step`` on the stack's two H100 calibration
cases (as tools/calibrate_stacks.py does) and prints the HugeCTR DCNv2 cases and the GPU-swap
and batch what-ifs.

    PYTHONPATH=$PWD python3 tools/gpu_swap_l2_study.py --share 0            # today's model
    PYTHONPATH=$PWD python3 tools/gpu_swap_l2_study.py --l2-rate-h100 5.5   # L2, every gather
    PYTHONPATH=$PWD python3 tools/gpu_swap_l2_study.py --forward-only       # L2, lookups only
    PYTHONPATH=$PWD python3 tools/gpu_swap_l2_study.py --scale 0.85         # bytes x 0.85

``--scale k`` multiplies every memory-bound byte the op list prices (streams and gathers, every
GPU) by ``k``: a diagnostic of "too much per-sample HBM traffic on every GPU" against "too much
gain on the new GPU", not a mechanism.

What it assumes (docs/validation.md, "Issue 25, round 9"):

1. A table whose rows all fit in the GPU's L2 cache, together with every smaller table, is
   served from L2 (tables sorted by size, weights only, FP32 rows of 128: 512 B); its share of a
   sample's lookups is the share ``f`` of random-row gather bytes that do not reach HBM.  So
   ``f`` follows from the workload's table sizes and the GPU's L2 capacity (no fit):
   A100 40 MB (NVIDIA A100 whitepaper), H100 SXM5 50 MB (NVIDIA H100 whitepaper; Chips and
   Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023: 60 MB on the die, 50 MB
   enabled), H200 50 MB (the same GH100 die), B200 126 MB (Chips and Cheese, "Nvidia's B200:
   Keeping the CUDA Juggernaut Rolling", 2025).  Hot rows of the large tables (skew) are left
   out: an under-estimate of ``f``.
   ``--forward-only`` applies it to the lookups alone: the backward updates each distinct row
   once (no reuse) and reads each lookup's gradient from the exchange buffer once.
2. L2-served gather bytes move at a rate that scales with SMs x SM clock (the L2 is fed by the
   SMs' load ports, not by HBM), ``--l2-rate-h100`` for an H100 SXM5; no public figure of random
   512-byte-row gathers from L2 was found, so the study sweeps it.
"""

from __future__ import annotations

import argparse
import math

import yaml

from zionsim.dlrm import estimate
from zionsim.hardware import compute
from zionsim.measure.validate import load_cases
from zionsim.sim import run as runmod

L2_BYTES = {"A100": 40e6, "H100": 50e6, "H200": 50e6, "B200": 126e6, "GB200": 126e6}
CLOCK_MHZ = {"ampere": 1410, "hopper": 1980, "blackwell": 1965}  # compute_model.yaml [clocks]
CALIBRATION = ["h100x8_dcnv2_hugectr_v40", "h100x4_dcnv2_hugectr_v40"]
HELD_OUT = [
    "h200x8_dcnv2_hugectr_v40",
    "h200x8_dcnv2_hugectr_v50_hpe",
    "b200x8_dcnv2_hugectr_v41",
    "b200x8_dcnv2_hugectr_v50",
    "gb200x8_dcnv2_hugectr_v50",
    "a100x8_dcnv2_hugectr_v30",
    "h100x4_dcnv2_hugectr_v41_gb49152",
]
WHAT_IFS = [
    ("h100x8_dcnv2_hugectr_v40", "h200x8_dcnv2_hugectr_v40"),
    ("h100x8_dcnv2_hugectr_v40", "b200x8_dcnv2_hugectr_v41"),
    ("h200x8_dcnv2_hugectr_v40", "b200x8_dcnv2_hugectr_v50"),
    ("b200x8_dcnv2_hugectr_v50", "gb200x8_dcnv2_hugectr_v50"),
    ("h100x4_dcnv2_hugectr_v40", "h100x4_dcnv2_hugectr_v41_gb49152"),
]


def resident_share(l2_bytes: float, workload: str = "workloads/mlperf_dlrm_dcnv2.yaml") -> float:
    """Share of a sample's lookups on the smallest tables whose rows fit in ``l2_bytes``."""
    tables = sorted(yaml.safe_load(open(workload))["tables"], key=lambda t: t["rows"])
    total = sum(t["pooling"] for t in tables)
    used = hits = 0.0
    for t in tables:
        used += t["rows"] * t["dim"] * 4
        if used > l2_bytes:
            break
        hits += t["pooling"]
    return hits / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--l2-rate-h100", type=float, default=5.5, help="TB/s of L2-served gathers on H100 SXM5"
    )
    ap.add_argument(
        "--share", type=float, default=None, help="override f for every GPU (0: today's model)"
    )
    ap.add_argument(
        "--forward-only", action="store_true", help="L2 serves the forward lookups only"
    )
    ap.add_argument(
        "--scale", type=float, default=None, help="diagnostic: every memory-bound byte x k"
    )
    args = ap.parse_args()
    estimate.REUSE = False
    original, original_memory = compute._transfer_s, compute.memory_time_s
    original_fwd = compute.embedding_forward_time_s
    forward = [False]

    def share(gpu) -> float:
        if args.share is not None:
            return args.share
        family = next(
            (k for k in ("GB200", "B200", "H200", "H100", "A100") if k in gpu.model), None
        )
        return resident_share(L2_BYTES[family]) if family else 0.0

    def l2_rate(gpu, a) -> float:
        arch = compute.architecture(gpu)
        sms = gpu.sm_count or a.sm_count
        return args.l2_rate_h100 * 1e12 * sms * CLOCK_MHZ[arch] / (132 * 1980)

    def patched(gpu, a, scattered, streamed):
        if args.scale is not None:
            return original(gpu, a, scattered * args.scale, streamed * args.scale)
        f = share(gpu) if (forward[0] or not args.forward_only) else 0.0
        if f <= 0:
            return original(gpu, a, scattered, streamed)
        hbm = scattered * (1 - f) / (a.gather_eff * gpu.hbm_bw_Bps)
        return hbm + scattered * f / l2_rate(gpu, a) + streamed / (a.stream_eff * gpu.hbm_bw_Bps)

    def forward_patched(*a, **k):
        forward[0] = True
        try:
            return original_fwd(*a, **k)
        finally:
            forward[0] = False

    def memory_patched(gpu, nbytes, model=None):
        return original_memory(gpu, nbytes * (args.scale or 1.0), model)

    compute._transfer_s = patched
    compute.embedding_forward_time_s = forward_patched
    compute.memory_time_s = memory_patched
    cases = {c.id: c for c in load_cases()}

    def sim(cid: str, gps_us: float) -> float:
        options = dict(cases[cid].params["options"])
        options["stack.gpu_per_step"] = f"{gps_us}us"
        return runmod.run_point(options).summary["iteration_time_s"] * 1e3

    def loss(g: float) -> float:
        return sum(math.log(sim(c, g) / cases[c].measured) ** 2 for c in CALIBRATION)

    lo, hi = 0.0, 2000.0
    for _ in range(20):  # golden-section-like ternary search: the loss is unimodal in g
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, m2) if loss(m1) < loss(m2) else (m1, hi)
    g = (lo + hi) / 2
    print(
        f"L2-resident share f: A100 {resident_share(40e6):.3f}, "
        f"H100/H200 {resident_share(50e6):.3f}, "
        f"B200/GB200 {resident_share(126e6):.3f}"
        + (f" (overridden: {args.share})" if args.share is not None else "")
    )
    print(f"hugectr gpu_per_step refitted: {g:.1f} us")
    s = {}
    for c in CALIBRATION + HELD_OUT:
        s[c] = sim(c, g)
        print(
            f"{c:40s} measured {cases[c].measured:7.3f} simulated {s[c]:7.3f} ms "
            f"{100 * (s[c] / cases[c].measured - 1):+6.1f} %"
        )
    for a, b in WHAT_IFS:
        mr, sr = cases[b].measured / cases[a].measured, s[b] / s[a]
        print(
            f"what-if {a} -> {b}: measured {mr:.4f} simulated {sr:.4f} "
            f"{100 * (sr / mr - 1):+5.1f} %"
        )


if __name__ == "__main__":
    main()
