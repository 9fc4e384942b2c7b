"""The variability study (``zionsim studies variability``, ``docs/variability.md``).

Two parts:

1. ``stragglers``: p50/p95/p99 step time of MLPerf DLRM on ZionEX at 128 and 1,024 GPUs,
   against the fraction of ranks that straggle (drawn per realisation) and their slowdown
   factor (1.0: none, the reference), with a little kernel noise (cv 5 %) so that a step time
   has a distribution; four realisations of two measured iterations per point.
2. ``goodput``: useful fraction and goodput of the same job at 1,024 GPUs against the
   checkpoint interval, with the Llama 3 component failure rates (``sim/goodput.py``), and
   CPR-style partial recovery.  The storage bandwidth (100 GB/s for the job) and the relaunch
   time (10 min) are the study's assumptions, not measurements: change them with
   ``variability.goodput.*`` in a sweep.

Pure tables and figures of the sweeps' result tables; ``standard.py`` runs and writes them.
"""

from __future__ import annotations

import pandas as pd

_TWO = {"iterations": 3, "warmup": 1}
#: the goodput part's assumptions (module docstring)
GOODPUT = {"storage_bw": "100 GB/s", "relaunch": "10 min",
           "partial_recovery": {"max_lost_fraction": 0.01}}  # fmt: skip
INTERVALS = ["5 min", "10 min", "20 min", "40 min", "80 min", "160 min", "320 min"]


def variability_sweeps(fast: bool) -> dict:
    """The study's sweeps (module docstring); ``fast``: the tiny workload on one or two nodes."""
    base = {"topology": "zionex", "workload": "tiny" if fast else "mlperf_dlrm", **_TWO}
    nodes = [1, 2] if fast else [16, 128]
    return {
        "stragglers": {
            "base": {**base, "stack": "bare" if fast else None, "samples": 2 if fast else 4,
                     "variability.kernel_cv": 0.05},
            "grid": {
                "nodes": nodes,
                "variability.stragglers.fraction": [0.01, 0.1],
                "variability.stragglers.factor": [1.0, 1.5, 2.0] if not fast else [1.0, 2.0],
            },
        },
        "goodput": {
            "base": {**base, "nodes": nodes[-1], "variability.goodput": GOODPUT},
            "grid": {"variability.goodput.checkpoint_interval": INTERVALS[::3] if fast
                     else INTERVALS},
        },
    }  # fmt: skip


def straggler_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per GPU count, straggler fraction and factor: step time p50/p95/p99, the mean rank's
    wait for the slowest, and the p95 relative to the same GPU count and fraction at factor 1."""
    ok = table[table["status"] == "ok"]
    d = "distribution.iteration_time_s."
    out = pd.DataFrame(
        {
            "gpus": ok["gpus"],
            "straggler_fraction": ok["variability.stragglers.fraction"].astype(float),
            "straggler_factor": ok["variability.stragglers.factor"].astype(float),
            "p50_s": ok[d + "p50"],
            "p95_s": ok[d + "p95"],
            "p99_s": ok[d + "p99"],
            "mean_s": ok[d + "mean"],
            "straggler_wait_s": ok["straggler_wait_s.total"],
        }
    )
    ref = out[out["straggler_factor"] == 1.0].set_index(["gpus", "straggler_fraction"])["p95_s"]
    keys = zip(out["gpus"], out["straggler_fraction"], out["p95_s"], strict=True)
    out["p95_slowdown"] = [p / ref.get((g, f), float("nan")) for g, f, p in keys]
    out["status"] = "ok"
    return out.sort_values(["gpus", "straggler_fraction", "straggler_factor"], ignore_index=True)


def _recovery_frame(rows: pd.DataFrame, recovery: str, prefix: str) -> pd.DataFrame:
    """The columns every recovery row has, read from ``rows``' goodput fields under ``prefix``."""
    return pd.DataFrame(
        {
            "recovery": recovery,
            "gpus": rows["gpus"],
            "checkpoint_interval_min": rows[prefix + "checkpoint_interval_s"] / 60.0,
            "useful_fraction": rows[prefix + "useful_fraction"],
            "goodput_samples_per_s": rows[prefix + "goodput_samples_per_s"],
            "samples_per_s": rows["samples_per_s"],
        }
    )


def goodput_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint interval: useful fraction and goodput under full recovery, with the
    optimum, Young's and Daly's intervals; one row for CPR-style partial recovery."""
    ok = table[table["status"] == "ok"]
    g = "goodput."
    full = _recovery_frame(ok, "full", g)
    for name in ("optimal", "young", "daly"):
        full[name + "_interval_min"] = ok[g + name + "_interval_s"] / 60.0
    full["checkpoint_write_s"] = ok[g + "checkpoint_write_s"]
    full["failures_per_day"] = ok[g + "failures_per_day"]
    partial = _recovery_frame(ok.iloc[:1], "partial (CPR)", g + "partial_recovery.")
    out = pd.concat([full, partial], ignore_index=True)
    out["status"] = "ok"
    return out.sort_values(["recovery", "checkpoint_interval_min"], ignore_index=True)


def variability_figures(tables: dict) -> dict:
    """``{file stem: axes}``: p95 slowdown against straggler factor, useful fraction against
    checkpoint interval."""
    from zionsim.io import plots_study as ps

    st = straggler_table(tables["stragglers"])
    gt = goodput_table(tables["goodput"])
    p95 = ps.plot_scaling(st, x="straggler_factor", y="p95_slowdown",
                          by=["gpus", "straggler_fraction"])  # fmt: skip
    p95.set_title("p95 step time (relative to no stragglers) vs straggler factor")
    good = ps.plot_scaling(gt, x="checkpoint_interval_min", y="useful_fraction", by="recovery")
    best = gt["optimal_interval_min"].dropna()
    if len(best):
        good.axvline(float(best.iloc[0]), color="grey", linestyle=":", label="optimum (Daly)")
        good.legend(fontsize=8)
    good.set_title("useful fraction of wall time vs checkpoint interval")
    return {"p95_vs_stragglers": p95, "goodput_vs_interval": good}
