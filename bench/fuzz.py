"""Fuzz every input kind with many cases and count what happened (not a test: figures only).

    PYTHONPATH=. python3 bench/fuzz.py                 # 2,000 cases per kind
    PYTHONPATH=. python3 bench/fuzz.py 300 topology sweep

For each kind (``tests/fuzz/targets.py``) it prints the cases that were accepted with finite
outputs (ok), refused with a one-line input error (refused), ended in any other exception
(traceback) or ran past the per-case limit (hang), then the distinct failures.  The target is
0 tracebacks and 0 hangs.  Seeds are fixed (hypothesis derandomised), so a run is repeatable.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from tests.fuzz.harness import Hang, outcome  # noqa: E402
from tests.fuzz.targets import kinds  # noqa: E402


def fuzz_kind(name: str, strategy, target, n: int) -> tuple[Counter, dict]:
    """Run ``n`` cases of one kind: counts per outcome and the first case of each failure."""
    counts: Counter = Counter()
    failures: dict[str, str] = {}

    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def body(case):
        try:
            counts[outcome(target, case)] += 1
        except Hang:
            counts["hang"] += 1
            failures.setdefault("hang", repr(case)[:300])
        except Exception as exc:  # every other exception is what this script counts
            counts["traceback"] += 1
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            failures.setdefault(key, f"{str(exc)[:200]!r}  case: {repr(case)[:300]}")

    body()
    return counts, failures


def main(argv: list[str]) -> None:
    """Fuzz the kinds named in ``argv`` (all by default) with ``argv[0]`` cases each."""
    n = int(argv[0]) if argv and argv[0].isdigit() else 2000
    names = [a for a in argv if not a.isdigit()] or list(kinds())
    total: Counter = Counter()
    print(
        f"{'kind':<12}{'cases':>7}{'ok':>7}{'refused':>9}{'traceback':>11}{'hang':>6}{'cpu_s':>8}"
    )
    for name in names:
        strategy, target = kinds()[name]
        t0 = time.process_time()
        counts, failures = fuzz_kind(name, strategy, target, n)
        total += counts
        cases = sum(counts.values())
        print(
            f"{name:<12}{cases:>7}{counts['ok']:>7}{counts['refused']:>9}"
            f"{counts['traceback']:>11}{counts['hang']:>6}{time.process_time() - t0:>8.1f}",
            flush=True,
        )
        for key, example in failures.items():
            print(f"    {key}: {example}", flush=True)
    print(
        f"{'total':<12}{sum(total.values()):>7}{total['ok']:>7}{total['refused']:>9}"
        f"{total['traceback']:>11}{total['hang']:>6}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
