"""Refit each software stack's one fitted field, ``step_overhead``, on its calibration cases.

    python tools/calibrate_stacks.py            # fit, print, rewrite `step_overhead:` in stacks/
    python tools/calibrate_stacks.py --dry-run  # fit and print only

What it fits on what: for every stack named by an end-to-end case marked ``calibrated: true`` in
validation/cases.yaml, the host time per step the GPU waits for (``step_overhead``, run at the
start of each iteration, see zionsim/dlrm/stack.py) that minimises the sum of squared log errors
of that stack's calibrated cases. Everything else in the stack profile, the topology and the
workload stays as it is. The calibration cases (chosen before any held-out error was looked at,
one single-node 8-GPU run per stack, the configuration each source presents as its reference):

- hugectr: h100x8_dcnv2_hugectr_v40 (MLPerf v4.0 DLRM-DCNv2, NVIDIA eos, 8x H100)
- nvidia_pytorch_dlrm: a100x8_dle_large_tf32 (DeepLearningExamples PyTorch DLRM, DGX A100, TF32)
- tensorflow_sok: a100_mlperf_dlrm_fp32 (SOK DLRM benchmark, 8x A100, FP32/TF32)
- torchrec: p4d_x8_torchrec_gb65536 (TorchRec DLRM example, p4d, 8 GPUs, batch 65536)

The overhead is bounded to [0, 50 ms]: host time cannot be negative, so a stack whose calibrated
cases are already simulated slower than measured fits 0 and the tool says so (the gap is then in
the model, not in the host). Simulated times depend on the NCCL, compute and embedding models:
rerun this after changing any of them, then `zionsim validate`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zionsim.dlrm.stack import load_stack  # noqa: E402
from zionsim.measure.validate import load_cases  # noqa: E402
from zionsim.sim.run import run_point  # noqa: E402

BOUNDS_S = (0.0, 50e-3)
TOL_S = 0.5e-6


def calibration_cases() -> dict[str, list]:
    """Stack name -> its calibrated end-to-end cases, in the file's order."""
    out: dict[str, list] = {}
    for c in load_cases():
        if c.family == "end_to_end" and c.calibrated:
            out.setdefault(c.params["options"]["stack"], []).append(c)
    return out


def simulate_ms(case, stack) -> float:
    """The case's simulated step time (ms) under ``stack`` (a StackSpec)."""
    options = dict(case.params["options"], stack=stack)
    return run_point(options).summary["iteration_time_s"] * 1e3


def loss(cases, stack) -> float:
    return sum(math.log(simulate_ms(c, stack) / c.measured) ** 2 for c in cases)


def fit(name: str, cases) -> tuple[float, list[tuple[str, float, float]]]:
    """Golden-section search of the step overhead (s) in BOUNDS_S; the loss is unimodal in it
    (the overhead adds to every step)."""
    base = load_stack(name)

    def f(x: float) -> float:
        return loss(cases, dataclasses.replace(base, step_overhead_s=x))

    lo, hi = BOUNDS_S
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    while hi - lo > TOL_S:
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
    best = (lo + hi) / 2
    if f(0.0) <= f(best):
        best = 0.0
    best = round(best * 1e6) * 1e-6
    spec = dataclasses.replace(base, step_overhead_s=best)
    return best, [(c.id, c.measured, simulate_ms(c, spec)) for c in cases]


def rewrite(name: str, overhead_s: float) -> None:
    """Replace the value on the `step_overhead:` line of stacks/NAME.yaml, keeping its comment."""
    path = ROOT / "stacks" / f"{name}.yaml"
    text = path.read_text()

    def line(m: re.Match) -> str:
        value = f"{m.group(1)}{overhead_s * 1e6:.0f} us"
        comment = (m.group(2) or "").strip()
        if not comment:
            return value
        col = m.group(0).index("#")
        return value.ljust(col - 1) + " " + comment

    new, n = re.subn(r"^(step_overhead:\s*)\S+ \S+(\s*#.*)?$", line, text, count=1, flags=re.M)
    if n != 1:
        raise SystemExit(f"{path}: no `step_overhead:` line")
    path.write_text(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the fit, change no file")
    args = ap.parse_args()
    for name, cases in sorted(calibration_cases().items()):
        overhead, rows = fit(name, cases)
        bound = "  (at the lower bound: simulated already >= measured)" if overhead == 0 else ""
        print(f"{name}: step_overhead {overhead * 1e6:.0f} us{bound}")
        for cid, meas, sim in rows:
            print(
                f"    {cid:32s} measured {meas:8.3f} ms  simulated {sim:8.3f} ms  "
                f"{100 * (sim - meas) / meas:+6.1f} %"
            )
        if not args.dry_run:
            rewrite(name, overhead)


if __name__ == "__main__":
    main()
