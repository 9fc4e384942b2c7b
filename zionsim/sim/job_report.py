"""What a user reads of a ``zionsim jobs`` run (``sim/jobs.py``): one row per job with its
figures shared and alone and the links where it waited, and the per-link table split by job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from zionsim.network.flows import NetworkStats
from zionsim.sim.engine import RunRecords


@dataclass
class JobsResult:
    """A scenario's outcome: one row per job (``jobs``), each training job's shared and alone
    :class:`~zionsim.sim.run.RunResult`, and the per-link table with bytes and utilisation of
    every job (``links``)."""

    jobs: list[dict]
    links: pd.DataFrame
    shared: dict = field(default_factory=dict)
    alone: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)

    def to_dict(self, top_links: int = 50) -> dict:
        """``{"jobs": [...], "links": [...]}``: the job rows, and the ``top_links`` most used
        links that carry traffic of more than one job, with each job's utilisation."""
        names = [j["name"] for j in self.jobs]
        cols = [f"utilisation:{n}" for n in names]
        shared = self.links[(self.links[[f"bytes:{n}" for n in names]] > 0).sum(axis=1) > 1]
        top = shared.sort_values("utilisation", ascending=False, kind="stable").head(top_links)
        links = [
            {
                "src": r["src"], "dst": r["dst"], "kind": r["kind"],
                "utilisation": float(r["utilisation"]),
                "by_job": {n: float(r[c]) for n, c in zip(names, cols, strict=True) if r[c] > 0},
            }
            for r in top.to_dict("records")
        ]  # fmt: skip
        return {"jobs": self.jobs, "links": links, "shared_links": int(len(shared))}


def gather(cluster, parts: list, shared, alone: dict, t0: float, t_shared: float) -> JobsResult:
    """The :class:`JobsResult` of ``parts`` (``sim.jobs`` parts, one per job) from their shared
    run ``shared`` and their runs alone (``alone``: part key -> outcome); ``t0`` the wall clock
    when the scenario started, ``t_shared`` the seconds its shared run took."""
    from zionsim.sim.run import run_result

    results, solos, rows = {}, {}, []
    for p in parts:
        solo = alone[p.key()]
        if p.job.kind != "train":
            rows.append(_traffic_row(p, shared, solo))
            continue
        runs = []
        for out, n in ((shared, len(parts)), (solo, 1)):
            if out is shared and runs:  # one job only: alone is the shared run
                runs.append(runs[0])
                continue
            rec = _job_records(out, p, n)
            span = max(r.end_s for r in rec.ops) - p.job.start_s
            runs.append((run_result(p.cluster, p.trace, p.memory, rec, _warm(p), t0), span))
        (results[p.job.name], s_span), (solos[p.job.name], a_span) = runs
        rows.append(_train_row(p, results[p.job.name], solos[p.job.name], s_span, a_span))
    links = _links(cluster, parts, shared)
    names = {p.index: p.job.name for p in parts}
    for row, p in zip(rows, parts, strict=True):
        row["waits_on"] = _waits_on(cluster, links, p, names)
        row["overlap_s"] = _overlaps(shared, p, names)
    timing = {"sim_wall_s": time.perf_counter() - t0, "shared_wall_s": t_shared,
              "simpy_events": shared.events}  # fmt: skip
    return JobsResult(rows, links, results, solos, timing)


def _warm(p) -> int:
    return p.job.inputs.options["warmup"]


def _job_records(out, p, n_parts: int) -> RunRecords:
    """Job ``p``'s records of a run, with its own network stats (its link bytes and spans)
    and its own end as the run's length (the whole run's when it ran alone)."""
    rec = out.records[p.index]
    door = out.doors[p.index]
    s = out.net.stats
    spans = [x for x in s.spans if getattr(x.tag, "job", None) == p.index]
    rec.network = NetworkStats(door.link_bytes, s.solves, s.batches, s.flows, s.splits, spans)
    ends = [r.end_s for r in rec.ops] + [r.end_s for r in rec.sync_rounds]
    rec.sim_time_s = out.end_s if n_parts == 1 else max(ends, default=out.end_s)
    rec.events = out.events
    return rec


