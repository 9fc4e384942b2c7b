"""zionsim's TorchRec plan dumps against the real TorchRec (skipped where torch is not installed).

Run it with the CPU wheels (no GPU needed; ``docs/plans.md``, "Checking against TorchRec")::

    pip install --target /tmp/trec torch torchrec fbgemm-gpu-cpu
    PYTHONPATH=$PWD:/tmp/trec python -m pytest tests/dlrm/test_torchrec_interop.py

Every sharding kind is exported from zionsim, read back with TorchRec's own types (the snippet in
``docs/plans.md``), compared with what TorchRec's generators (``torchrec.distributed.
sharding_plan``) or its planner write for the same placement, and sharded by TorchRec's
``EmbeddingBagCollectionSharder`` on a fake process group of 16 ranks (2 nodes × 8).  The
``tiny`` workload's tables (1,000, 2,000, 500 and 100 rows of 16 columns) split unevenly over 16
and 8 ranks, down to empty shards.  Row-wise routing is checked with TorchRec's own block size
and FBGEMM's ``block_bucketize_sparse_features``: every id must land in the shard whose rows the
export says hold it.
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

import torch.distributed as dist  # noqa: E402
from torch.distributed._shard.sharding_spec import (  # noqa: E402
    EnumerableShardingSpec,
    ShardMetadata,
)
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import (  # noqa: E402
    EmbeddingShardingPlanner,
    ParameterConstraints,
    Topology,
)
from torchrec.distributed.sharding_plan import (  # noqa: E402
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_row_wise,
    table_wise,
)
from torchrec.distributed.types import (  # noqa: E402
    CacheParams,
    EmbeddingModuleShardingPlan,
    ParameterSharding,
    ShardingEnv,
    ShardingPlan,
)
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402
from torchrec.types import DataType  # noqa: E402

from zionsim.base.errors import InputError  # noqa: E402
from zionsim.dlrm.plan import Plan, Shard  # noqa: E402
from zionsim.dlrm.torchrec_plan import DEFAULT_MODULE, from_torchrec, to_torchrec  # noqa: E402
from zionsim.dlrm.workload import load_workload  # noqa: E402

WORLD, LOCAL = 16, 8
W = load_workload("tiny")
NAMES = [t.name for t in W.tables]


# ------------------------------------------------------------------ docs/plans.md's snippets
def load_plan(data: dict) -> ShardingPlan:
    """A dump as TorchRec's ``ShardingPlan`` (``docs/plans.md``, "Reading a zionsim export")."""

    # fmt: off
    def param(p):
        spec = p["sharding_spec"]
        return ParameterSharding(
            sharding_type=p["sharding_type"], compute_kernel=p["compute_kernel"],
            ranks=p["ranks"],
            sharding_spec=None if spec is None else EnumerableShardingSpec(
                [ShardMetadata(**s) for s in spec["shards"]]),
            cache_params=None if p["cache_params"] is None else CacheParams(**p["cache_params"]),
            output_dtype=None if p["output_dtype"] is None else DataType(p["output_dtype"]))

    return ShardingPlan({module: EmbeddingModuleShardingPlan({n: param(p) for n, p in t.items()})
                         for module, t in data["plan"].items()})
    # fmt: on


def dump_plan(plan: ShardingPlan) -> dict:
    """TorchRec's plan as a dump (``docs/plans.md``, "Writing the dump from TorchRec")."""

    def shard(m):
        return {"shard_offsets": list(m.shard_offsets), "shard_sizes": list(m.shard_sizes),
                "placement": str(m.placement)}  # fmt: skip

    out = {"world_size": WORLD, "local_size": LOCAL, "plan": {}}
    for module, tables in plan.plan.items():
        out["plan"][module] = {name: {
            "sharding_type": ps.sharding_type,
            "compute_kernel": ps.compute_kernel,
            "ranks": ps.ranks,
            "sharding_spec": None if ps.sharding_spec is None
                             else {"shards": [shard(m) for m in ps.sharding_spec.shards]},
            "cache_params": None if ps.cache_params is None
                            else {"load_factor": ps.cache_params.load_factor},
            "output_dtype": None if ps.output_dtype is None else ps.output_dtype.value,
        } for name, ps in tables.items()}  # fmt: skip
    return json.loads(json.dumps(out))


