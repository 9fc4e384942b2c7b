"""The records a simulation keeps, as named tuples: one per executed op, per background sync
round, and the tag of every network span (what the traffic belonged to).  Plain data, built in
the engine's hot loop (a named tuple costs what a tuple does to read, by name or position)."""

from __future__ import annotations

from typing import NamedTuple


class OpRecord(NamedTuple):
    """One executed op: its iteration, op id, when its stream was free, its start and end (s)."""

    iteration: int
    op: int
    free_s: float
    start_s: float
    end_s: float


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
