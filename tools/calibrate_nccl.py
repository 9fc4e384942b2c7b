"""Refit the Ampere kernel-launch time in zionsim/data/nccl_model.yaml from the reference curve.

    python tools/calibrate_nccl.py          # prints the fit, rewrites `launch_us: {ampere: ...}`

Reference: zionsim/data/reference/nccl_allreduce_8xa100.csv (8x A100-SXM4-80GB, NVSwitch,
NCCL 2.18.5; Azure AI-benchmarking-guide ND_A100_v4, run as `all_reduce_perf -g 8`: one thread
launches the kernels of all 8 GPUs).  Everything else in the model is NCCL's own constants; the
one fitted parameter is the launch time ``L``: at sizes up to 64 KiB NCCL's kernel time is below
``8 L``, so the measured time is the launch floor ``8 L`` and ``L`` is the mean of time/8 there.
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


def main() -> None:
    ref = pd.read_csv(ROOT / "zionsim/data/reference/nccl_allreduce_8xa100.csv")
    small = ref[ref.size_bytes <= 64 * 1024]
    time_us = small.size_bytes * busbw_factor("all_reduce", 8) / small.busbw_GBps / 1e3
    launch = float((time_us / GPUS_PER_THREAD).mean())
    for s, t in zip(small.size_bytes, time_us, strict=True):
        print(f"{int(s):>8d} B  measured {t:6.1f} us  -> launch {t / GPUS_PER_THREAD:.2f} us")
    path = ROOT / "zionsim/data/nccl_model.yaml"
    text = re.sub(
        r"launch_us: \{ampere: [0-9.]+\}", f"launch_us: {{ampere: {launch:.1f}}}", path.read_text()
    )
    path.write_text(text)
    print(f"launch_us: {{ampere: {launch:.1f}}}")


if __name__ == "__main__":
    main()
