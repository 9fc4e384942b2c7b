"""Rank templates: ranks that run the same op sequence are stepped once per class.

Two ranks are alike when their op sequences match op for op: name, kind, category, stream,
dependencies (as positions in the rank's own sequence), collective, sync period and duration on
this cluster.  Such ranks start together and every op of theirs starts and ends when the other's
does: their streams wait on the same (own) dependencies and the same collectives, which end for
all members at once, and nothing else tells them apart.  The engine (``engine.py``) then runs
one representative per class and counts it for all members where ranks are counted (a
collective's arrivals, the share of its members computing), and records each member's op with
the representative's times.

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


@dataclass(frozen=True)
class Templates:
    """Classes of alike ranks: each rank's representative, each representative's members
    (itself first), and each representative op's member ops (other members only)."""

    rep_of: np.ndarray
    members: dict[int, list[int]]
    member_ops: dict[int, list[int]]

    @property
    def reps(self) -> list[int]:
        """The representatives in rank order."""
        return sorted(self.members)

    def size(self, rank: int) -> int:
        """Members of the class represented by ``rank``."""
        return len(self.members[rank])


def templates(trace, durations_s: np.ndarray, background: bool) -> Templates:
    """The rank classes of ``trace`` with op ``durations_s`` (module docstring); every rank on
    its own when templates are off, with ``background`` sync threads or with host transfers."""
    by_rank = trace.by_rank()
    n = trace.ranks
    alone = not ENABLED or background or any(op.kind == "transfer" for op in trace.ops)
    if alone:
        return Templates(np.arange(n), {r: [r] for r in range(n)}, {})
    first: dict[tuple, int] = {}
    rep_of = np.empty(n, dtype=np.int64)
    for rank, ops in enumerate(by_rank):
        base = ops[0].id if ops else 0
        key = tuple(
            (
                op.name,
                op.kind,
                op.category,
                op.stream,
                tuple(d - base for d in op.deps),
                op.args.get("coll"),
                op.args.get("every"),
                float(durations_s[op.id]),
            )
            for op in ops
        )
        rep_of[rank] = first.setdefault(key, rank)
    members: dict[int, list[int]] = {}
    for rank in range(n):
        members.setdefault(int(rep_of[rank]), []).append(rank)
    member_ops: dict[int, list[int]] = {}
    for rep, ranks in members.items():
        if len(ranks) == 1:
            continue
        for pos, op in enumerate(by_rank[rep]):
            member_ops[op.id] = [by_rank[m][pos].id for m in ranks[1:]]
    return Templates(rep_of, members, member_ops)
