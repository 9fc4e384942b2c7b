"""Benchmark: wall time per simulated iteration, events and peak RSS of a DLRM run.

    python bench/run.py            # neo_model_a on ZionEX at 1, 16 and 128 nodes

Each case runs in its own subprocess (so peak RSS is its own): build the cluster, lower the
workload, simulate 3 iterations (1 warm-up) with the flow network model, analyse.  Timed inside
the process, imports excluded; ``wall_s`` is the total divided by the 3 simulated iterations.
One line per case: ``case=<name> gpus=<N> wall_s=<x> events=<n> peak_rss_MB=<m>``.
"""

from __future__ import annotations

import sys
import time

from _harness import peak_rss_mb, run_cases

ITERATIONS = 3
CASES = (1, 16, 128)


def run_case(nodes: int) -> str:
    from zionsim.base.errors import CapacityError
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim.run import simulate_run

    t0 = time.perf_counter()
    try:
        r = simulate_run(
            Cluster.load("zionex", nodes=nodes),
            load_workload("neo_model_a"),
            iterations=ITERATIONS,
            warmup=1,
        )
    except CapacityError as exc:  # 1.6 TB of tables cannot sit in 8 GPUs' HBM without UVM
        return f'case=neo_model_a_zionex_{nodes}n gpus={nodes * 8} skipped="{exc.problem}"'
    wall = (time.perf_counter() - t0) / ITERATIONS
    rss_mb = peak_rss_mb()
    return (
        f"case=neo_model_a_zionex_{nodes}n gpus={nodes * 8} wall_s={wall:.3f} "
        f"events={r.timing['simpy_events']} peak_rss_MB={rss_mb:.0f}"
    )


def main() -> None:
    if len(sys.argv) == 2:
        print(run_case(int(sys.argv[1])), flush=True)
    else:
        run_cases(__file__, [(n,) for n in CASES])


if __name__ == "__main__":
    main()
