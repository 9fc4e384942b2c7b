"""HugeCTR's sharding planner, as NVIDIA's MLPerf DLRM-DCNv2 submissions run it.

Source: ``mlcommons/training_results_v3.0`` … ``v5.0``, NVIDIA (and every partner running its
code) ``benchmarks/dlrm_dcnv2/implementations/*hugectr/sharding/planner.py`` and
``generate_plan.py``, called from ``train.py`` with ``--sharding_plan``, ``--mem_comm_bw_ratio``
and ``--dp_sharding_threshold`` from each system's ``config_*.sh``.  What the planner does, as
read from that code (the code here is written from this description, not copied):

1. **Buckets.**  ``auto``: one bucket per GPU.  ``hier_auto`` (several nodes only): one bucket
   per node, and every GPU of the node gets the node's table list; HugeCTR then splits each of
   those tables' rows over the node's GPUs and runs its ``Hierarchical`` communication
   (``HugeCTR/embedding/hier_model_parallel_embedding.cpp``: lookups, each GPU's outputs sent
   to the GPU of the receiver's local index in its node and reduced there, then an all-to-all
   among the same-index GPUs of all nodes).  Which runs communicate so is ``train.py``'s
   choice: ``CommunicationStrategy.Hierarchical if num_nodes > 1`` in every v3.1 and v4.1 copy
   and in HPE's, ASUSTeK's and QCT's v5.0 copies, so also under ``auto`` (TW and RW shards with
   ``Shard.hierarchical``); NVIDIA's own v5.0 ``train.py`` (and Dell's, GigaComputing's and
   Supermicro's B200 copies) adds ``and args.sharding_plan=='hier_auto'`` (setting
   ``hierarchical: hier_auto``).
2. **Data-parallel tables.**  A table whose rows and optimizer state (4 bytes per weight and per
   Adagrad accumulator: 8 bytes per element, 4 under SGD) take less than
   ``dp_sharding_threshold`` (GB) is replicated on every GPU.
3. **Cost of a bucket** = Σ over the table shards it holds of the table's hotness (pooling
   factor) / the table's shard count, plus ``mem_comm_bw_ratio / mem_comm_work_ratio`` per
   shard.  Memory of a bucket = Σ rows / shard count × bytes per row, at most
   ``memory_cap_for_embedding`` per GPU (× GPUs per node for a node bucket), less what the
   replicated tables take.
4. **Search**, at most 20 rounds: shards hottest first (ties: the later table first), each into
   the cheapest bucket (ties: the lower bucket) that does not hold its table yet and has
   memory left.  When every shard is placed the plan is a candidate, and the hottest table
   whose shard count can double without exceeding the bucket count doubles it; when a shard
   fits nowhere, its table's shard count doubles, or the search stops if it cannot.
5. The first candidate is every table in every bucket; the candidate with the cheapest most
   loaded bucket wins (the earliest among equals).

In zionsim terms a table on one GPU bucket is TW, on several GPU buckets RW over those GPUs
(partial sums in the all-to-all, or a reduce-scatter when it is on all of them), on node buckets
TWRW over all their GPUs (``sharding.py``).  HugeCTR gives key ``k`` of a table split ``m`` ways
to shard ``k % m`` (``HugeCTR/embedding/operators/mp_index_calculation.cu``,
``index_calculation_kernel``), so shard ``i`` holds ``rows // m`` rows plus one when
``i < rows % m``: the plan states those rows (:func:`modulo_row_splits`) where they differ from
TorchRec's ``⌈rows/m⌉`` blocks (``sharding.row_splits``), which zionsim assumes otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.base.config import Fields
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.workload import EMBEDDING_OPTIMIZERS, WorkloadSpec

#: ``sharding/planner.py``: ``Planner(max_search_iter=20)``
MAX_SEARCH_ROUNDS = 20
PLANS = ("auto", "hier_auto")
#: when ``train.py`` picks ``CommunicationStrategy.Hierarchical``: on several nodes whatever
#: the plan (v3.1, v4.1 and several v5.0 copies: ``Hierarchical if num_nodes > 1``), or only
#: with ``hier_auto`` (NVIDIA's own v5.0 train.py: ``... and args.sharding_plan=='hier_auto'``)
HIERARCHICAL = ("multi_node", "hier_auto")


@dataclass(frozen=True)
class Settings:
    """The planner's inputs from ``train.py``'s arguments, per plan kind where configs differ."""

    #: plan kind on one node and on several (``SHARDING_PLAN`` of the configs)
    single_node: str = "auto"
    multi_node: str = "hier_auto"
    #: ``MEM_COMM_BW_RATIO`` per plan kind
    mem_comm_bw_ratio: tuple[tuple[str, float], ...] = (("auto", 7.0), ("hier_auto", 67.0))
    #: ``DP_SHARDING_THRESHOLD`` per plan kind, bytes (the configs give GB = 1e9 bytes)
    dp_threshold_bytes: tuple[tuple[str, float], ...] = (("auto", 8e6), ("hier_auto", 12.5e6))
    #: ``--mem_comm_work_ratio`` default 8 / 2
    mem_comm_work_ratio: float = 4.0
    #: ``--memory_cap_for_embedding`` default 60 (GB) per GPU
    memory_cap_bytes: float = 60e9
    #: when the embedding communicates hierarchically (:data:`HIERARCHICAL`)
    hierarchical: str = "multi_node"
    #: the hybrid embedding's settings (``planner.hybrid``, used by ``plan: hugectr_hybrid``;
    #: None: NVIDIA's, ``hybrid.HybridSettings``)
    hybrid: object = None

    def kind(self, nodes: int) -> str:
        """The plan kind HugeCTR runs on ``nodes`` nodes (``hier_auto`` needs several)."""
        return self.single_node if nodes <= 1 else self.multi_node

    def table_cost(self, kind: str) -> float:
        """Cost of one more table shard in a bucket, in lookups per sample."""
        return dict(self.mem_comm_bw_ratio)[kind] / self.mem_comm_work_ratio

    def to_dict(self) -> dict:
        """The settings as plain data (for ``summary.json`` through the stack)."""
        return {
            "sharding_plan": {"single_node": self.single_node, "multi_node": self.multi_node},
            "mem_comm_bw_ratio": dict(self.mem_comm_bw_ratio),
            "dp_threshold_bytes": dict(self.dp_threshold_bytes),
            "mem_comm_work_ratio": self.mem_comm_work_ratio,
            "memory_cap_bytes": self.memory_cap_bytes,
            "hierarchical": self.hierarchical,
            **({"hybrid": self.hybrid.to_dict()} if self.hybrid is not None else {}),
        }


def settings_from_fields(f: Fields) -> Settings:
    """Validate a stack's ``planner:`` mapping for ``name: hugectr`` (errors name the field):
    ``sharding_plan: {single_node, multi_node}``, ``mem_comm_bw_ratio`` and
    ``dp_sharding_threshold`` per plan kind (``{auto: …, hier_auto: …}``), ``mem_comm_work_ratio``
    and ``memory_cap_for_embedding``; absent fields take NVIDIA's values (:class:`Settings`)."""
    f.check_keys(
        {
            "name",
            "sharding_plan",
            "mem_comm_bw_ratio",
            "dp_sharding_threshold",
            "mem_comm_work_ratio",
            "memory_cap_for_embedding",
            "hierarchical",
            "hybrid",
        }
    )
    d = Settings()
    sp, ratio, dp = (
        f.sub(k, {}) for k in ("sharding_plan", "mem_comm_bw_ratio", "dp_sharding_threshold")
    )
    sp.check_keys({"single_node", "multi_node"})
    ratio.check_keys(set(PLANS))
    dp.check_keys(set(PLANS))
    return Settings(
        single_node=sp.choice("single_node", ("auto",), d.single_node),
        multi_node=sp.choice("multi_node", PLANS, d.multi_node),
        mem_comm_bw_ratio=tuple(
            (k, ratio.quantity(k, "ratio", v, unit=False)) for k, v in d.mem_comm_bw_ratio
        ),
        dp_threshold_bytes=tuple(
            (k, dp.quantity(k, "bytes", v, strict=False)) for k, v in d.dp_threshold_bytes
        ),
        mem_comm_work_ratio=f.quantity(
            "mem_comm_work_ratio", "ratio", d.mem_comm_work_ratio, unit=False
        ),
        memory_cap_bytes=f.quantity("memory_cap_for_embedding", "bytes", d.memory_cap_bytes),
        hierarchical=f.choice("hierarchical", HIERARCHICAL, d.hierarchical),
        hybrid=_hybrid(f),
    )


