"""Classes of alike ranks, for the planner's walks (``walks.py``): ranks whose ops match op for
op (name, kind, category, stream, dependencies, collective, sync period, seconds) and whose host
transfers take the same seconds are one class, and the walk plays one rank for each class.
With the copies of a step's collective grouped (``collective_copies``), ranks alike but for
which copy they join are alike too, split until every class joins copies of the same class
composition (``split_by_copies``)."""

from __future__ import annotations

import numpy as np

from zionsim.dlrm.trace import Trace


def rank_classes(
    by_rank: list,
    durations: np.ndarray,
    transfer_s: dict,
    alike: tuple | None = None,
    group_of: dict | None = None,
) -> tuple[list[int], list[int]]:
    """Per rank, the members of its class when it is the class's first rank, else 0, and each
    rank's class's first rank (module docstring).  ``alike`` (``Trace.alike``): ranks the
    lowering knows to have equal ops, whose ops are then compared once (their host transfers'
    seconds, which depend on the rank's own routes, still each time).  ``group_of``: a
    collective as the first of its copies (ranks alike but for which copy they join are
    alike, ``flat_walk.Shape``'s ``copies``)."""
    first: dict[tuple, int] = {}
    weight = [0] * len(by_rank)
    owner = [0] * len(by_rank)
    # a rank's key but for its transfers, by its ``alike`` rank, as the number of the first
    # equal key (a key is a long tuple, and a tuple's hash is not kept: hashed once here)
    known: dict[int, int] = {}
    numbers: dict[tuple, int] = {}
    for rank, ops in enumerate(by_rank):
        src = alike[rank] if alike is not None else rank
        if src not in known:
            key = _ops_key(by_rank[src], durations, group_of)
            known[src] = numbers.setdefault(key, len(numbers))
        moved = tuple(transfer_s[op.id] for op in ops if op.id in transfer_s) if transfer_s else ()
        owner[rank] = first.setdefault((known[src], moved), rank)
        weight[owner[rank]] += 1
    return weight, owner


def collective_copies(trace: Trace, by_rank: list | None = None) -> dict[int, tuple[int, ...]]:
    """Each collective's copies: the collectives of the ops of its ops' name.  With ``by_rank``
    (``trace.by_rank()``) and the trace's ``alike`` ranks, only the ranks the lowering made
    are read: a copied rank's ops hold its original's names and arguments."""
    named: dict[str, set[int]] = {}
    alike = trace.alike
    if by_rank is not None and alike is not None and len(alike) == len(by_rank):
        ops = (op for r, mine in enumerate(by_rank) if alike[r] == r for op in mine)
    else:
        ops = trace.ops
    for op in ops:
        if op.kind == "collective":
            named.setdefault(op.name, set()).add(op.args["coll"])
    return {c: tuple(sorted(g)) for g in named.values() for c in g}


def split_by_copies(by_rank: list, owner: list[int], collectives: list) -> tuple:
    """Classes of ranks alike but for which copy of a collective they join (``owner``: each
    rank's class's first rank), split until the members of a class join, op for op, copies
    whose members fall into the same classes (a copy shared with another class's ranks on one
    rail, alone on another, tells them apart); (members of each rank's class, 0 for a rank
    another one stands for; each rank's class's first rank)."""
    joined = [[op.args["coll"] for op in ops if op.kind == "collective"] for ops in by_rank]
    members = {c: collectives[c].ranks.tolist() for cs in joined for c in cs}
    while True:
        numbers: dict[tuple, int] = {}
        comp = {
            c: numbers.setdefault(tuple(sorted(owner[m] for m in ms)), len(numbers))
            for c, ms in members.items()
        }
        first: dict[tuple, int] = {}
        split = [first.setdefault((owner[r], *map(comp.get, cs)), r) for r, cs in enumerate(joined)]
        if len(first) == len(set(owner)):
            break
        owner = split
    weight = [0] * len(owner)
    for o in owner:
        weight[o] += 1
    return weight, owner


def _ops_key(ops: list, durations: np.ndarray, group_of: dict | None = None) -> tuple:
    """What tells one rank's ops from another's, but for host transfers' seconds (and, with
    ``group_of``, for which copy of a collective it joins)."""
    pos = {op.id: i for i, op in enumerate(ops)}.__getitem__
    seconds = durations[[op.id for op in ops]].tolist()  # Python floats, as float() gives
    coll = (lambda c: c) if group_of is None else (lambda c: c if c is None else group_of[c])
    return tuple(
        (
            op.name,
            op.kind,
            op.category,
            op.stream,
            tuple(map(pos, op.deps)),
            coll(op.args.get("coll")),
            op.args.get("every"),
            s,
        )
        for op, s in zip(ops, seconds, strict=True)
    )
