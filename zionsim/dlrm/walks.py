"""The planner's walk of a lowered trace (``estimate.py`` says what it prices and why): every
rank's streams played in time order as the engine plays them, each op priced in closed form.

Two walks give the same iteration times to the bit (``tests/sim/test_fast_paths.py``):

* :class:`Walk` reads the op objects, one method call per event: the reference, kept behind
  ``estimate.FLAT = False``;
* :class:`FlatWalk` plays the same heap of (ready time, op and iteration, stream) on the flat
  per-op lists of a :class:`Shape` (kind, rank, dependencies, collective, sync period), which a
  sweep keeps per lowered trace for the next walk of it (``estimate.REUSE``).

Both walk one rank per class of alike ranks (``rank_classes.py``) unless told not to.  What
they price with — host transfers' seconds, NCCL's choice for a collective — and the settings and
per-trace memos (a :class:`Shape` kept for the next walk of the same trace) come from
``estimate``, which calls them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.rank_classes import collective_copies, rank_classes, split_by_copies
from zionsim.dlrm.trace import Trace
from zionsim.network import nccl

NAN = float("nan")


def _walked(
    trace: Trace,
    durations: np.ndarray,
    transfer_s: dict,
    classes: bool,
    group_of=None,
    by_rank: list | None = None,
) -> tuple:
    """(members of each rank's class, 0 for a rank another one stands for — every rank its own
    class unless ``classes``; each rank's class's first rank; the walked ranks' ops; their
    streams as op ids in program order).  ``group_of``: as ``rank_classes.rank_classes``;
    ``by_rank``: ``trace.by_rank()`` where the caller has it."""
    by_rank = by_rank if by_rank is not None else trace.by_rank()
    if classes:
        weight, owner = rank_classes(by_rank, durations, transfer_s, trace.alike, group_of)
        if group_of is not None:
            weight, owner = split_by_copies(by_rank, owner, trace.collectives)
    else:
        weight, owner = [1] * len(by_rank), list(range(len(by_rank)))
    walked = [ops for ops, k in zip(by_rank, weight, strict=True) if k]
    streams = [
        [op.id for op in ops if op.stream == s]
        for ops in walked
        for s in dict.fromkeys(op.stream for op in ops)
    ]
    return weight, owner, walked, streams


def _gates(trace: Trace, streams: list[list[int]]) -> dict[int, int]:
    """Per first op of a stream that starts a step only once the rank's previous step has ended
    on its GPU, the rank's last compute-stream op: the engine's ``host_waits`` (a stack whose
    host does not run ahead, ``host.overlap: false``) for the host stream and ``emb_waits``
    (``iteration_join``) for the embedding stream.  The walk holds such a stream's iteration
    ``it`` until that op of iteration ``it - 1`` has ended, as the engine does."""
    stack = trace.stack
    waits = {
        "host": stack is not None and not stack.host_overlap,
        "embedding": stack is not None and stack.iteration_join,
    }
    if not any(waits.values()):
        return {}
    ops = trace.ops
    last = {ops[ids[0]].rank: ids[-1] for ids in streams if ops[ids[0]].stream == "compute"}
    return {
        ids[0]: last[ops[ids[0]].rank]
        for ids in streams
        if waits.get(ops[ids[0]].stream) and ops[ids[0]].rank in last
    }


class Walk:
    """Every rank's streams in time order: a heap of (ready time, op) with one head per stream.
    ``transfer_s``: seconds of each host transfer op; ``choose``: NCCL's choice for a
    collective of the trace; ``classes``: walk one rank per class of alike ranks; ``together``:
    ``nccl.estimate_together_s`` on the cluster of choices that run at once (default: it)."""

    def __init__(
        self,
        cluster,
        trace: Trace,
        durations: np.ndarray,
        slowdown: float,
        transfer_s: dict,
        choose: Callable[[object], nccl.Choice],
        classes: bool = True,
        together: Callable[[list], list[float]] | None = None,
    ):
        self.cluster, self.trace, self.dur, self.slow = cluster, trace, durations, slowdown
        self.transfer_s, self.choose = transfer_s, choose
        self.together = together or partial(nccl.estimate_together_s, cluster)
        #: members of each rank's class (0: a rank another one stands for, not walked)
        self.weight, _, walked, self.streams = _walked(trace, durations, transfer_s, classes)
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
        #: a gated stream's first op: the op of the previous iteration it waits for
        self.gate = _gates(trace, self.streams)
        for first, last in self.gate.items():
            self.waiting.setdefault(last, set()).add(self.stream_of[first])
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
        if it and op.id in self.gate:  # the rank's previous step must have ended on its GPU
            e = end[base - self.n_ops + self.gate[op.id]]
            if e != e:
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
        times = self.together([self._choice(c) for c in colls])
        self.coll_s.update(zip(group, times, strict=True))
        return self.coll_s[cid]

    def _choice(self, c) -> nccl.Choice:
        return self.choose(c)


#: op kinds of the flat walk
_COMPUTE, _HOST, _COLLECTIVE, _TRANSFER = 0, 1, 2, 3


class Shape:
    """What a walk of one trace needs that its cluster's network does not change (given the
    ops' seconds and the host transfers' seconds, which decide the rank classes): the walked
    streams as op ids, and per op id its kind, rank, dependencies, collective and sync period
    (None: not a sync op) as flat lists.

    ``copies``: ranks alike but for which copy of a step's collective they join (the copies of
    one name: a TWRW table's reduce-scatter in each node, its all-to-all on each rail) are one
    class too, so that one rank stands for alike ranks of every node or rail.  That holds only
    where each walked copy's members are all stood for by the ranks that join it (``valid``;
    else use the shape without), and only on a cluster that prices every copy of each step in
    ``spans`` alike (the walk checks: :meth:`FlatWalk.copies_alike`)."""

    def __init__(
        self,
        trace: Trace,
        durations: np.ndarray,
        transfer_s: dict,
        classes: bool,
        copies: bool = False,
    ):
        #: the collectives of the ops of each name: copies of one step that run at once
        by_rank = trace.by_rank()
        self.copies = collective_copies(trace, by_rank)
        copies = copies and any(len(g) > 1 for g in self.copies.values())  # else the same
        group_of = {c: g[0] for c, g in self.copies.items()} if copies else None
        self.weight, owner, walked, self.streams = _walked(
            trace, durations, transfer_s, classes, group_of, by_rank
        )
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
        self._link(trace, waiting)
        self.walked_ops = np.sort([op.id for ops in walked for op in ops]).astype(np.int64)
        self.walked_list = self.walked_ops.tolist()
        # a rank another stands for has its streams (classes compare them): the walked ranks
        self.two = any(op.stream == "embedding" for ops in walked for op in ops)
        self.need = [len(c.ranks) for c in trace.collectives]
        self.dur = durations.tolist()  # read one at a time, often
        #: per collective op of a walked rank, the members of its rank's class that join its
        #: collective (the class's members, unless ``copies``)
        self.joins = [0] * n
        #: the copies of each step that a class spans (``copies``), and whether every walked
        #: copy's members are stood for by the walked ranks that join it
        self.spans: tuple = ()
        self.valid = True
        self._join(trace, walked, owner, copies)
        #: kept for later walks: :meth:`bound_parts` (made when first asked for); iteration
        #: ends by what else a walk reads (:meth:`FlatWalk.inputs`); per iteration count, the
        #: collectives a walk prices (:meth:`FlatWalk.needed`)
        self._bound, self.ends, self.needed = None, {}, {}

    def bound_parts(self) -> tuple:
        """What :meth:`FlatWalk.lower_bound` reads, made once per shape: the first op of each
        walked stream whose last op no op of another stream waits for in the same iteration
        (a *sink* stream), and per such first op the walked ops of its rank from it on, in id
        order, with each op's predecessor on its stream (-1: none)."""
        if self._bound is None:
            fed = set()  # ops an op of another stream waits for (in the same iteration)
            prev = {}
            by_rank: dict[int, list[int]] = {}
            for k, ids in enumerate(self.streams):
                by_rank.setdefault(self.rank[ids[0]], []).extend(ids)
                for j, i in enumerate(ids):
                    prev[i] = ids[j - 1] if j else -1
                    for d in self.deps[i]:
                        if self.stream_of[d] != k:
                            fed.add(d)
            ranks = {r: sorted(ids) for r, ids in by_rank.items()}
            heads = []
            for ids in self.streams:
                if ids[-1] not in fed:
                    mine = ranks[self.rank[ids[0]]]
                    heads.append((ids[0], mine[mine.index(ids[0]) :]))
            self._bound = (heads, prev)
        return self._bound

    def _link(self, trace: Trace, waiting: dict[int, set[int]]) -> None:
        """``gate`` and ``then``, from ``waiting`` (per op, the other streams with an op that
        depends on it), to which the gated streams are added."""
        n = self.n_ops
        #: per op, the op of the previous iteration its stream waits for before it (-1: none;
        #: :func:`_gates`)
        self.gate = [-1] * n
        for first, last in _gates(trace, self.streams).items():
            self.gate[first] = last
            waiting.setdefault(last, set()).add(self.stream_of[first])
        #: per op, its stream and the streams (other than its own) with an op that waits for it
        self.then: list = [None] * n
        for k, ids in enumerate(self.streams):
            for i in ids:
                self.then[i] = (k, *waiting.get(i, ()))

    def _join(self, trace: Trace, walked: list, owner: list[int], copies: bool) -> None:
        """``joins``, and with ``copies`` (classes that span collective copies) ``spans`` and
        ``valid`` (``owner``: each rank's class's first rank)."""
        if not copies:
            for ops in walked:
                for op in ops:
                    if op.kind == "collective":
                        self.joins[op.id] = self.weight[op.rank]
            return
        joining: dict[int, list[int]] = {}
        for ops in walked:
            for op in ops:
                if op.kind == "collective":
                    joining.setdefault(op.args["coll"], []).append(op.id)
        spans = set()
        for cid, ids in joining.items():
            count: dict[int, int] = {}
            for m in trace.collectives[cid].ranks.tolist():
                count[owner[m]] = count.get(owner[m], 0) + 1
            reps = {self.rank[i] for i in ids}
            if not reps.issuperset(count) or len(reps) != len(ids):
                self.valid = False
                return
            for i in ids:
                self.joins[i] = count[self.rank[i]]
                if count[self.rank[i]] != self.weight[self.rank[i]]:  # its class spans copies
                    spans.add(self.copies[cid])
        self.spans = tuple(sorted(spans))


