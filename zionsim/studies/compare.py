"""A-vs-B comparison of two runs: where the difference in iteration time comes from.

:func:`attribute` takes two run summaries (the mappings behind ``summary.json``) and splits each
iteration time into components that sum to it, so the differences B − A sum to the difference in
iteration time.  Pure: no files, no printing (``zionsim compare`` reads and writes).

Components, each in seconds per iteration (definitions also in ``docs/outputs.md``):

1. **Compute** (``embedding``, ``gemm``, ``interaction``, ``optimizer``): the balanced part of the
   category's time on the critical path, ``min(critical_path_s, busy_s)`` — what the average rank
   spends on it, as far as it is on the critical path.
2. **Exposed communication** (``all_to_all``, ``all_reduce``, ``reduce_scatter``, ``all_gather``,
   ``host_transfer``, ``sync``): the collective's time on the critical path, i.e. communication
   that compute did not hide.  Their subtotal is the ``exposed_communication`` row.  Any other
   category of the breakdown (e.g. ``parameter_server``) is communication too and gets its own
   row after these.
3. **Host** (``framework``): host time per iteration the GPUs wait for (a stack's fitted
   host thread: batch preparation and kernel launches), group ``host``: neither
   compute nor communication, so it is not folded into either subtotal.
4. **Imbalance**: critical-path compute beyond the rank average,
   ``Σ max(0, critical_path_s − busy_s)`` over compute categories (the slowest rank's excess over
   the mean, e.g. a GPU with more embedding rows), plus ``idle`` gaps on the critical path.

Every row also carries the busy time of its category (mean over ranks, hidden or not), so hidden
communication shows as busy time that is not on the critical path.
"""

from __future__ import annotations

import pandas as pd

COMPUTE = ("embedding", "gemm", "interaction", "optimizer")
COMMUNICATION = (
    "all_to_all",
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "host_transfer",
    "sync",
)
#: host time the GPUs wait for: its own row and group, never communication
HOST = ("framework",)
#: rows of the attribution table, in order; the last two are subtotal and total
ROWS = (
    *COMPUTE, *HOST, *COMMUNICATION, "imbalance", "exposed_communication", "iteration_time"
)  # fmt: skip
COLUMNS = (
    "component",
    "group",
    "a_s",
    "b_s",
    "delta_s",
    "delta_pct_of_a",
    "share_of_delta",
    "a_busy_s",
    "b_busy_s",
)


def nested(summary) -> dict:
    """A summary mapping from a flattened row too (``breakdown_s.gemm`` → ``breakdown_s``)."""
    s = dict(summary)
    for key in ("breakdown_s", "busy_s"):
        if key not in s:
            prefix = key + "."
            s[key] = {
                k[len(prefix) :]: float(v)
                for k, v in s.items()
                if isinstance(k, str) and k.startswith(prefix) and v == v
            }
    return s


def components(summary: dict) -> dict[str, float]:
    """Seconds per iteration per component (see module docstring); they sum to the iteration.

    >>> s = {"iteration_time_s": 3.0, "breakdown_s": {"gemm": 2.0, "all_to_all": 0.5,
    ...      "idle": 0.5}, "busy_s": {"gemm": 1.5, "all_to_all": 0.9}}
    >>> components(s)["gemm"], components(s)["imbalance"]
    (1.5, 1.0)
    """
    summary = nested(summary)
    cp, busy = summary["breakdown_s"], summary.get("busy_s", {})
    out = {}
    imbalance = float(cp.get("idle", 0.0))
    for cat in COMPUTE:
        on_path = float(cp.get(cat, 0.0))
        balanced = min(on_path, float(busy.get(cat, on_path)))
        out[cat] = balanced
        imbalance += on_path - balanced
    for cat in (*HOST, *COMMUNICATION):
        out[cat] = float(cp.get(cat, 0.0))
    out["imbalance"] = imbalance
    for cat in _extra(summary):
        out[cat] = float(cp[cat])
    return out


def _extra(*summaries: dict) -> list[str]:
    """Breakdown categories of the summaries outside the known ones, sorted."""
    known = set(COMPUTE) | set(HOST) | set(COMMUNICATION) | {"idle"}
    return sorted({k for s in summaries for k in s["breakdown_s"] if k not in known})


def _group(component: str, comm) -> str:
    if component in COMPUTE:
        return "compute"
    if component in HOST:
        return "host"
    if component in comm or component == "exposed_communication":
        return "exposed_communication"
    return "imbalance" if component == "imbalance" else "total"


