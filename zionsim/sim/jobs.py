"""Several jobs on one fabric: training jobs and background traffic in one engine and network.

A :class:`Scenario` is a cluster and a list of jobs (``docs/jobs.md``).  A training job is a run
(``sim/inputs.py``: the options ``zionsim run`` takes) placed on some of the cluster's nodes; a
traffic job is a byte stream between node sets (checkpoint writes, data loading).  Every job's
ranks run in one simpy environment on one :class:`~zionsim.network.flows.FlowNetwork` over the
whole cluster: flows of different jobs share links max-min fairly, each flow's weight multiplied
by its job's traffic-class ``weight`` (weighted max-min: on a shared bottleneck a job of weight
3 gets three times the rate per flow of a job of weight 1).

Modelling assumptions:

1. A training job is planned and lowered as ``zionsim run`` would plan it on a cluster of its
   own node count (same topology and overrides), then runs on its placed nodes of the shared
   fabric (``hardware.cluster.NodeSubset``): its rank ``r`` is GPU ``r % g`` of its
   ``r // g``-th node.  Its NCCL algorithm choices are made on those nodes.
2. Jobs meet only on the network: GPUs are never shared (two jobs on one node is refused), and
   host CPU, PCIe and memory links are shared only by the flows that cross them.
3. Alike ranks are stepped once per job (``templates.py``; a class never spans jobs); where the
   shared fabric tells a class's copies apart the whole scenario is run again with every rank on
   its own, as a single run is.
4. A traffic job sends ``bytes`` every ``period_s`` (a burst starts at its period or when the
   previous one ended, whichever is later) as flows from every GPU of its source nodes to the
   GPUs of its destination nodes (round-robin pairing), together capped at ``rate_Bps``; it runs
   from its start until every training job has ended (or for ``duration_s``).
5. A job's slowdown compares its iteration time with the same job run alone on the same nodes
   of the same fabric (the other jobs absent), computed here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from zionsim.base.errors import InputError
from zionsim.dlrm.op_costs import op_durations, stack_compute_model
from zionsim.dlrm.stack import BARE
from zionsim.hardware.cluster import Cluster, on_nodes
from zionsim.hardware.graph import fabric_shape, nic_leaf
from zionsim.network.flows import FlowNetwork, NetworkStats
from zionsim.network.simulate import CountingEnvironment
from zionsim.sim.engine import REDO, RunRecords, check_cluster, finish_trace, start_trace
from zionsim.sim.records import SpanTag

#: placement policies of a job given as a node count
PLACEMENTS = ("packed", "spread", "random")
#: kinds of job
KINDS = ("train", "traffic")


@dataclass(frozen=True)
class JobSpec:
    """One job of a scenario.  ``inputs``: its ``sim.inputs.RunInputs`` (training jobs);
    ``nodes`` (explicit, rank order) or ``count`` placed by ``placement`` (``seed`` for
    ``random``); ``start_s`` its start offset; ``weight`` its traffic class.  Traffic jobs:
    ``src``/``dst`` node lists or job names, ``bytes`` per burst every ``period_s`` at up to
    ``rate_Bps`` (inf: as fast as the fabric allows), for ``duration_s`` (None: until training
    ends)."""

    name: str
    kind: str = "train"
    inputs: object = None
    nodes: tuple[int, ...] | None = None
    count: int | None = None
    placement: str = "packed"
    seed: int = 0
    start_s: float = 0.0
    weight: float = 1.0
    src: tuple = ()
    dst: tuple = ()
    bytes: float = 0.0
    period_s: float = 0.0
    rate_Bps: float = float("inf")
    duration_s: float | None = None


@dataclass(frozen=True)
class Scenario:
    """A cluster spec and its jobs (``io.scenario.load_scenario`` reads one from YAML)."""

    cluster: object
    jobs: tuple[JobSpec, ...]
    file: str = "scenario"


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


# ------------------------------------------------------------------------------ placement
def node_leaves(spec) -> list[tuple[int, ...]]:
    """Each node's leaf switches (the leaves its NICs attach to; one tuple per node)."""
    so = spec.scale_out
    if spec.nodes == 1 or so.tiers == 1:
        return [(0,)] * spec.nodes
    shape = fabric_shape(spec)
    return [
        tuple(sorted({nic_leaf(spec, k, j, shape) for j in range(so.nics_per_node)}))
        for k in range(spec.nodes)
    ]