class FlatWalk(Walk):
    """:class:`Walk` played on the flat lists of a :class:`Shape`: the same heap of (ready
    time, op and iteration, stream), the same order of events and the same arithmetic, so the
    same iteration times to the bit (tested), at a fraction of the interpreter's work."""

    def __init__(
        self,
        cluster,
        trace: Trace,
        shape: Shape,
        slowdown: float,
        transfer_s: dict,
        choose: Callable[[object], nccl.Choice],
        together: Callable[[list], list[float]] | None = None,
    ):
        self.cluster, self.trace, self.slow = cluster, trace, slowdown
        self.transfer_s, self.choose = transfer_s, choose
        self.together = together or partial(nccl.estimate_together_s, cluster)
        self.shape = shape
        self.weight = self.shape.weight
        self.copies = self.shape.copies
        self.coll_s: dict = {}

    def copies_alike(self) -> bool:
        """Whether every copy of each step the shape's classes span is priced alike on this
        cluster (a :class:`Shape` with ``copies`` holds only then)."""
        for group in self.shape.spans:
            times = {self._collective_s(c) for c in group}
            if len(times) > 1:
                return False
        return True

    def needed(self, iterations: int) -> list[int]:
        """The collectives a walk of ``iterations`` prices: those of the walked collective ops
        that some iteration does not skip (a sync round runs every ``every``-th)."""
        sh = self.shape
        hit = sh.needed.get(iterations)
        if hit is None:
            hit = sh.needed[iterations] = sorted(
                {
                    sh.coll[i]
                    for i in sh.walked_list
                    if sh.kind[i] == _COLLECTIVE
                    and (sh.every[i] is None or any((it + 1) % sh.every[i] == 0
                                                    for it in range(iterations)))
                }
            )  # fmt: skip
        return hit

    def inputs(self, iterations: int) -> tuple:
        """All a walk of ``iterations`` reads beside its shape (whose trace, op seconds and host
        transfers' seconds are fixed): the compute slowdown, the rank count and the seconds of
        every collective it prices.  Walks of one shape with equal inputs end alike."""
        times = tuple(self._collective_s(c) for c in self.needed(iterations))
        return (self.slow, self.trace.ranks, iterations, times)

    def lower_bound(self, cutoff: float = -np.inf, above: float = 0.0) -> float:
        """A lower bound on the second iteration's end minus the first's in :meth:`run` of two
        iterations (the estimate).  With ``cutoff``: a number no greater than ``cutoff`` as soon
        as the bound is known not to exceed it, and a chain (below) followed only until it
        exceeds ``cutoff`` by ``above`` of itself (the collectives further on are not priced:
        a part of a chain bounds the estimate too).

        Why it holds: the first iteration ends with an op that no op of the same iteration waits
        for (one that did would end no earlier), so with the last op of a *sink* stream
        (:meth:`Shape.bound_parts`); that stream's ops of the second iteration start after it,
        in order, and so does every op of its rank that waits for one of them (through
        dependencies or its own stream's order).  Each op takes at least its seconds (compute
        and host ops: no slowdown, no wait for the GPU; a collective: its own NCCL estimate
        from its own arrival; a transfer: its seconds; a skipped sync op: nothing), so the
        longest such chain from the stream's first op bounds the difference; the bound is the
        least of these over the sink streams.  Collectives couple ranks, which the bound
        ignores: it only gets weaker."""
        sh = self.shape
        heads, prev = sh.bound_parts()
        kind, every, dur, coll, deps = sh.kind, sh.every, sh.dur, sh.coll, sh.deps
        transfer_s, coll_s = self.transfer_s, self._collective_s
        if not heads:  # no op walked (or a cycle, which the walk reports): no bound
            return 0.0
        least = np.inf
        stop = cutoff > -np.inf
        for first, ids in heads:
            reach: dict[int, float] = {}
            top = 0.0
            for i in ids:
                if i == first:
                    start = 0.0
                else:
                    start = reach.get(prev[i], -1.0)
                    for d in deps[i]:
                        x = reach.get(d, -1.0)
                        if x > start:
                            start = x
                    if start < 0.0:  # waits for no op of the chain
                        continue
                kd = kind[i]
                if kd == _COLLECTIVE or kd == _TRANSFER:
                    ev = every[i]
                    if ev is not None and 2 % ev:  # skipped in the second iteration
                        seconds = 0.0
                    else:
                        seconds = coll_s(coll[i]) if kd == _COLLECTIVE else transfer_s[i]
                else:
                    seconds = dur[i]
                end = reach[i] = start + seconds
                if end > top:
                    top = end
                    if stop and top - cutoff > above * top:  # this chain passed the cutoff
                        break
            if top < least:
                least = top
                if least <= cutoff:
                    return least
        return least

    def run(self, iterations: int) -> np.ndarray:
        """End time of each iteration (latest end of any of its ops)."""
        sh, trace = self.shape, self.trace
        st = _State(sh, trace.ranks, iterations)
        self._play(st, _finisher(sh, st, iterations))
        walked, n, end = sh.walked_ops, sh.n_ops, st.end
        ids = sh.walked_list
        out = np.array([[end[it * n + i] for i in ids] for it in range(iterations)])
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
        """Pop the heap until it is empty (:meth:`Walk.run` and :meth:`Walk._start`)."""
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
                if slow and not host and flight[r]:  # Walk._in_flight
                    live = [(a, x) for a, x in flight[r] if x > t]
                    flight[r] = live
                    if any(a <= t for a, _ in live):
                        seconds *= 1.0 + slow
                if on_gpu:
                    gpu_free[r] = t + seconds
                finish(i, it, t + seconds)

    def _arrive_flat(self, st: _State, finish, i: int, it: int, t: float, k: int) -> None:
        """:meth:`Walk._arrive` of op ``i`` of stream ``k``, iteration ``it``, at ``t``."""
        sh, inf = self.shape, np.inf
        r = sh.rank[i]
        st.flight[r].append((t, inf))
        st.in_coll[k] = True
        cid = sh.coll[i]
        members = st.arrived.setdefault((it, cid), [0])
        members.append((i, t))
        members[0] += sh.joins[i]
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
    """The changing state of one :class:`FlatWalk`: per stream its next op (index in the
    iteration, and the iteration), when it is free, whether it is queued or waiting inside a
    collective; per op and iteration its end (NaN until it ends); the collectives' arrivals,
    each rank's collectives in flight and its GPU's next free time; the heap."""

    def __init__(self, sh: Shape, ranks: int, iterations: int):
        n = len(sh.streams)
        self.lens = [len(ids) for ids in sh.streams]
        self.end = [NAN] * (iterations * sh.n_ops)
        self.step, self.it_of, self.free = [0] * n, [0] * n, [0.0] * n
        self.queued, self.in_coll = [False] * n, [False] * n
        self.arrived: dict = {}
        self.flight: list[list[tuple[float, float]]] = [[] for _ in range(ranks)]
        self.gpu = [0.0] * ranks if sh.two else None
        self.heap: list = []


