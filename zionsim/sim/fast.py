"""The fast analytic engine: the simpy engine's semantics for ``fidelity="analytic"``, one pass.

:func:`simulate_trace` runs a trace exactly as :func:`zionsim.sim.engine.simulate_trace` does
with the analytic network (``flows.AnalyticNetwork``) and returns the same
:class:`~zionsim.sim.engine.RunRecords`, but without simpy: a (rank, stream) is a small state
machine instead of a generator process, an event is a tuple on one heap, and only events that
wake something are scheduled.  The heap orders events as simpy does (time, then urgent before
normal, then scheduling order), and every wake-up happens where simpy's would, so ties resolve
the same way: which kernel a GPU runs first when two streams want it, whether a kernel starts
while an NCCL kernel of its rank is in flight (the stack's ``compute_slowdown``), the order in
which collectives reserve links, and the order of the op rows.  Times are computed with the same
float expressions, so the records match the simpy engine's bit for bit (tests/sim/test_fast.py);
only ``events`` differs: it counts this engine's events, which skip simpy's that wake nothing.

The analytic network is the same model with its per-collective work done once: each phase of a
prepared collective keeps its links, per-link load and per-flow rate caps, so a reservation costs
array passes over the links it uses, not over its flows.

Fallback: a run with ShadowSync background rounds (``sync.mode`` ``shadow*`` with sync traffic)
runs on the simpy engine, as does every other fidelity: background threads that wait for the
trainers' iteration ends are not reproduced here.  Everything else (UVM host transfers,
parameter-server transfers, foreground sync every K-th iteration, a stack's embedding stream
with GPU turn-taking, compute/comm interference) runs here.
"""

from __future__ import annotations

import heapq

import numpy as np

from zionsim.dlrm.trace import STREAMS, Trace
from zionsim.hardware import compute
from zionsim.network import nccl
from zionsim.network.flows import NetworkStats
from zionsim.sim import engine
from zionsim.sim.engine import CollectiveRecord, RunRecords

#: simpy's event priorities: process starts before other events at the same time
URGENT, NORMAL = 0, 1
# what a stream does with an op once its dependencies are done
_SKIP, _COLL, _XFER, _GPU, _CMP, _NOP = range(6)


def simulate_trace(
    cluster,
    trace: Trace,
    *,
    iterations: int = 3,
    fidelity: str = "flow",
    compute_model: compute.ComputeModel | None = None,
    collective_model: nccl.CollectiveModel | None = None,
    sync_traffic: bool = True,
) -> RunRecords:
    """Run ``iterations`` iterations of ``trace`` on ``cluster``; the records of
    :func:`zionsim.sim.engine.simulate_trace` (same arguments), computed in one pass for the
    analytic fidelity and by the simpy engine otherwise (module docstring)."""
    sync = trace.meta.get("sync") or {}
    shadow = sync.get("mode", "allreduce").startswith("shadow") and sync_traffic
    if fidelity != "analytic" or shadow:
        return engine.simulate_trace(
            cluster,
            trace,
            iterations=iterations,
            fidelity=fidelity,
            compute_model=compute_model,
            collective_model=collective_model,
            sync_traffic=sync_traffic,
        )
    engine.check_cluster(cluster, trace)
    stack = trace.meta.get("stack") or {}
    compute_model = engine.stack_compute_model(cluster, stack, compute_model)
    rec = RunRecords(trace, iterations, engine.op_durations(cluster, trace, compute_model))
    sched = _Scheduler(cluster, trace, rec, collective_model or nccl.load_model(), sync_traffic)
    sched.run()
    engine.check_complete(rec)
    rec.network, rec.sim_time_s, rec.events = sched.net.stats, sched.now, sched.seq
    return rec


