"""Benchmark: wall time, simulated events and peak RSS of collectives at 8 to 16,384 GPUs.

    python bench/collectives.py            # all cases, each in its own subprocess

Each case: ZionEX with 1, 16, 128, 512 or 2,048 nodes, all_to_all and all_reduce of 64 MiB per
GPU, on the flow model (max-min sharing re-solved as flows start and end).  Timed inside the
process around cluster build + simulation, imports excluded.  One line per case:
``case=<name> gpus=<N> wall_s=<x> sim_us=<t> events=<n> peak_rss_MB=<m> flows=<f>``,
where sim_us is the simulated collective time, events
counts simpy events and flows the point-to-point flows the network model carried (it handles
them as arrays, a batch per collective phase, so they cost array passes rather than events).
"""

from __future__ import annotations

import sys
import time

from _harness import peak_rss_mb, run_cases

CASES = [(op, nodes) for nodes in (1, 16, 128, 512, 2048) for op in ("all_to_all", "all_reduce")]


def run_case(op: str, nodes: int) -> str:
    from zionsim.hardware.cluster import Cluster
    from zionsim.network.simulate import simulate_collective

    t0 = time.perf_counter()
    cluster = Cluster.load("zionex", nodes=nodes)
    r = simulate_collective(cluster, op, 64 * 2**20)
    wall = time.perf_counter() - t0
    rss_mb = peak_rss_mb()
    return (
        f"case={op}_zionex_{nodes}n gpus={nodes * 8} wall_s={wall:.3f} "
        f"sim_us={r.time_s * 1e6:.1f} events={r.events} peak_rss_MB={rss_mb:.0f} flows={r.flows}"
    )


def main() -> None:
    if len(sys.argv) == 3:
        print(run_case(sys.argv[1], int(sys.argv[2])), flush=True)
    else:
        run_cases(__file__, CASES)


if __name__ == "__main__":
    main()
