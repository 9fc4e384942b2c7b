"""Calibrate the resource estimator (``zionsim/sim/resources.py``) against measured peak RSS.

    python bench/resources.py                 # measure every case, print the table
    python bench/resources.py --fit           # ... and fit the coefficients (non-negative LSQ)
    python bench/resources.py --quick         # the cases under ~10 s only
    python bench/resources.py --fit --save rows.json   # keep the measurements
    python bench/resources.py --fit --load rows.json   # refit without measuring again

Each case is one ``zionsim run`` (writing its result folder, plots off, ``--max-memory none``)
in its own process; its peak RSS and CPU time (user + sys) come from ``wait4``.  Its sizes
(``resources.sizes_of_trace``) come from lowering the same inputs in another process.  The
table compares the measurement with the estimate of ``zionsim/data/resource_model.yaml``;
``--fit`` prints new coefficients to paste there (memory fitted so that no case is
under-estimated: the least-squares fit, then scaled up to cover the worst case).  Two memory
coefficients are held at measured physical values (:data:`FIXED`): they are nearly collinear
with others in these cases but matter alone elsewhere (a huge cluster with no all-to-all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

#: (workload, nodes, iterations, extra CLI arguments)
CASES = [
    ("tiny", 1, 3, ()),
    ("tiny", 16, 3, ()),
    ("tiny", 64, 30, ()),
    ("tiny", 256, 2, ("--plan", "round_robin")),
    ("mlperf_dlrm", 1, 3, ()),
    ("mlperf_dlrm", 16, 3, ()),
    ("mlperf_dlrm", 64, 3, ()),
    ("neo_model_i", 16, 3, ()),
    ("neo_model_a", 16, 3, ()),
    ("neo_model_a", 64, 3, ()),
    ("neo_model_a", 128, 2, ()),
    ("mlperf_dlrm", 16, 3, ("--sync", "shadow-ma")),
    ("mlperf_dlrm_dcnv2", 128, 2, ("--topology", "dgx_h100")),
    ("mlperf_dlrm_dcnv2", 512, 2, ("--topology", "dgx_h100")),
    ("neo_model_a", 256, 2, ()),
    # the largest case with the bench's plan: greedy planning alone at 16,384 GPUs takes many
    # CPU minutes (its candidates' estimates), and what it holds is freed before the
    # simulation, whose structures the coefficients are about
    ("neo_model_a", 2048, 2, ("--plan", "round_robin")),
]
QUICK = 11
#: memory coefficients held fixed in the fit: a float64 matrix cell; the cluster graph, router
#: and per-rank arrays per GPU (RSS growth of ``Cluster.load("zionex", nodes=1024,
#: overrides=["scale_out.tiers=3"])``: 9,980 bytes per GPU)
FIXED = {"matrix_cells": 8.0, "gpus": 10.0e3}

SIZES_CODE = """
import json, sys
from dataclasses import asdict
from zionsim.cli.main import build_parser, _inputs
from zionsim.sim.resources import sizes_of_trace
from zionsim.sim.run import trace_of
args = build_parser().parse_args(sys.argv[1:])
inputs = _inputs(args)
trace, _, cluster = trace_of(inputs)
passes = 1 if inputs.sync.mode == "allreduce" else 2
print(json.dumps(asdict(sizes_of_trace(trace, args.iterations, passes,
                                       len(inputs.workload.tables), cluster.spec))))
"""


def _args(case, out: str) -> list[str]:
    wl, nodes, iters, extra = case
    return ["run", "--workload", wl, "--nodes", str(nodes), "--iterations", str(iters),
            "--no-plot", "--format", "json", "--out", out, *extra]  # fmt: skip


def measure(case) -> dict:
    """Peak RSS (bytes) and CPU seconds of one ``zionsim run``, and its sizes."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "zionsim", *_args(case, tmp + "/r"), "--max-memory", "none"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"{case}: {proc.stderr.read().decode()[-300:]}")
    sizes = subprocess.run(
        [sys.executable, "-c", SIZES_CODE, *_args(case, "unused")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {
        "case": f"{case[0]} {case[1]}n x{case[2]} {' '.join(case[3])}".strip(),
        "rss_bytes": usage.ru_maxrss * 1024.0,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "sizes": json.loads(sizes.stdout),
    }


def fit(rows: list[dict]) -> dict:
    """Non-negative least squares of memory and CPU on the sizes (with a constant); memory
    relative errors weighted equally, then scaled to cover the worst case."""
    import numpy as np
    from scipy.optimize import nnls

    names = list(rows[0]["sizes"])
    x = np.array([[1.0, *(r["sizes"][k] for k in names)] for r in rows])
    fixed = np.array([0.0, *(FIXED.get(k, 0.0) for k in names)])
    out = {}
    for key, target in (("memory_bytes", "rss_bytes"), ("cpu_s", "cpu_s")):
        y = np.array([r[target] for r in rows])
        held = x @ fixed if key == "memory_bytes" else np.zeros(len(y))
        free = [i for i, k in enumerate(["base", *names]) if key == "cpu_s" or k not in FIXED]
        coef = np.zeros(x.shape[1])
        coef[free], _ = nnls(x[:, free] / y[:, None], (y - held) / y)
        if key == "memory_bytes":
            coef *= max(1.0, float(np.max((y - held) / (x @ coef))))
            coef += fixed
        out[key] = {"base": float(coef[0]), **dict(zip(names, map(float, coef[1:]), strict=True))}
    return out


def main(argv: list[str]) -> None:
    from zionsim.sim.resources import Sizes, estimate

    cases = CASES[:QUICK] if "--quick" in argv else CASES
    loaded = json.load(open(argv[argv.index("--load") + 1])) if "--load" in argv else None
    rows = []
    print(f"{'case':40s} {'peak_MB':>8s} {'est_MB':>8s} {'ratio':>6s} {'cpu_s':>7s} {'est_s':>7s}")
    for r in loaded or (measure(case) for case in cases):
        e = estimate(Sizes(**r["sizes"]))
        rows.append(r)
        print(
            f"{r['case']:40s} {r['rss_bytes'] / 1e6:8.0f} {e.memory_bytes / 1e6:8.0f} "
            f"{e.memory_bytes / r['rss_bytes']:6.2f} {r['cpu_s']:7.1f} {e.cpu_s:7.1f}",
            flush=True,
        )
    if "--save" in argv:
        with open(argv[argv.index("--save") + 1], "w") as fh:
            json.dump(rows, fh, indent=1)
    if "--fit" in argv:
        print(json.dumps(fit(rows), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
