"""Sharding plans: which GPU holds which table, and what that costs in memory.

This module holds the plan types and the default plan (table-wise, largest table first dealt
round-robin over the GPUs; tables under ``DP_MAX_BYTES`` replicated data-parallel).  Memory per GPU
is accounted here and checked against HBM: a plan that does not fit raises
:class:`~zionsim.base.errors.CapacityError` naming the GPU, the bytes needed and the bytes
available.

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

from zionsim.base.errors import CapacityError
from zionsim.dlrm.workload import DENSE_OPTIMIZERS, WorkloadSpec, row_bytes

SHARDINGS = ("TW", "RW", "CW", "TWRW", "TWCW", "DP")
#: shardings that split columns (one slice per listed rank) and rows (one block per listed rank)
COLUMN_SHARDINGS = ("CW", "TWCW")
ROW_SHARDINGS = ("RW", "TWRW")
#: memory tiers: HBM, host DRAM read by the GPU through a software cache (UVM), or host DRAM of a
#: CPU parameter server that does the lookups itself (``ps``: Zion's and ShadowSync's placement)
TIERS = ("hbm", "uvm", "ps")
#: tables at most this large are replicated (DP) by the default plan: below ~1 MiB the
#: all-to-all traffic of a remote table costs more than all-reducing its gradient (assumption)
DP_MAX_BYTES = 2**20
#: HugeCTR's hybrid embedding (``hybrid.py``): frequent rows replicated, infrequent rows spread
#: over every rank; made by the ``hugectr_hybrid`` planner only (plan files do not name it)
HYBRID = "HYB"
MEMORY_KINDS = ("embedding", "embedding_optimizer", "dense", "activations")


@dataclass(frozen=True)
class Shard:
    """Placement of one table: sharding kind and the ranks holding it."""

    table: int
    kind: str
    ranks: tuple[int, ...]
    tier: str = "hbm"
    cache_fraction: float = 0.0
    #: parameter server (a CPU service host of the front-end network) holding a ``ps``-tier table
    server: int = -1
    #: CW/TWCW: columns of each slice, in ``ranks`` order (None: nearly equal slices)
    widths: tuple[int, ...] | None = None
    #: RW/TWRW: rows of each block, in ``ranks`` order (None: TorchRec's ceil(rows/k) blocks,
    #: ``sharding.row_splits``)
    rows: tuple[int, ...] | None = None
    #: precision of this table's pooled embeddings and their gradients on the wire (None: the
    #: workload's ``precision.communication``)
    comm_precision: str | None = None
    #: HYB (HugeCTR's hybrid embedding, ``hybrid.py``): the table's frequent rows, replicated on
    #: every rank, and the share of its lookups they take; ``rows`` then lists each rank's
    #: infrequent rows
    frequent_rows: int = 0
    frequent_share: float = 0.0
    #: HYB under ``IB_NVLink_Hier``: the infrequent vectors cross nodes in two stages (an
    #: all-to-all inside the node to the GPU of the receiver's local index, then an all-to-all
    #: among the same-index GPUs of all nodes); False: one all-to-all over all GPUs
    hierarchical: bool = False


@dataclass(frozen=True)
class Plan:
    """A sharding plan: its name and one :class:`Shard` per table (``Shard.table`` is the
    table's index in the workload)."""

    name: str
    shards: tuple[Shard, ...]

    def owner(self) -> np.ndarray:
        """Owning rank of each table-wise table, -1 for replicated tables."""
        return np.array([s.ranks[0] if s.kind == "TW" and s.ranks else -1 for s in self.shards])


def table_bytes(w: WorkloadSpec, t) -> int:
    """Bytes of table ``t``'s rows in ``w``'s embedding precision (optimizer state excluded)."""
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


def fixed_hbm_bytes(w: WorkloadSpec) -> tuple[float, float]:
    """HBM bytes every GPU needs whatever the plan: dense parameters with their gradients and
    optimizer state, and activations (assumptions 2–3)."""
    dense = 4.0 * w.dense_params * (2 + DENSE_OPTIMIZERS[w.optimizer["dense"]])
    widths = sum(o for _, o in w.bottom_layers() + w.top_layers()) + w.top_input_width
    return dense, 4.0 * w.batch_per_gpu * (widths + 2 * w.embedding_width)


def check_fixed_fits(w: WorkloadSpec, hbm_bytes: float) -> None:
    """Raise :class:`CapacityError` when the plan-independent part of a GPU's memory (dense
    parameters and activations) overflows its HBM: no plan can fit, so planning is skipped."""
    dense, act = fixed_hbm_bytes(w)
    if dense + act > hbm_bytes:
        raise CapacityError(
            f"every GPU needs {(dense + act) / 1e9:.1f} GB of HBM for dense parameters "
            f"({dense / 1e9:.1f} GB) and activations ({act / 1e9:.1f} GB) alone, whatever the "
            f"plan, but has {hbm_bytes / 1e9:.1f} GB",
            field="workload",
            allowed="a smaller batch_per_gpu, fewer or narrower tables, smaller MLPs, or GPUs "
            "with more HBM",
        )


def check_cluster_holds(
    w: WorkloadSpec, gpus: int, hbm_bytes: float, dram_bytes: float, ps_bytes: float = 0.0
) -> None:
    """Raise :class:`CapacityError` when the embedding rows alone exceed all the HBM and host DRAM
    of the cluster (``gpus`` × ``hbm_bytes`` plus ``dram_bytes`` of all nodes), and the DRAM of
    the parameter-server hosts where the plan may use them (``ps_bytes``): no plan fits."""
    rows = float(sum(table_bytes(w, t) for t in w.tables))
    have = gpus * hbm_bytes + dram_bytes + ps_bytes
    if rows > have:
        where = "HBM, host DRAM and parameter-server DRAM" if ps_bytes else "HBM and host DRAM"
        raise CapacityError(
            f"the embedding tables need {rows / 1e12:.2f} TB but the whole cluster has "
            f"{have / 1e12:.2f} TB of {where}",
            field="--nodes",
            allowed="more nodes, fewer or smaller tables, or a smaller embedding precision"
            + (", or more service hosts (--set front_end.servers=N)" if ps_bytes else ""),
        )


def memory_by_rank(
    w: WorkloadSpec, plan: Plan, gpus: int, gpus_per_node: int = 8, zipf_alpha: float = 1.0
) -> dict[str, np.ndarray]:
    """HBM bytes per rank of each kind in :data:`MEMORY_KINDS` (assumptions 1–3), plus
    ``host_dram`` (rows of UVM shards kept in host memory, per rank)."""
    from zionsim.dlrm.sharding import layout

    lay = layout(w, plan, gpus, gpus_per_node, zipf_alpha)
    dense, act = fixed_hbm_bytes(w)
    return {
        "embedding": lay.hbm_bytes,
        "embedding_optimizer": lay.hbm_state_bytes,
        "dense": np.full(gpus, dense),
        "activations": np.full(gpus, act),
        "host_dram": lay.dram_bytes,
        "ps_dram": lay.ps_dram_bytes,
    }


def check_host_fits(
    host_dram: np.ndarray,
    dram_bytes_per_node: float,
    gpus_per_node: int,
    ps_dram: np.ndarray | None = None,
    servers: int = 0,
    server_dram_bytes: float = 0.0,
) -> None:
    """Raise :class:`CapacityError` if a node's host DRAM cannot hold its UVM shards, or a
    parameter server (one of ``servers`` service hosts) the tables placed on it (``ps_dram``:
    bytes per server)."""
    per_node = host_dram.reshape(-1, gpus_per_node).sum(axis=1)
    worst = int(np.argmax(per_node))
    if per_node[worst] > dram_bytes_per_node:
        raise CapacityError(
            f"node n{worst} needs {per_node[worst] / 1e9:.1f} GB of host DRAM for UVM tables "
            f"but has {dram_bytes_per_node / 1e9:.1f} GB",
            field="plan",
            allowed="more nodes, fewer host-memory tables, or a smaller embedding precision",
        )
    if ps_dram is None or not ps_dram.size:
        return
    if ps_dram.size > servers:
        raise CapacityError(
            f"the plan uses parameter server {ps_dram.size - 1} but the front-end network has "
            f"{servers} service hosts",
            field="plan",
            allowed=f"servers 0..{servers - 1}, or more with --set front_end.servers=N",
        )
    worst = int(np.argmax(ps_dram))
    if ps_dram[worst] > server_dram_bytes:
        raise CapacityError(
            f"parameter server {worst} needs {ps_dram[worst] / 1e9:.1f} GB of DRAM for its "
            f"tables but has {server_dram_bytes / 1e9:.1f} GB",
            field="plan",
            allowed="more parameter servers (front_end.servers) or larger ones "
            "(front_end.server.dram)",
        )


def check_fits(memory: dict[str, np.ndarray], hbm_bytes: float, gpu_names: list[str]) -> None:
    """Raise :class:`CapacityError` for the first GPU whose HBM the plan overflows."""
    total = sum(memory[k] for k in MEMORY_KINDS)
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
