"""How well the planner's iteration estimate agrees with the simulation (docs/plans.md).

    python tools/plan_estimates.py                    # every shipped workload at 1, 2, 16 nodes
    python tools/plan_estimates.py --nodes 16 --workload neo_model_f

For each workload in workloads/*.yaml and each node count of the default ZionEX topology, under
the default (torchrec) stack and ``plan: auto``: the plan's shardings and tiers, the planner's
estimated iteration (``zionsim/dlrm/estimate.py``, the figure it compares its candidates by),
the simulated iteration as ``zionsim run`` computes it (flow model, 3 iterations, 1 warm-up),
the estimate's error, and the CPU seconds the estimate took.  Prints a Markdown table.
Nothing is fitted.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODES = (1, 2, 16)


def row(workload: str, nodes: int) -> str:
    """One Markdown row: workload, GPUs, plan, estimate, simulation, error, estimate CPU s."""
    from zionsim.base.errors import InputError
    from zionsim.dlrm.estimate import iteration_estimate
    from zionsim.dlrm.planner import named_plan
    from zionsim.dlrm.stack import apply_stack, resolve_stack
    from zionsim.dlrm.workload import load_workload
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim.run import simulate_run

    cluster, stack = Cluster.load("zionex", nodes=nodes), resolve_stack(None)
    w = apply_stack(load_workload(workload), stack)
    plan = named_plan("auto", cluster, w, stack)
    kinds = sorted({f"{s.kind}{'/' + s.tier if s.tier != 'hbm' else ''}" for s in plan.shards})
    head = f"| {workload} | {nodes * cluster.spec.gpus_per_node} | {', '.join(kinds)} |"
    try:
        sim = simulate_run(cluster, w, plan, iterations=3, warmup=1, stack=stack)
    except InputError as exc:
        return f"{head} — | does not fit: {exc.problem} | — | — |"
    t0 = time.process_time()
    est = iteration_estimate(cluster, w, plan, stack).iteration_s
    cpu = time.process_time() - t0
    s = sim.summary["iteration_time_s"]
    return f"{head} {est * 1e3:.2f} | {s * 1e3:.2f} | {100 * (est / s - 1):+.1f} % | {cpu:.2f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", action="append", help="a workload name (repeatable; default all)")
    ap.add_argument("--nodes", type=int, action="append", help="node count (default 1, 2, 16)")
    args = ap.parse_args()
    names = args.workload or sorted(p.stem for p in (ROOT / "workloads").glob("*.yaml"))
    cols = ("workload", "GPUs", "plan (auto)", "estimated ms", "simulated ms", "error")
    print("| " + " | ".join((*cols, "estimate CPU s")) + " |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name in names:
        for nodes in args.nodes or NODES:
            print(row(name, nodes), flush=True)


if __name__ == "__main__":
    main()