def _train_row(p, shared, alone, shared_span: float, alone_span: float) -> dict:
    """A training job's row: its figures shared and alone; ``makespan_s``: from its start to
    the end of its last iteration (robust to the transients of few iterations)."""
    s, a = shared.summary, alone.summary
    return {
        "name": p.job.name, "kind": "train", "nodes": list(p.nodes), "gpus": s["gpus"],
        "workload": s["workload"], "weight": p.job.weight, "start_s": p.job.start_s,
        "iteration_time_s": s["iteration_time_s"], "samples_per_s": s["samples_per_s"],
        "alone_iteration_time_s": a["iteration_time_s"],
        "slowdown": _ratio(s["iteration_time_s"], a["iteration_time_s"]),
        "exposed_comm_s": s["exposed_comm_s"], "alone_exposed_comm_s": a["exposed_comm_s"],
        "makespan_s": shared_span, "alone_makespan_s": alone_span,
        "makespan_slowdown": _ratio(shared_span, alone_span),
    }  # fmt: skip


def _traffic_row(p, shared, solo) -> dict:
    b, a = shared.bursts[p.index], solo.bursts[p.index]
    burst = float(np.mean([e - s for s, e in b])) if b else 0.0
    alone = float(np.mean([e - s for s, e in a])) if a else 0.0
    sent = p.job.bytes * len(b)
    span = (b[-1][1] - b[0][0]) if b else 0.0
    return {
        "name": p.job.name, "kind": "traffic", "nodes": list(p.nodes), "weight": p.job.weight,
        "start_s": p.job.start_s, "bursts": len(b), "bytes_sent": sent,
        "achieved_Bps": sent / span if span > 0 else 0.0,
        "burst_time_s": burst, "alone_burst_time_s": alone, "slowdown": _ratio(burst, alone),
        "iteration_time_s": None, "samples_per_s": None, "alone_iteration_time_s": None,
    }  # fmt: skip


def _ratio(shared: float, alone: float) -> float:
    """shared / alone - 1 (0 when there is nothing to compare)."""
    return shared / alone - 1.0 if alone > 0 else 0.0


def _links(cluster, parts: list, out) -> pd.DataFrame:
    """Every directed link: bytes and utilisation in all (``links_table``) and per job
    (``bytes:NAME``, ``utilisation:NAME``), over the whole shared run."""
    from zionsim.sim.results import links_table

    total = sum(out.doors[p.index].link_bytes for p in parts)
    table = links_table(cluster, NetworkStats(total), out.end_s)
    denom = cluster.router.capacity_Bps * out.end_s if out.end_s > 0 else np.inf
    extra = {}
    for p in parts:
        b = out.doors[p.index].link_bytes
        extra[f"bytes:{p.job.name}"] = b
        extra[f"utilisation:{p.job.name}"] = b / denom
    return pd.concat([table, pd.DataFrame(extra)], axis=1)


def _waits_on(cluster, links: pd.DataFrame, p, names: dict, top: int = 5) -> list[dict]:
    """The links job ``p`` shares with other jobs, most loaded first: each link, its total
    utilisation, this job's bytes and the other jobs' bytes on it."""
    mine = links[f"bytes:{p.job.name}"].to_numpy()
    others = {n: links[f"bytes:{n}"].to_numpy() for i, n in names.items() if i != p.index}
    if not others:
        return []
    other_total = sum(others.values())
    shared = np.flatnonzero((mine > 0) & (other_total > 0))
    util = links["utilisation"].to_numpy()
    order = shared[np.argsort(-util[shared], kind="stable")][:top]
    return [
        {
            "link": f"{links['src'].iat[k]}->{links['dst'].iat[k]}",
            "utilisation": float(util[k]),
            "bytes": float(mine[k]),
            "other_jobs_bytes": {n: float(b[k]) for n, b in others.items() if b[k] > 0},
        }
        for k in order.tolist()
    ]


def _overlaps(out, p, names: dict) -> dict:
    """Seconds during which job ``p`` and each other job both had traffic on the network."""
    busy = {i: _union([(s.start_s, s.end_s) for s in out.net.stats.spans
                       if getattr(s.tag, "job", None) == i]) for i in names}  # fmt: skip
    return {n: _intersection(busy[p.index], busy[i]) for i, n in names.items() if i != p.index}


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _intersection(a: list, b: list) -> float:
    """Length of the intersection of two sorted lists of disjoint intervals."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