def _finisher(sh: Shape, st: _State, iterations: int):
    """``finish(op, iteration, end)``: :meth:`Walk._finish` with its pushes
    (:meth:`Walk._push`, the gate included) inlined; every stream's first op is pushed here."""
    n_ops, streams, deps, stream_of, then = sh.n_ops, sh.streams, sh.deps, sh.stream_of, sh.then
    gate = sh.gate
    end, step, it_of, free = st.end, st.step, st.it_of, st.free
    queued, in_coll = st.queued, st.in_coll
    heap, heappush = st.heap, heapq.heappush

    def push_first(s: int) -> None:
        """Queue stream ``s``'s first op (iteration 0: no gate, ``finish`` pushes the rest)."""
        if not iterations:
            return
        j = streams[s][0]
        t = free[s]
        for d in deps[j]:
            x = end[d]
            if x != x:  # NaN: not ended yet
                return
            if x > t:
                t = x
        heappush(heap, (t, j, s))
        queued[s] = True

    def finish(i: int, it: int, e: float) -> None:
        end[it * n_ops + i] = e
        k = stream_of[i]
        free[k] = e
        in_coll[k] = False
        for s in then[i]:  # its own stream first (never queued or in a collective here)
            if not queued[s] and not in_coll[s]:  # Walk._push, inlined: the walk's busiest call
                its = it_of[s]
                if its >= iterations:
                    continue
                j = streams[s][step[s]]
                base = its * n_ops
                t = free[s]
                for d in deps[j]:
                    x = end[base + d]
                    if x != x:  # NaN: not ended yet
                        break
                    if x > t:
                        t = x
                else:
                    g = gate[j]
                    if g >= 0 and its:  # Walk._push: the rank's previous step has ended
                        x = end[base - n_ops + g]
                        if x != x:
                            continue
                        if x > t:
                            t = x
                    heappush(heap, (t, j + base, s))
                    queued[s] = True

    for s in range(len(streams)):
        push_first(s)
    return finish
