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

SHARDINGS = ("TW", "RW", "CW", "TWRW", "DP")
#: memory tiers: HBM, host DRAM read by the GPU through a software cache (UVM), or host DRAM of a
#: CPU parameter server that does the lookups itself (``ps``: Zion's and ShadowSync's placement)
TIERS = ("hbm", "uvm", "ps")
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
    cache_fraction: float = 0.0
    #: parameter server (host socket, numbered node-major) holding a ``ps``-tier table
    server: int = -1


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


def memory_by_rank(
    w: WorkloadSpec, plan: Plan, gpus: int, gpus_per_node: int = 8, zipf_alpha: float = 1.0
) -> dict[str, np.ndarray]:
    """HBM bytes per rank of each kind in :data:`MEMORY_KINDS` (assumptions 1–3), plus
    ``host_dram`` (rows of UVM shards kept in host memory, per rank)."""
    from zionsim.dlrm.sharding import layout

    lay = layout(w, plan, gpus, gpus_per_node, zipf_alpha)
    dense = np.full(gpus, 4.0 * w.dense_params * (2 + DENSE_OPTIMIZERS[w.optimizer["dense"]]))
    widths = sum(o for _, o in w.bottom_layers() + w.top_layers()) + w.top_input_width
    act = 4.0 * w.batch_per_gpu * (widths + 2 * w.embedding_width)
    return {
        "embedding": lay.hbm_bytes,
        "embedding_optimizer": lay.hbm_state_bytes,
        "dense": dense,
        "activations": np.full(gpus, act),
        "host_dram": lay.dram_bytes,
        "ps_dram": lay.ps_dram_bytes,
    }


