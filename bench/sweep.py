"""Benchmark: sweep throughput (points per minute) with 1 and 2 local worker processes.

    python bench/sweep.py          # 64 points of mlperf_dlrm on ZionEX x 16 nodes (128 GPUs)

The grid is NIC speed (4) x batch per GPU (4) x dense precision (2) x communication precision
(2) = 64 points, 2 iterations each (1 warm-up).  Each case runs in its own
subprocess into a fresh folder (no resume), timed from the call to ``run_sweep`` to the written
table (pool start-up included, imports of the parent excluded).  ``peak_rss_MB`` is the parent's
peak; ``tree_rss_MB`` is the peak of parent + workers together, sampled every 0.1 s.
One line per case: ``case=sweep64_workers<N> points=64 wall_s=<x> points_per_min=<y> ...``.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from _harness import peak_rss_mb, run_cases

WORKERS = (1, 2)
SWEEP = {
    "base": {"topology": "zionex", "nodes": 16, "workload": "mlperf_dlrm", "iterations": 2},
    "grid": {
        "topology.scale_out.nic_bw": ["100Gbps", "200Gbps", "400Gbps", "800Gbps"],
        "batch_per_gpu": [1024, 2048, 4096, 6912],
        "workload.precision.dense": ["fp32", "tf32"],
        "workload.precision.communication": ["fp32", "fp16"],
    },
}


def _tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and all its descendants now (MB), from /proc."""
    parents, rss = {}, {}
    for stat in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in stat.read_text().splitlines())
        except (OSError, ValueError):
            continue
        pid = int(fields["Pid"])
        parents[pid] = int(fields["PPid"])
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    tree, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in tree} - tree
        tree |= new
        grew = bool(new)
    return sum(rss.get(p, 0.0) for p in tree)


def _sample_peak(root: int, stop: threading.Event, peak: list[float]) -> None:
    while not stop.wait(0.1):
        peak[0] = max(peak[0], _tree_rss_mb(root))


def run_case(workers: int) -> str:
    import os

    from zionsim.studies.sweep import points, run_sweep, sweep_from_dict

    sweep = sweep_from_dict(SWEEP)
    n = len(points(sweep))
    stop, peak = threading.Event(), [0.0]
    sampler = threading.Thread(target=_sample_peak, args=(os.getpid(), stop, peak), daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        table = run_sweep(sweep, out, workers=workers, progress=False)
        wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    ok = int((table["status"] == "ok").sum())
    return (
        f"case=sweep{n}_workers{workers} points={n} ok={ok} wall_s={wall:.2f} "
        f"points_per_min={60 * n / wall:.0f} peak_rss_MB={peak_rss_mb():.0f} "
        f"tree_rss_MB={peak[0]:.0f}"
    )


def main() -> None:
    if len(sys.argv) == 2:
        print(run_case(int(sys.argv[1])), flush=True)
    else:
        run_cases(__file__, [(w,) for w in WORKERS])


if __name__ == "__main__":
    main()
