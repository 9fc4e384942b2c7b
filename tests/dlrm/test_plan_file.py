"""Plan files: uneven columns and rows, RW on a subset, TWCW, per-table communication precision."""

import numpy as np
import pytest
import yaml

from zionsim.base.errors import InputError
from zionsim.dlrm.plan import Plan, Shard, memory_by_rank
from zionsim.dlrm.plan_file import plan_from_dict, plan_to_dict
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.workload import load_workload
from zionsim.sim.run import simulate_run

N, G = 4, 2  # the tiny world


def _plan(*entries):
    """A tiny-workload plan: the given entries, every other table DP."""
    w = load_workload("tiny")
    named = {e["table"] for e in entries}
    rest = [{"table": t.name, "sharding": "DP"} for t in w.tables if t.name not in named]
    return w, plan_from_dict({"name": "p", "tables": [*entries, *rest]}, w, N, G, "p.yaml")


def test_uneven_columns_split_work_and_bytes_by_width():
    """Column slices of 4 and 12 of a 16-wide table: lookup and pooled bytes in ratio 1:3."""
    w, plan = _plan({"table": "t0", "sharding": "CW", "ranks": [1, 2], "columns": [4, 12]})
    lay = layout(w, plan, N, G)
    dp = layout(w, _plan()[1], N, G)
    extra = lay.lookup_bytes - dp.lookup_bytes  # minus t0's DP share on every rank
    cw = extra - extra[0]  # rank 0 holds no slice
    assert cw[2] == pytest.approx(3 * cw[1]) and cw[1] > 0 and cw[3] == 0
    assert lay.pooled_matrix[2].sum() == pytest.approx(3 * lay.pooled_matrix[1].sum())


def test_uneven_rows_split_memory_and_lookups_by_rows():
    """RW blocks of 1500 and 500 rows over all ranks: memory and lookups in ratio 3:1, and the
    outputs still reduce-scatter over every rank."""
    e = {"table": "t1", "sharding": "RW", "ranks": [0, 1, 2, 3], "rows": [1500, 500, 0, 0]}
    w, plan = _plan(e)
    base = _plan()[1]
    lay, dp = layout(w, plan, N, G), layout(w, base, N, G)
    mem = memory_by_rank(w, plan, N, G)["embedding"] - memory_by_rank(w, base, N, G)["embedding"]
    rw = mem - mem[2]  # rank 2 holds no rows (DP's full copy subtracted everywhere)
    assert rw[0] == pytest.approx(3 * rw[1]) and rw[0] == pytest.approx(1500 * 16 * 4)
    look = lay.lookups - dp.lookups
    assert look[0] - look[2] == pytest.approx(3 * (look[1] - look[2])) and look[3] == look[2]
    assert lay.rw_bytes > 0


def test_row_wise_on_a_subset_sends_partial_sums():
    """RW on ranks 0 and 1 only: no reduce-scatter; each member sends B·d partial sums to every
    rank in the pooled all-to-allv, and only members do lookups."""
    w, plan = _plan({"table": "t1", "sharding": "RW", "ranks": [0, 1]})
    lay, dp = layout(w, plan, N, G), layout(w, _plan()[1], N, G)
    assert lay.rw_bytes == 0
    part = w.batch_per_gpu * 16 * 4
    assert np.allclose(lay.pooled_matrix[:2], part) and not lay.pooled_matrix[2:].any()
    more = lay.lookups - dp.lookups
    assert more[0] > 0 and more[1] > 0 and more[2] < 0 and more[3] < 0


def test_comm_precision_per_table_halves_its_bytes():
    """comm_precision fp16 on one TW table halves its pooled bytes (workload is fp32)."""
    entry = {"table": "t0", "sharding": "TW", "ranks": [3]}
    w, full = _plan(entry)
    _, half = _plan({**entry, "comm_precision": "fp16"})
    a, b = layout(w, full, N, G).pooled_matrix, layout(w, half, N, G).pooled_matrix
    assert b.sum() == pytest.approx(a.sum() / 2)


def test_table_column_wise_lowers_like_column_wise_on_one_node():
    """TWCW on node 1 moves the same bytes as CW on the same ranks; off-node ranks are an error."""
    cw = _plan({"table": "t0", "sharding": "CW", "ranks": [2, 3]})
    tw = _plan({"table": "t0", "sharding": "TWCW", "node": 1})
    w = cw[0]
    assert np.array_equal(
        layout(w, cw[1], N, G).pooled_matrix, layout(w, tw[1], N, G).pooled_matrix
    )
    with pytest.raises(InputError, match="one node"):
        _plan({"table": "t0", "sharding": "TWCW", "ranks": [1, 2]})