def _hybrid(f: Fields):
    """The ``hybrid:`` mapping's settings (``hybrid.settings_from_fields``), None when absent."""
    if f.data.get("hybrid") is None:
        return None
    from zionsim.dlrm.hybrid import settings_from_fields as hybrid_settings

    return hybrid_settings(f.sub("hybrid"))


@dataclass(frozen=True)
class Problem:
    """One planning problem: per-table hotness, bytes (rows and optimizer state), the bucket
    count, the cost of a shard, the memory a bucket may hold and the data-parallel threshold."""

    hotness: tuple[float, ...]
    table_bytes: tuple[float, ...]
    buckets: int
    table_cost: float
    capacity_bytes: float
    dp_threshold_bytes: float = 0.0


def bucket_tables(p: Problem) -> tuple[list[int], list[list[int]]]:
    """HugeCTR's plan for problem ``p``: the data-parallel tables, and the model-parallel tables
    each bucket holds (a table in k buckets has k shards) — steps 2–5 of the module docstring."""
    size = np.asarray(p.table_bytes, dtype=float)
    hot = np.asarray(p.hotness, dtype=float)
    dp = [int(i) for i in np.flatnonzero(size < p.dp_threshold_bytes)]
    mp = [i for i in range(len(hot)) if i not in dp]
    everywhere = [list(range(len(hot))) for _ in range(p.buckets)]
    split_all = np.full(len(hot), p.buckets)
    candidates = [(_costs(p, hot, split_all, everywhere).max(), everywhere)]
    capacity = p.capacity_bytes - size[dp].sum()
    split = np.zeros(len(hot), dtype=int)
    split[mp] = 1
    for _ in range(MAX_SEARCH_ROUNDS):
        placed, stuck = _greedy(p, hot, size, split, capacity)
        if stuck is None:
            candidates.append((_costs(p, hot, split, placed).max(), placed))
            stuck = next((t for t in _shard_order(hot, split) if split[t] * 2 <= p.buckets), None)
            if stuck is None:  # nothing left to split: later rounds repeat this candidate
                break
        elif split[stuck] * 2 > p.buckets:
            break
        split[stuck] *= 2
    best = min(range(len(candidates)), key=lambda i: (candidates[i][0], i))
    return dp, [sorted(b) for b in candidates[best][1]]


