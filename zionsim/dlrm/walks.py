"""The planner's walk of a lowered trace (``estimate.py`` says what it prices and why): every
rank's streams played in time order as the engine plays them, each op priced in closed form.

Two walks give the same iteration times to the bit (``tests/sim/test_fast_paths.py``):

* :class:`Walk` reads the op objects, one method call per event: the reference, kept behind
  ``estimate.FLAT = False``;
* ``flat_walk.FlatWalk`` plays the same heap of (ready time, op and iteration, stream) on the
  flat per-op lists of a ``flat_walk.Shape`` (kind, rank, dependencies, collective, sync
  period), which a sweep keeps per lowered trace for the next walk of it
  (``estimate.REUSE``), and bounds a walk's end from below.

Both walk one rank per class of alike ranks (``rank_classes.py``) unless told not to.  What
they price with — host transfers' seconds, NCCL's choice for a collective — and the settings and
per-trace memos (a ``Shape`` kept for the next walk of the same trace) come from
``estimate``, which calls them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.rank_classes import rank_classes, split_by_copies
from zionsim.dlrm.stack import slowed_s
from zionsim.dlrm.trace import Trace
from zionsim.network import nccl

NAN = float("nan")


def walked_ranks(
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


def gates(trace: Trace, streams: list[list[int]]) -> dict[int, int]:
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
        self.weight, _, walked, self.streams = walked_ranks(trace, durations, transfer_s, classes)
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
        self.gate = gates(trace, self.streams)
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
        self.flight: list[list[tuple[float, float, int]]] = [[] for _ in range(self.trace.ranks)]
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
            cid = op.args["coll"]
            self.flight[op.rank].append((t, np.inf, cid))
            self.in_collective.add(k)
            return self._arrive(op, it, t)
        if op.kind == "transfer":
            skip = op.category == "sync" and (it + 1) % op.args.get("every", 1)
            return self._finish(op, it, t + (0.0 if skip else self.transfer_s[op.id]))
        seconds = self.dur[op.id]
        on_gpu = self.gpu_free is not None and op.kind != "host" and seconds > 0
        if on_gpu:
            t = max(t, self.gpu_free[op.rank])
        if self.slow and op.kind != "host":
            seconds = slowed_s(seconds, self._quiet_at(op.rank, t) - t, self.slow)
        if on_gpu:
            self.gpu_free[op.rank] = t + seconds
        self._finish(op, it, t + seconds)

    def _quiet_at(self, rank: int, t: float) -> float:
        """When the collectives ``rank`` has in flight at ``t`` end: their end where known,
        else their arrival plus their own time (a collective still waiting for its peers);
        ``t`` when none is in flight (``stack.slowed_s``)."""
        return quiet_at(self.flight, rank, t, self._collective_s)

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
            landed(self.flight[o.rank], a, end)
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


def quiet_at(flight: list, rank: int, t: float, collective_s) -> float:
    """When the collectives ``rank`` has in flight at ``t`` end (``Walk._quiet_at``); prunes the
    ended ones from ``flight[rank]``, a list of (arrival, end or inf, collective id): one still
    waiting for its peers is taken to end its own time (``collective_s``) after its arrival."""
    fl = flight[rank]
    if not fl:
        return t
    live = [x for x in fl if x[1] > t]
    flight[rank] = live
    quiet = t
    for a, end, cid in live:
        if a <= t:
            quiet = max(quiet, end if end < np.inf else a + collective_s(cid))
    return quiet


def landed(fl: list, arrival: float, end: float) -> None:
    """The flight entry of the collective that arrived at ``arrival`` ends at ``end``."""
    for j, x in enumerate(fl):
        if x[0] == arrival and x[1] == np.inf:
            fl[j] = (arrival, end, x[2])
            return