class _Flows:
    """One batch of flows prepared for reservations: the links it uses (with a slot for the
    padding of short routes), its per-link load over capacity, per-flow rate-cap times, and
    the bytes it adds to each link."""

    def __init__(self, routes, nbytes, latency_s, cap, capacity):
        n_links = len(capacity)
        nbytes = np.asarray(nbytes, dtype=float)
        cap = np.full(len(nbytes), np.inf) if cap is None else np.asarray(cap, dtype=float)
        self.n, self.total = len(nbytes), float(nbytes.sum())
        self.latency = np.asarray(latency_s, dtype=float) * np.ones(len(nbytes))
        self.hops = routes.shape[1]
        flat = np.where(routes >= 0, routes, n_links)
        load = np.bincount(flat.ravel(), np.repeat(nbytes, self.hops), minlength=n_links + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(load > 0, load / np.append(capacity, np.inf), 0.0)
            self.own = np.where(nbytes > 0, nbytes / cap, 0.0)
        self.links = np.unique(flat)
        self.local = np.searchsorted(self.links, flat)
        self.pad = bool(len(self.links)) and self.links[-1] == n_links
        self.q = q[self.links]
        used = load[self.links] > 0
        if self.pad:
            used[-1] = False
        self.used_local, self.used_links = np.flatnonzero(used), self.links[used]
        self.fast = not self.latency.any()  # no tail latency: the busiest link or cap decides
        self.own_max = float(self.own.max()) if self.n else 0.0
        valid = routes >= 0
        self.account = None
        if valid.any():
            self.account = np.bincount(
                routes[valid],
                weights=np.broadcast_to(nbytes[:, None], routes.shape)[valid],
                minlength=n_links,
            )


class _Network:
    """``flows.AnalyticNetwork``'s reservations, on prepared :class:`_Flows`: the same float
    expressions restricted to the links a batch uses (other links only add zeros)."""

    def __init__(self, capacity_Bps: np.ndarray):
        self.capacity = np.asarray(capacity_Bps, dtype=float)
        self.free_at = np.zeros(len(self.capacity) + 1)
        self.stats = NetworkStats(link_bytes=np.zeros(len(self.capacity)))

    def finish_s(self, now: float, f: _Flows, tag) -> float:
        """Reserve ``f``'s bytes on its links from ``now``; when its last flow arrives."""
        self.stats.batches += 1
        self.stats.flows += f.n
        if f.n == 0:
            self.stats.spans.append((tag, now, now, f.total, 0))
            return now
        if f.account is not None:
            self.stats.link_bytes += f.account
        backlog = np.maximum(self.free_at[f.links] - now, 0.0)
        if f.pad:
            backlog[-1] = 0.0
        drained = backlog + f.q
        if f.pad:
            drained[-1] = 0.0
        if not f.hops:
            longest = float((f.own + f.latency).max())
        elif f.fast and not backlog.any():
            longest = max(float(drained.max()), f.own_max)
        else:
            wait = backlog[f.local].max(axis=1)
            times = np.maximum(drained[f.local].max(axis=1), wait + f.own) + f.latency
            longest = float(times.max())
        self.free_at[f.used_links] = now + drained[f.used_local]
        finish = now + longest
        self.stats.spans.append((tag, now, finish, f.total, 0))
        return finish


class _Scheduler:
    """The event heap, the shared state the streams read (NCCL kernels in flight, busy GPUs,
    GPU turns) and the collectives' rendezvous."""

    def __init__(self, cluster, trace: Trace, rec: RunRecords, model, sync_traffic: bool):
        self.cluster, self.trace, self.rec, self.model = cluster, trace, rec, model
        self.heap: list = []
        self.seq, self.now = 0, 0.0
        self.net = _Network(cluster.router.capacity_Bps)
        self.n_ops = len(trace.ops)
        self.done = bytearray(rec.iterations * self.n_ops)
        self.waiters: dict[int, list] = {}  # op instance -> resumes waiting for its end
        self.members: dict[tuple[int, int], list] = {}  # collective instance -> its ops waiting
        self.prepared: dict = {}
        self.flows: dict = {}
        stack = trace.meta.get("stack") or {}
        self.slow_compute = float(stack.get("compute_slowdown", 0.0))
        self.slow_comm = float(stack.get("comm_slowdown", 0.0))
        self.comm_in_flight = [0] * trace.ranks
        self.compute_busy = [False] * trace.ranks
        two = any(op.stream == "embedding" for op in trace.ops)
        self.gpu_busy = [False] * trace.ranks
        self.gpu_queue: list[list] = [[] for _ in range(trace.ranks)]
        seconds = rec.durations_s.tolist()
        tables: dict[tuple[int, int], list] = {}
        order = {name: i for i, name in enumerate(STREAMS)}
        for op in trace.ops:
            key = (op.rank, order[op.stream])
            tables.setdefault(key, []).append(_entry(op, seconds[op.id], two))
        for rank, stream in sorted(tables):  # the engine starts them rank by rank, in STREAMS
            table = tables[rank, stream]
            self.push(0.0, URGENT, _Stream(self, rank, table, sync_traffic).resume)

    def push(self, t: float, priority: int, fn, arg=None) -> None:
        """Schedule ``fn(arg)`` at ``t`` (after every earlier-scheduled event of equal key)."""
        heapq.heappush(self.heap, (t, priority, self.seq, fn, arg))
        self.seq += 1

    def run(self) -> None:
        """Process events in order until none is left."""
        heap, pop = self.heap, heapq.heappop
        while heap:
            self.now, _, _, fn, arg = pop(heap)
            fn(arg)

    def finished(self, key: int) -> None:
        """Op instance ``key`` has ended: wake what waits for it (as an event, as simpy)."""
        self.done[key] = 1
        woken = self.waiters.pop(key, None)
        if woken:
            self.push(self.now, NORMAL, _wake, woken)

    # ------------------------------------------------------------------ GPU turns
    def request_gpu(self, rank: int, resume) -> None:
        """Queue for ``rank``'s GPU (simpy ``Resource(1)``: the head is granted when free)."""
        self.gpu_queue[rank].append(resume)
        self._grant(rank)

    def release_gpu(self, rank: int) -> None:
        """Free the GPU now; the next in line is granted when the release is processed, or
        sooner by a new request."""
        self.gpu_busy[rank] = False
        self.push(self.now, NORMAL, self._grant, rank)

    def _grant(self, rank: int) -> None:
        queue = self.gpu_queue[rank]
        if queue and not self.gpu_busy[rank]:
            self.gpu_busy[rank] = True
            self.push(self.now, NORMAL, queue.pop(0))

    # ------------------------------------------------------------------ network
    def transfer(self, f: _Flows, tag) -> list:
        """Submit ``f`` now; the list to put resumes in, woken when its last flow arrives."""
        woken: list = []
        finish = self.net.finish_s(self.now, f, tag)
        delay = max(0.0, finish - self.now)
        if delay > 0:  # a timer, whose callback triggers the batch's event (as flows.py)
            self.push(self.now + delay, NORMAL, self._trigger, woken)
        else:
            self.push(self.now, NORMAL, _wake, woken)
        return woken

    def _trigger(self, woken: list) -> None:
        self.push(self.now, NORMAL, _wake, woken)

    def host_flows(self, op_id: int, rank: int, args: dict) -> tuple[_Flows, str]:
        """The flows of a host transfer op (the same every iteration) and its tag label."""
        if op_id not in self.flows:
            routes, nbytes, latency, label = engine.transfer_flows(self.cluster, rank, args)
            self.flows[op_id] = _Flows(routes, nbytes, latency, None, self.net.capacity), label
        return self.flows[op_id]

    # ------------------------------------------------------------------ collectives
    def arrive(self, it: int, cid: int, rank: int, resume) -> None:
        """A member's op reaches collective ``cid`` of iteration ``it``; the last one starts it."""
        key = (it, cid)
        cr = self.rec.collectives.get(key)
        if cr is None:
            cr = self.rec.collectives[key] = CollectiveRecord(it, cid)
            self.members[key] = []
        cr.arrived += 1
        cr.last_rank, cr.start_s = rank, self.now
        if cr.arrived == len(self.trace.collectives[cid].ranks):
            self.push(self.now, URGENT, _Collective(self, cr).step)
        self.members[key].append(resume)


def _wake(woken: list) -> None:
    for resume in woken:
        resume(None)


def _entry(op, seconds: float, two_streams: bool) -> tuple:
    """(op id, action, deps, seconds, slowed/busy flag, sync period or 0, args) of one op."""
    every = op.args.get("every", 1) if op.category == "sync" else 0
    if op.kind == "collective":
        action = _COLL
    elif op.kind == "transfer":
        action = _XFER
    elif seconds > 0 and two_streams and op.kind != "host":
        action = _GPU
    elif seconds > 0:
        action = _CMP
    else:
        action = _NOP
    return (op.id, action, op.deps, float(seconds), op.kind != "host", every, op.args)


class _Stream:
    """One (rank, stream): its ops in order for every iteration, each after its dependencies
    (the engine's ``_Run.stream`` as a state machine; ``phase`` is where it waits)."""

    def __init__(self, s: _Scheduler, rank: int, table: list, sync_traffic: bool):
        self.s, self.rank, self.table, self.sync_traffic = s, rank, table, sync_traffic
        self.it, self.k, self.phase, self.dep = 0, 0, 0, 0
        self.free = self.start = 0.0

    def resume(self, _=None) -> None:
        """Run ops until one must wait for an event (its resume is then registered)."""
        s, table = self.s, self.table
        while True:
            if self.phase == 0:  # the next op: wait for its dependencies
                if self.k == len(table):
                    self.it, self.k = self.it + 1, 0
                if self.it == s.rec.iterations:
                    return
                self.free, self.dep, self.phase = s.now, 0, 1
            entry = table[self.k]
            if self.phase == 1:
                if entry[2] and not self._deps_done(entry[2]):
                    return
                self.start = s.now
                if self._launch(entry):
                    return
            elif self.phase == 3:  # a collective has ended
                s.comm_in_flight[self.rank] -= 1
            elif self.phase == 5:  # the GPU is ours: run the kernel
                self.start = s.now
                self._compute(entry)
                self.phase = 7
                return
            elif self.phase in (6, 7):  # a kernel has ended
                s.compute_busy[self.rank] = False
                if self.phase == 7:
                    s.release_gpu(self.rank)
            s.rec.ops.append((self.it, entry[0], self.free, self.start, s.now))
            s.finished(self.it * s.n_ops + entry[0])
            self.k, self.phase = self.k + 1, 0

    def _deps_done(self, deps: tuple) -> bool:
        """Whether the dependencies from ``self.dep`` on have ended; if not, wait for the first
        that has not (and resume there)."""
        s, base = self.s, self.it * self.s.n_ops
        while self.dep < len(deps):
            key = base + deps[self.dep]
            self.dep += 1
            if not s.done[key]:
                s.waiters.setdefault(key, []).append(self.resume)
                return False
        return True

    def _launch(self, entry: tuple) -> bool:
        """Start the op; True when it must wait (``phase`` set), False when it ran at once."""
        s, rank = self.s, self.rank
        op_id, action, _, _, _, every, args = entry
        if every and (not self.sync_traffic or (self.it + 1) % every != 0):
            return False  # foreground sync runs every K-th iteration only
        if action == _COLL:
            s.comm_in_flight[rank] += 1
            s.arrive(self.it, args["coll"], rank, self.resume)
            self.phase = 3
        elif action == _XFER:
            flows, label = s.host_flows(op_id, rank, args)
            s.transfer(flows, (label, self.it, rank)).append(self.resume)
            self.phase = 4
        elif action == _GPU:
            s.request_gpu(rank, self.resume)
            self.phase = 5
        elif action == _CMP:
            self._compute(entry)
            self.phase = 6
        else:
            return False
        return True

    def _compute(self, entry: tuple) -> None:
        """A kernel (or host work): slowed by the stack's factor when NCCL kernels of this rank
        are in flight as it starts (host work is not slowed); its end is an event."""
        s, seconds, kernel = self.s, entry[3], entry[4]
        if s.slow_compute and s.comm_in_flight[self.rank] and kernel:
            seconds *= 1.0 + s.slow_compute
        s.compute_busy[self.rank] = kernel
        heapq.heappush(s.heap, (s.now + seconds, NORMAL, s.seq, self.resume, None))
        s.seq += 1


class _Collective:
    """A collective from its last member's arrival to its end: NCCL's start latency, its phases
    on the network one after another, the launch floor, the comm slowdown (``nccl.execute``
    and the engine's ``_run_collective``)."""

    def __init__(self, s: _Scheduler, cr: CollectiveRecord):
        self.s, self.cr, self.stage, self.phase = s, cr, 0, 0
        self.t0 = self.busy = 0.0
        self.prep = None

    def step(self, _=None) -> None:
        """Advance to the next wait (a timer or a phase's flows), or end and wake the members."""
        s, cr = self.s, self.cr
        if self.stage == 0:
            prep = self.prep = engine.prepare_collective(
                s.cluster, s.trace, cr.coll, s.model, s.prepared
            )
            cr.algorithm, cr.protocol = prep.algorithm, prep.protocol
            self.t0, self.stage = s.now, 1
            if s.slow_comm:  # share of members computing as it begins
                ranks = s.trace.collectives[cr.coll].ranks
                self.busy = sum(s.compute_busy[r] for r in ranks) / len(ranks)
            if prep.start_s > 0:
                s.push(s.now + prep.start_s, NORMAL, self.step)
                return
        if self.stage == 1:
            if self.phase < len(self.prep.phases):
                s.transfer(self._flows(), (cr.iteration, cr.coll)).append(self.step)
                self.phase += 1
                return
            self.stage = 2
            if s.now < self.t0 + self.prep.floor_s:
                s.push(s.now + (self.t0 + self.prep.floor_s - s.now), NORMAL, self.step)
                return
        if self.stage == 2:
            self.stage = 3
            if self.busy:
                s.push(s.now + (s.now - self.t0) * s.slow_comm * self.busy, NORMAL, self.step)
                return
        cr.end_s = s.now
        s.push(s.now, NORMAL, _wake, s.members.pop((cr.iteration, cr.coll)))

    def _flows(self) -> _Flows:
        key = (id(self.prep), self.phase)
        if key not in self.s.flows:
            routes, wire, lat, _, cap = self.prep.phases[self.phase]
            self.s.flows[key] = _Flows(routes, wire, lat, cap, self.s.net.capacity)
        return self.s.flows[key]
