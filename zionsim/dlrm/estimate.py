"""The planner's estimate of a training iteration: the lowered trace played out without the flow
simulation.

:func:`iteration_estimate` lowers the workload under a plan exactly as a run does (``lowering.py``)
and walks every rank's streams in time order, as the engine does, but prices each op in closed
form instead of sharing links flow by flow:

* compute ops (GEMMs, embedding kernels, the stack's host work) take the seconds the engine gives
  them (``op_costs.op_durations``), slowed by the stack's ``compute_slowdown`` when one of the
  rank's collectives is in flight as they start (the engine's interference rule);
* a collective starts when its last member arrives and takes NCCL's own estimate of the algorithm
  and protocol NCCL picks (``network.nccl.choose``: latency, then each phase's bytes over its most
  loaded link); the copies of one step that run at once (a TWRW all-to-all on every rail, a
  reduce-scatter in every node: the collectives of the ops of one name) are priced together, so
  rails that share a NIC or a PCIe switch share its bandwidth (``nccl.estimate_together_s``);
* a host transfer (UVM rows, parameter-server traffic) takes its route's latency plus the time
  its most loaded link needs for the bytes of every rank's transfer of the same op that crosses
  it: all ranks move their UVM misses at the same point of the iteration, so GPUs behind one
  PCIe switch share its uplink, and ranks on one socket its DRAM.

What it leaves out, against the simulation: contention between *different* concurrent
collectives or transfers (an all-reduce bucket beside a gradient all-to-all, the pooled
all-to-all beside a host read), and ShadowSync's background rounds.  Foreground sync rounds run
every K-th iteration as in a run, so the walked iterations hold one only when K divides 2.
docs/plans.md tabulates the estimate's error on every shipped workload.

Two iterations run back to back, as in a run (the input all-to-all of the next iteration may
start during this one's compute); the estimate is the second's end-to-end time, the measure of
``iteration_time_s`` (a run averages two iterations after its warm-up; walking a third moves
the estimates of the shipped workloads by at most 1.5 % of the iteration, for half as much
work again).
"""

from __future__ import annotations

import heapq
import operator
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.op_costs import op_durations, stack_compute_model, transfer_flows
from zionsim.dlrm.stack import BARE, StackSpec
from zionsim.dlrm.sync import sync_spec
from zionsim.dlrm.trace import Trace
from zionsim.network import nccl

NAN = float("nan")
#: iterations played (the first is the warm-up)
ITERATIONS = 2
#: walk one rank per class of alike ranks (module docstring); False: every rank (the tests
#: comparing the two)
CLASSES = True


@dataclass(frozen=True)
class Estimate:
    """Estimated seconds of one iteration, and the host seconds per step included in it."""

    iteration_s: float
    host_s: float


def host_time_s(stack: StackSpec, batch_per_gpu: int = 0) -> float:
    """Per-step seconds of the stack's host thread (batch preparation, without its kernel
    launches) and of HugeCTR's ``gpu_per_step``: the one place the estimate reads the stack's
    host-time model.  The lowered trace carries that work as ``host`` ops (the host stream's
    ``input_pipeline`` and ``launch_*`` ops, the compute stream's ``step_gpu_work``), which the
    walk plays like any other stream; an overlapped host runs ahead of the GPU there too."""
    prepare = stack.host_per_step_s + stack.host_per_sample_s * batch_per_gpu
    return prepare + stack.gpu_per_step_s


def iteration_estimate(cluster, w, plan, stack: StackSpec = BARE, sync=None) -> Estimate:
    """Estimated iteration seconds of workload ``w`` (the stack's precisions already applied, as
    ``apply_stack`` does) under ``plan`` on ``cluster``, as ``stack`` runs it, with dense sync
    ``sync`` (a :class:`~zionsim.dlrm.sync.SyncSpec`; default: the workload's ``sync:``)."""
    g = cluster.spec.gpus_per_node
    sync = sync or sync_spec(base=w.sync)
    trace = lower(
        w, plan, len(cluster.gpus), stack.fused_embedding, g, w.zipf_alpha, sync, stack
    )  # fmt: skip
    return Estimate(evaluate(cluster, trace), host_time_s(stack, w.batch_per_gpu))