def place(scenario: Scenario) -> dict[str, tuple[int, ...]]:
    """Each training job's nodes: explicit lists first, then counts in file order by their
    policy among the nodes left: ``packed`` on the fewest leaf groups (the smallest group that
    holds the job, else the fullest groups first), ``spread`` round-robin over leaf groups
    (those with the most free nodes first, so successive jobs spread over the whole fabric),
    ``random`` a seeded sample.  InputError when the nodes run out or two jobs share one."""
    spec, file = scenario.cluster, scenario.file
    owner: dict[int, str] = {}
    out: dict[str, tuple[int, ...]] = {}
    trains = [(i, j) for i, j in enumerate(scenario.jobs) if j.kind == "train"]
    for i, j in trains:
        if j.nodes is None:
            continue
        for k in j.nodes:
            if k in owner:
                raise InputError(
                    f"node {k} is already used by job {owner[k]!r}", file=file,
                    field=f"jobs[{i}].nodes", allowed="each node in at most one training job",
                )  # fmt: skip
            owner[k] = j.name
        out[j.name] = tuple(j.nodes)
    groups: dict[tuple, list[int]] = {}
    for k, leaves in enumerate(node_leaves(spec)):
        groups.setdefault(leaves, []).append(k)
    for i, j in trains:
        if j.nodes is not None:
            continue
        free = {g: [k for k in ks if k not in owner] for g, ks in groups.items()}
        left = sum(len(v) for v in free.values())
        if j.count > left:
            raise InputError(
                f"job {j.name!r} needs {j.count} nodes but {left} are free", file=file,
                field=f"jobs[{i}].count",
                allowed=f"1..{left}" if left else "fewer jobs, or more cluster nodes",
            )  # fmt: skip
        nodes = _pick(j, [v for v in free.values() if v])
        owner.update({k: j.name for k in nodes})
        out[j.name] = nodes
    return out


def _pick(job: JobSpec, free: list[list[int]]) -> tuple[int, ...]:
    """``job.count`` nodes from the free nodes of each leaf group (groups in leaf order)."""
    n = job.count
    if job.placement == "random":
        pool = np.array(sorted(k for g in free for k in g))
        picked = np.random.default_rng(job.seed).choice(pool, n, replace=False)
        return tuple(sorted(picked.tolist()))
    if job.placement == "spread":  # the leaves with the most free nodes first, in turn
        out, queues = [], [list(g) for g in sorted(free, key=len, reverse=True)]
        while len(out) < n:
            for q in queues:
                if q and len(out) < n:
                    out.append(q.pop(0))
        return tuple(sorted(out))
    fits = [g for g in free if len(g) >= n]
    if fits:  # best fit: the smallest group that holds the whole job
        return tuple(min(fits, key=len)[:n])
    out = []
    for g in sorted(free, key=len, reverse=True):  # stable: leaf order among equals
        out += g[: n - len(out)]
        if len(out) == n:
            break
    return tuple(sorted(out))


# ------------------------------------------------------------------------------ the network
class JobTag(SpanTag):
    """A :class:`~zionsim.sim.records.SpanTag` that knows its job (``job``: its index)."""

    job: int = -1


def _tagged(tag, job: int):
    if tag is None:
        return None
    t = JobTag(*tag)
    t.job = job
    return t


class JobNetwork:
    """One job's door to the shared network: its flows' weights times the job's ``weight``,
    its spans tagged with its index, the bytes it puts on each link counted apart."""

    def __init__(self, net: FlowNetwork, job: int, weight: float = 1.0):
        self.net, self.job, self.weight = net, job, float(weight)
        self.link_bytes = np.zeros(len(net.capacity))

    def __getattr__(self, name):
        return getattr(self.net, name)

    def transfer(self, routes, nbytes, latency_s, weight=None, tag=None, cap=None, coalesce=False):
        """``FlowNetwork.transfer`` for this job (class docstring)."""
        if self.weight != 1.0:
            w = np.ones(len(np.atleast_1d(nbytes))) if weight is None else np.asarray(weight)
            weight = w * self.weight
        stats = self.net.stats
        total, stats.link_bytes = stats.link_bytes, self.link_bytes
        try:
            return self.net.transfer(
                routes, nbytes, latency_s, weight=weight, tag=_tagged(tag, self.job), cap=cap,
                coalesce=coalesce,
            )  # fmt: skip
        finally:
            stats.link_bytes = total