# ------------------------------------------------------------------ TorchRec side
@pytest.fixture(scope="module", autouse=True)
def fake_world():
    """A fake process group of 16 ranks (this process is rank 0), 8 per node."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    old = os.environ.get("LOCAL_WORLD_SIZE")
    os.environ["LOCAL_WORLD_SIZE"] = str(LOCAL)  # TorchRec's node size for TWRW and TWCW
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    yield dist.group.WORLD
    dist.destroy_process_group()
    if old is None:
        del os.environ["LOCAL_WORLD_SIZE"]
    else:
        os.environ["LOCAL_WORLD_SIZE"] = old


def _ebc(device: str = "meta", fused: bool = True) -> EmbeddingBagCollection:
    """The tiny workload's tables as an EmbeddingBagCollection, one feature per table; with
    ``fused`` their optimizer runs in the backward (TorchRec's training setup: ``fused``
    kernels)."""
    configs = [
        EmbeddingBagConfig(
            name=t.name, embedding_dim=t.dim, num_embeddings=t.rows, feature_names=[f"f{t.index}"]
        )
        for t in W.tables
    ]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device(device))
    if fused:
        apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": 0.1})
    return ebc


def _generated(gens: dict) -> dict:
    """What TorchRec's generators write for ``gens`` (table name → generator), as a dump."""
    plan = construct_module_sharding_plan(
        _ebc(), gens, local_size=LOCAL, world_size=WORLD, device_type="cuda",
        sharder=EmbeddingBagCollectionSharder(),
    )  # fmt: skip
    return dump_plan(ShardingPlan({DEFAULT_MODULE: plan}))


def _shard_module(data: dict, fake_world):
    """TorchRec shards the tiny EBC by the dump on rank 0 of the fake world, on the CPU: the
    placements' ``cuda:M`` become ``cpu`` (what TorchRec writes for CPU ranks), nothing else
    changes."""
    cpu = json.loads(json.dumps(data))
    for table in cpu["plan"][DEFAULT_MODULE].values():
        for s in (table["sharding_spec"] or {}).get("shards", []):
            s["placement"] = s["placement"].split("/")[0] + "/cpu"
    plan = load_plan(cpu).plan[DEFAULT_MODULE]
    return EmbeddingBagCollectionSharder().shard(
        _ebc("cpu"), plan, env=ShardingEnv.from_process_group(fake_world),
        device=torch.device("cpu"),
    )  # fmt: skip


def _block_sizes(module) -> dict[str, int]:
    """Feature → the block size TorchRec's row-wise input distribution routes ids by."""
    out = {}
    for sharding in module._embedding_shardings:  # one per sharding type
        buffers = dict(sharding.create_input_dist().named_buffers())
        if "_feature_block_sizes_tensor" in buffers:
            sizes = buffers["_feature_block_sizes_tensor"].tolist()
            out.update(zip(sharding.feature_names(), sizes, strict=True))
    return out


def _routes_every_id(rows: int, block: int, sizes: list[int]) -> bool:
    """True when FBGEMM's bucketizing (``block``-row blocks, one bucket per shard) sends every
    id ``0..rows-1`` to the shard whose rows hold it, at the right local row."""
    ids = torch.arange(rows, dtype=torch.int64)
    lengths, local, _, _, _ = torch.ops.fbgemm.block_bucketize_sparse_features(
        torch.ones(rows, dtype=torch.int64), ids, False, True,
        torch.tensor([block], dtype=torch.int64), len(sizes),
    )  # fmt: skip
    bucket = lengths.view(len(sizes), rows).argmax(dim=0)  # the shard each id went to
    order = torch.argsort(bucket, stable=True)  # FBGEMM lists the ids shard by shard
    starts = torch.tensor([0, *sizes]).cumsum(0)
    holder = torch.searchsorted(starts[1:], ids, right=True)  # the shard holding each id's row
    return bool((bucket == holder).all() and (local == ids[order] - starts[bucket[order]]).all())


# ------------------------------------------------------------------ the checks
def _plan(shards: list[Shard]) -> Plan:
    return Plan("interop", tuple(shards))


def _export(shards: list[Shard]) -> dict:
    return json.loads(json.dumps(to_torchrec(_plan(shards), W, WORLD, LOCAL)))