def evaluate(cluster, trace: Trace, iterations: int = ITERATIONS) -> float:
    """Mean seconds of the iterations after the first, ``trace`` played as the module says."""
    stack = trace.stack or BARE
    durations = durations_of(cluster, trace, _compute_model(cluster, stack))
    if FLAT:
        ends = _FlatWalk(cluster, trace, durations, stack.compute_slowdown).run(iterations)
    else:
        ends = _Walk(cluster, trace, durations, stack.compute_slowdown).run(iterations)
    return float(np.diff(ends).mean()) if len(ends) > 1 else float(ends[0])


#: keep what a walk needs of a trace (its op seconds, its streams and rank classes) for the
#: next walk of the same lowered trace (the lowering hands a cached trace out again with the
#: same op objects): a sweep's points that differ only in the network's rates walk the same
#: candidate plans with the same op seconds; False: everything made anew (the tests)
REUSE = True
#: ops of the traces whose walk shapes (or op seconds) are kept, at most, in all (a larger
#: trace is not kept: a walk's shape costs about ten references per op, and a kept entry holds
#: its trace's ops alive); the lowering keeps 100,000 (``lowering.CACHE_OPS``)
KEEP_OPS = 200_000
#: compute models kept (:func:`_compute_model`), at most
KEEP_MODELS = 32
#: play the walk on flat per-op lists (:class:`_FlatWalk`); False: the op-object walk
#: (:class:`_Walk`, the tests comparing the two)
FLAT = True


