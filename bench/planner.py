"""Benchmark: planning wall time, and the simulated speed-up of the planner over round-robin.

    python bench/planner.py

1. Wall time of the greedy planner for 4,096 tables (neo_model_a) on 128 and 1,024 GPUs (ZionEX
   16 and 128 nodes), each in its own process, imports excluded.
2. Simulated iteration time with the round-robin baseline and the greedy plan, at 16 ZionEX
   nodes, for neo_model_a, mlperf_dlrm_dcnv2 and neo_model_f (3 iterations, 1 warm-up).
"""

from __future__ import annotations

import sys
import time

from _harness import peak_rss_mb, run_cases

PLAN_CASES = [("plan", 16), ("plan", 128)]
SPEEDUP_CASES = [("speedup", w) for w in ("neo_model_a", "mlperf_dlrm_dcnv2", "neo_model_f")]


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


def main() -> None:
    if len(sys.argv) == 3:
        kind, arg = sys.argv[1], sys.argv[2]
        print(plan_case(int(arg)) if kind == "plan" else speedup_case(arg), flush=True)
    else:
        run_cases(__file__, PLAN_CASES + SPEEDUP_CASES)


if __name__ == "__main__":
    main()
