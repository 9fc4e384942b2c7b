"""TorchRec plan dumps: import, export, round trip, and clear errors."""

import copy
import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import DATA
from zionsim.base.errors import InputError
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.plan_file import load_plan
from zionsim.dlrm.planner import PLANNERS
from zionsim.dlrm.torchrec_plan import from_torchrec, is_torchrec_dump, to_torchrec
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster

DUMP = DATA / "torchrec_plan_tiny.json"  # written by hand in the documented dump format


def _dump() -> dict:
    return json.loads(DUMP.read_text())


def test_dump_round_trips_unchanged():
    """Importing the TorchRec dump and exporting the plan gives the same JSON back."""
    w = load_workload("tiny")
    plan = from_torchrec(_dump(), w, 4, 2)
    assert to_torchrec(plan, w, 4, 2) == _dump()


def test_import_maps_every_field():
    """Sharding types, uneven columns and rows, UVM cache and output dtype land in the plan."""
    w = load_workload("tiny")
    plan = load_plan(str(DUMP), w, 4, 2)
    t0, t1, t2, t3 = plan.shards
    assert (t0.kind, t0.ranks, t0.widths, t0.tier, t0.cache_fraction) == (
        "CW", (1, 2), (4, 12), "uvm", 0.5,
    )  # fmt: skip
    assert (t1.kind, t1.rows) == ("TWRW", (1000, 1000))
    assert (t2.kind, t2.rows, t2.comm_precision) == ("RW", (125, 125, 125, 125), "fp16")
    assert (t3.kind, t3.ranks) == ("DP", (0, 1, 2, 3))
    assert is_torchrec_dump(_dump()) and not is_torchrec_dump({"tables": []})


def test_planner_plans_export_and_import_back():
    """A greedy plan exported to TorchRec and imported back simulates the same layout: equal
    splits become explicit whole columns and rows, nothing else changes."""
    w = load_workload("mlperf_dlrm_dcnv2")
    plan = PLANNERS["greedy"](Cluster.load("zionex", nodes=2), w)
    back = from_torchrec(json.loads(json.dumps(to_torchrec(plan, w, 16, 8))), w, 16, 8)
    for a, b in zip(plan.shards, back.shards, strict=True):
        assert (a.kind, a.ranks, a.tier) == (b.kind, b.ranks, b.tier)
        if b.rows is not None:
            assert sum(b.rows) == w.tables[a.table].rows


def test_parameter_server_tables_cannot_be_exported():
    """A ps-tier table has no TorchRec equivalent: a clear error, not a wrong file."""
    w = load_workload("tiny")
    plan = Plan("ps", tuple(Shard(t.index, "TW", (), "ps", 0.0, 0) for t in w.tables))
    with pytest.raises(InputError, match="parameter server"):
        to_torchrec(plan, w, 4, 2)


def _edit(path, value):
    data = _dump()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


T = ["plan", "model.sparse_arch.embedding_bag_collection"]


@pytest.mark.parametrize(
    "path, value, field",
    [
        (["world_size"], 8, "world_size"),
        ([*T, "t1", "sharding_type"], "grid_shard", "t1.sharding_type"),
        ([*T, "t1", "compute_kernel"], "key_value", "t1.compute_kernel"),
        ([*T, "t3", "compute_kernel"], "fused", "t3.compute_kernel"),
        ([*T, "t1", "ranks"], [2, 1], "t1.ranks"),
        ([*T, "t2", "output_dtype"], "INT4", "t2.output_dtype"),
        ([*T, "t0", "sharding_spec", "shards", 1, "shard_offsets"], [0, 5], "t0.sharding_spec"),
        ([*T, "t0", "sharding_spec", "shards", 1, "placement"], "rank:2/cuda:1", "placement"),
        ([*T, "t1", "sharding_spec", "shards", 1, "placement"], "rank:0/cuda:0", "t1.ranks"),
    ],
)
def test_bad_dumps_name_the_field(path, value, field):
    """Each malformed dump is an InputError whose field names what is wrong."""
    w = load_workload("tiny")
    with pytest.raises(InputError) as err:
        from_torchrec(_edit(path, value), w, 4, 2, "dump.json")
    assert field in err.value.field and err.value.file == "dump.json"


def test_missing_and_unknown_tables_are_errors():
    """Every workload table must be placed once, and only workload tables."""
    w = load_workload("tiny")
    data = _dump()
    tables = data["plan"]["model.sparse_arch.embedding_bag_collection"]
    tables["t9"] = copy.deepcopy(tables.pop("t3"))
    with pytest.raises(InputError, match="no table 't9'"):
        from_torchrec(data, w, 4, 2)
    del tables["t9"]
    with pytest.raises(InputError, match="not placed"):
        from_torchrec(data, w, 4, 2)


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "zionsim.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def _plan_file(tmp_path, name: str, t00: dict) -> str:
    """mlperf_dlrm on 2 ZionEX nodes: ``t00`` as given, every other table table-wise."""
    w = load_workload("mlperf_dlrm")
    rest = [{"table": t.name, "sharding": "TW", "ranks": [t.index % 16]} for t in w.tables[1:]]
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"name": name, "tables": [{"table": "t00", **t00}, *rest]}))
    return str(path)


