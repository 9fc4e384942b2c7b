"""The engine: execute a trace on a cluster with simpy; return plain records (no I/O).

Every rank has three in-order streams (``compute``, ``a2a``, ``allreduce``), each a simpy process
that walks its ops: wait for the op's dependencies, then run it.  A compute op takes the time its
cost model gives on this cluster's GPU (``compute.py``).  A collective op is a rendezvous: when the
last member of its group arrives, the collective runs on the shared network model (flows of every
concurrent collective contend for links), and every member's op ends when it ends.  Several
iterations run back to back; the streams carry each iteration's ops after the previous one's.

Assumptions: a stream runs one op at a time in trace order (CUDA-stream semantics); where a
stack runs its embeddings on a stream of their own, a GPU's two compute streams take turns, one
kernel at a time (no two kernels share the SMs); collectives that have been launched progress
independently of compute (NCCL kernels on their own SMs), slowing it by the stack's interference
factor.

Ranks that run the same op sequence are stepped once (``templates.py``): one process per
representative and stream, counted for every member of its class.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import simpy
from simpy.events import NORMAL, Timeout

from zionsim.base.errors import InputError
from zionsim.base.kept import Registry, kept_for, kept_with
from zionsim.dlrm import estimate
from zionsim.dlrm.op_costs import (  # noqa: F401 - op_durations is imported from here too
    op_durations,
    transfer_flows,
)
from zionsim.dlrm.stack import BARE
from zionsim.dlrm.sync import TraceSync
from zionsim.dlrm.trace import STREAMS, Trace
from zionsim.hardware import compute
from zionsim.network import nccl
from zionsim.network.flows import FlowNetwork, NetworkStats
from zionsim.network.simulate import CountingEnvironment
from zionsim.sim import templates as TEMPLATES
from zionsim.sim.records import OpRecords, SpanTag, SyncRound
from zionsim.sim.templates import TemplateBroken, templates


@dataclass
class CollectiveRecord:
    """One collective instance: when the last member arrived, when it ended, how it ran."""

    iteration: int
    coll: int
    start_s: float = 0.0
    end_s: float = 0.0
    last_rank: int = -1
    algorithm: str = ""
    protocol: str = ""
    arrived: int = 0
    event: simpy.Event | None = None


@dataclass
class RunRecords:
    """What a run did: one row per executed op, per collective instance, and network totals."""

    trace: Trace
    iterations: int
    durations_s: np.ndarray
    #: one :class:`~zionsim.sim.records.OpRecord` per executed op (held compactly)
    ops: OpRecords = field(default_factory=OpRecords)
    collectives: dict[tuple[int, int], CollectiveRecord] = field(default_factory=dict)
    network: NetworkStats | None = None
    sim_time_s: float = 0.0
    events: int = 0
    #: background (ShadowSync) rounds
    sync_rounds: list[SyncRound] = field(default_factory=list)
    #: iterations × ops durations where they vary from step to step (``variability.py``)
    per_iteration_s: np.ndarray | None = None


def simulate_trace(
    cluster,
    trace: Trace,
    *,
    iterations: int = 3,
    compute_model: compute.ComputeModel | None = None,
    collective_model: nccl.CollectiveModel | None = None,
    sync_traffic: bool = True,
    variability=None,
    seed: int = 0,
    realisation: int = 0,
) -> RunRecords:
    """Run ``iterations`` iterations of ``trace`` on ``cluster``; return the records.

    ``variability`` (a :class:`~zionsim.sim.variability.VariabilitySpec`): realisation
    ``realisation`` of its noise and stragglers, drawn from ``(seed, realisation)``."""
    check_cluster(cluster, trace)
    durations = estimate.op_seconds(cluster, trace, compute_model)
    per_iteration = None
    if variability is not None and variability.perturbs:
        from zionsim.sim.variability import realise

        g = cluster.spec.gpus_per_node
        r = realise(variability, trace, durations, iterations, g, seed, realisation)
        durations, per_iteration = r.static_s, r.per_iteration_s
    args = (cluster, trace, iterations, durations, collective_model, sync_traffic)
    try:
        return _simulate(*args, per_iteration=per_iteration)
    except REDO:  # copies ended apart, or waiting for them stalled
        return _simulate(*args, False, per_iteration=per_iteration)


class Environment(CountingEnvironment):
    """The engine's simpy environment: it counts among the events scheduled those the engine
    elides (:meth:`_Run._finished`: an op's end no op waits for), so that ``events_scheduled``
    (``timing.json``'s ``simpy_events``, and the size of a simulation that ``studies/refine.py``
    turns a time budget into evaluations with) is what it was with every such event scheduled."""

    def __init__(self):
        super().__init__()
        self.elided = 0

    @property
    def events_scheduled(self) -> int:
        """Events scheduled so far, elided ones included."""
        return super().events_scheduled + self.elided

    def run(self, until=None):
        """``simpy.Environment.run``; without ``until`` (to the last event), its ``step``
        inline: each event's callbacks in order, and a failed event that nothing defused
        raised as simpy raises it (a copy of its exception, caused by it).  An event nothing
        waits for does not move the clock, so the run ends at its last event that did
        something (its ``now`` is the simulated time the links' utilisation divides by)."""
        if until is not None:
            return super().run(until)
        queue, pop = self._queue, heapq.heappop
        while queue:
            now, _, _, event = pop(queue)
            callbacks, event.callbacks = event.callbacks, None
            if callbacks:  # else nothing waits (a slowed kernel's spare timeout, _Run._slowed):
                self._now = now  # the clock stays at the last event that did something
                for callback in callbacks:
                    callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None


def _timeout(env, delay: float) -> Timeout:
    """``env.timeout(delay)`` made as simpy's ``Timeout.__init__`` and ``Environment.schedule``
    make it (the same fields, the same queue entry and event number), without their two calls:
    the engine's most common event (a compute op's end).  Only for an environment that
    schedules as simpy's does (``_Run.stream`` checks), with ``delay`` > 0."""
    t = _new(Timeout)
    t.env, t.callbacks, t._value, t._delay, t._ok = env, [], None, delay, True
    heapq.heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), t))
    return t


