"""Sharding plans: which GPU holds which table, and what that costs in memory.

This module holds the plan types and the default plan (table-wise, largest table first dealt
round-robin over the GPUs; tables under ``DP_MAX_BYTES`` replicated data-parallel).  Memory per GPU
is accounted here and checked against HBM: a plan that does not fit raises
:class:`~zionsim.errors.CapacityError` naming the GPU, the bytes needed and the bytes available.

Memory assumptions (per GPU):

1. Embedding rows at the embedding precision (INT8 rows carry a 4-byte scale/bias), plus optimizer
   state in FP32: per element (adagrad 1, adam 2) or per row (row-wise adagrad 1).
2. Dense parameters are replicated: FP32 weights, FP32 gradients and optimizer state (adagrad 1,
   adam/lamb 2 values per parameter).
3. Activations kept for backward: every MLP layer's output and the interaction output for the
   local batch, at 4 bytes, plus the pooled embeddings received and their gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.errors import CapacityError
from zionsim.workload import DENSE_OPTIMIZERS, EMBEDDING_OPTIMIZERS, WorkloadSpec, row_bytes

SHARDINGS = ("TW", "RW", "CW", "TWRW", "DP")
#: tables at most this large are replicated (DP) by the default plan: below ~1 MiB the
#: all-to-all traffic of a remote table costs more than all-reducing its gradient (assumption)
DP_MAX_BYTES = 2**20
MEMORY_KINDS = ("embedding", "embedding_optimizer", "dense", "activations")


@dataclass(frozen=True)
class Shard:
    """Placement of one table: sharding kind and the ranks holding it."""

    table: int
    kind: str
    ranks: tuple[int, ...]
    tier: str = "hbm"


@dataclass(frozen=True)
class Plan:
    name: str
    shards: tuple[Shard, ...]

    def owner(self) -> np.ndarray:
        """Owning rank of each table-wise table, -1 for replicated tables."""
        return np.array([s.ranks[0] if s.kind == "TW" else -1 for s in self.shards])


def table_bytes(w: WorkloadSpec, t) -> int:
    return t.rows * row_bytes(t.dim, w.precision["embedding"])


def default_plan(w: WorkloadSpec, gpus: int) -> Plan:
    """Table-wise round-robin by size (largest first); tiny tables data-parallel."""
    order = sorted(w.tables, key=lambda t: (-table_bytes(w, t), t.index))
    shards: dict[int, Shard] = {}
    k = 0
    for t in order:
        if table_bytes(w, t) <= DP_MAX_BYTES and gpus > 1:
            shards[t.index] = Shard(t.index, "DP", tuple(range(gpus)))
        else:
            shards[t.index] = Shard(t.index, "TW", (k % gpus,))
            k += 1
    return Plan("round_robin", tuple(shards[t.index] for t in w.tables))


def memory_by_rank(w: WorkloadSpec, plan: Plan, gpus: int) -> dict[str, np.ndarray]:
    """Bytes per rank of each kind in :data:`MEMORY_KINDS` (assumptions 1–3)."""
    per_el, per_row = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]]
    emb, emb_opt = np.zeros(gpus), np.zeros(gpus)
    for s in plan.shards:
        t = w.tables[s.table]
        share = 1.0 if s.kind == "DP" else 1.0 / len(s.ranks)
        rows = t.rows * share
        for r in s.ranks:
            emb[r] += rows * row_bytes(t.dim, w.precision["embedding"])
            emb_opt[r] += 4 * rows * (per_el * t.dim + per_row)
    dense = np.full(gpus, 4.0 * w.dense_params * (2 + DENSE_OPTIMIZERS[w.optimizer["dense"]]))
    widths = sum(o for _, o in w.bottom_layers() + w.top_layers()) + w.top_input_width
    act = 4.0 * w.batch_per_gpu * (widths + 2 * w.embedding_width)
    return {
        "embedding": emb,
        "embedding_optimizer": emb_opt,
        "dense": dense,
        "activations": np.full(gpus, act),
    }


def check_fits(memory: dict[str, np.ndarray], hbm_bytes: float, gpu_names: list[str]) -> None:
    """Raise :class:`CapacityError` for the first GPU whose HBM the plan overflows."""
    total = sum(memory.values())
    worst = int(np.argmax(total))
    if total[worst] > hbm_bytes:
        parts = ", ".join(f"{k} {memory[k][worst] / 1e9:.1f} GB" for k in MEMORY_KINDS)
        raise CapacityError(
            f"{gpu_names[worst]} needs {total[worst] / 1e9:.1f} GB of HBM ({parts}) but has "
            f"{hbm_bytes / 1e9:.1f} GB",
            field="plan",
            allowed="a plan that fits: more GPUs, a smaller embedding precision, or "
            "host-memory (UVM) placement once supported",
        )