def _export(tmp_path, t00: dict):
    plan = _plan_file(tmp_path, "p.yaml", t00)
    args = ["plan", "--workload", "mlperf_dlrm", "--nodes", "2", "--plan", plan]
    return _cli(*args, "--to-torchrec", "out.json", cwd=tmp_path)


def test_uneven_row_wise_export_has_torchrec_ceiling_shards(tmp_path):
    """t00's 39,884,406 rows over 16 GPUs export as 15 × 2,492,776 + 2,492,766 (TorchRec's
    ceil(rows/16) blocks), not 6 × 2,492,776 + 10 × 2,492,775."""
    r = _export(tmp_path, {"sharding": "RW"})
    assert r.returncode == 0, r.stderr
    t00 = json.loads((tmp_path / "out.json").read_text())["plan"][
        "model.sparse_arch.embedding_bag_collection"
    ]["t00"]
    spec = t00["sharding_spec"]["shards"]
    assert [s["shard_sizes"][0] for s in spec] == [2_492_776] * 15 + [2_492_766]
    assert [s["shard_offsets"][0] for s in spec] == [2_492_776 * i for i in range(16)]
    assert t00["ranks"] == list(range(16))


@pytest.mark.parametrize(
    "t00, words",
    [
        ({"sharding": "RW", "ranks": [10, 11, 12]}, ["'t00'", "every rank 0..15"]),
        ({"sharding": "TWRW", "ranks": [8, 9]}, ["'t00'", "every GPU of node 1"]),
        ({"sharding": "TWRW", "ranks": [9, 8, 10, 11, 12, 13, 14, 15]}, ["rank order"]),
        (
            {"sharding": "RW", "rows": [2_492_776] * 6 + [2_492_775] * 10},
            ["'t00'", "block 6 has 2492775 rows", "j // 2492776"],
        ),
        ({"sharding": "CW", "ranks": [0, 1, 2]}, ["'t00'", "multiple of 4 columns"]),
    ],
)
def test_plans_torchrec_cannot_train_are_refused_at_export(tmp_path, t00, words):
    """One line naming the table, exit 2, and no file written."""
    r = _export(tmp_path, t00)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert not (tmp_path / "out.json").exists()


def test_node_and_ranks_together_are_refused(tmp_path):
    """``node:`` with ``ranks:`` is a contradiction, not silently the whole node (exit 2)."""
    plan = _plan_file(tmp_path, "p.yaml", {"sharding": "TWRW", "node": 1, "ranks": [8, 9]})
    r = _cli("run", "--workload", "mlperf_dlrm", "--nodes", "2", "--plan", plan, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "'t00'" in r.stderr and "node:" in r.stderr and "ranks:" in r.stderr
    assert "tables[0].node" in r.stderr


def _tiny_dump_with(table: str, **fields) -> dict:
    data = _dump()
    data["plan"]["model.sparse_arch.embedding_bag_collection"][table].update(fields)
    return data


def test_dumps_torchrec_cannot_train_are_refused_at_import():
    """A dump with row blocks that are not TorchRec's own, or row-wise on some ranks only,
    describes what TorchRec would not train as written: an error naming the table's field."""
    w = load_workload("tiny")
    spec = {"shards": [
        {"shard_offsets": [o, 0], "shard_sizes": [n, 16], "placement": f"rank:{r}/cuda:{r % 2}"}
        for o, n, r in ((0, 167, 0), (167, 167, 1), (334, 166, 2), (500, 0, 3))
    ]}  # fmt: skip
    with pytest.raises(InputError, match="block 0 has 167 rows") as err:
        from_torchrec(_tiny_dump_with("t2", sharding_spec=spec), w, 4, 2)
    assert err.value.field.endswith("t2.sharding_spec")
    spec = {"shards": [
        {"shard_offsets": [o, 0], "shard_sizes": [250, 16], "placement": f"rank:{r}/cuda:{r % 2}"}
        for o, r in ((0, 1), (250, 2))
    ]}  # fmt: skip
    with pytest.raises(InputError, match="every rank 0..3") as err:
        from_torchrec(_tiny_dump_with("t2", sharding_spec=spec, ranks=[1, 2]), w, 4, 2)
    assert err.value.field.endswith("t2.ranks")
