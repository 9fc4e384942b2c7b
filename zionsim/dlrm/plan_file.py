"""Plan files: the plan YAML schema (``docs/plans.md``) to and from a :class:`~.plan.Plan`.

One entry per table::

    {table: t00, sharding: CW, ranks: [40, 41, 43], columns: [64, 32, 32]}
    {table: t20, sharding: RW, ranks: [0, 1, 2, 3], rows: [20000000, 10000000, 9000000, 979771]}
    {table: t11, sharding: TWCW, ranks: [8, 9], comm_precision: fp16}

Validation happens once, here: every error names the file, the field (``tables[3].columns``), the
value and what is allowed.  :func:`load_plan` also reads a TorchRec sharding-plan dump
(``torchrec_plan.py``), recognised by its top-level ``plan`` mapping.
"""

from __future__ import annotations

from zionsim.dlrm.plan import COLUMN_SHARDINGS, ROW_SHARDINGS, SHARDINGS, TIERS, Plan, Shard
from zionsim.dlrm.workload import COMM_DTYPES, WorkloadSpec

ENTRY_KEYS = {
    "table",
    "sharding",
    "ranks",
    "node",
    "tier",
    "cache_fraction",
    "server",
    "columns",
    "rows",
    "comm_precision",
    "hierarchical",
}


def plan_to_dict(plan: Plan, w: WorkloadSpec, gpus: int | None = None) -> dict:
    """A plan as plain data (the plan YAML schema, ``docs/plans.md``); with ``gpus`` given, an RW
    table over all of them omits its ranks."""
    rows = [_entry(s, w, gpus) for s in plan.shards]
    return {"name": plan.name, "workload": w.name, "tables": rows}


def _entry(sh: Shard, w: WorkloadSpec, gpus: int | None) -> dict:
    """One table's entry: ranks unless implied (DP, RW over every rank), then the optional
    fields that differ from their defaults."""
    row: dict = {"table": w.tables[sh.table].name, "sharding": sh.kind}
    if sh.tier == "ps":
        return {**row, "tier": "ps", "server": sh.server}
    every = gpus is not None and sh.ranks == tuple(range(gpus))
    if sh.kind != "DP" and not (sh.kind == "RW" and every):
        row["ranks"] = list(sh.ranks)
    if sh.widths is not None:
        row["columns"] = list(sh.widths)
    if sh.rows is not None:
        row["rows"] = list(sh.rows)
    if sh.tier == "uvm":
        row["tier"] = sh.tier
        row["cache_fraction"] = sh.cache_fraction
    if sh.comm_precision is not None:
        row["comm_precision"] = sh.comm_precision
    if sh.hierarchical and sh.kind in ("TW", "RW"):
        row["hierarchical"] = True
    return row


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
        e.check_keys(ENTRY_KEYS)
        name = e.text("table")
        if name not in index:
            raise e.error(
                "table",
                f"no table {name!r} in workload {w.name!r}",
                allowed=", ".join(list(index)[:5]) + (", ..." if len(index) > 5 else ""),
            )
        if index[name] in shards:
            raise e.error("table", f"table {name!r} is placed twice")
        _check_consistent(e, name)
        shards[index[name]] = _entry_shard(e, w.tables[index[name]], gpus, gpus_per_node, servers)
    missing = [t.name for t in w.tables if t.index not in shards]
    if missing:
        raise f.error("tables", f"{len(missing)} table(s) not placed, first {missing[0]!r}")
    return Plan(str(f.raw("name", "plan")), tuple(shards[t.index] for t in w.tables))


#: fields that only some entries may have: (field, applies to, what it applies to)
_ONLY = (
    ("node", lambda kind, tier: kind in ("TWRW", "TWCW") and tier != "ps", "TWRW and TWCW"),
    ("ranks", lambda kind, tier: kind != "DP" and tier != "ps", "shardings other than DP"),
    ("server", lambda kind, tier: tier == "ps", "tier: ps"),
    ("hierarchical", lambda kind, tier: kind in ("TW", "RW") and tier != "ps", "TW and RW"),
)
#: fields a ``tier: ps`` entry (the whole table on one parameter server) cannot have
_NOT_PS = ("columns", "rows", "cache_fraction", "comm_precision")


def _check_consistent(e, name: str) -> None:
    """Refuse an entry whose fields contradict each other (``node:`` and ``ranks:`` together, a
    field the sharding or tier ignores), naming the table and the fields."""
    given = set(e.data)
    if {"node", "ranks"} <= given:
        raise e.error(
            "node",
            f"table {name!r} gives both node: and ranks:, which say different things",
            allowed="node: N (every GPU of node N) or ranks: [...], not both",
        )
    kind, tier = e.data.get("sharding"), e.data.get("tier", "hbm")
    if tier == "ps":
        kind = e.data.get("sharding", "TW")
    if kind not in SHARDINGS or tier not in TIERS:
        return  # _entry_shard names the bad value
    for key, ok, what in _ONLY:
        if key in given and not ok(kind, tier):
            here = "tier: ps" if tier == "ps" else f"sharding: {kind}"
            raise e.error(
                key, f"table {name!r} gives {key}: with {here}, which does not use it",
                allowed=f"{key}: only with {what}",
            )  # fmt: skip
    extra = sorted(given & set(_NOT_PS)) if tier == "ps" else []
    if extra:
        raise e.error(
            extra[0], f"table {name!r} gives {extra[0]}: with tier: ps (the whole table on one "
            "parameter server), which does not use it", allowed="table, tier, server, sharding: TW",
        )  # fmt: skip


