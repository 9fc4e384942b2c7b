"""Benchmark: wall and CPU time per simulated iteration, events, peak RSS and write time of
DLRM runs from 128 to 16,384 GPUs (65,536 when named: ``python bench/run.py neo_model_a 8192``).

    python bench/run.py                      # every case, each in its own subprocess
    python bench/run.py --max-gpus 1024      # only the cases up to 1,024 GPUs
    python bench/run.py neo_model_a 16       # one case (workload, nodes), in this process
    python bench/run.py --compare --max-gpus 4096   # flow classes against one flow each
    python bench/run.py --plan greedy        # with zionsim run's default planner

Cases: neo_model_a on ZionEX and mlperf_dlrm_dcnv2 on DGX H100 (it does not fit 40 GB GPUs),
16, 128, 512 and 2,048 nodes (128, 1,024, 4,096 and 16,384 GPUs; the fabric's tiers follow the
node count), and 8,192 nodes (65,536 GPUs) with ``--max-gpus 65536``.  After the cases, a
``growth`` line per workload gives the exponent of CPU seconds per iteration against GPUs
(least squares on logs, cases from 1,024 GPUs).  Each case builds the cluster, lowers the
workload, simulates 3 iterations (1 warm-up) and analyses; that is timed inside the process,
imports excluded, and divided by the 3 simulated iterations (``wall_s``; ``cpu_s``: process CPU
time, the figure to trust on a shared machine).  ``write_s`` is writing the result folder
(default ``--trace-ranks``), ``write_pct`` its share of the run.  A case that runs past
``--timeout`` seconds (default 3600) is reported as ``timeout``.  One line per case:
``case=<name> gpus=<N> wall_s=<x> cpu_s=<c> write_s=<w> write_pct=<p>
events=<n> events_per_s=<e> peak_rss_MB=<m>`` (``events``: simpy events of the run,
``events_per_s`` per CPU second of it; ``peak_rss_MB``: the process's peak resident memory,
writing included).

The plan is ``simulate_run``'s default (table-wise round robin by size) unless ``--plan NAME``
names a planner (``greedy`` is what ``zionsim run`` uses by default; its planning time is part
of the case's time).  ``--per-flow`` runs the all-to-alls one flow per node pair and rail
(``network.point_to_point.CLASSES = False``), the model the flow classes must reproduce;
``--per-rank`` steps every rank on its own (``sim.templates.ENABLED = False``), the engine the
rank templates must reproduce.
``--compare`` runs each case both ways (default, and ``--per-flow --per-rank``) and prints
whether their ``summary.json`` files are byte-identical and the largest relative difference of
any number in them (``summary_max_rel_diff``), with both CPU times.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

from _harness import peak_rss_mb

ITERATIONS = 3
#: workload → topology: DCNv2's largest table (40 M rows × 128 × fp32 = 20.5 GB, twice with its
#: optimizer state) does not fit a 40 GB ZionEX GPU, so it runs on DGX H100 (80 GB) nodes
WORKLOADS = {"neo_model_a": "zionex", "mlperf_dlrm_dcnv2": "dgx_h100"}
#: node counts of the cases; 8,192 (65,536 GPUs, about 10 GB) only with ``--max-gpus 65536``
NODES = (16, 128, 512, 2048, 8192)


def run_case(
    workload: str,
    nodes: int,
    per_flow: bool = False,
    per_rank: bool = False,
    summary=None,
    plan: str | None = None,
) -> str:
    """Simulate and write one case; its line (``summary``: copy summary.json there)."""
    from zionsim.network import point_to_point
    from zionsim.sim import templates

    point_to_point.CLASSES = not per_flow
    templates.ENABLED = not per_rank
    # imports are excluded from the timing (the run imports pandas lazily)
    import pandas  # noqa: F401

    import zionsim.dlrm.planner  # noqa: F401
    import zionsim.dlrm.workload  # noqa: F401
    import zionsim.hardware.cluster  # noqa: F401
    import zionsim.io.files  # noqa: F401
    from zionsim.sim.run import few_gc_passes

    topology = WORKLOADS[workload]
    name = f"case={workload}_{topology}_{nodes}n gpus={nodes * 8}"
    if plan:
        name += f" plan={plan}"
    # the cycle collector as ``zionsim run`` has it, writing included (cli/main.py)
    with few_gc_passes():
        return _timed_case(name, topology, workload, nodes, summary, plan)


def _timed_case(name, topology, workload, nodes, summary, plan) -> str:
    """The line of one case (``run_case``)."""
    from zionsim.base.errors import CapacityError
    from zionsim.dlrm.planner import named_plan
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster
    from zionsim.io.files import write_run
    from zionsim.sim.run import simulate_run

    t0, c0 = time.perf_counter(), time.process_time()
    try:
        cluster, w = Cluster.load(topology, nodes=nodes), load_workload(workload)
        r = simulate_run(
            cluster,
            w,
            plan=named_plan(plan, cluster, w) if plan else None,
            iterations=ITERATIONS,
            warmup=1,
        )
    except CapacityError as exc:
        return f'{name} skipped="{exc.problem}"'
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.perf_counter()
        write_run(f"{tmp}/run", r, plot=False)
        write = time.perf_counter() - t1
        if summary:
            with open(f"{tmp}/run/summary.json", "rb") as src, open(summary, "wb") as dst:
                dst.write(src.read())
    return (
        f"{name} wall_s={wall / ITERATIONS:.3f} cpu_s={cpu / ITERATIONS:.3f} "
        f"write_s={write:.3f} write_pct={100 * write / (wall + write):.1f} "
        f"events={r.timing['simpy_events']} events_per_s={r.timing['simpy_events'] / cpu:.0f} "
        f"peak_rss_MB={peak_rss_mb():.0f}"
    )


def compare(workload: str, nodes: int, timeout: float) -> str:
    """One case run as built and with one flow each and every rank alone, in subprocesses:
    the line."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        cpu = {}
        for mode in ("classes", "per_flow"):
            cmd = [sys.executable, __file__, workload, str(nodes), "--summary", f"{tmp}/{mode}"]
            out = subprocess.run(
                cmd + (["--per-flow", "--per-rank"] if mode == "per_flow" else []),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            fields = dict(x.split("=", 1) for x in out.stdout.split() if "=" in x)
            cpu[mode] = fields.get("cpu_s", "?")
        a, b = (open(f"{tmp}/{m}", "rb").read() for m in ("classes", "per_flow"))
        worst = _max_rel_diff(json.loads(a), json.loads(b))
    return (
        f"case={workload}_{nodes}n gpus={nodes * 8} summary_identical={a == b} "
        f"summary_max_rel_diff={worst:.2g} cpu_s={cpu['classes']} "
        f"cpu_s_per_flow_per_rank={cpu['per_flow']}"
    )


def _max_rel_diff(x, y) -> float:
    """The largest relative difference between numbers at the same place of two JSON values
    (inf where their shapes or non-numbers differ)."""
    if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
        return max((_max_rel_diff(x[k], y[k]) for k in x), default=0.0)
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return max((_max_rel_diff(u, v) for u, v in zip(x, y, strict=True)), default=0.0)
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return abs(x - y) / max(abs(x), abs(y), 1e-300) if x != y else 0.0
    return 0.0 if x == y else float("inf")


def main() -> None:
    """One case from the arguments, or every case (up to ``--max-gpus``) in subprocesses."""
    args = sys.argv[1:]
    valued = ("--summary", "--max-gpus", "--timeout", "--plan")
    positional = [
        a
        for i, a in enumerate(args)
        if not a.startswith("--") and (i == 0 or args[i - 1] not in valued)
    ]
    if len(positional) == 2:
        summary = args[args.index("--summary") + 1] if "--summary" in args else None
        flags = "--per-flow" in args, "--per-rank" in args
        plan = args[args.index("--plan") + 1] if "--plan" in args else None
        line = run_case(positional[0], int(positional[1]), *flags, summary=summary, plan=plan)
        print(line, flush=True)
        return
    cmp = "--compare" in args
    max_gpus = int(args[args.index("--max-gpus") + 1]) if "--max-gpus" in args else 16384
    timeout = float(args[args.index("--timeout") + 1]) if "--timeout" in args else 3600.0
    cpu: dict[str, list[tuple[int, float]]] = {}  # workload -> (GPUs, CPU s per iteration)
    for nodes in NODES:
        if nodes * 8 > max_gpus:
            continue
        for workload in WORKLOADS:
            if cmp:
                print(compare(workload, nodes, timeout), flush=True)
                continue
            try:
                out = subprocess.run(
                    [sys.executable, __file__, workload, str(nodes)]
                    + [a for a in ("--per-flow", "--per-rank") if a in args]
                    + (["--plan", args[args.index("--plan") + 1]] if "--plan" in args else []),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                line = out.stdout.strip() or out.stderr.strip().splitlines()[-1]
            except subprocess.TimeoutExpired:
                line = f"case={workload} nodes={nodes} timeout={timeout:g}"
            print(line, flush=True)
            fields = dict(x.split("=", 1) for x in line.split() if "=" in x)
            if "cpu_s" in fields:
                cpu.setdefault(workload, []).append((nodes * 8, float(fields["cpu_s"])))
    for workload, points in cpu.items():
        print(growth(workload, points), flush=True)


def growth(workload: str, points: list[tuple[int, float]], base: int = 1024) -> str:
    """The exponent ``a`` of CPU seconds per iteration ~ N^a, least squares on logs over the
    cases of ``base`` GPUs and more (the line ``growth``)."""
    import math

    pts = [(math.log(n), math.log(c)) for n, c in points if n >= base and c > 0]
    if len(pts) < 2:
        return f"growth workload={workload} exponent=? (fewer than 2 cases from {base} GPUs)"
    mx, my = (sum(p[i] for p in pts) / len(pts) for i in (0, 1))
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    gpus = ",".join(str(n) for n, _ in points if n >= base)
    return f"growth workload={workload} gpus={gpus} exponent={slope:.3f}"


if __name__ == "__main__":
    main()
