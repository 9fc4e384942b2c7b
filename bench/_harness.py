"""Shared by the bench scripts: run each case in its own process and print its one line."""

from __future__ import annotations

import resource
import subprocess
import sys


def peak_rss_mb() -> float:
    """Peak resident set size of this process (MB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_cases(script: str, cases: list[tuple]) -> None:
    """Run ``script`` once per case (arguments = the case) and print what each prints."""
    for case in cases:
        out = subprocess.run(
            [sys.executable, script, *map(str, case)], capture_output=True, text=True
        )
        print(out.stdout.strip() or out.stderr.strip().splitlines()[-1], flush=True)