def check_host_fits(
    host_dram: np.ndarray,
    dram_bytes_per_node: float,
    gpus_per_node: int,
    ps_dram: np.ndarray | None = None,
    sockets: int = 1,
) -> None:
    """Raise :class:`CapacityError` if a node's host DRAM cannot hold its UVM shards and the
    tables of its parameter servers (``ps_dram``: bytes per server, ``sockets`` per node)."""
    per_node = host_dram.reshape(-1, gpus_per_node).sum(axis=1)
    if ps_dram is not None and ps_dram.size:
        nodes = len(per_node)
        if ps_dram.size > nodes * sockets:
            raise CapacityError(
                f"the plan uses parameter server {ps_dram.size - 1} but the cluster has "
                f"{nodes * sockets} host sockets",
                field="plan",
                allowed=f"servers 0..{nodes * sockets - 1}",
            )
        per_node = per_node + np.resize(
            np.pad(ps_dram, (0, nodes * sockets - ps_dram.size)), (nodes, sockets)
        ).sum(axis=1)
    worst = int(np.argmax(per_node))
    if per_node[worst] > dram_bytes_per_node:
        raise CapacityError(
            f"node n{worst} needs {per_node[worst] / 1e9:.1f} GB of host DRAM for UVM and "
            f"parameter-server tables but has {dram_bytes_per_node / 1e9:.1f} GB",
            field="plan",
            allowed="more nodes, fewer host-memory tables, or a smaller embedding precision",
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


# ------------------------------------------------------------------------------ plan files
def plan_to_dict(plan: Plan, w: WorkloadSpec) -> dict:
    """A plan as plain data (the plan YAML schema, ``docs/plans.md``)."""
    rows = []
    for sh in plan.shards:
        row = {"table": w.tables[sh.table].name, "sharding": sh.kind}
        if sh.kind in ("TW", "CW", "TWRW"):
            row["ranks"] = list(sh.ranks)
        if sh.tier == "uvm":
            row["tier"] = sh.tier
            row["cache_fraction"] = sh.cache_fraction
        elif sh.tier == "ps":
            row["tier"] = sh.tier
            row["server"] = sh.server
        rows.append(row)
    return {"name": plan.name, "workload": w.name, "tables": rows}


def plan_from_dict(
    data: dict,
    w: WorkloadSpec,
    gpus: int,
    gpus_per_node: int,
    file: str = "<plan>",
    servers: int | None = None,
) -> Plan:
    """Validate a plan mapping against the workload and cluster; errors name file and field."""
    from zionsim.base.config import Fields

    f = Fields(data, file)
    f.check_keys({"name", "workload", "tables", "description"})
    items = f.raw("tables")
    if not isinstance(items, list):
        raise f.error("tables", "expected a list with one entry per table")
    index = {t.name: t.index for t in w.tables}
    shards: dict[int, Shard] = {}
    for i, item in enumerate(items):
        e = Fields(item, file, f"tables[{i}]")
        e.check_keys({"table", "sharding", "ranks", "node", "tier", "cache_fraction", "server"})
        name = e.text("table")
        if name not in index:
            raise e.error(
                "table",
                f"no table {name!r} in workload {w.name!r}",
                allowed=", ".join(list(index)[:5]) + (", ..." if len(index) > 5 else ""),
            )
        if index[name] in shards:
            raise e.error("table", f"table {name!r} is placed twice")
        tier = e.choice("tier", TIERS, "hbm")
        if tier == "ps":
            shards[index[name]] = _ps_shard(e, index[name], servers)
            continue
        kind = e.choice("sharding", SHARDINGS)
        ranks = _plan_ranks(e, kind, gpus, gpus_per_node)
        frac = e.quantity("cache_fraction", "fraction", 0.0, strict=False)
        if frac > 1.0:
            raise e.error("cache_fraction", f"must be in [0, 1], got {frac:g}")
        if kind == "CW" and len(ranks) > w.tables[index[name]].dim:
            raise e.error("ranks", "more column slices than the table has columns")
        shards[index[name]] = Shard(index[name], kind, ranks, tier, frac)
    missing = [t.name for t in w.tables if t.index not in shards]
    if missing:
        raise f.error("tables", f"{len(missing)} table(s) not placed, first {missing[0]!r}")
    return Plan(str(f.raw("name", "plan")), tuple(shards[t.index] for t in w.tables))


def _ps_shard(e, table: int, servers: int | None) -> Shard:
    """A ``tier: ps`` entry: the whole table on one parameter server (``server: K``)."""
    kind = e.choice("sharding", ("TW",), "TW")
    top = servers - 1 if servers else None
    k = e.integer("server", minimum=0)
    if top is not None and k > top:
        raise e.error("server", f"server {k} does not exist", allowed=f"0..{top}")
    return Shard(table, kind, (), "ps", 0.0, k)


def _plan_ranks(e, kind: str, gpus: int, g: int) -> tuple[int, ...]:
    if kind in ("RW", "DP"):
        return tuple(range(gpus))
    if kind == "TWRW" and "node" in e.data:
        node = e.integer("node", minimum=0)
        if node >= gpus // g:
            raise e.error("node", f"node {node} does not exist", allowed=f"0..{gpus // g - 1}")
        return tuple(range(node * g, (node + 1) * g))
    ranks = e.raw("ranks")
    if (
        not isinstance(ranks, list)
        or not ranks
        or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < gpus for r in ranks)
    ):
        raise e.error("ranks", f"expected a list of ranks in 0..{gpus - 1}, got {ranks!r}")
    if len(set(ranks)) != len(ranks):
        raise e.error("ranks", "a rank appears twice")
    if kind == "TW" and len(ranks) != 1:
        raise e.error("ranks", "table-wise sharding takes exactly one rank")
    if kind == "TWRW" and len({r // g for r in ranks}) != 1:
        raise e.error("ranks", "table-row-wise ranks must all be on one node")
    return tuple(ranks)


def load_plan(
    path: str, workload: WorkloadSpec, gpus: int, gpus_per_node: int, servers: int | None = None
) -> Plan:
    """Load and validate a plan YAML (``docs/plans.md``) against the workload and the cluster
    (``servers``: host sockets that can be parameter servers); errors name file and field."""
    from zionsim.base.config import load_yaml

    data, file = load_yaml(path, "plans")
    return plan_from_dict(data, workload, gpus, gpus_per_node, file, servers)
