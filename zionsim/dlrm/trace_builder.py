"""The op list of a trace under construction (``lowering.py`` places the ops): appending ops
and collectives, the host's launch ops in front of GPU ops (``stack.py`` item 5), one argument
dict for equal arguments, and a rank's block of ops copied for a rank whose inputs are equal."""

from __future__ import annotations

import sys

import numpy as np

from zionsim.dlrm.trace import Collective, Op


class TraceBuilder:
    """Accumulates the ops and collectives of a trace under construction.

    With a host timeline (a stack's ``host``, ``stack.py`` item 5) every GPU op waits for the
    host op that launches it: its own ``launch`` op on the rank's ``host`` stream when the stack
    dispatches eagerly, else (a CUDA graph) the rank's batch preparation."""

    def __init__(self, ranks: int, dispatch_s: float = 0.0):
        self.ranks, self.ops, self.colls = ranks, [], []
        self.dispatch_s = dispatch_s
        self.prepared: dict[int, int] = {}  # rank -> its batch-preparation host op
        self.last_launch: dict[int, int] = {}  # rank -> its latest launch op
        self.shared: dict[tuple, dict] = {}  # op arguments by value (_shared)

    def op(self, rank, name, kind, category, stream, deps=(), **args) -> int:
        """Append an op (None deps dropped: absent ops) and return its id (:meth:`_append`
        inline: the lowering makes tens of thousands of ops a sweep point)."""
        if type(deps) is not tuple:
            deps = tuple(deps)
        if None in deps:
            deps = tuple(d for d in deps if d is not None)
        if stream != "host" and rank in self.prepared:
            if self.dispatch_s > 0:
                deps += (self._launch(rank, name, kind, stream, args),)
            elif not deps:
                deps = (self.prepared[rank],)
        ops = self.ops
        i = len(ops)
        if kind != "host":  # as _append: a launch op's seconds grow (_launch), not shared
            args = self._shared(kind, args)
        ops.append(Op(i, rank, sys.intern(name), kind, category, stream, deps, args))
        return i

    def _launch(self, rank, name, kind, stream, args) -> int:
        """The host op that launches a GPU op: a new ``launch_<name>``, or, for an op right after
        another of the same stream, that one's launch lengthened (one host op per run of ops of
        a stream keeps traces small; the run's first kernel then waits for the whole run's
        launches, a difference of at most the run's GPU time when the host sets the pace)."""
        seconds = self.dispatch_s * _kernels(kind, args)
        last = self.ops[-1]
        launch = self.last_launch.get(rank)
        if last.rank == rank and last.stream == stream and last.deps[-1:] == (launch,):
            self.ops[last.deps[-1]].args["seconds"] += seconds
            return last.deps[-1]
        i = self._append(rank, f"launch_{name}", "host", "framework", "host", (),
                         {"seconds": seconds})  # fmt: skip
        self.last_launch[rank] = i
        return i

    def _append(self, rank, name, kind, category, stream, deps, args) -> int:
        i = len(self.ops)
        if kind != "host":  # a launch op's seconds grow as its run does (_launch): not shared
            args = self._shared(kind, args)
        self.ops.append(Op(i, rank, sys.intern(name), kind, category, stream, deps, args))
        return i

    def _shared(self, kind: str, args: dict) -> dict:
        """One dict for the equal arguments of many ops of one ``kind`` (alike ranks' GEMMs,
        every member's op of a collective): at 65,536 ranks the trace's largest part.  Values
        are compared with their types (``1`` and ``1.0`` stay apart); arguments holding lists
        are not shared.  The key is the kind, the items and the values' types, each a tuple
        built in C (equal keys exactly where the triples ``(key, type, value)`` are equal)."""
        try:
            key = (kind, tuple(args.items()), tuple(map(type, args.values())))
            return self.shared.setdefault(key, args)
        except TypeError:  # an unhashable value (a parameter server's per-server bytes)
            return args

    def prepare_batch(self, rank: int, seconds: float) -> None:
        """The host's per-iteration batch preparation of ``rank`` (the first op of its host
        stream); the rank's GPU ops then wait for the host (class docstring)."""
        self.prepared[rank] = self._append(
            rank, "input_pipeline", "host", "framework", "host", (), {"seconds": seconds}
        )

    def copy_rank(self, rank: int, start: int, end: int, colls: dict | None = None) -> None:
        """Append the ops ``[start, end)`` of another rank, whose inputs equal ``rank``'s
        (``lower``), as ``rank``'s: ids and dependencies shifted, the same (finished, never
        changed again) arguments; with ``colls``, each collective op joins ``colls``' collective
        in place of its own where ``colls`` names one (its arguments shared by value, as
        :meth:`op` shares them)."""
        if colls:
            n = len(self.ops)
            self.copy_rank(rank, start, end)
            ops = self.ops
            for i in range(n, len(ops)):
                op = ops[i]
                if op.kind == "collective" and op.args["coll"] in colls:
                    args = {**op.args, "coll": colls[op.args["coll"]]}
                    op.args = self._shared("collective", args)  # a new op: not yet shared
            return
        shift = len(self.ops) - start
        add, append = shift.__add__, self.ops.append  # bound once: thousands of ops a rank
        new = object.__new__
        for op in self.ops[start:end]:
            d = op.deps
            k = len(d)  # most ops wait for one or two: spelled out, a fifth of a copy saved
            if k == 2:
                deps = (d[0] + shift, d[1] + shift)
            elif k == 1:
                deps = (d[0] + shift,)
            else:
                deps = tuple(map(add, d)) if k else ()
            # Op(...) with its fields set here, as its __init__ sets them: a quarter of a copy
            # is the call of that __init__ (Op has no __post_init__ and no defaults)
            c = new(Op)
            c.id, c.rank, c.name, c.kind = op.id + shift, rank, op.name, op.kind
            c.category, c.stream, c.deps, c.args = op.category, op.stream, deps, op.args
            append(c)

    def collective(self, op, size, matrix=None, ranks=None) -> int:
        """Append a collective of ``size`` bytes over ``ranks`` (default all) and return its id."""
        ranks = np.arange(self.ranks) if ranks is None else ranks
        self.colls.append(Collective(len(self.colls), op, ranks, float(size), matrix))
        return len(self.colls) - 1


def _kernels(kind: str, args: dict) -> int:
    """Kernels the host launches for one op: its ``launches`` (one per table for unfused
    embeddings), one for a collective or a copy."""
    if kind in ("embedding_fwd", "embedding_bwd") and not args.get("fused", True):
        return max(int(args.get("tables", 1)), 1)
    return int(args.get("launches", 1))
