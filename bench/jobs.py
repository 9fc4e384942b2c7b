"""Benchmark: several jobs on one fabric (``zionsim jobs``) against one run of the same size.

    python bench/jobs.py                 # 8 jobs x 128 GPUs on a 1,024-GPU ZionEX, and one
                                         # 1,024-GPU run; each in its own subprocess
    python bench/jobs.py jobs 8 16       # one case in this process: 8 jobs of 16 nodes
    python bench/jobs.py run 128         # one case: one run of 128 nodes

Cases: ``jobs N K``: N Neo model A jobs of K ZionEX nodes each (placed ``packed``) on one fabric
of N x K nodes, 3 iterations (1 warm-up), as ``zionsim jobs`` runs them: every job planned
(``auto``), the shared simulation, then each job alone on its nodes.  ``run M``: ``zionsim
run``'s simulation of the same workload on M nodes.  Timed inside the process, imports
excluded; ``cpu_s`` is process CPU time (the figure to trust on a shared machine),
``shared_cpu_s`` the part spent planning and in the shared simulation (what compares with one
run of the whole fabric; the alone runs come after).  One line per case:
``case=<name> gpus=<N> wall_s=<x> cpu_s=<c> shared_cpu_s=<s> events=<n> peak_rss_MB=<m>``.
"""

from __future__ import annotations

import sys
import time

from _harness import peak_rss_mb, run_cases

WORKLOAD = "neo_model_a"


def jobs_case(n_jobs: int, nodes: int) -> str:
    """N jobs of ``nodes`` nodes each on one fabric: the shared run and the runs alone."""
    from zionsim.io.scenario import scenario_from_dict
    from zionsim.sim import jobs

    doc = {
        "cluster": {"topology": "zionex", "nodes": n_jobs * nodes},
        "jobs": [
            {"name": f"j{i}", "workload": WORKLOAD, "count": nodes, "iterations": 3}
            for i in range(n_jobs)
        ],
    }
    w0, c0 = time.perf_counter(), time.process_time()
    marks = {}
    together = jobs._together

    def timed(cluster, parts, alike=True):  # the first call is the shared run
        out = together(cluster, parts, alike)
        marks.setdefault("shared_cpu_s", time.process_time() - c0)
        return out

    jobs._together = timed
    result = jobs.simulate_jobs(scenario_from_dict(doc, "bench"))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    slow = max(j["slowdown"] for j in result.jobs)
    return (
        f"case=jobs_{n_jobs}x{nodes} gpus={n_jobs * nodes * 8} wall_s={wall:.2f} cpu_s={cpu:.2f} "
        f"shared_cpu_s={marks['shared_cpu_s']:.2f} events={result.timing['simpy_events']} "
        f"max_slowdown={slow:.4f} peak_rss_MB={peak_rss_mb():.0f}"
    )


def run_case(nodes: int) -> str:
    """One ``zionsim run`` simulation of ``nodes`` nodes."""
    from zionsim.sim.run import run_point

    w0, c0 = time.perf_counter(), time.process_time()
    r = run_point({"topology": "zionex", "nodes": nodes, "workload": WORKLOAD, "iterations": 3})
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return (
        f"case=run_{nodes} gpus={nodes * 8} wall_s={wall:.2f} cpu_s={cpu:.2f} "
        f"shared_cpu_s={cpu:.2f} events={r.timing['simpy_events']} peak_rss_MB={peak_rss_mb():.0f}"
    )


def main(argv: list[str]) -> None:
    if argv and argv[0] == "jobs":
        print(jobs_case(int(argv[1]), int(argv[2])), flush=True)
    elif argv and argv[0] == "run":
        print(run_case(int(argv[1])), flush=True)
    else:
        run_cases(__file__, [("run", 128), ("jobs", 8, 16)])


if __name__ == "__main__":
    main(sys.argv[1:])
