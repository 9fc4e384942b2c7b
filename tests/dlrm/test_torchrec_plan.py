"""TorchRec plan dumps: import, export, round trip, and clear errors."""

import copy
import json

import pytest

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
    assert (t2.kind, t2.rows, t2.comm_precision) == ("RW", (167, 167, 166, 0), "fp16")
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
