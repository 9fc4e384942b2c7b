"""The records a simulation keeps, as named tuples: one per executed op, per background sync
round, and the tag of every network span (what the traffic belonged to).  Plain data, built in
the engine's hot loop (a named tuple costs what a tuple does to read, by name or position)."""

from __future__ import annotations

import itertools
from operator import itemgetter
from typing import NamedTuple

import numpy as np


class OpRecord(NamedTuple):
    """One executed op: its iteration, op id, when its stream was free, its start and end (s)."""

    iteration: int
    op: int
    free_s: float
    start_s: float
    end_s: float


class OpRecords:
    """Every executed op's :class:`OpRecord`, held compactly: the engine appends one row per op
    it steps (``rows``: plain tuples in :class:`OpRecord` order); where that op stands for the
    ops of other ranks of its class (``sim/templates.py``), ``copies`` gets (the row's index,
    the member op ids), whose records share the row's iteration and times and follow it.  At
    65,536 ranks that is a few hundred rows and arrays instead of 20 M records.

    Iterating yields every record in that order (each row, then its members' records);
    :meth:`columns` gives the same as arrays."""

    __slots__ = ("rows", "copies")

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.copies: list[tuple[int, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self.rows) + sum(map(len, map(itemgetter(1), self.copies)))

    def __iter__(self):
        extra = dict(self.copies)
        for k, row in enumerate(self.rows):
            yield OpRecord(*row)
            for m in extra.get(k, ()):
                yield OpRecord(row[0], int(m), *row[2:])

    def columns(self) -> tuple[np.ndarray, ...]:
        """Iteration, op (int64), free, start and end (s) of every record, in iteration order."""
        flat = itertools.chain.from_iterable(self.rows)
        base = np.fromiter(flat, float, 5 * len(self.rows)).reshape(-1, 5)
        counts = np.ones(len(base), dtype=np.int64)
        n = len(self.copies)
        if n:  # one entry per row at most, in row order (the engine appends it after its row)
            rows = np.fromiter((k for k, _ in self.copies), np.int64, n)
            counts[rows] += np.fromiter((len(m) for _, m in self.copies), np.int64, n)
        it, op = (np.repeat(base[:, j].astype(np.int64), counts) for j in (0, 1))
        if n:
            first = np.cumsum(counts) - counts  # each row's own place
            member = np.ones(len(op), dtype=bool)
            member[first] = False
            op[member] = np.concatenate([m for _, m in self.copies]).astype(np.int64, copy=False)
        return (it, op, *(np.repeat(base[:, j], counts) for j in (2, 3, 4)))


class SyncRound(NamedTuple):
    """One background (ShadowSync) round of a trainer: its rank, start and end (s), and the
    iterations its trainer had finished at the start and at the end."""

    rank: int
    start_s: float
    end_s: float
    first_iteration: int
    last_iteration: int


#: the kinds of network traffic a span can carry (:class:`SpanTag`'s ``kind``)
SPAN_KINDS = ("collective", "host", "emb_ps", "ps", "sync")


class SpanTag(NamedTuple):
    """What a network span belongs to.

    ``kind``: ``collective`` (``index`` is the collective id), ``host`` (UVM rows of rank
    ``index``), ``emb_ps`` (parameter-server lookups of rank ``index``), ``ps`` (EASGD sync
    traffic of rank ``index``) or ``sync`` (a background round's collective ``index``).
    ``iteration`` is the training iteration, or the round's number for ``ps``/``sync``."""

    kind: str
    iteration: int
    index: int