class _ByTrace:
    """Values computed from a trace's ops and collectives, kept for the traces that hold the very
    same op and collective objects (the lowering's cache shares them among the traces it hands
    out): found by the first op's identity, the op count and ``extra``, then checked object by
    object.  An entry holds its ops, so no other op can take the first one's identity while it
    is kept."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()

    def get(self, trace: Trace, extra):
        """The value kept for ``trace`` (these very ops and collectives) and ``extra``, or
        None."""
        if not REUSE or not trace.ops:
            return None
        key = (id(trace.ops[0]), len(trace.ops), extra)
        hit = self.entries.get(key)
        if hit is None:
            return None
        ops, colls, value = hit
        same = (
            len(colls) == len(trace.collectives)
            and all(map(operator.is_, ops, trace.ops))
            and all(map(operator.is_, colls, trace.collectives))
        )
        if not same:
            return None
        self.entries.move_to_end(key)
        return value

    def put(self, trace: Trace, extra, value) -> None:
        """Keep ``value`` for ``trace`` and ``extra``, dropping the least recently used entries
        beyond :data:`KEEP_OPS` ops (a trace larger than that is not kept)."""
        if not REUSE or not trace.ops or len(trace.ops) > KEEP_OPS:
            return
        key = (id(trace.ops[0]), len(trace.ops), extra)
        self.entries[key] = (list(trace.ops), list(trace.collectives), value)
        while sum(len(ops) for ops, _, _ in self.entries.values()) > KEEP_OPS:
            self.entries.popitem(last=False)


_DURATIONS = _ByTrace()
_SHAPES = _ByTrace()
_TRANSFERS = _ByTrace()  # each trace's transfer ops


_MODELS: dict = {}


def _compute_model(cluster, stack: StackSpec):
    """``op_costs.stack_compute_model`` of ``cluster`` and ``stack``, kept by the GPU and the
    stack (by value) and the base model (by identity, held) while :data:`REUSE`."""
    if not REUSE:
        return stack_compute_model(cluster, stack)
    from zionsim.hardware.compute import load_compute_model

    base = load_compute_model()
    key = (repr(cluster.spec.gpu), repr(stack))
    hit = _MODELS.get(key)
    if hit is None or hit[0] is not base:
        if len(_MODELS) >= KEEP_MODELS:
            _MODELS.clear()
        hit = _MODELS[key] = (base, stack_compute_model(cluster, stack))
    return hit[1]


def durations_of(cluster, trace: Trace, model) -> np.ndarray:
    """``op_costs.op_durations`` of ``trace`` on ``cluster``'s GPU under compute ``model``,
    kept per trace, GPU and model (by value) while :data:`REUSE`; read only (shared)."""
    from zionsim.hardware.compute import load_compute_model

    extra = (repr(cluster.spec.gpu), repr(model if model is not None else load_compute_model()))
    out = _DURATIONS.get(trace, extra)
    if out is None:
        out = op_durations(cluster, trace, model)
        out.flags.writeable = False
        _DURATIONS.put(trace, extra, out)
    return out


def _walked(trace: Trace, durations: np.ndarray, transfer_s: dict) -> tuple:
    """(members of each rank's class, 0 for a rank another one stands for; the walked ranks'
    ops; their streams as op ids in program order)."""
    by_rank = trace.by_rank()
    weight = (
        rank_classes(by_rank, durations, transfer_s, trace.alike) if CLASSES else [1] * len(by_rank)
    )
    walked = [ops for ops, k in zip(by_rank, weight, strict=True) if k]
    streams = [
        [op.id for op in ops if op.stream == s]
        for ops in walked
        for s in dict.fromkeys(op.stream for op in ops)
    ]
    return weight, walked, streams


class _Walk:
    """Every rank's streams in time order: a heap of (ready time, op) with one head per stream."""

    def __init__(self, cluster, trace: Trace, durations: np.ndarray, slowdown: float):
        self.cluster, self.trace, self.dur, self.slow = cluster, trace, durations, slowdown
        self.transfer_s = _transfer_seconds(cluster, trace)
        #: members of each rank's class (0: a rank another one stands for, not walked)
        self.weight, walked, self.streams = _walked(trace, durations, self.transfer_s)
        self.stream_of = {i: k for k, ids in enumerate(self.streams) for i in ids}
        self.stream_ops = [[trace.ops[i] for i in ids] for ids in self.streams]
        self.dur = durations.tolist()  # read one at a time, often
        self.n_ops = len(trace.ops)
        #: streams (other than its own) with an op that waits for each op
        self.waiting: dict[int, set[int]] = {}
        for ops in walked:
            for op in ops:
                for d in op.deps:
                    if self.stream_of[d] != self.stream_of[op.id]:
                        self.waiting.setdefault(d, set()).add(self.stream_of[op.id])
        self.walked_ops = np.sort([op.id for ops in walked for op in ops]).astype(np.int64)
        two = any(op.stream == "embedding" for op in trace.ops)
        self.gpu_free = [0.0] * trace.ranks if two else None
        self.coll_s: dict = {}
        #: the collectives of the ops of each name: copies of one step that run at once
        copies: dict[str, set[int]] = {}
        for op in trace.ops:
            if op.kind == "collective":
                copies.setdefault(op.name, set()).add(op.args["coll"])
        self.copies = {c: tuple(sorted(g)) for g in copies.values() for c in g}

    def run(self, iterations: int) -> np.ndarray:
        """End time of each iteration (latest end of any of its ops)."""
        ops, n_ops = self.trace.ops, len(self.trace.ops)
        self.end = [NAN] * (iterations * n_ops)  # a list: read one at a time, often
        self.pos = [0] * len(self.streams)  # next op index, over iterations
        self.free = [0.0] * len(self.streams)
        self.arrived: dict = {}
        self.flight: list[list[tuple[float, float]]] = [[] for _ in range(self.trace.ranks)]
        self.heap: list = []
        self.queued: set[int] = set()
        self.in_collective: set[int] = set()  # streams waiting inside a collective
        self.iterations = iterations
        for k in range(len(self.streams)):
            self._push(k)
        while self.heap:
            t, _, k = heapq.heappop(self.heap)
            self.queued.discard(k)
            self._start(k, t)
        end = np.array(self.end).reshape(iterations, n_ops)[:, self.walked_ops]
        if np.isnan(end).any():
            stuck = int(self.walked_ops[np.flatnonzero(np.isnan(end))[0] % len(self.walked_ops)])
            raise InputError(
                f"the trace stalls: op {stuck} ({ops[stuck].name}, rank {ops[stuck].rank}) "
                "never runs",
                field=f"ops[{stuck}]",
            )
        return end.max(axis=1)

    def _push(self, k: int) -> None:
        """Queue stream ``k``'s next op once all its dependencies have ended."""
        ops, p = self.stream_ops[k], self.pos[k]
        if p >= len(ops) * self.iterations:
            return
        it, j = divmod(p, len(ops))
        op = ops[j]
        base, end = it * self.n_ops, self.end
        t = self.free[k]
        for d in op.deps:
            e = end[base + d]
            if e != e:  # NaN: not ended yet
                return
            if e > t:
                t = e
        heapq.heappush(self.heap, (t, op.id + base, k))
        self.queued.add(k)

    def _start(self, k: int, t: float) -> None:
        ops = self.stream_ops[k]
        it, j = divmod(self.pos[k], len(ops))
        op = ops[j]
        self.pos[k] += 1
        if op.kind == "collective":
            if op.category == "sync" and (it + 1) % op.args.get("every", 1):
                return self._finish(op, it, t)
            self.flight[op.rank].append((t, np.inf))
            self.in_collective.add(k)
            return self._arrive(op, it, t)
        if op.kind == "transfer":
            skip = op.category == "sync" and (it + 1) % op.args.get("every", 1)
            return self._finish(op, it, t + (0.0 if skip else self.transfer_s[op.id]))
        seconds = self.dur[op.id]
        on_gpu = self.gpu_free is not None and op.kind != "host" and seconds > 0
        if on_gpu:
            t = max(t, self.gpu_free[op.rank])
        if self.slow and op.kind != "host" and self._in_flight(op.rank, t):
            seconds *= 1.0 + self.slow
        if on_gpu:
            self.gpu_free[op.rank] = t + seconds
        self._finish(op, it, t + seconds)

    def _in_flight(self, rank: int, t: float) -> bool:
        if not self.flight[rank]:
            return False
        live = [(a, e) for a, e in self.flight[rank] if e > t]
        self.flight[rank] = live
        return any(a <= t for a, _ in live)

    def _arrive(self, op, it: int, t: float) -> None:
        cid = op.args["coll"]
        members = self.arrived.setdefault((it, cid), [0])
        members.append((op, t))
        members[0] += self.weight[op.rank]  # the ranks arrived: a class counts all its members
        c = self.trace.collectives[cid]
        if members[0] < len(c.ranks):
            return
        end = max(a for _, a in members[1:]) + self._collective_s(cid)
        for o, a in members[1:]:
            fl = self.flight[o.rank]
            if (a, np.inf) in fl:
                fl[fl.index((a, np.inf))] = (a, end)
            self._finish(o, it, end)
        del self.arrived[it, cid]

    def _finish(self, op, it: int, end: float) -> None:
        self.end[it * self.n_ops + op.id] = end
        k = self.stream_of[op.id]
        self.free[k] = end
        self.in_collective.discard(k)
        self._push(k)
        for s in self.waiting.get(op.id, ()):
            if s not in self.queued and s not in self.in_collective:
                self._push(s)

    def _collective_s(self, cid: int) -> float:
        """NCCL's estimate of collective ``cid``, priced with the copies it runs beside
        (memoised by op, size and group where a lone collective has no byte matrix, as the
        engine memoises its preparation)."""
        group = self.copies.get(cid, (cid,))
        if cid in self.coll_s:
            return self.coll_s[cid]
        colls = [self.trace.collectives[c] for c in group]
        if len(group) == 1:
            c = colls[0]
            key = (c.op, c.size_bytes, c.ranks.tobytes()) if c.matrix is None else None
            if key is not None and key in self.coll_s:
                return self.coll_s[key]
            self.coll_s[cid] = self._choice(c).estimate_s
            if key is not None:
                self.coll_s[key] = self.coll_s[cid]
            return self.coll_s[cid]
        times = nccl.estimate_together_s(self.cluster, [self._choice(c) for c in colls])
        self.coll_s.update(zip(group, times, strict=True))
        return self.coll_s[cid]

    def _choice(self, c) -> nccl.Choice:
        return choice_of(self.cluster, c)