def _entry_shard(e, t, gpus: int, g: int, servers: int | None) -> Shard:
    """The :class:`Shard` of one validated entry ``e`` for table ``t``."""
    tier = e.choice("tier", TIERS, "hbm")
    if tier == "ps":
        return _ps_shard(e, t.index, servers)
    kind = e.choice("sharding", SHARDINGS)
    ranks = _plan_ranks(e, kind, gpus, g)
    frac = e.quantity("cache_fraction", "fraction", 0.0, strict=False)
    if frac > 1.0:
        raise e.error("cache_fraction", f"must be in [0, 1], got {frac:g}")
    if frac > 0 and tier != "uvm":
        raise e.error("cache_fraction", "only a uvm-tier table has a cache", allowed="tier: uvm")
    if kind in COLUMN_SHARDINGS and len(ranks) > t.dim:
        raise e.error("ranks", f"{len(ranks)} column slices but the table has {t.dim} columns")
    widths = _parts(e, "columns", kind in COLUMN_SHARDINGS, len(ranks), t.dim, 1, "columns")
    rows = _parts(e, "rows", kind in ROW_SHARDINGS, len(ranks), t.rows, 0, "rows")
    comm = e.choice("comm_precision", COMM_DTYPES, None) if "comm_precision" in e.data else None
    hier = e.flag("hierarchical", False)
    return Shard(t.index, kind, ranks, tier, frac, -1, widths, rows, comm, hierarchical=hier)


def _parts(e, key: str, applies: bool, k: int, total: int, least: int, what: str):
    """``columns`` or ``rows``: one whole number ``>= least`` per listed rank, summing to the
    table's ``total``; None when absent."""
    if key not in e.data:
        return None
    if not applies:
        kinds = COLUMN_SHARDINGS if key == "columns" else ROW_SHARDINGS
        raise e.error(key, f"only {' and '.join(kinds)} tables split their {what}")
    parts = e.raw(key)
    if (
        not isinstance(parts, list)
        or not all(isinstance(p, int) and not isinstance(p, bool) and p >= least for p in parts)
        or len(parts) != k
    ):
        raise e.error(
            key, f"expected {k} whole numbers >= {least}, one per rank listed, got {parts!r}"
        )
    if sum(parts) != total:
        raise e.error(key, f"the {what} add up to {sum(parts)} but the table has {total}")
    return tuple(parts)


def _ps_shard(e, table: int, servers: int | None) -> Shard:
    """A ``tier: ps`` entry: the whole table on one parameter server (``server: K``)."""
    kind = e.choice("sharding", ("TW",), "TW")
    top = servers - 1 if servers else None
    k = e.integer("server", minimum=0)
    if top is not None and k > top:
        raise e.error("server", f"server {k} does not exist", allowed=f"0..{top}")
    return Shard(table, kind, (), "ps", 0.0, k)


def _plan_ranks(e, kind: str, gpus: int, g: int) -> tuple[int, ...]:
    """The ranks of an entry: all for DP (and RW without ``ranks``), a node's for ``node:``,
    else the ``ranks`` list, checked against what the sharding allows."""
    if kind == "DP" or (kind == "RW" and "ranks" not in e.data):
        return tuple(range(gpus))
    if kind in ("TWRW", "TWCW") and "node" in e.data:
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
    if len(set(ranks)) != len(ranks) and kind not in COLUMN_SHARDINGS:
        raise e.error("ranks", "a rank appears twice (only column slices may share a rank)")
    if kind == "TW" and len(ranks) != 1:
        raise e.error("ranks", "table-wise sharding takes exactly one rank")
    nodes = sorted({r // g for r in ranks})
    if kind == "TWCW" and len(nodes) != 1:
        raise e.error("ranks", f"{kind} ranks must all be on one node ({g} GPUs per node)")
    if kind == "TWRW" and len(nodes) > 1 and len(ranks) != len(nodes) * g:
        # a table on several node buckets (HugeCTR's hier_auto, hugectr_plan.py) holds rows on
        # every GPU of each of those nodes; a part of a node is not a sharding zionsim lowers
        raise e.error(
            "ranks",
            f"TWRW ranks must all be on one node, or cover whole nodes ({g} GPUs per node); "
            f"got nodes {nodes} with {len(ranks)} ranks",
        )
    return tuple(ranks)


def load_plan(
    path: str, workload: WorkloadSpec, gpus: int, gpus_per_node: int, servers: int | None = None
) -> Plan:
    """Load and validate a plan file against the workload and the cluster (``servers``: host
    sockets that can be parameter servers): a zionsim plan YAML (``docs/plans.md``) or a TorchRec
    sharding-plan dump (JSON with a top-level ``plan`` mapping, ``torchrec_plan.py``)."""
    from zionsim.base.config import load_yaml

    data, file = load_yaml(path, "plans")
    from zionsim.dlrm.torchrec_plan import from_torchrec, is_torchrec_dump

    if is_torchrec_dump(data):
        return from_torchrec(data, workload, gpus, gpus_per_node, file)
    return plan_from_dict(data, workload, gpus, gpus_per_node, file, servers)
