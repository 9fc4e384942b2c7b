"""Benchmark: sweep throughput (points per CPU-minute and per minute) with 1 and 2 local
worker processes.

    python bench/sweep.py          # 64 points of mlperf_dlrm on ZionEX x 16 nodes (128 GPUs)

The grid is NIC speed (4) x batch per GPU (4) x dense precision (2) x communication precision
(2) = 64 points, 2 iterations each (1 warm-up).  Each case runs in its own
subprocess into a fresh folder (no resume), timed from the call to ``run_sweep`` to the written
table (pool start-up included, imports of the parent excluded).

With one worker the points run in the case's own process (``studies/sweep.py``, assumption 7:
no pool); with two, in a local pool.
``cpu_s`` is the CPU time (user + system) of the whole process tree the case started — the
parent, and with a pool the fork server, every worker and the resource tracker — less the
parent's CPU time before it called ``run_sweep`` (its interpreter start and imports, printed as
``parent_import_cpu_s``): the case's process and all its descendants are reaped before this
script reads ``RUSAGE_CHILDREN`` (it makes itself the child subreaper, Linux's
``PR_SET_CHILD_SUBREAPER``, so that the fork server and the workers, orphaned when the case
exits, are reaped here too).  The parent imports pandas and pyarrow, which it needs only to
write the table, before its clock starts, as ``bench/run.py`` does: the sweep imports them
lazily, once per sweep whatever its size (about 0.3 CPU s).  ``points_per_cpu_min`` is
``60 * points / cpu_s``: the figure that holds on a loaded machine, where ``points_per_min``
(wall) does not.
``peak_rss_MB`` is the parent's peak; ``tree_rss_MB`` is the peak of parent + workers together,
sampled every 0.1 s.  One line per case: ``case=sweep64_workers<N> points=64 cpu_s=<c>
points_per_cpu_min=<p> wall_s=<x> points_per_min=<y> ...``.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _harness import peak_rss_mb

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
    """Resident memory of ``root`` and all its descendants now (MB), from /proc: each process's
    children as its threads list them (``/proc/<pid>/task/<tid>/children``), so a look reads a
    few files, not every process's (:func:`_all_rss_mb` where the kernel lists no children)."""
    total, todo, seen = 0.0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            kids = [c.read_text().split() for c in Path(f"/proc/{pid}/task").glob("*/children")]
        except OSError:  # gone meanwhile
            continue
        if pid == root and not kids:
            return _all_rss_mb(root)
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
        todo += [int(k) for ks in kids for k in ks]
    return total


def _all_rss_mb(root: int) -> float:
    """:func:`_tree_rss_mb` from every process's status (parent links)."""
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

    import pandas  # noqa: F401 - the parent's imports are left out (module docstring)
    import pyarrow.parquet  # noqa: F401 - the table's parquet writer

    from zionsim.studies.sweep import points, run_sweep, sweep_from_dict

    before_s = time.process_time()  # interpreter start and imports
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
        f"tree_rss_MB={peak[0]:.0f} parent_import_cpu_s={before_s:.3f}"
    )


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _adopt_orphans() -> None:
    """Linux: become the child subreaper, so that the case's fork server and workers, orphaned
    when the case exits, are reparented to this process and their CPU time reaches its
    ``RUSAGE_CHILDREN`` once reaped (:func:`_reap_all`)."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_all() -> None:
    """Wait for every child left (orphaned descendants of the case included)."""
    import os

    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def run_tree(workers: int) -> str:
    """Run one case in a fresh process and add the CPU time of its whole process tree."""
    _adopt_orphans()
    before = _children_cpu_s()
    out = subprocess.run([sys.executable, __file__, str(workers)], capture_output=True, text=True)
    _reap_all()
    tree_s = _children_cpu_s() - before
    line = out.stdout.strip()
    if out.returncode or not line:
        return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    fields = dict(f.split("=", 1) for f in line.split())
    cpu_s = tree_s - float(fields["parent_import_cpu_s"])
    n = int(fields["points"])
    head, tail = line.split(" ok=", 1)
    return (
        f"{head} cpu_s={cpu_s:.2f} points_per_cpu_min={60 * n / cpu_s:.0f} "
        f"process_tree_cpu_s={tree_s:.2f} ok={tail}"
    )


def main() -> None:
    if len(sys.argv) == 2:
        print(run_case(int(sys.argv[1])), flush=True)
    else:
        for w in WORKERS:
            print(run_tree(w), flush=True)


if __name__ == "__main__":
    main()