def choice_of(cluster, c) -> nccl.Choice:
    """NCCL's choice (the built-in collective model) for collective ``c`` on ``cluster``,
    remembered per cluster (the candidate plans of one run share most of their collectives,
    and the run's own, which the engine then prepares from the same choice)."""
    memo = _choices_of(cluster)
    key = (c.op, c.size_bytes, c.ranks.tobytes(), nccl.matrix_key(c.matrix))
    if key not in memo:
        if len(memo) >= MEMO_CHOICES:
            memo.clear()
        devices = cluster.gpus[c.ranks]
        memo[key] = nccl.choose(cluster, c.op, devices, c.size_bytes, matrix=c.matrix)
    return memo[key]


#: op kinds of the flat walk
_COMPUTE, _HOST, _COLLECTIVE, _TRANSFER = 0, 1, 2, 3


class _Shape:
    """What a walk of one trace needs that its cluster's network does not change (given the
    ops' seconds and the host transfers' seconds, which decide the rank classes): the walked
    streams as op ids, and per op id its kind, rank, dependencies, collective and sync period
    (None: not a sync op) as flat lists."""

    def __init__(self, trace: Trace, durations: np.ndarray, transfer_s: dict):
        self.weight, walked, self.streams = _walked(trace, durations, transfer_s)
        n = self.n_ops = len(trace.ops)
        self.stream_of = [-1] * n
        for k, ids in enumerate(self.streams):
            for i in ids:
                self.stream_of[i] = k
        self.kind = [_COMPUTE] * n
        self.rank = [0] * n
        self.deps: list[tuple] = [()] * n
        self.coll = [-1] * n
        self.every: list = [None] * n
        codes = {"host": _HOST, "collective": _COLLECTIVE, "transfer": _TRANSFER}
        waiting: dict[int, set[int]] = {}
        for ops in walked:
            for op in ops:
                i = op.id
                self.kind[i] = codes.get(op.kind, _COMPUTE)
                self.rank[i] = op.rank
                self.deps[i] = tuple(op.deps)
                if op.kind == "collective":
                    self.coll[i] = op.args["coll"]
                if op.category == "sync":
                    self.every[i] = op.args.get("every", 1)
                for d in op.deps:
                    if self.stream_of[d] != self.stream_of[i]:
                        waiting.setdefault(d, set()).add(self.stream_of[i])
        #: per op, its stream and the streams (other than its own) with an op that waits for it
        self.then: list = [None] * n
        for k, ids in enumerate(self.streams):
            for i in ids:
                self.then[i] = (k, *waiting.get(i, ()))
        self.walked_ops = np.sort([op.id for ops in walked for op in ops]).astype(np.int64)
        self.two = any(op.stream == "embedding" for op in trace.ops)
        copies: dict[str, set[int]] = {}
        for op in trace.ops:
            if op.kind == "collective":
                copies.setdefault(op.name, set()).add(op.args["coll"])
        #: the collectives of the ops of each name: copies of one step that run at once
        self.copies = {c: tuple(sorted(g)) for g in copies.values() for c in g}
        self.need = [len(c.ranks) for c in trace.collectives]
        self.dur = durations.tolist()  # read one at a time, often