# ------------------------------------------------------------------------------ simulation
@dataclass
class _Part:
    """A job ready to run: its index, spec, nodes, view of the cluster, and (training) its
    trace, memory table and op durations, or (traffic) its routes and their latencies."""

    index: int
    job: JobSpec
    nodes: tuple[int, ...]
    cluster: object
    trace: object = None
    memory: object = None
    durations: np.ndarray | None = None
    routes: np.ndarray | None = None
    latency: np.ndarray | None = None

    def key(self) -> tuple:
        """What decides this job's run alone (everything but its name)."""
        j = self.job
        opts = None if j.inputs is None else repr((j.inputs.options, j.inputs.overrides))
        return (j.kind, opts, self.nodes, j.start_s, j.weight, j.src, j.dst, j.bytes,
                j.period_s, j.rate_Bps, j.duration_s)  # fmt: skip


@dataclass
class _Outcome:
    """What one simulation of some jobs did: per job its records (training) or bursts
    (traffic), its door to the network, the end of training and of the simulation."""

    records: dict
    bursts: dict
    doors: dict
    net: FlowNetwork
    events: int
    train_end_s: float
    end_s: float


def _together(cluster, parts: list[_Part], alike: bool = True) -> _Outcome:
    """Run ``parts`` in one environment and network (module docstring); with templates unless
    ``alike`` is False, done again without them where they broke."""
    try:
        return _simulate_parts(cluster, parts, alike)
    except REDO:
        if not alike:
            raise
        return _simulate_parts(cluster, parts, False)


def _simulate_parts(cluster, parts: list[_Part], alike: bool) -> _Outcome:
    env = CountingEnvironment()
    net = FlowNetwork(env, cluster.router.capacity_Bps, router=cluster.router)
    records, bursts, doors, tpls, trained = {}, {}, {}, {}, []
    for p in parts:
        door = doors[p.index] = JobNetwork(net, p.index, p.job.weight)
        if p.job.kind != "train":
            continue
        it = p.job.inputs.options["iterations"]
        rec = records[p.index] = RunRecords(p.trace, it, p.durations)
        tpls[p.index], procs = start_trace(env, door, p.cluster, rec, None, True, alike,
                                           p.job.start_s)  # fmt: skip
        trained += procs
    done = simpy.AllOf(env, trained)
    for p in parts:
        if p.job.kind == "traffic":
            bursts[p.index] = []
            env.process(_stream(env, doors[p.index], p, done, bursts[p.index]))
    ends = []
    done.callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    for i, rec in records.items():
        finish_trace(rec, tpls[i])
    train_end = ends[0] if ends else env.now
    return _Outcome(records, bursts, doors, net, env.events_scheduled, train_end, env.now)


def _stream(env, door: JobNetwork, p: _Part, trained: simpy.Event, bursts: list):
    """A traffic job (assumption 4): bursts of ``bytes`` every ``period_s`` until training
    has ended (``trained``) or for ``duration_s``; each burst's (start, end) in ``bursts``."""
    j = p.job
    if j.start_s > 0:
        yield env.timeout(j.start_s)
    n = len(p.routes)
    nbytes, cap = np.full(n, j.bytes / n), np.full(n, j.rate_Bps / n)
    end = None if j.duration_s is None else env.now + j.duration_s
    k = 0
    while (env.now < end) if end is not None else not trained.triggered:
        begin = env.now
        yield door.transfer(p.routes, nbytes, p.latency, cap=cap, tag=SpanTag("traffic", k, 0))
        bursts.append((begin, env.now))
        k += 1
        wait = j.period_s - (env.now - begin)
        if wait > 0:
            yield env.timeout(wait)