def _simpy_timeout(env, delay: float) -> Timeout:
    return env.timeout(delay)


_new = object.__new__
#: an op-iteration that has ended with no event asked for (``_Run.done``)
ENDED = object()
#: mark an op's end that no op waits for instead of firing its event (``_Run._finished``);
#: False: every end fires one (the tests comparing the two)
ELIDE = True


class _Stalled(Exception):
    """A run with collective classes stalled (``templates.py``)."""


def _simulate(
    cluster,
    trace,
    iterations,
    durations,
    collective_model,
    sync_traffic,
    alike=True,
    per_iteration=None,
) -> RunRecords:
    env = Environment()
    net = FlowNetwork(env, cluster.router.capacity_Bps, router=cluster.router)
    rec = RunRecords(trace, iterations, durations, per_iteration_s=per_iteration)
    tpl, _ = start_trace(env, net, cluster, rec, collective_model, sync_traffic, alike)
    env.run()
    finish_trace(rec, tpl)
    rec.network, rec.sim_time_s, rec.events = net.stats, env.now, env.events_scheduled
    return rec


#: what a run with rank templates raises when it must be done again with every rank alone
REDO = (TemplateBroken, _Stalled)


def start_trace(
    env, net, cluster, rec: RunRecords, collective_model=None, sync_traffic=True, alike=True,
    delay_s: float = 0.0,
):  # fmt: skip
    """Start the simpy processes of ``rec.trace``'s ranks on ``env`` and ``net`` (one per
    representative and stream, plus ShadowSync background threads), ``delay_s`` from now; the
    rank templates and the started processes (each an event that fires as it ends).  Several
    traces may share one ``env`` and ``net`` (``sim/jobs.py``)."""
    trace, iterations = rec.trace, rec.iterations
    sync = trace.sync
    background = trace.sync_spec.is_shadow and sync_traffic
    g = cluster.spec.gpus_per_node
    noisy = rec.per_iteration_s is not None  # noisy ranks are not alike
    by_rank, tpl = _ranks_and_templates(trace, rec.durations_s, background or not alike or noisy, g)
    run = _Run(env, net, cluster, trace, rec, collective_model, sync_traffic, tpl, by_rank)
    procs = []
    for rank in tpl.reps:
        for stream in STREAMS:
            mine = [op for op in by_rank[rank] if op.stream == stream]
            if mine:
                procs.append(run.stream(rank, mine, iterations))
    if background:
        procs += [run.background(rank, sync) for rank in range(trace.ranks)]
    started = [env.process(_after(env, delay_s, p) if delay_s > 0 else p) for p in procs]
    return tpl, started