def _shape(trace: Trace, durations: np.ndarray, transfer_s: dict) -> _Shape:
    """The :class:`_Shape` of ``trace``, kept while :data:`REUSE` (by the ops' and transfers'
    seconds, by value)."""
    extra = (durations.tobytes(), tuple(sorted(transfer_s.items())), CLASSES)
    shape = _SHAPES.get(trace, extra)
    if shape is None:
        shape = _Shape(trace, durations, transfer_s)
        _SHAPES.put(trace, extra, shape)
    return shape


class _FlatWalk(_Walk):
    """:class:`_Walk` played on the flat lists of a :class:`_Shape`: the same heap of (ready
    time, op and iteration, stream), the same order of events and the same arithmetic, so the
    same iteration times to the bit (tested), at a fraction of the interpreter's work."""

    def __init__(self, cluster, trace: Trace, durations: np.ndarray, slowdown: float):
        self.cluster, self.trace, self.slow = cluster, trace, slowdown
        self.transfer_s = _transfer_seconds(cluster, trace)
        self.shape = _shape(trace, durations, self.transfer_s)
        self.weight = self.shape.weight
        self.copies = self.shape.copies
        self.coll_s: dict = {}

    def run(self, iterations: int) -> np.ndarray:
        """End time of each iteration (latest end of any of its ops)."""
        sh, trace = self.shape, self.trace
        st = _State(sh, trace.ranks, iterations)
        self._play(st, _finisher(sh, st, iterations))
        walked = sh.walked_ops
        out = np.array(st.end).reshape(iterations, sh.n_ops)[:, walked]
        if np.isnan(out).any():
            ops = trace.ops
            stuck = int(walked[np.flatnonzero(np.isnan(out))[0] % len(walked)])
            raise InputError(
                f"the trace stalls: op {stuck} ({ops[stuck].name}, rank {ops[stuck].rank}) "
                "never runs",
                field=f"ops[{stuck}]",
            )
        return out.max(axis=1)

    def _play(self, st: _State, finish) -> None:
        """Pop the heap until it is empty (:meth:`_Walk.run` and :meth:`_Walk._start`)."""
        sh = self.shape
        streams, lens, kind, rank_of, every = sh.streams, st.lens, sh.kind, sh.rank, sh.every
        dur, transfer_s, slow = sh.dur, self.transfer_s, self.slow
        step, it_of, queued, flight, gpu_free = st.step, st.it_of, st.queued, st.flight, st.gpu
        heap, heappop = st.heap, heapq.heappop
        while heap:
            t, _, k = heappop(heap)
            queued[k] = False
            it, j = it_of[k], step[k]
            i = streams[k][j]
            if j + 1 == lens[k]:
                step[k], it_of[k] = 0, it + 1
            else:
                step[k] = j + 1
            kd = kind[i]
            if kd == _COLLECTIVE:
                ev = every[i]
                if ev is not None and (it + 1) % ev:
                    finish(i, it, t)
                else:
                    self._arrive_flat(st, finish, i, it, t, k)
            elif kd == _TRANSFER:
                ev = every[i]
                skip = ev is not None and (it + 1) % ev
                finish(i, it, t + (0.0 if skip else transfer_s[i]))
            else:
                seconds = dur[i]
                host = kd == _HOST
                r = rank_of[i]
                on_gpu = gpu_free is not None and not host and seconds > 0
                if on_gpu:
                    t = max(t, gpu_free[r])
                if slow and not host and flight[r]:  # _Walk._in_flight
                    live = [(a, x) for a, x in flight[r] if x > t]
                    flight[r] = live
                    if any(a <= t for a, _ in live):
                        seconds *= 1.0 + slow
                if on_gpu:
                    gpu_free[r] = t + seconds
                finish(i, it, t + seconds)

    def _arrive_flat(self, st: _State, finish, i: int, it: int, t: float, k: int) -> None:
        """:meth:`_Walk._arrive` of op ``i`` of stream ``k``, iteration ``it``, at ``t``."""
        sh, inf = self.shape, np.inf
        r = sh.rank[i]
        st.flight[r].append((t, inf))
        st.in_coll[k] = True
        cid = sh.coll[i]
        members = st.arrived.setdefault((it, cid), [0])
        members.append((i, t))
        members[0] += sh.weight[r]
        if members[0] < sh.need[cid]:
            return
        e = max(a for _, a in members[1:]) + self._collective_s(cid)
        for o, a in members[1:]:
            fl = st.flight[sh.rank[o]]
            if (a, inf) in fl:
                fl[fl.index((a, inf))] = (a, e)
            finish(o, it, e)
        del st.arrived[it, cid]


