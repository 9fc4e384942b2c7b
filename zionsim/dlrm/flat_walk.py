"""The planner's flat walk (``walks.py`` has the reference walk it reproduces): a trace's walked
streams and per-op kinds, ranks, dependencies, collectives and sync periods as flat lists
(:class:`Shape`, which a sweep keeps per lowered trace for the next walk of it,
``estimate.REUSE``), played by :class:`FlatWalk` on the same heap of (ready time, op and
iteration, stream) as :class:`~.walks.Walk`, to the same iteration times to the bit
(``tests/sim/test_fast_paths.py``), and a lower bound on a walk's end that lets the planner skip
a candidate without walking it (:meth:`FlatWalk.lower_bound`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.rank_classes import collective_copies
from zionsim.dlrm.stack import slowed_s
from zionsim.dlrm.trace import Trace
from zionsim.dlrm.walks import NAN, Walk, gates, landed, quiet_at, walked_ranks
from zionsim.network import nccl

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
        self.weight, owner, walked, self.streams = walked_ranks(
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
        #: :func:`gates`)
        self.gate = [-1] * n
        for first, last in gates(trace, self.streams).items():
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
        dur, transfer_s, slow, coll_s = sh.dur, self.transfer_s, self.slow, self._collective_s
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
                if slow and not host and flight[r]:  # Walk._quiet_at
                    seconds = slowed_s(seconds, quiet_at(flight, r, t, coll_s) - t, slow)
                if on_gpu:
                    gpu_free[r] = t + seconds
                finish(i, it, t + seconds)

    def _arrive_flat(self, st: _State, finish, i: int, it: int, t: float, k: int) -> None:
        """:meth:`Walk._arrive` of op ``i`` of stream ``k``, iteration ``it``, at ``t``."""
        sh, inf = self.shape, np.inf
        r = sh.rank[i]
        cid = sh.coll[i]
        st.flight[r].append((t, inf, cid))
        st.in_coll[k] = True
        members = st.arrived.setdefault((it, cid), [0])
        members.append((i, t))
        members[0] += sh.joins[i]
        if members[0] < sh.need[cid]:
            return
        e = max(a for _, a in members[1:]) + self._collective_s(cid)
        for o, a in members[1:]:
            landed(st.flight[sh.rank[o]], a, e)
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
        self.flight: list[list[tuple[float, float, int]]] = [[] for _ in range(ranks)]
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