def _shard_order(hot: np.ndarray, split: np.ndarray) -> list[int]:
    """Table of each shard, hottest shard first (equal hotness: the later table first)."""
    shards = [(hot[t] / split[t], t) for t in range(len(hot)) for _ in range(split[t])]
    return [t for _, t in sorted(shards, reverse=True)]


def _costs(p: Problem, hot, split, buckets: list[list[int]]) -> np.ndarray:
    """Cost of each bucket: its shards' hotness plus ``table_cost`` per shard."""
    return np.array([sum(hot[t] / split[t] for t in b) + p.table_cost * len(b) for b in buckets])


def _greedy(p: Problem, hot, size, split, capacity) -> tuple[list[list[int]], int | None]:
    """One placement round (step 4): the buckets' tables, and the table of a shard that fit
    nowhere (None when all were placed)."""
    buckets: list[list[int]] = [[] for _ in range(p.buckets)]
    cost = np.zeros(p.buckets)
    mem = np.zeros(p.buckets)
    for t in _shard_order(hot, split):
        for b in np.argsort(cost, kind="stable"):
            if t not in buckets[b] and mem[b] + size[t] / split[t] <= capacity:
                buckets[b].append(t)
                cost[b] += hot[t] / split[t] + p.table_cost
                mem[b] += size[t] / split[t]
                break
        else:
            return buckets, t
    return buckets, None


def problem(w: WorkloadSpec, buckets: int, gpus_per_bucket: int, kind: str, s: Settings):
    """The planning problem of workload ``w`` on ``buckets`` buckets of ``gpus_per_bucket`` GPUs."""
    per_el = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]][0]
    return Problem(
        hotness=tuple(float(t.pooling) for t in w.tables),
        table_bytes=tuple(float(t.rows * t.dim * 4 * (1 + per_el)) for t in w.tables),
        buckets=buckets,
        table_cost=s.table_cost(kind),
        capacity_bytes=s.memory_cap_bytes * gpus_per_bucket,
        dp_threshold_bytes=dict(s.dp_threshold_bytes)[kind],
    )


def hugectr_plan(cluster, w: WorkloadSpec, settings: Settings | None = None) -> Plan:
    """HugeCTR's plan of ``w`` on ``cluster`` (module docstring), as zionsim shards."""
    s = settings or Settings()
    n, nodes = len(cluster.gpus), cluster.spec.nodes
    g = n // nodes
    kind = s.kind(nodes)
    by_node = kind == "hier_auto"
    hier = nodes > 1 and (by_node or s.hierarchical == "multi_node")
    p = problem(w, nodes if by_node else n, g if by_node else 1, kind, s)
    dp, buckets = bucket_tables(p)
    holders: dict[int, list[int]] = {}
    for b, tables in enumerate(buckets):
        for t in tables:
            holders.setdefault(t, []).append(b)
    shards = []
    for t in w.tables:
        where = holders.get(t.index, [])
        if t.index in dp or n == 1:
            kind_t, ranks = ("DP" if n > 1 else "TW"), tuple(range(n))
        elif by_node:
            kind_t, ranks = "TWRW", tuple(r for b in where for r in range(b * g, (b + 1) * g))
        else:
            kind_t, ranks = ("TW" if len(where) == 1 else "RW"), tuple(where)
        rows = None
        if kind_t in ("RW", "TWRW") and t.rows % len(ranks):
            rows = tuple(modulo_row_splits(t.rows, len(ranks)))
        shards.append(
            Shard(
                t.index, kind_t, ranks[:1] if n == 1 else ranks, rows=rows,
                hierarchical=hier and kind_t in ("TW", "RW"),
            )
        )  # fmt: skip
    return Plan(f"hugectr_{kind}", tuple(shards))


def modulo_row_splits(rows: int, k: int) -> list[int]:
    """Rows of each of ``k`` shards when key ``i`` goes to shard ``i % k`` (HugeCTR, module
    docstring): ``rows // k``, one more on the first ``rows % k`` shards."""
    return [rows // k + (1 if i < rows % k else 0) for i in range(k)]
