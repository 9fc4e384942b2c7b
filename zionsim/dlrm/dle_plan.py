"""NVIDIA DeepLearningExamples' PyTorch DLRM device mapping, as a :class:`~.plan.Plan`.

DLE places every table whole on one GPU (table-wise) by its own greedy rule, not by a cost
model [dle_dist]: ``get_device_mapping`` keeps the first GPU free of tables when there are more
than 4 GPUs (it runs the bottom MLP for the whole global batch: the stack's ``bottom_mlp:
first_rank``, ``stack.py`` item 13) and ``distribute_to_buckets`` deals the tables, largest
first (by row count, equal counts by the higher table index first), always into the bucket
whose tables hold the fewest rows so far, a bucket closing once it holds
``ceil(tables / buckets)`` tables.

Source [dle_dist]: NVIDIA/DeepLearningExamples (commit 729963d)
PyTorch/Recommendation/DLRM/dlrm/utils/distributed.py, ``get_device_mapping`` and
``distribute_to_buckets``; ``dlrm/scripts/main.py`` calls it with the tables' row counts
(``get_embedding_sizes``).
"""

from __future__ import annotations

import math

from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.workload import WorkloadSpec

#: above this many GPUs the first GPU holds no tables (it runs the bottom MLP) [dle_dist]
FREE_FIRST_ABOVE = 4


def buckets(sizes: list[int], n: int) -> list[list[int]]:
    """DLE's ``distribute_to_buckets``: table indices in ``n`` buckets (module docstring)."""
    cap = math.ceil(len(sizes) / n)
    order = [i for _, i in sorted(((s, i) for i, s in enumerate(sizes)), reverse=True)]
    open_, closed = [[] for _ in range(n)], []
    for i in order:
        open_[0].append(i)
        if len(open_[0]) == cap:
            closed.append(open_.pop(0))
        open_.sort(key=lambda b: sum(sizes[j] for j in b))  # stable, as Python's list.sort
    return closed + open_


def device_mapping(sizes: list[int], gpus: int) -> list[list[int]]:
    """DLE's ``get_device_mapping``: the table indices each of ``gpus`` GPUs holds."""
    if gpus > FREE_FIRST_ABOVE:
        return [[], *buckets(sizes, gpus - 1)]
    return buckets(sizes, gpus)


def dle_plan(cluster, w: WorkloadSpec) -> Plan:
    """Every table table-wise on the GPU DLE's device mapping gives it (module docstring)."""
    gpus = len(cluster.gpus)
    owner = {}
    for rank, tables in enumerate(device_mapping([t.rows for t in w.tables], gpus)):
        for i in tables:
            owner[i] = rank
    return Plan("dle", tuple(Shard(i, "TW", (owner[i],)) for i in range(len(w.tables))))
