"""A run with variability: realisations, their distribution, straggler waits, faults, goodput.

:func:`execute_varied` runs what ``sim/run.py`` runs, on the cluster with its faults applied
(``hardware/faults.py``), once per realisation of the variability (``sim/variability.py``):
realisation ``n`` draws from ``(seed, n)``.  The first realisation is the run the summary's
figures, breakdown and events describe; ``summary.json`` gains

- ``variability``: the spec, the seed and realisation 0's straggler ranks;
- ``distribution``: mean, p50, p95, p99 and a 95 % confidence interval of the mean of the
  iteration time and samples/s over every measured iteration of every realisation
  (:func:`distribution`);
- ``straggler_wait_s``: per collective, the seconds per iteration the mean rank waits at it
  for the last member to arrive (:func:`straggler_wait`);
- ``faults``: what failed and how many device pairs were rerouted;
- ``goodput`` when the variability asks for it (``sim/goodput.py``).

A job the faults stop (a failed node, a route no proxy repairs) raises ``JobStopped``, which
``sim/run.py`` turns into a result whose summary says ``"status": "stopped"`` and why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from zionsim.base.bounds import require_finite
from zionsim.hardware import faults as hw_faults
from zionsim.sim.engine import simulate_trace
from zionsim.sim.results import Analysis
from zionsim.sim.variability import VariabilitySpec, check_against, straggler_ranks


def execute_varied(inputs, cluster, trace, memory, execute):
    """The :class:`~zionsim.sim.run.RunResult` of ``inputs`` with its variability (module
    docstring); ``execute(cluster, simulate)`` gathers a run's result (``sim/run.py``).  A job
    the faults stop raises :class:`~zionsim.hardware.faults.JobStopped`."""
    o = inputs.options
    var = inputs.variability or VariabilitySpec()
    seed, n = o["seed"] or 0, o["samples"]
    iterations, warmup = o["iterations"], o["warmup"]
    file = o["variability"] or "command line"
    check_against(var, trace.ranks, cluster.spec.nodes, file)
    recs: list = []

    def simulate(c, t, iterations, realisation=0):
        rec = simulate_trace(c, t, iterations=iterations, variability=var, seed=seed,
                             realisation=realisation)  # fmt: skip
        recs.append(rec)
        return rec

    parsed = [hw_faults.parse_fault(t, file) for t in var.faults]
    faulted = hw_faults.apply(cluster, parsed, var.links, file)
    result = execute(faulted, simulate)
    times = [Analysis(recs[0], warmup).iteration_times()]
    wait = straggler_wait(recs[0], trace, warmup)
    recs.clear()
    for r in range(1, n):
        if not var.random:  # nothing is drawn: every realisation is realisation 0
            times.append(times[0])
            continue
        rec = simulate(faulted, trace, iterations, r)
        times.append(Analysis(rec, warmup).iteration_times())
        recs.clear()
    s = result.summary
    batch = s["global_batch"]
    g = cluster.spec.gpus_per_node
    factor = straggler_ranks(var, trace.ranks, g, np.random.default_rng([seed, 0]))
    s["variability"] = {
        **var.to_dict(),
        "seed": seed,
        "straggler_ranks": np.flatnonzero(factor > 1).tolist(),
    }
    s["straggler_wait_s"] = wait
    s["distribution"] = distribution(times, batch, seed)
    result.samples = samples_table(times, batch, warmup)
    if var.faults:
        s["faults"] = {
            "failed": list(var.faults),
            "rerouted_pairs": faulted.router.rerouted_pairs,  # faults: a FaultedRouter
        }
    if var.goodput is not None:
        from zionsim.sim.goodput import goodput_block

        s["goodput"] = goodput_block(var.goodput, cluster, memory, s["samples_per_s"], file)
    require_finite(s, "summary.json")
    return result


def samples_table(times: list[np.ndarray], global_batch: int, warmup: int) -> pd.DataFrame:
    """One row per measured iteration of every realisation: realisation, iteration, seconds
    and samples/s (``samples.csv``)."""
    return pd.DataFrame(
        [
            {"realisation": r, "iteration": warmup + i, "iteration_time_s": float(x),
             "samples_per_s": global_batch / float(x)}
            for r, t in enumerate(times)
            for i, x in enumerate(t)
        ]
    )  # fmt: skip


def straggler_wait(rec, trace, warmup: int) -> dict:
    """Per collective (by name), the seconds per measured iteration the mean rank spends
    waiting at it for its last member (the slowest rank) to arrive, and their ``total``;
    ``worst_rank_s``: the most any one rank waits per iteration."""
    coll = np.full(len(trace.ops), -1, dtype=np.int64)
    names: dict[int, str] = {}
    for op in trace.ops:
        if op.kind == "collective":
            coll[op.id] = op.args["coll"]
            names.setdefault(op.args["coll"], op.name)
    rows = np.array([(r.iteration, r.op, r.start_s) for r in rec.ops if r.iteration >= warmup
                     and coll[r.op] >= 0], dtype=float).reshape(-1, 3)  # fmt: skip
    measured = max(1, rec.iterations - warmup)
    by_name: dict[str, float] = {}
    per_rank = np.zeros(trace.ranks)
    for it, op, start in rows:
        cr = rec.collectives.get((int(it), int(coll[int(op)])))
        if cr is None:
            continue
        wait = max(0.0, cr.start_s - start)
        name = names[int(coll[int(op)])]
        by_name[name] = by_name.get(name, 0.0) + wait
        per_rank[trace.ops[int(op)].rank] += wait
    scale = 1.0 / (measured * trace.ranks)
    out = {k: v * scale for k, v in sorted(by_name.items())}
    return {
        "by_collective": out,
        "total": float(sum(out.values())),
        "worst_rank_s": float(per_rank.max() / measured) if len(per_rank) else 0.0,
    }


def distribution(times: list[np.ndarray], global_batch: int, seed: int) -> dict:
    """Statistics of iteration times (one array per realisation) and of samples/s: ``mean``,
    ``p50``, ``p95``, ``p99`` over every measured iteration, and ``ci95``: Student's t interval
    of the mean over realisation means (over one realisation's iterations when there is one)."""
    units = [t.mean() for t in times] if len(times) > 1 else list(times[0])
    rates = [global_batch / t for t in times]
    rate_units = [r.mean() for r in rates] if len(times) > 1 else list(rates[0])
    return {
        "samples": len(times),
        "iterations_per_sample": int(len(times[0])),
        "seed": seed,
        "iteration_time_s": _stats(np.concatenate(times), units),
        "samples_per_s": _stats(np.concatenate(rates), rate_units),
    }


def _stats(values: np.ndarray, units) -> dict:
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "mean": float(values.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "ci95": ci95(np.asarray(units, dtype=float)),
    }


def ci95(units: np.ndarray) -> list[float]:
    """Student's t 95 % confidence interval of the mean of ``units`` (a point when fewer than
    two, or when they are all equal)."""
    m = float(units.mean())
    if len(units) < 2:
        return [m, m]
    from scipy.stats import t

    half = float(t.ppf(0.975, len(units) - 1) * units.std(ddof=1) / np.sqrt(len(units)))
    return [m - half, m + half]
