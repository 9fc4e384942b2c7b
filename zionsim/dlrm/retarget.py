"""Re-targeting a trace to another rank count (weak scaling), e.g. an imported Kineto profile of
one node replayed on 16 (``zionsim trace --import-kineto FILE --nodes N``; ``docs/traces.md``)."""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.trace import Collective, Op, Trace
from zionsim.network.peer_bytes import OuterSum, tiled


def retarget(trace: Trace, ranks: int) -> Trace:
    """``trace`` replayed by ``ranks`` ranks: weak scaling of the per-rank pattern.

    1. New rank ``r`` runs the ops of trace rank ``r mod R`` (``R = trace.ranks``): every GPU
       keeps the measured per-GPU work (per-GPU batch, local tables, MLP shapes).
    2. A collective over all ``R`` ranks becomes one over all ``ranks`` ranks with the same
       nccl-tests size (per-rank buffer); an all-to-allv matrix is tiled (``new[i][j] =
       old[i mod R][j mod R]``) and each row rescaled to its old total.
    3. A collective over a subgroup (e.g. one node) is replicated in every block of ``R`` new
       ranks, which needs ``ranks`` to be a multiple of ``R``.
    4. ``meta["global_batch"]`` scales by ``ranks / R``; ``meta["ranks_global"]`` names the
       profiled rank each new rank replays.
    """
    R = trace.ranks
    if ranks < 1:
        raise InputError(f"must be >= 1, got {ranks}", field="--nodes/--gpus-per-node")
    if ranks == R:
        return trace
    if trace.sync is not None and trace.sync.background:
        raise InputError("cannot retarget a trace with background sync rounds", field="meta.sync")
    full = [len(c.ranks) == R for c in trace.collectives]
    blocks = ranks // R
    if not all(full) and ranks % R:
        raise InputError(
            f"the trace has collectives over subgroups of its {R} ranks: a new rank count must "
            f"be a multiple of {R}, got {ranks}",
            field="--nodes/--gpus-per-node",
        )
    colls, new_id = [], {}
    for c, is_full in zip(trace.collectives, full, strict=True):
        for b in [0] if is_full else range(blocks):
            new_id[c.id, b] = len(colls)
            members = np.arange(ranks) if is_full else c.ranks + b * R
            matrix = _tiled(c.matrix, ranks) if is_full and c.matrix is not None else c.matrix
            colls.append(
                Collective(len(colls), c.op, members.astype(np.int64), c.size_bytes, matrix)
            )
    ops: list[Op] = []
    per_rank = trace.by_rank()
    for r in range(ranks):
        src, b = per_rank[r % R], r // R
        offset = len(ops) - (src[0].id if src else 0)
        for o in src:
            args = dict(o.args)
            if o.kind == "collective":
                c = args["coll"]
                args["coll"] = new_id[c, 0 if full[c] else b]
            deps = tuple(d + offset for d in o.deps)
            ops.append(Op(len(ops), r, o.name, o.kind, o.category, o.stream, deps, args))
    meta = dict(trace.meta)
    if meta.get("global_batch"):
        meta["global_batch"] = int(round(meta["global_batch"] * ranks / R))
    original = meta.get("ranks_global") or []
    original = original if len(original) == R else list(range(R))
    meta["ranks_global"] = [original[r % R] for r in range(ranks)]
    meta["retargeted_from_ranks"] = R
    return Trace(ranks, ops, colls, meta, trace.stack, trace.sync)


def _tiled(matrix, ranks: int):
    """An R×R per-peer byte matrix tiled to ranks×ranks, each row keeping its total."""
    R = len(matrix)
    if isinstance(matrix, OuterSum):
        if ranks % R == 0:
            return tiled(matrix, ranks)
        matrix = matrix.dense()
    idx = np.arange(ranks) % R
    out = matrix[np.ix_(idx, idx)].astype(float)
    sums = out.sum(axis=1, keepdims=True)
    target = matrix.sum(axis=1)[idx][:, None]
    return np.divide(out * target, sums, out=np.zeros_like(out), where=sums > 0)
