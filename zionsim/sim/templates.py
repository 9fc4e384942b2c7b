"""Rank templates: ranks that run the same op sequence are stepped once per class.

Two ranks are alike when their op sequences match op for op: name, kind, category, stream,
dependencies (as positions in the rank's own sequence), collective, sync period and duration on
this cluster.  Such ranks start together and every op of theirs starts and ends when the other's
does: their streams wait on the same (own) dependencies and the same collectives, which end for
all members at once, and nothing else tells them apart.  The engine (``engine.py``) then runs
one representative per class and counts it for all members where ranks are counted (a
collective's arrivals, the share of its members computing), and records each member's op with
the representative's times.

Collectives that are one another's copies on other nodes (same op, size and no byte matrix; the
same local GPUs, their nodes shifted alike: the reduce-scatters of table-row-wise shards inside
each node) form a *collective class*: ranks that differ only in which copy they join are alike
too.  The copies of a class start together when all their members have arrived and run as the
per-rank engine runs them, each on the network; the ranks go on when the last copy ends, and
the copies must end at one time (to 1e-12): where they do not, the fabric has told the nodes
apart, and the run is done again with every rank on its own (:class:`TemplateBroken`), as it
is when waiting for every copy's members stalls the run (a member that could only arrive after
another copy ran).

Where something does tell them apart, every rank is its own class (the per-rank engine): host
transfers (each rank's own flows on the network, which may contend differently) and ShadowSync
background threads (each trainer's rounds follow its own progress).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: step alike ranks once (module docstring); False: every rank on its own (bench/run.py
#: ``--per-rank``, and the tests comparing the two)
ENABLED = True


class TemplateBroken(Exception):
    """The copies of a collective class ended at different times: run every rank alone."""


@dataclass(frozen=True)
class Templates:
    """Classes of alike ranks: each rank's representative, each representative's members
    (itself first), and each representative op's member ops (other members only); each
    collective's class (its own id when it has no copies) and each class's collectives."""

    rep_of: np.ndarray
    members: dict[int, list[int]]
    member_ops: dict[int, np.ndarray]
    coll_class: np.ndarray | None = None
    copies: dict[int, list[int]] | None = None

    @property
    def reps(self) -> list[int]:
        """The representatives in rank order."""
        return sorted(self.members)

    def size(self, rank: int) -> int:
        """Members of the class represented by ``rank``."""
        return len(self.members[rank])


def _rank_classes(by_rank, durations_s: np.ndarray, coll_class, alike=None) -> np.ndarray:
    """Each rank's representative: the first rank with the same op sequence (module
    docstring), collectives named by their class (``coll_class``; None: by their id).
    ``alike`` (``Trace.alike``): ranks the lowering made as copies of an earlier rank (the same
    ops but for ids and rank, collectives included), whose sequence is then that rank's when
    their ops' seconds are that rank's too (compared here, op for op)."""
    first: dict[tuple, int] = {}
    rep_of = np.empty(len(by_rank), dtype=np.int64)
    known: dict[int, tuple] = {}  # the key of each rank that others copy
    seconds = durations_s.tolist() if alike is not None else None
    for rank, ops in enumerate(by_rank):
        src = alike[rank] if alike is not None else rank
        if src != rank and src in known and _same_seconds(by_rank[src], ops, seconds):
            rep_of[rank] = first[known[src]]
            continue
        base = ops[0].id if ops else 0
        key = tuple(
            (
                op.name,
                op.kind,
                op.category,
                op.stream,
                tuple(d - base for d in op.deps),
                op.args.get("coll")
                if coll_class is None or op.kind != "collective"
                else int(coll_class[op.args["coll"]]),
                op.args.get("every"),
                float(durations_s[op.id]),
            )
            for op in ops
        )
        if src == rank:
            known[rank] = key
        rep_of[rank] = first.setdefault(key, rank)
    return rep_of


def _same_seconds(a: list, b: list, seconds: list) -> bool:
    """Whether op lists ``a`` and ``b`` are as long and their ops take the same ``seconds``."""
    return len(a) == len(b) and [seconds[op.id] for op in a] == [seconds[op.id] for op in b]


def _drop_unaligned(trace, rep_of, coll_class, copies) -> bool:
    """Make each collective a class of its own where its class's copies are not joined by
    the same rank classes in the same numbers (then their members need not arrive together);
    whether any was."""
    dropped = False
    for cids in copies.values():
        if len(cids) < 2:
            continue
        joined = {tuple(np.sort(rep_of[trace.collectives[c].ranks]).tolist()) for c in cids}
        if len(joined) > 1:
            coll_class[cids] = cids
            dropped = True
    return dropped


def collective_classes(trace, g: int) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Each collective's class (module docstring), numbered by its first collective's id, and
    each class's collectives in id order; ``g`` GPUs per node."""
    first: dict[tuple, int] = {}
    seen: dict[tuple, int] = {}  # collectives of one shape already met on one set of nodes
    cls = np.empty(len(trace.collectives), dtype=np.int64)
    for c in trace.collectives:
        ranks = np.asarray(c.ranks, dtype=np.int64)
        key: tuple = (c.id,)
        if c.matrix is None and len(ranks):
            shift = (int(ranks.min()) // g) * g  # the group moved to node 0
            shape = (c.op, float(c.size_bytes), tuple((ranks - shift).tolist()))
            # the k-th collective of a shape on these nodes copies the k-th on other nodes
            k = seen[shape, shift] = seen.get((shape, shift), -1) + 1
            key = (shape, k)
        cls[c.id] = first.setdefault(key, c.id)
    copies: dict[int, list[int]] = {}
    for cid, k in enumerate(cls.tolist()):
        copies.setdefault(k, []).append(cid)
    return cls, copies


def templates(
    trace, durations_s: np.ndarray, alone: bool, g: int = 0, by_rank: list | None = None
) -> Templates:
    """The rank classes of ``trace`` with op ``durations_s`` (module docstring) on nodes of
    ``g`` GPUs (0: no collective classes); every rank on its own when ``alone`` (the caller's:
    ShadowSync background threads, or a redone run), when templates are off or with host
    transfers; ``by_rank``: ``trace.by_rank()`` when the caller has it."""
    by_rank = by_rank if by_rank is not None else trace.by_rank()
    n = trace.ranks
    alone = alone or not ENABLED or any(op.kind == "transfer" for op in trace.ops)
    if alone:
        return Templates(np.arange(n), {r: [r] for r in range(n)}, {})
    coll_class, copies = collective_classes(trace, g) if g else (None, None)
    while True:
        rep_of = _rank_classes(by_rank, durations_s, coll_class, trace.alike)
        if not copies or not _drop_unaligned(trace, rep_of, coll_class, copies):
            break
        copies = {}
        for cid, k in enumerate(coll_class.tolist()):
            copies.setdefault(k, []).append(cid)
    members: dict[int, list[int]] = {}
    for rank in range(n):
        members.setdefault(int(rep_of[rank]), []).append(rank)
    member_ops: dict[int, np.ndarray] = {}
    for rep, ranks in members.items():
        if len(ranks) == 1:
            continue
        ids = np.empty((len(by_rank[rep]), len(ranks) - 1), dtype=np.int64)
        for j, m in enumerate(ranks[1:]):
            ids[:, j] = [op.id for op in by_rank[m]]
        for pos, op in enumerate(by_rank[rep]):
            member_ops[op.id] = ids[pos]
    return Templates(rep_of, members, member_ops, coll_class, copies)