def _ranks_and_templates(trace: Trace, durations_s: np.ndarray, alone: bool, g: int):
    """``trace.by_rank()`` and its rank templates (``templates.py``), kept with the trace's ops
    (``base.kept.kept_with``: a sweep's points that differ only in the cluster's rates run the
    same lowered ops, mostly with the same op seconds) for the same collectives, rank copies,
    op seconds and flags; both are only read."""
    kept = kept_with(trace.ops)
    by_rank = kept.get("by_rank")
    if by_rank is None or len(by_rank) != trace.ranks:
        by_rank = kept["by_rank"] = trace.by_rank()
    key = (durations_s.tobytes(), alone, g, TEMPLATES.ENABLED, trace.alike)
    memo = kept.setdefault("templates", {})
    got = memo.get(key)
    if got is not None and _same_objects(got[0], trace.collectives):
        return by_rank, got[1]
    tpl = templates(trace, durations_s, alone, g, by_rank)
    if len(memo) >= KEEP_TEMPLATES:
        memo.clear()
    memo[key] = (list(trace.collectives), tpl)
    return by_rank, tpl


#: rank templates kept per lowered trace (for as many op-seconds vectors, flags), at most
KEEP_TEMPLATES = 8


def _same_objects(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _after(env, delay_s: float, process):
    """``process`` started ``delay_s`` from now."""
    yield env.timeout(delay_s)
    return (yield from process)


def finish_trace(rec: RunRecords, tpl) -> None:
    """After the run: redo (:data:`REDO`) if collective classes stalled, else InputError
    unless every op ran every iteration (:func:`check_complete`)."""
    if tpl.copies and len(rec.ops) != rec.iterations * len(rec.trace.ops):
        raise _Stalled()
    check_complete(rec)


def check_cluster(cluster, trace: Trace) -> None:
    """InputError unless ``trace`` has one rank per GPU of ``cluster``, and, on CPU trainers,
    no NCCL collective (:func:`check_cpu_trainers`)."""
    if trace.ranks != len(cluster.gpus):
        raise InputError(
            f"the trace has {trace.ranks} ranks but the cluster has {len(cluster.gpus)} GPUs",
            field="--nodes/--gpus-per-node",
            allowed=f"a cluster of {trace.ranks} GPUs",
        )
    check_cpu_trainers(cluster, trace)


def check_cpu_trainers(cluster, trace: Trace) -> None:
    """CPU trainers (``gpu.architecture: cpu``) run no NCCL: InputError naming the option that
    asked for a collective (dense all-reduce: ``--sync``; embedding all-to-all: ``--plan``).
    Their embeddings live on parameter servers and their dense replicas sync with EASGD
    servers, both over the front-end network, as ShadowSync's CPU trainers did."""
    if compute.architecture(cluster.spec.gpu) != "cpu" or not trace.collectives:
        return
    ops = {c.op for c in trace.collectives}
    if "all_to_all" in ops or "all_to_allv" in ops or ops - {"all_reduce"}:
        raise InputError(
            "CPU trainers have no NCCL all-to-all: embedding tables sharded on the trainers "
            "need one",
            field="--plan",
            allowed="ps (tables on CPU parameter servers)",
        )
    raise InputError(
        "CPU trainers have no NCCL all-reduce: --sync allreduce, *-ma and *-bmuf need one",
        field="--sync",
        allowed="foreground-easgd or shadow-easgd (EASGD sync servers on the front-end network)",
    )


def check_complete(rec: RunRecords) -> None:
    """InputError naming the first op that never ran, unless every op ran every iteration."""
    trace = rec.trace
    if len(rec.ops) != rec.iterations * len(trace.ops):
        it, op = rec.ops.columns()[:2]
        stuck = {o.id for o in trace.ops} - set(op[it == 0].tolist())
        first = trace.ops[min(stuck)] if stuck else trace.ops[-1]
        raise InputError(
            f"the trace stalls: op {first.id} ({first.name}, rank {first.rank}) "
            "never runs; a collective is missing a member's op or a dependency "
            "can never finish",
            field=f"ops[{first.id}]",
        )


def _rep_counts(rep_of: np.ndarray, ranks) -> tuple[np.ndarray, np.ndarray]:
    """The representatives of ``ranks`` and how many of ``ranks`` each stands for."""
    reps, counts = np.unique(rep_of[np.asarray(ranks, dtype=np.int64)], return_counts=True)
    return reps, counts


class _Run:
    def __init__(
        self, env, net, cluster, trace, rec, model, sync_traffic=True, tpl=None, by_rank=None
    ):  # fmt: skip
        self.env, self.net, self.cluster, self.trace, self.rec = env, net, cluster, trace, rec
        self.tpl = tpl or templates(trace, rec.durations_s, alone=True)
        #: per collective: its members' representatives and how many members each stands for
        self.coll_reps = [_rep_counts(self.tpl.rep_of, c.ranks) for c in trace.collectives]
        self.model = model or nccl.load_model()
        self.sync_traffic = sync_traffic
        self.iteration = [0] * trace.ranks  # iterations each rank's compute stream finished
        self.progress = [env.event() for _ in range(trace.ranks)]  # fires at each such end
        by_rank = by_rank if by_rank is not None else trace.by_rank()
        kept = kept_with(trace.ops)  # what the ops alone give, kept with them
        if "computing" not in kept or len(by_rank) != kept["ranks"]:
            kept["computing"] = sum(1 for r in by_rank if any(o.stream == "compute" for o in r))
            kept["ranks"] = len(by_rank)
            kept["two_streams"] = any(op.stream == "embedding" for op in trace.ops)
        self.computing = kept["computing"]
        self.rounds: dict[tuple[int, int], CollectiveRecord] = {}
        self.class_rounds: dict[tuple[int, int], list] = {}  # (iteration, class): copies
        self.n_ops = len(trace.ops)
        #: per iteration × op: its end's event once asked for, :data:`ENDED` once it ended
        #: with none asked for, else None
        self.done: list = [None] * (rec.iterations * self.n_ops)
        self.elide = ELIDE and isinstance(env, Environment)  # it counts the elided events
        self.prepared: dict[tuple, nccl.Prepared] = {}
        stack = trace.stack or BARE
        #: interference (``stack.py``): compute under in-flight NCCL kernels, NCCL under compute
        self.slow_compute = stack.compute_slowdown
        self.slow_comm = stack.comm_slowdown
        self.comm_in_flight = [0] * trace.ranks  # a rank's collective ops launched, not ended
        #: per rank, the event a slowed kernel waits on: its NCCL kernels have all ended
        self.comm_quiet: list[simpy.Event | None] = [None] * trace.ranks
        self.compute_busy = np.zeros(trace.ranks, dtype=bool)  # a compute kernel is running
        #: the host starts a step only once the previous one has ended (a stack's host overlap)
        self.host_waits = not stack.host_overlap
        #: the embedding stream starts a step only once the previous one has ended (a stack's
        #: ``iteration_join``: HugeCTR joins its streams at the end of every iteration)
        self.emb_waits = stack.iteration_join
        #: with a second compute stream (a stack's ``embedding_stream``) the streams of a GPU take
        #: turns, one kernel at a time; None when each GPU has one compute stream
        two = kept["two_streams"]
        self.gpu = [simpy.Resource(env, 1) for _ in range(trace.ranks)] if two else None
        #: per iteration × op durations where they vary (``variability.py``), else None
        self.per_iteration: np.ndarray | None = rec.per_iteration_s
        #: the op seconds as Python floats (the same values: read one at a time, often)
        self.dur_s: list[float] = rec.durations_s.tolist()

    def _done(self, it: int, op_id: int) -> simpy.Event:
        i = it * self.n_ops + op_id
        ev = self.done[i]
        if ev is None:
            ev = self.done[i] = self.env.event()
        return ev

    def _finished(self, i: int) -> None:
        """Op-iteration ``i`` has ended: its event fires for the ops waiting on it; where none
        waits (none has asked for the event yet), it is only marked :data:`ENDED` — an event
        fired with no callback changes nothing but simpy's count, which the environment keeps
        (:class:`Environment`), so every other event keeps its place in the order."""
        ev = self.done[i]
        if ev is None and self.elide:
            self.done[i] = ENDED
            self.env.elided += 1
        else:
            if ev is None:
                ev = self._done(i // self.n_ops, i % self.n_ops)
            ev.succeed()

    def stream(self, rank: int, ops, iterations: int):
        """Process running one (rank, stream)'s ops in order for ``iterations`` iterations, each
        after its deps; records (iteration, op, free, start, end) per op."""
        env, dur, done = self.env, self.dur_s, self.done
        rows, copies = self.rec.ops.rows, self.rec.ops.copies
        member_ops = self.tpl.member_ops
        slow, busy, elide = self.slow_compute, self.compute_busy, self.elide
        timeout = _timeout if type(env).schedule is simpy.Environment.schedule else _simpy_timeout
        for it in range(iterations):
            if self.per_iteration is not None:  # noise and hiccups (``variability.py``)
                dur = self.per_iteration[it]
            waits = self.host_waits if ops[0].stream == "host" else self.emb_waits
            if it and waits and ops[0].stream in ("host", "embedding"):
                while self.iteration[rank] < it:  # the previous step has not ended on the GPU
                    yield self.progress[rank]
            base = it * self.n_ops
            for op in ops:
                free = env.now
                for d in op.deps:
                    ev = done[base + d]
                    if ev is ENDED:
                        continue
                    if ev is None:
                        ev = self._done(it, d)
                    if not ev.triggered:
                        yield ev
                start = env.now
                i, kind = op.id, op.kind
                if op.category == "sync" and self._skipped(op, it):
                    pass
                elif kind == "collective":
                    self.comm_in_flight[rank] += 1
                    yield self._arrive(it, op.args["coll"], rank)
                    self._comm_ended(rank)
                elif kind == "transfer":
                    yield self._host_transfer(it, rank, op.args)
                elif dur[i] > 0 and self.gpu is not None and kind != "host":
                    with self.gpu[rank].request() as turn:  # one kernel at a time per GPU
                        yield turn
                        start = env.now
                        yield from self._compute(rank, op, dur[i])
                elif dur[i] > 0:  # :meth:`_compute`, inline (most ops step here)
                    busy[rank] = kind != "host"
                    if slow and self.comm_in_flight[rank] and kind != "host":
                        yield from self._slowed(rank, dur[i])
                    else:
                        yield timeout(env, dur[i])
                    busy[rank] = False
                rows.append((it, i, free, start, env.now))
                if i in member_ops:  # the other members of its class: the same times
                    copies.append((len(rows) - 1, member_ops[i]))
                ev = done[base + i]  # :meth:`_finished`, inline
                if ev is None and elide:
                    done[base + i] = ENDED
                    env.elided += 1
                else:
                    self._finished(base + i)
            if ops[0].stream == "compute":
                self._iteration_ended(rank, it, iterations)

    def _iteration_ended(self, rank: int, it: int, iterations: int) -> None:
        """``rank``'s compute stream has ended iteration ``it``: its progress event fires."""
        self.iteration[rank] = it + 1
        if it + 1 == iterations:
            self.computing -= self.tpl.size(rank)
        ev, self.progress[rank] = self.progress[rank], self.env.event()
        ev.succeed()

    def _compute(self, rank: int, op, seconds: float):
        """A compute kernel: slowed by the stack's interference factor when NCCL kernels of this
        rank are in flight as it starts (they hold SMs and HBM bandwidth while they run or wait
        for their peers); host work (``host`` ops) is not slowed."""
        self.compute_busy[rank] = op.kind != "host"
        if self.slow_compute and self.comm_in_flight[rank] and op.kind != "host":
            yield from self._slowed(rank, seconds)
        else:
            yield self.env.timeout(seconds)
        self.compute_busy[rank] = False

    def _slowed(self, rank: int, seconds: float):
        """A kernel of ``seconds`` that starts under ``rank``'s NCCL kernels: slower by the
        stack's factor until they have all ended, at full speed for the rest
        (``stack.slowed_s``: NCCL kernels that start later, while it runs, do not slow it)."""
        env, f = self.env, 1.0 + self.slow_compute
        quiet = self.comm_quiet[rank]
        if quiet is None:
            quiet = self.comm_quiet[rank] = env.event()
        start = env.now
        yield env.any_of((env.timeout(seconds * f), quiet))
        rest = seconds - (env.now - start) / f
        if rest > 1e-12 * seconds:
            yield env.timeout(rest)

    def _comm_ended(self, rank: int) -> None:
        """One of ``rank``'s collective ops has ended; the last one wakes its slowed kernel."""
        self.comm_in_flight[rank] -= 1
        if not self.comm_in_flight[rank]:
            quiet = self.comm_quiet[rank]
            if quiet is not None:
                self.comm_quiet[rank] = None
                quiet.succeed()

    def _skipped(self, op, it: int) -> bool:
        """Foreground sync ops run only every K-th iteration, and not at all without traffic."""
        if op.category != "sync":
            return False
        return not self.sync_traffic or (it + 1) % op.args.get("every", 1) != 0

    def background(self, rank: int, sync: TraceSync):
        """ShadowSync: sync rounds in the background until training ends, paced by the sync
        thread: a round starts once its trainer has run ``every`` iterations (K, default 1)
        since the last round began, and no sooner than ``period_s`` after it.

        A model-averaging round is an NCCL all-reduce, so while it is in flight the trainer's
        compute kernels run slower by the stack's ``compute_slowdown``, as under foreground
        collectives; EASGD's host transfers go through copy engines and slow nothing.

        At least one iteration between rounds: averaging parameters that have not changed is a
        no-op, and a round that costs no time (an ideal network) must not loop forever at one
        instant."""
        env, n_round, last = self.env, 0, 0  # trainers start from the same parameters
        spec, background = sync.spec, sync.background
        every = spec.every  # a round at most every K of the trainer's iterations
        share = sync.bytes / (self.cluster.spec.gpus_per_node if spec.trainer == "node" else 1)
        while self.computing > 0:
            if self.iteration[rank] < last + every:
                yield self.progress[rank]
                continue
            start, it0 = env.now, self.iteration[rank]
            last = it0
            if spec.uses_servers:
                args = {"nbytes": share, "servers": spec.servers, "placement": spec.placement}
                yield self._host_transfer(n_round, rank, {**args, "direction": "to_ps"}, "sync")
                yield self._host_transfer(n_round, rank, {**args, "direction": "from_ps"}, "sync")
            else:  # NCCL kernels of the round hold SMs from launch to end (interference)
                self.comm_in_flight[rank] += 1
                yield self._arrive_round(background[rank], n_round, rank)
                self._comm_ended(rank)
            self.rec.sync_rounds.append(SyncRound(rank, start, env.now, it0, self.iteration[rank]))
            n_round += 1
            wait = spec.period_s - (env.now - start)
            if wait > 0:
                yield env.timeout(wait)

    def _arrive_round(self, cid: int, n_round: int, rank: int) -> simpy.Event:
        key = (cid, n_round)
        cr = self.rounds.get(key)
        if cr is None:
            cr = self.rounds[key] = CollectiveRecord(n_round, cid, event=self.env.event())
        cr.arrived += 1
        if cr.arrived == len(self.trace.collectives[cid].ranks):
            self.env.process(self._run_collective(cr, tag=SpanTag("sync", n_round, cid)))
        return cr.event

    def _host_transfer(self, it: int, rank: int, args: dict, label: str = "") -> simpy.Event:
        """Host traffic of ``rank`` (:func:`transfer_flows`) on the network, tagged by label,
        iteration and rank."""
        routes, nbytes, latency, label = transfer_flows(self.cluster, rank, args, label)
        return self.net.transfer(routes, nbytes, latency, tag=SpanTag(label, it, rank))

    def _arrive(self, it: int, cid: int, rank: int) -> simpy.Event:
        copies = self.tpl.copies[int(self.tpl.coll_class[cid])] if self.tpl.copies else [cid]
        if len(copies) > 1:
            return self._arrive_copies(it, copies, rank)
        key = (it, cid)
        cr = self.rec.collectives.get(key)
        if cr is None:
            cr = self.rec.collectives[key] = CollectiveRecord(it, cid, event=self.env.event())
        cr.arrived += self.tpl.size(rank)  # a representative arrives for its whole class
        cr.last_rank, cr.start_s = self.tpl.members[rank][-1], self.env.now
        if cr.arrived == len(self.trace.collectives[cid].ranks):
            self.env.process(self._run_collective(cr))
        return cr.event

    def _arrive_copies(self, it: int, copies: list[int], rank: int) -> simpy.Event:
        """A representative arrives at a collective class (``templates.py``): once every member
        of every copy has, the copies start, each as the per-rank engine runs it."""
        key = (it, copies[0])
        inst = self.class_rounds.get(key)
        if inst is None:
            need = sum(len(self.trace.collectives[c].ranks) for c in copies)
            inst = self.class_rounds[key] = [0, need, self.env.event()]
        inst[0] += self.tpl.size(rank)
        if inst[0] == inst[1]:
            self.env.process(self._run_copies(it, copies, rank, inst[2]))
        return inst[2]

    def _run_copies(self, it: int, copies: list[int], last: int, done: simpy.Event):
        """Run the copies of a collective class together; ``done`` fires when all have ended,
        which must be at one time (else :class:`~zionsim.sim.templates.TemplateBroken`)."""
        mine = set(self.tpl.members[last])
        records = []
        for cid in copies:
            cr = self.rec.collectives[it, cid] = CollectiveRecord(it, cid, event=self.env.event())
            ranks = self.trace.collectives[cid].ranks
            cr.arrived, cr.start_s = len(ranks), self.env.now
            cr.last_rank = max(int(r) for r in ranks if int(r) in mine)
            records.append(cr)
            self.env.process(self._run_collective(cr, coalesce=True))
        yield simpy.AllOf(self.env, [cr.event for cr in records])
        ends = [cr.end_s for cr in records]
        if max(ends) - min(ends) > 1e-12 * max(abs(max(ends)), 1e-300):
            raise TemplateBroken(f"copies of collective {copies[0]} ended apart")
        done.succeed()

    def _run_collective(self, cr: CollectiveRecord, tag: tuple | None = None, coalesce=False):
        prep = self._prepare(cr.coll)
        cr.algorithm, cr.protocol = prep.algorithm, prep.protocol
        start, busy = self.env.now, 0.0
        if self.slow_comm:  # share of members computing as it begins: their kernels share SMs
            reps, counts = self.coll_reps[cr.coll]
            busy = float((self.compute_busy[reps] * counts).sum() / counts.sum())
        tag = tag or SpanTag("collective", cr.iteration, cr.coll)
        yield from nccl.execute(self.env, self.net, prep, tag=tag, coalesce=coalesce)
        if busy:
            yield self.env.timeout((self.env.now - start) * self.slow_comm * busy)
        cr.end_s = self.env.now
        cr.event.succeed()

    def _prepare(self, cid: int) -> nccl.Prepared:
        return prepare_collective(self.cluster, self.trace, cid, self.model, self.prepared)


def prepare_collective(cluster, trace: Trace, cid: int, model, cache: dict) -> nccl.Prepared:
    """Collective ``cid`` of ``trace`` chosen and prepared on ``cluster`` (memoised in ``cache``
    by op, size and group, or by id where it has a byte matrix).  Under the built-in collective
    model the choice is the planner's, remembered per cluster (``estimate.choice_of``: the
    planner's estimate chose every collective of the plan it picked), and so is its preparation
    (:data:`KEEP_PREPARED`; one with a byte matrix by the matrix's bytes, on clusters of at most
    :data:`KEEP_PREPARED_MATRIX_GPUS`): a sweep's points on one cluster share their all-reduce
    buckets, and their all-to-alls where the batch and communication precision agree."""
    c = trace.collectives[cid]
    key = (c.op, c.size_bytes, c.ranks.tobytes()) if c.matrix is None else ("coll", cid)
    if key not in cache:
        if model is nccl.load_model():
            from zionsim.dlrm.estimate import choice_of

            shared, skey = _prepared_of(cluster), key
            if c.matrix is not None:  # by its bytes, as estimate.choice_of keys its choice
                keep = len(cluster.gpus) <= KEEP_PREPARED_MATRIX_GPUS
                shared = shared if keep else {}
                skey = (c.op, c.size_bytes, c.ranks.tobytes(), nccl.matrix_key(c.matrix))
            if skey not in shared:
                if len(shared) >= KEEP_PREPARED:
                    shared.clear()
                shared[skey] = nccl.prepare(cluster, choice_of(cluster, c), model)
            cache[key] = shared[skey]
        else:
            devices = cluster.gpus[c.ranks]
            choice = nccl.choose(cluster, c.op, devices, c.size_bytes, model, matrix=c.matrix)
            cache[key] = nccl.prepare(cluster, choice, model)
    return cache[key]


#: prepared collectives (built-in model) kept per cluster, at most; 0: none
KEEP_PREPARED = 1024
#: collectives with a byte matrix (all-to-alls) are kept, by the matrix's bytes, on clusters of
#: at most this many GPUs (a sweep's points on one cluster share their exchanges where their
#: batch and communication precision agree; a larger cluster's are left to its one run)
KEEP_PREPARED_MATRIX_GPUS = 4096
_PREPARED: Registry = {}


def _prepared_of(cluster) -> dict:
    """The prepared collectives kept for ``cluster`` (forgotten with it)."""
    if KEEP_PREPARED <= 0:
        return {}
    return kept_for(_PREPARED, cluster)
