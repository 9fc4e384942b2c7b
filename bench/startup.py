"""Start-up cost of the command line: ``zionsim --help``, small ``zionsim collective`` runs
(the 8-GPU all-reduce of 64 MiB among them), and the headline ``zionsim run`` (defaults: Neo's
model A on 16 ZionEX nodes, 3 iterations, every output file and the plot).

Each command runs in a fresh process (the installed ``zionsim`` entry point next to this
interpreter, else ``python -m zionsim``), ``--repeat`` times after one warm-up run that fills the
byte-code cache; prints the median wall time and the median CPU time (user + system) of the
child.  The interpreter's own start (``python -c pass``) and ``import numpy`` are printed too:
they are the floor under every command.

    python bench/startup.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _entry() -> list[str]:
    script = Path(sys.executable).parent / "zionsim"
    if script.is_file() and shutil.which(str(script)):
        return [str(script)]
    return [sys.executable, "-m", "zionsim"]


def _time(cmd: list[str], repeat: int) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(cmd, env=env, capture_output=True, check=True)  # warm the byte-code cache
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(
            after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        )  # fmt: skip
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    """Print the start-up figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="zionsim-startup-")
    zs = _entry()
    cases = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'import numpy'", [sys.executable, "-c", "import numpy"]),
        ("zionsim --help", zs + ["--help"]),
        ("zionsim --version", zs + ["--version"]),
        (
            "zionsim collective (1 node, 1 MiB)",
            zs + ["collective", "--nodes", "1", "--sizes", "1M:1M", "--out", out, "--force"],
        ),
        (
            "zionsim collective (16 nodes, 1 MiB)",
            zs + ["collective", "--sizes", "1M:1M", "--out", out, "--force"],
        ),
        (
            "zionsim collective (8 GPUs, all_reduce 64 MiB)",
            zs
            + ["collective", "--op", "all_reduce", "--nodes", "1", "--sizes", "64M:64M"]
            + ["--out", out, "--force"],
        ),
        ("zionsim run (headline, with its plot)", zs + ["run", "--out", out, "--force"]),
    ]
    print(f"entry point: {' '.join(zs)}; median of {args.repeat} runs")
    print(f"{'command':<48} {'wall s':>8} {'CPU s':>8}")
    for name, cmd in cases:
        wall, cpu = _time(cmd, args.repeat)
        print(f"{name:<48} {wall:8.3f} {cpu:8.3f}", flush=True)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
