"""Benchmark: planning wall time, and the simulated speed-up of the planner over round-robin.

    python bench/planner.py

1. Wall time of the greedy planner for 4,096 tables (neo_model_a) on 128 and 1,024 GPUs (ZionEX
   16 and 128 nodes), each in its own process, imports excluded.
2. Simulated iteration time with the round-robin baseline and the greedy plan, at 16 ZionEX
   nodes, for neo_model_a, mlperf_dlrm_dcnv2 and neo_model_f (3 iterations, 1 warm-up).
3. Refinement (``zionsim plan --refine``, seed 0): greedy and refined plan simulated as
   ``zionsim run`` does (flow, 3 iterations, 1 warm-up), the gain, the simulations the budget
   allowed, and the search's wall and CPU time, for mlperf_dlrm and mlperf_dlrm_dcnv2 at 8 ZionEX
   nodes (120 s budget) and neo_model_a at 16 nodes (60 s budget).
4. The cost of one refinement simulation: CPU seconds against simpy events and trace ops, the
   fit behind ``studies.refine.EVAL_S_PER_EVENT`` / ``EVAL_S_PER_TABLE``.
"""

from __future__ import annotations

import sys
import time

from _harness import peak_rss_mb, run_cases

PLAN_CASES = [("plan", 16), ("plan", 128)]
SPEEDUP_CASES = [("speedup", w) for w in ("neo_model_a", "mlperf_dlrm_dcnv2", "neo_model_f")]
REFINE_CASES = [
    ("refine", "mlperf_dlrm_dcnv2", 8, 120),
    ("refine", "mlperf_dlrm", 8, 120),
    ("refine", "neo_model_a", 16, 60),
]
EVAL_CASES = [("eval", w, n) for w, n in (("mlperf_dlrm", 8), ("mlperf_dlrm_dcnv2", 8),
                                          ("neo_model_a", 16))]  # fmt: skip


def plan_case(nodes: int) -> str:
    from zionsim.dlrm.planner import PLANNERS
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster

    cluster, w = Cluster.load("zionex", nodes=nodes), load_workload("neo_model_a")
    t0 = time.perf_counter()
    PLANNERS["greedy"](cluster, w)
    wall = time.perf_counter() - t0
    return (
        f"case=plan_neo_model_a_zionex_{nodes}n gpus={nodes * 8} tables={len(w.tables)} "
        f"wall_s={wall:.3f} peak_rss_MB={peak_rss_mb():.0f}"
    )


def speedup_case(workload: str) -> str:
    from zionsim.base.errors import InputError
    from zionsim.dlrm.planner import PLANNERS
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim.run import simulate_run

    cluster, w = Cluster.load("zionex", nodes=16), load_workload(workload)
    times = {}
    for name in ("round_robin", "greedy"):
        try:
            r = simulate_run(cluster, w, PLANNERS[name](cluster, w), iterations=3, warmup=1)
            times[name] = r.summary["iteration_time_s"]
        except InputError as exc:
            times[name] = f'"{exc.problem}"'
    rr, gr = times["round_robin"], times["greedy"]
    if isinstance(rr, float) and isinstance(gr, float):
        return (
            f"case=speedup_{workload}_zionex_16n round_robin_s={rr:.6f} greedy_s={gr:.6f} "
            f"speedup={rr / gr:.3f}"
        )
    return f"case=speedup_{workload}_zionex_16n round_robin={rr} greedy={gr}"


def _inputs(workload: str, nodes: int):
    from zionsim.dlrm.planner import PLANNERS
    from zionsim.dlrm.stack import apply_stack, resolve_stack
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster

    cluster = Cluster.load("zionex", nodes=nodes)
    w = apply_stack(load_workload(workload), resolve_stack(None))
    return cluster, w, PLANNERS["greedy"](cluster, w)


def refine_case(workload: str, nodes: int, budget: float) -> str:
    from zionsim.sim.run import simulate_run
    from zionsim.studies.refine import refine

    cluster, w, greedy = _inputs(workload, nodes)
    t0, c0 = time.perf_counter(), time.process_time()
    r = refine(cluster, w, greedy, seed=0, budget_s=budget)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    runs = [simulate_run(cluster, w, p).summary["iteration_time_s"] for p in (greedy, r.plan)]
    return (
        f"case=refine_{workload}_zionex_{nodes}n budget_s={budget:g} simulations={r.evaluations} "
        f"wall_s={wall:.1f} cpu_s={cpu:.1f} greedy_s={runs[0]:.6f} refined_s={runs[1]:.6f} "
        f"gain={1 - runs[1] / runs[0]:.4f} judged_gain={r.gain:.4f} changed={len(r.changes(w))}"
    )


def eval_case(workload: str, nodes: int) -> str:
    from zionsim.studies.refine import Judge, evals_for_budget

    cluster, w, greedy = _inputs(workload, nodes)
    judge = Judge(cluster, w)
    judge(greedy)
    reps = 5
    c0 = time.process_time()
    for _ in range(reps):
        judge.cache.clear()
        judge(greedy)
    cpu = (time.process_time() - c0) / reps
    events, tables = judge.work
    nominal = 1.0 / evals_for_budget(1000.0, events, tables) * 1000.0
    return (
        f"case=eval_{workload}_zionex_{nodes}n events={events} tables={tables} cpu_s={cpu:.3f} "
        f"nominal_s={nominal:.3f}"
    )


def main() -> None:
    if len(sys.argv) > 2:
        kind, args = sys.argv[1], sys.argv[2:]
        if kind == "plan":
            print(plan_case(int(args[0])), flush=True)
        elif kind == "speedup":
            print(speedup_case(args[0]), flush=True)
        elif kind == "refine":
            print(refine_case(args[0], int(args[1]), float(args[2])), flush=True)
        else:
            print(eval_case(args[0], int(args[1])), flush=True)
    else:
        run_cases(__file__, PLAN_CASES + SPEEDUP_CASES + EVAL_CASES + REFINE_CASES)


if __name__ == "__main__":
    main()
