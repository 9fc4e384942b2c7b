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
from dataclasses import dataclass

import numpy as np
import simpy

from zionsim.base.errors import InputError
from zionsim.dlrm.op_costs import op_durations, stack_compute_model
from zionsim.dlrm.stack import BARE
from zionsim.hardware.cluster import Cluster, on_nodes
from zionsim.network.flows import FlowNetwork
from zionsim.sim.engine import (
    REDO,
    Environment,
    RunRecords,
    check_cluster,
    finish_trace,
    start_trace,
)
from zionsim.sim.job_report import JobsResult, gather
from zionsim.sim.records import SpanTag
from zionsim.sim.scenario import JobSpec, Scenario, endpoint_nodes, place


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
    env = Environment()
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
    return gather(cluster, parts, shared, alone, t0, t_shared)


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