class _State:
    """The changing state of one :class:`_FlatWalk`: per stream its next op (index in the
    iteration, and the iteration), when it is free, whether it is queued or waiting inside a
    collective; per op and iteration its end (NaN until it ends); the collectives' arrivals,
    each rank's collectives in flight and its GPU's next free time; the heap."""

    def __init__(self, sh: _Shape, ranks: int, iterations: int):
        n = len(sh.streams)
        self.lens = [len(ids) for ids in sh.streams]
        self.end = [NAN] * (iterations * sh.n_ops)
        self.step, self.it_of, self.free = [0] * n, [0] * n, [0.0] * n
        self.queued, self.in_coll = [False] * n, [False] * n
        self.arrived: dict = {}
        self.flight: list[list[tuple[float, float]]] = [[] for _ in range(ranks)]
        self.gpu = [0.0] * ranks if sh.two else None
        self.heap: list = []


def _finisher(sh: _Shape, st: _State, iterations: int):
    """``finish(op, iteration, end)``: :meth:`_Walk._finish` with its pushes
    (:meth:`_Walk._push`) inlined; every stream's first op is pushed here."""
    n_ops, streams, deps, stream_of, then = sh.n_ops, sh.streams, sh.deps, sh.stream_of, sh.then
    end, step, it_of, free = st.end, st.step, st.it_of, st.free
    queued, in_coll = st.queued, st.in_coll
    heap, heappush = st.heap, heapq.heappush

    def push(s: int) -> None:
        it = it_of[s]
        if it >= iterations:
            return
        j = streams[s][step[s]]
        base = it * n_ops
        t = free[s]
        for d in deps[j]:
            x = end[base + d]
            if x != x:  # NaN: not ended yet
                return
            if x > t:
                t = x
        heappush(heap, (t, j + base, s))
        queued[s] = True

    def finish(i: int, it: int, e: float) -> None:
        end[it * n_ops + i] = e
        k = stream_of[i]
        free[k] = e
        in_coll[k] = False
        for s in then[i]:  # its own stream first (never queued or in a collective here)
            if not queued[s] and not in_coll[s]:
                push(s)

    for s in range(len(streams)):
        push(s)
    return finish


