"""TorchRec sharding plans as JSON: import one into a :class:`~zionsim.dlrm.plan.Plan`, export one.

The file is a JSON dump of ``torchrec.distributed.types.ShardingPlan`` (``docs/plans.md`` shows the
few lines of TorchRec code that write it); nothing here imports torch::

    {"world_size": 64, "local_size": 8,
     "plan": {"model.sparse_arch.embedding_bag_collection": {
        "t00": {"sharding_type": "column_wise", "compute_kernel": "fused", "ranks": [3, 9],
                "sharding_spec": {"shards": [
                    {"shard_offsets": [0, 0], "shard_sizes": [39884406, 64],
                     "placement": "rank:3/cuda:3"},
                    {"shard_offsets": [0, 64], "shard_sizes": [39884406, 64],
                     "placement": "rank:9/cuda:1"}]},
                "cache_params": null, "output_dtype": null}, ...}}}

Fields are TorchRec's ``ParameterSharding`` (``sharding_type``, ``compute_kernel``, ``ranks``,
``sharding_spec``, ``cache_params``, ``output_dtype``) and ``ShardMetadata`` (``shard_offsets``
``[row, column]``, ``shard_sizes`` ``[rows, columns]``, ``placement``
``rank:N/cuda:(N % local_size)``), as TorchRec's planner fills them
(``torchrec/distributed/planner/planners.py``, ``to_sharding_plan``).  Mapping:

==================  ==================  =====================================================
TorchRec            zionsim             notes
==================  ==================  =====================================================
data_parallel       DP                  ``compute_kernel: dense``, no ``sharding_spec``
table_wise          TW                  one shard, the whole table
column_wise         CW                  column shards in column order (widths may differ)
table_column_wise   TWCW                column shards on one node's ranks
row_wise            RW                  row blocks in row order, on any ranks
table_row_wise      TWRW                row blocks on one node's ranks
fused               tier hbm
fused_uvm_caching   tier uvm            ``cache_params.load_factor`` → ``cache_fraction``
                                        (absent: 0.2, FBGEMM's default ``cache_load_factor``)
fused_uvm           tier uvm            ``cache_fraction: 0``
output_dtype        comm_precision      FP32, FP16, BF16 (the pooled output's dtype is what the
                                        all-to-all carries)
==================  ==================  =====================================================

``enforce_hbm``, ``stochastic_rounding`` and ``bounds_check_mode`` are accepted and ignored (they
do not change what the model times); ``grid_shard``, other kernels and ``key_value_params`` are
errors.  Export writes the six fields above, so an imported dump exports unchanged.

Both directions accept only placements TorchRec trains as written (:func:`untrainable`): its
row-wise sharding gives shard ``r`` to rank ``r`` (``row_wise``: one shard on every rank, in rank
order; ``table_row_wise``: one on every GPU of one node, in order) and routes id ``i`` to shard
``i // ⌈rows/k⌉`` whatever the shard sizes say, so the row blocks must be TorchRec's own
(``sharding.row_splits``); its fused kernels take shards a multiple of 4 columns wide.  A plan
outside that (RW over some ranks, other row blocks, TWRW over several nodes as HugeCTR runs it,
column slices of 5 or 6 columns) is refused with one line naming the table, not rewritten: any
rewrite would train and communicate differently from what zionsim simulated for the plan.
"""

from __future__ import annotations

import re

from zionsim.base.errors import InputError
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.sharding import row_splits, shard_rows, shard_widths
from zionsim.dlrm.workload import WorkloadSpec

#: module path of the embedding tables in TorchRec's DLRM (``DLRMTrain.model.sparse_arch``)
DEFAULT_MODULE = "model.sparse_arch.embedding_bag_collection"
SHARDING_TYPES = {
    "data_parallel": "DP",
    "table_wise": "TW",
    "column_wise": "CW",
    "table_column_wise": "TWCW",
    "row_wise": "RW",
    "table_row_wise": "TWRW",
}
KERNEL_TIERS = {"dense": "hbm", "fused": "hbm", "fused_uvm_caching": "uvm", "fused_uvm": "uvm"}
OUTPUT_DTYPES = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16"}
#: FBGEMM SplitTableBatchedEmbeddingBagsCodegen's default ``cache_load_factor``
DEFAULT_LOAD_FACTOR = 0.2
FIELDS = (
    "sharding_type",
    "compute_kernel",
    "ranks",
    "sharding_spec",
    "cache_params",
    "output_dtype",
)
IGNORED_FIELDS = ("enforce_hbm", "stochastic_rounding", "bounds_check_mode")
PLACEMENT = re.compile(r"rank:(\d+)/cuda:(\d+)$")