CASES = {
    "table_wise": (
        [Shard(t.index, "TW", (3 * t.index + 1,)) for t in W.tables],
        {t.name: table_wise(rank=3 * t.index + 1) for t in W.tables},
    ),
    "row_wise (uneven, an empty shard)": (
        [Shard(t.index, "RW", tuple(range(WORLD))) for t in W.tables],
        {t.name: row_wise() for t in W.tables},
    ),
    "table_row_wise (uneven)": (
        [Shard(t.index, "TWRW", tuple(range(LOCAL, 2 * LOCAL))) for t in W.tables],
        {t.name: table_row_wise(host_index=1) for t in W.tables},
    ),
    "column_wise (even, a shared rank)": (
        [Shard(t.index, "CW", (2, 7, 7, 12)) for t in W.tables],
        {t.name: column_wise(ranks=[2, 7, 7, 12]) for t in W.tables},
    ),
    "column_wise (uneven)": (
        [Shard(t.index, "CW", (0, 1, 2), widths=(8, 4, 4)) for t in W.tables],
        {t.name: column_wise(size_per_rank=[8, 4, 4]) for t in W.tables},
    ),
    "data_parallel": (
        [Shard(t.index, "DP", tuple(range(WORLD))) for t in W.tables],
        {t.name: data_parallel() for t in W.tables},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_export_is_what_torchrec_generates_and_shards(case, fake_world):
    """zionsim's export equals TorchRec's generator output field for field, loads into TorchRec's
    types, and TorchRec shards the module by it; row-wise ids route to the rows that hold them."""
    shards, gens = CASES[case]
    data = _export(shards)
    assert data["plan"] == _generated(gens)["plan"]
    assert dump_plan(load_plan(data)) == data  # TorchRec's types carry every field
    module = _shard_module(data, fake_world)
    blocks = _block_sizes(module)
    for s in shards:
        if s.kind in ("RW", "TWRW"):
            t = W.tables[s.table]
            spec = data["plan"][DEFAULT_MODULE][t.name]["sharding_spec"]["shards"]
            sizes = [m["shard_sizes"][0] for m in spec]
            assert _routes_every_id(t.rows, blocks[f"f{t.index}"], sizes), t.name


def test_table_column_wise_shards():
    """TWCW (TorchRec has no generator for it) exports as column_wise's shards on one node's
    ranks, and TorchRec shards the module by it."""
    shards = [Shard(t.index, "TWCW", (8, 9, 10, 11)) for t in W.tables]
    data = _export(shards)
    cw = _generated({t.name: column_wise(ranks=[8, 9, 10, 11]) for t in W.tables})["plan"]
    for name, p in data["plan"][DEFAULT_MODULE].items():
        assert p["sharding_type"] == "table_column_wise"
        assert p["sharding_spec"] == cw[DEFAULT_MODULE][name]["sharding_spec"]
    assert _shard_module(data, dist.group.WORLD) is not None


def test_the_old_balanced_split_misroutes():
    """The check has teeth: 1,000 rows split "first blocks one row larger" over 16 ranks (what
    zionsim exported before) sends ids to shards that do not hold them under TorchRec's routing."""
    balanced = [1000 // WORLD + (1 if i < 1000 % WORLD else 0) for i in range(WORLD)]
    assert not _routes_every_id(1000, 63, balanced)
    assert _routes_every_id(1000, 63, [63] * 15 + [55])


def test_row_wise_on_some_ranks_is_refused_as_torchrec_cannot_shard_it():
    """zionsim refuses to export RW on a subset of the ranks; TorchRec itself fails on it."""
    shards = [Shard(0, "RW", (10, 11, 12))] + [Shard(i, "TW", (0,)) for i in (1, 2, 3)]
    with pytest.raises(InputError, match="'t0'.*every rank 0..15"):
        to_torchrec(_plan(shards), W, WORLD, LOCAL)
    full = _export([Shard(0, "RW", tuple(range(WORLD)))] + shards[1:])
    subset = full["plan"][DEFAULT_MODULE]["t0"]
    subset["ranks"] = [10, 11, 12]
    subset["sharding_spec"]["shards"] = [
        {"shard_offsets": [o, 0], "shard_sizes": [n, 16], "placement": f"rank:{r}/cuda:{r % 8}"}
        for o, n, r in ((0, 334, 10), (334, 333, 11), (667, 333, 12))
    ]
    with pytest.raises(IndexError):
        _shard_module(full, dist.group.WORLD)


def test_column_slices_not_a_multiple_of_4_are_refused_as_torchrec_cannot_shard_them():
    """16 columns in 3 slices (6, 5, 5) are refused at export; TorchRec's fused kernel asserts."""
    shards = [Shard(t.index, "CW", (0, 1, 2)) for t in W.tables]
    with pytest.raises(InputError, match="'t0'.*5 columns|'t0'.*6 columns"):
        to_torchrec(_plan(shards), W, WORLD, LOCAL)
    data = _export([Shard(t.index, "CW", (0, 1, 2), widths=(8, 4, 4)) for t in W.tables])
    slices = ((0, 6), (6, 5), (11, 5))
    for p in data["plan"][DEFAULT_MODULE].values():
        for s, (off, width) in zip(p["sharding_spec"]["shards"], slices, strict=True):
            s["shard_offsets"][1], s["shard_sizes"][1] = off, width
    with pytest.raises(AssertionError, match="divisible by 4"):
        _shard_module(data, dist.group.WORLD)


@pytest.mark.parametrize(
    "constraints",
    [
        {"t0": "row_wise", "t1": "table_row_wise", "t2": "table_row_wise", "t3": "data_parallel"},
        {"t0": "table_wise", "t1": "column_wise", "t2": "row_wise", "t3": "row_wise"},
        {"t0": "table_column_wise", "t1": "row_wise", "t2": "column_wise", "t3": "table_wise"},
    ],
)
def test_torchrec_planner_plans_import_and_round_trip(constraints):
    """A plan from TorchRec's planner imports into zionsim and exports back byte-identical."""
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=WORLD, local_world_size=LOCAL, compute_device="cuda"),
        constraints={n: ParameterConstraints(sharding_types=[k]) for n, k in constraints.items()},
    )
    data = dump_plan(planner.plan(_ebc(), [EmbeddingBagCollectionSharder()]))
    ((module, tables),) = data["plan"].items()
    assert {n: p["sharding_type"] for n, p in tables.items()} == constraints
    plan = from_torchrec(data, W, WORLD, LOCAL)
    assert to_torchrec(plan, W, WORLD, LOCAL, module) == data