def simulate_jobs(scenario: Scenario, prepared: dict | None = None) -> JobsResult:
    """Run every job of ``scenario`` together, then each alone on the same nodes; the
    :class:`JobsResult`.  ``prepared``: job name → (trace, memory table) lowered already
    (default: lowered here, as ``zionsim run`` lowers it on a cluster of the job's size, once
    for jobs with the same run options)."""
    t0 = time.perf_counter()
    cluster = Cluster.build(scenario.cluster)
    nodes = place(scenario)
    lowered = dict(prepared or {})  # and by run options: alike jobs are planned once
    parts = [_prepare(scenario, i, cluster, nodes, lowered) for i in range(len(scenario.jobs))]
    shared = _together(cluster, parts)
    t_shared = time.perf_counter() - t0
    alone: dict[tuple, _Outcome] = {}
    for p in parts:
        if p.key() not in alone:
            solo = p
            if p.job.kind == "traffic" and p.job.duration_s is None:
                from dataclasses import replace

                span = max(shared.train_end_s - p.job.start_s, 0.0)
                solo = replace(p, job=replace(p.job, duration_s=span))
            alone[p.key()] = _together(cluster, [solo]) if len(parts) > 1 else shared
    return _gather(scenario, cluster, parts, shared, alone, t0, t_shared)


def _prepare(scenario: Scenario, i: int, cluster, nodes: dict, prepared: dict) -> _Part:
    """Job ``i`` ready to run (:class:`_Part`) on its nodes of ``cluster``."""
    job = scenario.jobs[i]
    if job.kind == "traffic":
        src = endpoint_nodes(scenario, i, "src", nodes)
        dst = endpoint_nodes(scenario, i, "dst", nodes)
        if set(src) & set(dst):
            raise InputError(
                f"traffic job {job.name!r} sends from and to node {min(set(src) & set(dst))}",
                file=scenario.file, field=f"jobs[{i}].dst", allowed="disjoint node sets",
            )  # fmt: skip
        per = cluster.router.gpus().reshape(cluster.spec.nodes, -1)
        s, d = per[list(src)].ravel(), per[list(dst)].ravel()
        pairs = max(len(s), len(d))
        s, d = s[np.arange(pairs) % len(s)], d[np.arange(pairs) % len(d)]
        routes = cluster.router.routes(s, d)
        return _Part(i, job, tuple(sorted(set(src) | set(dst))), cluster, routes=routes,
                     latency=cluster.router.latency(routes))  # fmt: skip
    from zionsim.sim.run import trace_of

    view = on_nodes(cluster, nodes[job.name])
    same = repr((job.inputs.options, job.inputs.overrides))  # the plan ignores the placement
    if job.name in prepared or same in prepared:
        trace, memory = prepared.get(job.name) or prepared[same]
    else:
        trace, memory, _ = trace_of(job.inputs)
        prepared[same] = (trace, memory)
    check_cluster(view, trace)
    model = stack_compute_model(view, trace.stack or BARE, None)
    return _Part(i, job, view.nodes, view, trace, memory, op_durations(view, trace, model))


def endpoint_nodes(scenario: Scenario, i: int, side: str, nodes: dict) -> tuple[int, ...]:
    """The nodes of traffic job ``i``'s ``side`` (``src`` or ``dst``): node indices, and the
    nodes of the training jobs named there."""
    out: list[int] = []
    for x in getattr(scenario.jobs[i], side):
        if isinstance(x, str):
            if x not in nodes:
                raise InputError(
                    f"no training job named {x!r}", file=scenario.file,
                    field=f"jobs[{i}].{side}", allowed=", ".join(sorted(nodes)) or "node indices",
                )  # fmt: skip
            out += nodes[x]
        else:
            out.append(int(x))
    return tuple(dict.fromkeys(out))


def _gather(scenario, cluster, parts, shared: _Outcome, alone: dict, t0, t_shared) -> JobsResult:
    """The :class:`JobsResult` of the shared run and the runs alone."""
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


def _warm(p: _Part) -> int:
    return p.job.inputs.options["warmup"]


def _job_records(out: _Outcome, p: _Part, n_parts: int) -> RunRecords:
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


def _train_row(p: _Part, shared, alone, shared_span: float, alone_span: float) -> dict:
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


def _traffic_row(p: _Part, shared: _Outcome, solo: _Outcome) -> dict:
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


def _links(cluster, parts: list[_Part], out: _Outcome) -> pd.DataFrame:
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


def _waits_on(cluster, links: pd.DataFrame, p: _Part, names: dict, top: int = 5) -> list[dict]:
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


def _overlaps(out: _Outcome, p: _Part, names: dict) -> dict:
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