#: NCCL choices remembered per cluster (:meth:`_Walk._choice`), at most
MEMO_CHOICES = 4096
_CHOICES: dict[int, tuple[weakref.ref, dict]] = {}


def _choices_of(cluster) -> dict:
    """The remembered NCCL choices of ``cluster`` (forgotten with it)."""
    entry = _CHOICES.get(id(cluster))
    if entry is None or entry[0]() is not cluster:
        for k in [k for k, (ref, _) in _CHOICES.items() if ref() is None]:
            del _CHOICES[k]
        entry = _CHOICES[id(cluster)] = (weakref.ref(cluster), {})
    return entry[1]


def rank_classes(
    by_rank: list, durations: np.ndarray, transfer_s: dict, alike: tuple | None = None
) -> list[int]:
    """Per rank, the members of its class when it is the class's first rank, else 0: ranks are
    alike when their ops match op for op in name, kind, category, stream, dependencies (as
    positions in the rank's own sequence), collective, sync period and seconds (module
    docstring).  ``alike`` (``Trace.alike``): ranks the lowering knows to have equal ops, whose
    ops are then compared once (their host transfers' seconds, which depend on the rank's own
    routes, still each time)."""
    first: dict[tuple, int] = {}
    weight = [0] * len(by_rank)
    known: dict[int, tuple] = {}  # a rank's key but for its transfers, by its ``alike`` rank
    for rank, ops in enumerate(by_rank):
        src = alike[rank] if alike is not None else rank
        if src not in known:
            known[src] = _ops_key(by_rank[src], durations)
        moved = tuple(transfer_s[op.id] for op in ops if op.id in transfer_s) if transfer_s else ()
        weight[first.setdefault((known[src], moved), rank)] += 1
    return weight


def _ops_key(ops: list, durations: np.ndarray) -> tuple:
    """What tells one rank's ops from another's, but for host transfers' seconds."""
    pos = {op.id: i for i, op in enumerate(ops)}
    return tuple(
        (
            op.name,
            op.kind,
            op.category,
            op.stream,
            tuple(pos[d] for d in op.deps),
            op.args.get("coll"),
            op.args.get("every"),
            float(durations[op.id]),
        )
        for op in ops
    )


def _transfer_seconds(cluster, trace: Trace) -> dict[int, float]:
    """Seconds of every transfer op: its route's latency plus, over the links it crosses, the
    most any link needs for the bytes of all ranks' transfers of the same name (module
    docstring)."""
    by_name: dict[str, list] = {}
    moves = _TRANSFERS.get(trace, None)
    if moves is None:
        moves = [op for op in trace.ops if op.kind == "transfer"]
        _TRANSFERS.put(trace, None, moves)
    for op in moves:
        routes, nbytes, latency, _ = transfer_flows(cluster, op.rank, op.args)
        by_name.setdefault(op.name, []).append((op.id, routes, np.asarray(nbytes), latency))
    out = {}
    for flows in by_name.values():
        busy = link_seconds(cluster.router.capacity_Bps, [(f[1], f[2]) for f in flows])
        for (op_id, _, _, latency), s in zip(flows, busy, strict=True):
            out[op_id] = float((latency.max() if len(latency) else 0.0) + s)
    return out


def link_seconds(capacity_Bps: np.ndarray, transfers: list[tuple[np.ndarray, np.ndarray]]):
    """For transfers running together, each a (routes, bytes per route) pair on links of
    ``capacity_Bps`` (routes padded with -1): the seconds the busiest link each one crosses needs
    for the bytes of all of them that cross it."""
    cap = np.append(capacity_Bps, np.inf)  # -1 padding lands on a link that costs nothing
    load = np.zeros(len(cap))
    for routes, nbytes in transfers:
        if routes.size:
            np.add.at(load, routes, np.broadcast_to(np.asarray(nbytes)[:, None], routes.shape))
    load[-1] = 0.0
    busy = load / cap
    out = []
    for routes, nbytes in transfers:
        used = routes[np.asarray(nbytes) > 0] if routes.size else routes
        out.append(float(busy[used].max()) if used.size else 0.0)
    return out