def attribute(a: dict, b: dict) -> pd.DataFrame:
    """One row per component (:data:`ROWS`, plus any extra communication category before
    ``imbalance``): A's and B's seconds, B − A, and its share.  ``a``/``b`` are summaries or
    flattened rows of a sweep table (a pandas Series works).

    ``delta_pct_of_a`` is B − A in percent of A's iteration time; ``share_of_delta`` is the
    row's fraction of the total B − A (NaN when the iteration times are equal).  The component
    rows sum to ``iteration_time`` in every numeric column that is additive.
    """
    a, b = nested(a), nested(b)
    extra = _extra(a, b)
    comm = (*COMMUNICATION, *extra)
    ca, cb = components(a), components(b)
    for c in (ca, cb):
        c.update({k: c.get(k, 0.0) for k in extra})
        c["exposed_communication"] = sum(c[k] for k in comm)
    ca["iteration_time"], cb["iteration_time"] = a["iteration_time_s"], b["iteration_time_s"]
    busy_a, busy_b = a.get("busy_s", {}), b.get("busy_s", {})
    total = cb["iteration_time"] - ca["iteration_time"]
    rows = []
    order = (*COMPUTE, *HOST, *comm, "imbalance", "exposed_communication", "iteration_time")
    for comp in order:
        delta = cb[comp] - ca[comp]
        rows.append(
            {
                "component": comp,
                "group": _group(comp, comm),
                "a_s": ca[comp],
                "b_s": cb[comp],
                "delta_s": delta,
                "delta_pct_of_a": 100 * delta / ca["iteration_time"]
                if ca["iteration_time"]
                else 0.0,
                "share_of_delta": delta / total if total else float("nan"),
                "a_busy_s": _busy(busy_a, comp, comm),
                "b_busy_s": _busy(busy_b, comp, comm),
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _busy(busy: dict, comp: str, comm) -> float:
    """Busy seconds behind a row: the category's, the sum over communication, or NaN."""
    if comp in busy:
        return float(busy[comp])
    if comp == "exposed_communication":
        return float(sum(busy.get(k, 0.0) for k in comm))
    return float("nan")


def headline(a: dict, b: dict, names: tuple[str, str] = ("A", "B")) -> dict:
    """Iteration times, samples/s and B's speed-up over A (A's time / B's time)."""
    ta, tb = a["iteration_time_s"], b["iteration_time_s"]
    return {
        "a": names[0],
        "b": names[1],
        "a_run": _describe(a),
        "b_run": _describe(b),
        "a_iteration_time_s": ta,
        "b_iteration_time_s": tb,
        "a_samples_per_s": a.get("samples_per_s"),
        "b_samples_per_s": b.get("samples_per_s"),
        "speedup_b_over_a": ta / tb if tb else float("nan"),
    }


def stragglers(a: dict, b: dict) -> dict | None:
    """With variability on either side (``sim/varied.py``): each side's straggler ranks, its
    step-time p95 and, per collective, the seconds per iteration the mean rank waits there for
    the slowest, with B − A; None when neither run had variability.  The slowdown itself shows
    in the attribution as ``imbalance`` (the slow ranks' compute beyond the mean) and as the
    collectives the others wait at."""
    if "straggler_wait_s" not in a and "straggler_wait_s" not in b:
        return None
    wa = (a.get("straggler_wait_s") or {}).get("by_collective", {})
    wb = (b.get("straggler_wait_s") or {}).get("by_collective", {})
    rows = {
        name: {"a_s": wa.get(name, 0.0), "b_s": wb.get(name, 0.0),
               "delta_s": wb.get(name, 0.0) - wa.get(name, 0.0)}
        for name in sorted(set(wa) | set(wb))
    }  # fmt: skip

    def p95(s: dict):
        d = s.get("distribution")
        return d["iteration_time_s"]["p95"] if d else s.get("iteration_time_s")

    return {
        "a_straggler_ranks": (a.get("variability") or {}).get("straggler_ranks", []),
        "b_straggler_ranks": (b.get("variability") or {}).get("straggler_ranks", []),
        "a_p95_iteration_time_s": p95(a),
        "b_p95_iteration_time_s": p95(b),
        "wait_by_collective": rows,
        "a_wait_s": sum(r["a_s"] for r in rows.values()),
        "b_wait_s": sum(r["b_s"] for r in rows.values()),
    }


def _describe(s: dict) -> str:
    """``workload on topology x N nodes (G GPUs)`` from a summary."""
    where = f"{s.get('topology')} x {s.get('nodes')} nodes ({s.get('gpus')} GPUs)"
    return f"{s.get('workload')} on {where}"


def largest_change(table: pd.DataFrame) -> str:
    """The component row (not subtotal/total) whose B − A has the largest magnitude."""
    rows = table[~table["component"].isin(("exposed_communication", "iteration_time"))]
    return str(rows.loc[rows["delta_s"].abs().idxmax(), "component"])
