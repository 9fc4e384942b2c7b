"""Refit the Ampere kernel-launch time in zionsim/data/nccl_model.yaml from the reference curve.

    python tools/calibrate_nccl.py          # prints the fit, rewrites `launch_us: {ampere: ...}`

Reference: zionsim/data/reference/nccl_allreduce_8xa100.csv (8x A100-SXM4-80GB, NVSwitch,
NCCL 2.18.5; Azure AI-benchmarking-guide ND_A100_v4, run as `all_reduce_perf -g 8`: one thread
launches the kernels of all 8 GPUs).  Everything else in the model is NCCL's own constants; the
one fitted parameter is the launch time ``L``: at sizes up to 64 KiB NCCL's kernel time is below
``8 L``, so the measured time is the launch floor ``8 L``.

The curve gives bus bandwidths printed to two decimals (GB/s), so a row's time is known only to
``± 0.005 / busbw`` of itself: ±12 % at 1 KiB (0.04 GB/s), ±0.2 % at 64 KiB (2.70 GB/s).  ``L``
is the mean of time/8 over those rows weighted by the inverse variance of that rounding
(:func:`weighted_launch_us`), not their plain mean: the plain mean (5.46 us) predicts 2.63 GB/s
at 64 KiB, which the curve's printed 2.70 rules out; the weighted one lies inside every row's
rounding interval (issue 26, round 6; docs/validation.md).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zionsim.network.collectives import busbw_factor  # noqa: E402

GPUS_PER_THREAD = 8  # nccl-tests -g 8 (Azure NCCLBandwidth.py)
#: half of the last printed digit of the curve's busbw column (GB/s, two decimals)
BUSBW_HALF_DIGIT_GBPS = 0.005


def weighted_launch_us(time_us, busbw_GBps, gpus: int = GPUS_PER_THREAD) -> float:
    """``L`` (us) from launch-bound rows: time/``gpus`` averaged with weights 1/σ², σ being the
    time's rounding error (time × half a printed digit / busbw)."""
    launch = pd.Series(time_us, dtype=float).to_numpy() / gpus
    sigma = launch * BUSBW_HALF_DIGIT_GBPS / pd.Series(busbw_GBps, dtype=float).to_numpy()
    w = 1.0 / sigma**2
    return float((w * launch).sum() / w.sum())


def main() -> None:
    ref = pd.read_csv(ROOT / "zionsim/data/reference/nccl_allreduce_8xa100.csv")
    small = ref[ref.size_bytes <= 64 * 1024]
    time_us = small.size_bytes * busbw_factor("all_reduce", 8) / small.busbw_GBps / 1e3
    launch = weighted_launch_us(time_us, small.busbw_GBps)
    for s, t in zip(small.size_bytes, time_us, strict=True):
        print(f"{int(s):>8d} B  measured {t:6.1f} us  -> launch {t / GPUS_PER_THREAD:.2f} us")
    path = ROOT / "zionsim/data/nccl_model.yaml"
    text = re.sub(
        r"launch_us: \{ampere: [0-9.]+\}", f"launch_us: {{ampere: {launch:.2f}}}", path.read_text()
    )
    path.write_text(text)
    print(f"launch_us: {{ampere: {launch:.2f}}}")


if __name__ == "__main__":
    main()