def test_table_row_wise_over_whole_nodes_loads_like_the_planners_shard():
    """TWRW over every GPU of several nodes (a table on two node buckets, HugeCTR's hier_auto)
    loads as the shard the planner builds; a part of a second node is an error."""
    w, p = _plan({"table": "t0", "sharding": "TWRW", "ranks": [0, 1, 2, 3]})
    assert p.shards[0].kind == "TWRW" and p.shards[0].ranks == (0, 1, 2, 3)
    built = Plan("p", (Shard(0, "TWRW", (0, 1, 2, 3)),) + p.shards[1:])
    assert layout(w, p, N, G).twrw_rs == layout(w, built, N, G).twrw_rs
    with pytest.raises(InputError, match="cover whole nodes"):
        _plan({"table": "t0", "sharding": "TWRW", "ranks": [0, 1, 2]})


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"sharding": "CW", "ranks": [0, 1], "columns": [8, 9]}, "add up to 17"),
        ({"sharding": "CW", "ranks": [0, 1], "columns": [16]}, "one per rank"),
        ({"sharding": "CW", "ranks": [0, 1], "columns": [16, 0]}, "whole numbers >= 1"),
        ({"sharding": "TW", "ranks": [0], "rows": [1000]}, "only RW and TWRW"),
        ({"sharding": "RW", "ranks": [0, 1], "rows": [999, 0]}, "add up to 999"),
        ({"sharding": "RW", "ranks": [0, 0]}, "appears twice"),
        ({"sharding": "TW", "ranks": [0], "comm_precision": "int4"}, "unknown value"),
        ({"sharding": "TW", "ranks": [0], "cache_fraction": 0.5}, "only a uvm-tier"),
        # contradictory fields: named with the table, never resolved silently
        ({"sharding": "TWRW", "node": 1, "ranks": [2, 3]}, "'t0' gives both node: and ranks:"),
        ({"sharding": "TWCW", "node": 0, "ranks": [0, 1]}, "'t0' gives both node: and ranks:"),
        ({"sharding": "TW", "node": 1}, "'t0' gives node: with sharding: TW"),
        ({"sharding": "RW", "node": 1}, "'t0' gives node: with sharding: RW"),
        ({"sharding": "DP", "ranks": [0, 1]}, "'t0' gives ranks: with sharding: DP"),
        ({"sharding": "TW", "ranks": [0], "server": 0}, "'t0' gives server: with sharding: TW"),
        ({"tier": "ps", "server": 0, "ranks": [1]}, "'t0' gives ranks: with tier: ps"),
        ({"tier": "ps", "server": 0, "rows": [1000]}, "'t0' gives rows: with tier: ps"),
    ],
)
def test_bad_entries_name_file_field_and_rule(entry, match):
    """Each bad entry is an InputError naming p.yaml, the table's field, and what is allowed."""
    with pytest.raises(InputError, match=match) as err:
        _plan({"table": "t0", **entry})
    assert err.value.file == "p.yaml" and err.value.field.startswith("tables[0].")


def test_new_fields_round_trip_through_yaml():
    """Columns, rows, subset ranks, TWCW and comm_precision survive plan_to_dict → YAML → back."""
    w, plan = _plan(
        {"table": "t0", "sharding": "CW", "ranks": [1, 1, 2], "columns": [4, 4, 8]},
        {"table": "t1", "sharding": "RW", "ranks": [0, 2], "rows": [1200, 800]},
        {"table": "t2", "sharding": "TWCW", "ranks": [2, 3], "comm_precision": "bf16"},
    )
    text = yaml.safe_dump(plan_to_dict(plan, w, N))
    assert plan_from_dict(yaml.safe_load(text), w, N, G) == plan


def test_a_plan_with_every_new_feature_simulates(tiny_cluster):
    """Uneven CW, RW on a subset, TWRW with uneven rows and fp16 communication run end to end."""
    w, plan = _plan(
        {"table": "t0", "sharding": "CW", "ranks": [1, 2], "columns": [4, 12]},
        {"table": "t1", "sharding": "RW", "ranks": [0, 3], "rows": [1500, 500]},
        {
            "table": "t2",
            "sharding": "TWRW",
            "node": 0,
            "rows": [100, 400],
            "comm_precision": "fp16",
        },
    )
    r = simulate_run(tiny_cluster, w, plan, iterations=2, warmup=1, stack="bare")
    assert r.summary["iteration_time_s"] > 0