def is_torchrec_dump(data) -> bool:
    """True for a TorchRec plan dump (a top-level ``plan`` mapping), False for a zionsim plan."""
    return isinstance(data, dict) and isinstance(data.get("plan"), dict) and "tables" not in data


def from_torchrec(
    data: dict, w: WorkloadSpec, gpus: int, gpus_per_node: int, file: str = "<torchrec plan>"
) -> Plan:
    """The plan a TorchRec dump describes, validated against workload ``w`` and a cluster of
    ``gpus`` ranks (``gpus_per_node`` per node); errors name the file and the field."""
    from zionsim.base.config import Fields

    f = Fields(data, file)
    f.check_keys({"world_size", "local_size", "plan"})
    for key, have in (("world_size", gpus), ("local_size", gpus_per_node)):
        if f.integer(key) != have:
            raise f.error(
                key, f"the plan is for {f.raw(key)} but the cluster has {have}",
                allowed=f"{have}, or --nodes/--gpus-per-node to match the plan",
            )  # fmt: skip
    index = {t.name: t.index for t in w.tables}
    shards: dict[int, Shard] = {}
    for module, tables in f.raw("plan").items():
        m = Fields(tables, file, f"plan.{module}")
        for name in tables:
            if name not in index:
                raise m.error(name, f"no table {name!r} in workload {w.name!r}")
            if index[name] in shards:
                raise m.error(name, f"table {name!r} is placed twice")
            e = m.sub(name)
            shards[index[name]] = _import_table(e, w.tables[index[name]], gpus, gpus_per_node)
    missing = [t.name for t in w.tables if t.index not in shards]
    if missing:
        raise f.error("plan", f"{len(missing)} table(s) not placed, first {missing[0]!r}")
    return Plan("torchrec", tuple(shards[t.index] for t in w.tables))


