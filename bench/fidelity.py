"""Benchmark: the flow engine, the simpy engine in analytic fidelity, and the fast analytic engine.

    python bench/fidelity.py        # neo_model_a on 16 ZionEX nodes, mlperf_dlrm_dcnv2 on 2 and 16

Each case runs in its own subprocess.  The cluster is built, the greedy plan made and the trace
lowered once, outside every timing; each engine then runs once untimed (file caches warm) and
``REPEATS`` times timed, and the best wall and CPU (user + sys) seconds are kept:

* ``step``: the simulation step alone (``simulate_trace``, 3 iterations);
* ``run``: the whole ``simulate_run`` (lowering, simulation, analysis) with the plan passed in.

One line per case and measure: seconds of ``flow``, ``simpy_analytic`` and ``fast_analytic``, and
the fast engine's speed-up over each (CPU time, the steadier figure on a shared machine).
"""

from __future__ import annotations

import sys
import time

from _harness import run_cases

ITERATIONS = 3
REPEATS = 3
CASES = (("neo_model_a", 16), ("mlperf_dlrm_dcnv2", 2), ("mlperf_dlrm_dcnv2", 16))


def _best(fn) -> tuple[float, float]:
    """Best (wall, CPU) seconds of ``fn()`` over ``REPEATS`` runs, after one untimed run."""
    fn()
    wall = cpu = float("inf")
    for _ in range(REPEATS):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def _engines():
    """(name, simulate_trace, fidelity) of the three engines compared."""
    from zionsim.sim import engine, fast

    return (
        ("flow", engine.simulate_trace, "flow"),
        ("simpy_analytic", engine.simulate_trace, "analytic"),
        ("fast_analytic", fast.simulate_trace, "analytic"),
    )


def _line(case: str, measure: str, times: dict) -> str:
    fast_cpu = times["fast_analytic"][1]
    parts = [f"case={case} measure={measure}"]
    parts += [f"{k}_wall_s={w:.4f} {k}_cpu_s={c:.4f}" for k, (w, c) in times.items()]
    parts += [f"speedup_vs_flow={times['flow'][1] / fast_cpu:.1f}x"]
    parts += [f"speedup_vs_simpy_analytic={times['simpy_analytic'][1] / fast_cpu:.1f}x"]
    return " ".join(parts)


def run_case(workload: str, nodes: int) -> str:
    """Two lines for one case: the simulation step, then the whole run."""
    from zionsim.dlrm.planner import PLANNERS
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim import run as run_module

    cluster = Cluster.load("zionex", nodes=nodes)
    w = load_workload(workload)
    plan = PLANNERS["greedy"](cluster, w)
    trace, _ = run_module.build_trace(cluster, w, plan)
    case = f"{workload}_zionex_{nodes}n"
    step, whole = {}, {}
    for name, simulate, fidelity in _engines():
        step[name] = _best(
            lambda s=simulate, f=fidelity: s(cluster, trace, iterations=ITERATIONS, fidelity=f)
        )
        run_module.simulate_trace = simulate  # simulate_run's engine, for this measure only
        whole[name] = _best(
            lambda f=fidelity: run_module.simulate_run(
                cluster, w, plan, iterations=ITERATIONS, fidelity=f
            )
        )
    return _line(case, "step", step) + "\n" + _line(case, "run", whole)


def main() -> None:
    if len(sys.argv) == 3:
        print(run_case(sys.argv[1], int(sys.argv[2])), flush=True)
    else:
        run_cases(__file__, list(CASES))


if __name__ == "__main__":
    main()