def _import_table(e, t, gpus: int, g: int) -> Shard:
    """One table's ``ParameterSharding`` as a :class:`Shard`."""
    e.check_keys(set(FIELDS) | set(IGNORED_FIELDS))
    st = e.raw("sharding_type")
    if st not in SHARDING_TYPES:
        raise e.error("sharding_type", f"{st!r} is not modelled", allowed=", ".join(SHARDING_TYPES))
    kind = SHARDING_TYPES[st]
    kernel = e.choice("compute_kernel", tuple(KERNEL_TIERS))
    if (kernel == "dense") != (kind == "DP"):
        raise e.error("compute_kernel", f"{kernel!r} with {st}", allowed="dense exactly for DP")
    tier, frac = KERNEL_TIERS[kernel], 0.0
    if kernel == "fused_uvm_caching":
        cache = e.sub("cache_params", {})
        frac = cache.quantity("load_factor", "fraction", DEFAULT_LOAD_FACTOR, strict=False)
    comm = None
    if e.raw("output_dtype", None) is not None:
        comm = OUTPUT_DTYPES[e.choice("output_dtype", tuple(OUTPUT_DTYPES))]
    if kind == "DP":
        if e.raw("sharding_spec", None) is not None:
            raise e.error("sharding_spec", "data_parallel tables have no shards", allowed="null")
        ranks = e.raw("ranks", list(range(gpus)))
        if ranks != list(range(gpus)):
            raise e.error("ranks", "data_parallel tables are on every rank, in order")
        return Shard(t.index, "DP", tuple(range(gpus)), tier, frac, comm_precision=comm)
    ranks, offsets, sizes = _shards(e, gpus, g)
    widths, rows = _split(e, kind, t, offsets, sizes)
    if kind in ("TWCW", "TWRW") and len({r // g for r in ranks}) != 1:
        raise e.error("ranks", f"{st} shards must be on one node ({g} GPUs per node)")
    if kind in ("RW", "TWRW", "TW") and len(set(ranks)) != len(ranks):
        raise e.error("ranks", "a rank appears twice (only column shards may share a rank)")
    shard = Shard(t.index, kind, tuple(ranks), tier, frac, -1, widths, rows, comm)
    problem = untrainable(shard, t, gpus, g)
    if problem:
        raise e.error("ranks" if problem[0] == "ranks" else "sharding_spec", problem[1])
    return shard


def untrainable(s: Shard, t, gpus: int, g: int) -> tuple[str, str] | None:
    """Why TorchRec cannot train shard ``s`` of table ``t`` as written, as (field, problem), or
    None when it can (module docstring; ``gpus`` ranks, ``g`` per node).

    ``torchrec/distributed/sharding/rw_sharding.py`` (``RwEmbeddingSharding._shard``) takes
    ``shards[rank]`` for every rank of the world and ``twrw_sharding.py`` ``shards[i]`` for GPU
    ``i`` of the node of ``ranks[0]``; both bucketize ids by ``⌈rows/k⌉`` blocks.  The fused
    kernels (every sharding but DP) hold shards whose width is a multiple of 4 columns: FBGEMM's
    training table-batched embedding asserts it (``fbgemm_gpu/
    split_table_batched_embeddings_ops_training.py``, ``construct_split_state``: "embedding_dim
    must be a multiple of 4"), and torchrec 1.9's ``BatchedFusedEmbeddingBag`` checks it up
    front (``local_cols % 4 == 0``)."""
    if s.kind == "DP":
        return None
    widths = shard_widths(s, t.dim) if s.kind in ("CW", "TWCW") else [t.dim]
    odd = [w for w in widths if w % 4]
    if odd:
        return "columns", (
            f"a shard {odd[0]} columns wide (of {widths}): TorchRec's fused embedding kernels "
            "(FBGEMM) take shards whose width is a multiple of 4 columns"
        )
    if s.kind not in ("RW", "TWRW"):
        return None
    kind = "row_wise" if s.kind == "RW" else "table_row_wise"
    if s.kind == "RW":
        want, where = tuple(range(gpus)), f"every rank 0..{gpus - 1}"
    else:
        node = s.ranks[0] // g
        want, where = tuple(range(node * g, (node + 1) * g)), f"every GPU of node {node}"
    if tuple(s.ranks) != want:
        return "ranks", (
            f"TorchRec's {kind} sharding needs one shard on {where}, in rank order "
            f"(shard i goes to the i-th of them), got ranks {_brief(s.ranks)}"
        )
    rows, split = shard_rows(s, t.rows), row_splits(t.rows, len(s.ranks))
    if rows != split:
        i = next(i for i, (a, b) in enumerate(zip(rows, split, strict=True)) if a != b)
        return "rows", (
            f"row block {i} has {rows[i]} rows but TorchRec routes id j to block "
            f"j // {split[0]} (blocks of ceil({t.rows}/{len(split)}) rows, the last one short), "
            f"so block {i} must have {split[i]}"
        )
    return None


def _brief(ranks) -> str:
    """A rank list for a message, shortened when long."""
    r = list(ranks)
    return str(r) if len(r) <= 8 else f"[{', '.join(map(str, r[:4]))}, ..., {r[-1]}] ({len(r)})"


def _shards(e, gpus: int, g: int) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """Ranks, offsets and sizes of the ``sharding_spec`` shards; the placements must name the
    ranks of ``ranks`` in order, each on device ``rank % local_size``."""
    spec = e.sub("sharding_spec")
    spec.check_keys({"shards"})
    items = spec.raw("shards")
    if not isinstance(items, list) or not items:
        raise spec.error("shards", "expected a non-empty list of shards")
    ranks, offsets, sizes = [], [], []
    for i, item in enumerate(items):
        s = type(spec)(item, spec.file, spec.path(f"shards[{i}]"))
        s.check_keys({"shard_offsets", "shard_sizes", "placement"})
        pair = [s.raw("shard_offsets"), s.raw("shard_sizes")]
        for key, v in zip(("shard_offsets", "shard_sizes"), pair, strict=True):
            if not (isinstance(v, list) and len(v) == 2 and all(_whole(x) for x in v)):
                raise s.error(key, f"expected [rows, columns] as two whole numbers, got {v!r}")
        match = PLACEMENT.match(str(s.raw("placement")))
        if not match or int(match[2]) != int(match[1]) % g or int(match[1]) >= gpus:
            raise s.error(
                "placement", f"bad placement {s.raw('placement')!r}",
                allowed=f"'rank:N/cuda:M' with N in 0..{gpus - 1} and M = N % {g}",
            )  # fmt: skip
        ranks.append(int(match[1]))
        offsets.append(pair[0])
        sizes.append(pair[1])
    if e.raw("ranks", ranks) != ranks:
        raise e.error("ranks", f"expected the shards' ranks in order, {ranks}")
    return ranks, offsets, sizes


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _split(e, kind: str, t, offsets, sizes) -> tuple:
    """(widths, rows) of the shards: column shards tile the columns in order over all rows, row
    shards tile the rows in order over all columns; anything else is an error."""
    col = kind in ("TW", "CW", "TWCW")
    along, full = (1, t.dim) if col else (0, t.rows)
    other, other_full = (0, t.rows) if col else (1, t.dim)
    at = 0
    for i, (off, size) in enumerate(zip(offsets, sizes, strict=True)):
        if off[other] != 0 or size[other] != other_full or off[along] != at:
            raise e.error(
                f"sharding_spec.shards[{i}]",
                f"shard at offsets {off} of sizes {size} does not continue the table's "
                f"{'columns' if col else 'rows'} (next offset {at}, table {t.rows}×{t.dim})",
            )
        at += size[along]
    if at != full:
        raise e.error(
            "sharding_spec", f"the shards cover {at} of {full} {'columns' if col else 'rows'}"
        )
    if kind == "TW" and len(sizes) != 1:
        raise e.error("sharding_spec", "a table_wise table has one shard")
    parts = tuple(s[along] for s in sizes)
    if kind == "TW":
        return None, None
    return (parts, None) if col else (None, parts)


def to_torchrec(
    plan: Plan, w: WorkloadSpec, gpus: int, gpus_per_node: int, module: str = DEFAULT_MODULE
) -> dict:
    """``plan`` as a TorchRec plan dump (all tables under ``module``); raises InputError for a
    parameter-server table, which TorchRec cannot express."""
    tables = {}
    for s in plan.shards:
        t = w.tables[s.table]
        if s.tier == "ps":
            raise InputError(
                f"table {t.name!r} is on a CPU parameter server, which TorchRec plans cannot say",
                field="plan", allowed="GPU shardings (TW, CW, TWCW, RW, TWRW, DP)",
            )  # fmt: skip
        problem = untrainable(s, t, gpus, gpus_per_node)
        if problem:
            raise InputError(
                f"table {t.name!r} ({s.kind}) cannot be exported: {problem[1]}",
                field="--to-torchrec",
                allowed="RW over every rank or TWRW over one whole node, in TorchRec's "
                "ceil(rows/k) blocks; TW, CW, TWCW, DP; shards a multiple of 4 columns wide",
            )  # fmt: skip
        tables[t.name] = _export_table(s, t, gpus_per_node)
    return {"world_size": gpus, "local_size": gpus_per_node, "plan": {module: tables}}


def _export_table(s: Shard, t, g: int) -> dict:
    """One shard as TorchRec's ``ParameterSharding`` fields."""
    kinds = {v: k for k, v in SHARDING_TYPES.items()}
    if s.kind == "DP":
        kernel = "dense"
    elif s.tier == "uvm":
        kernel = "fused_uvm_caching" if s.cache_fraction > 0 else "fused_uvm"
    else:
        kernel = "fused"
    cache = {"load_factor": s.cache_fraction} if kernel == "fused_uvm_caching" else None
    dtypes = {v: k for k, v in OUTPUT_DTYPES.items()}
    return {
        "sharding_type": kinds[s.kind],
        "compute_kernel": kernel,
        "ranks": list(s.ranks),
        "sharding_spec": None if s.kind == "DP" else {"shards": _export_shards(s, t, g)},
        "cache_params": cache,
        "output_dtype": dtypes.get(s.comm_precision) if s.comm_precision else None,
    }


def _export_shards(s: Shard, t, g: int) -> list[dict]:
    """ShardMetadata of each part: column slices (TW, CW, TWCW) or row blocks (RW, TWRW, the
    plan's own or TorchRec's ``⌈rows/k⌉`` split)."""
    if s.kind in ("TW", "CW", "TWCW"):
        parts, along = shard_widths(s, t.dim), 1
    else:
        parts, along = shard_rows(s, t.rows), 0
    out, at = [], 0
    for r, p in zip(s.ranks, parts, strict=True):
        off = [0, at] if along else [at, 0]
        size = [t.rows, p] if along else [p, t.dim]
        out.append(
            {"shard_offsets": off, "shard_sizes": size, "placement": f"rank:{r}/cuda:{r % g}"}
        )
        at += p
    return out
