"""Planner: deterministic, respects memory, beats round-robin where tables differ; plan files."""

import pytest
import yaml

from tests.conftest import TINY
from zionsim.base.errors import InputError
from zionsim.dlrm.plan_cost import plan_costs
from zionsim.dlrm.plan_file import plan_from_dict, plan_to_dict
from zionsim.dlrm.planner import PLANNERS, Planner
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import simulate_run


@pytest.fixture(scope="module")
def two_nodes():
    return Cluster.load("zionex", nodes=2)


def test_planner_is_deterministic(two_nodes):
    """Same inputs, same plan."""
    w = load_workload("mlperf_dlrm_dcnv2")
    assert PLANNERS["greedy"](two_nodes, w) == PLANNERS["greedy"](two_nodes, w)


def test_greedy_beats_round_robin_on_heterogeneous_tables(two_nodes):
    """On DCNv2's uneven tables the greedy plan simulates faster than round-robin."""
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=1024)
    rr = simulate_run(
        two_nodes, w, PLANNERS["round_robin"](two_nodes, w), iterations=2, warmup=1
    ).summary["iteration_time_s"]
    gr = simulate_run(
        two_nodes, w, PLANNERS["greedy"](two_nodes, w), iterations=2, warmup=1
    ).summary["iteration_time_s"]
    assert gr < rr


def test_table_larger_than_hbm_needs_rows_split_or_uvm(two_nodes):
    """A 64 GB table: TW-only fails the HBM check; RW or UVM fit, and so does the planner's."""
    from zionsim.dlrm.plan import Plan, Shard, check_fits, memory_by_rank

    w = load_workload(
        "tiny",
        overrides=[
            "tables=[{name: big, rows: 500000000, dim: 32, pooling: 1}]",
            "bottom_mlp=[8, 32, 32]",
        ],
    )
    tw = Plan("tw", (Shard(0, "TW", (0,)),))
    with pytest.raises(InputError, match="needs"):
        check_fits(memory_by_rank(w, tw, 16, 8), 40e9, [f"g{i}" for i in range(16)])
    names = [f"g{i}" for i in range(16)]
    rw = Plan("rw", (Shard(0, "RW", tuple(range(16))),))
    uvm = Plan("uvm", (Shard(0, "TW", (0,), "uvm", 0.1),))
    for plan in (rw, uvm, PLANNERS["greedy"](two_nodes, w)):
        check_fits(memory_by_rank(w, plan, 16, 8), two_nodes.spec.gpu.hbm_bytes, names)


def test_stages_are_replaceable(two_nodes):
    """Replacing the choose stage (and the compare stage, which would otherwise return an
    alternative its estimate prefers) changes the plan; the other stages stay."""
    w = load_workload("mlperf_dlrm_dcnv2")
    always_rw = Planner(
        choose=lambda ctx, t, costed, target: next(o for o, _ in costed if o.kind == "RW"),
        compare=lambda cluster, w, plans, stack: plans[0],
    )
    assert {s.kind for s in always_rw.plan(two_nodes, w).shards} == {"RW"}


def test_plan_files_round_trip(two_nodes):
    """A plan written as YAML and read back is the same plan."""
    w = load_workload("mlperf_dlrm_dcnv2")
    plan = PLANNERS["greedy"](two_nodes, w)
    text = yaml.safe_dump(plan_to_dict(plan, w))
    assert plan_from_dict(yaml.safe_load(text), w, 16, 8) == plan


@pytest.mark.parametrize(
    "entry, field",
    [
        ({"table": "nope", "sharding": "TW", "ranks": [0]}, "tables[0].table"),
        ({"table": "t0", "sharding": "XW", "ranks": [0]}, "tables[0].sharding"),
        ({"table": "t0", "sharding": "TW", "ranks": [9]}, "tables[0].ranks"),
        ({"table": "t0", "sharding": "TWRW", "ranks": [1, 2]}, "tables[0].ranks"),
    ],
)
def test_bad_plan_files(entry, field):
    """Bad plan entries name the file and the field."""
    w = load_workload("tiny")
    data = {
        "name": "p",
        "tables": [entry] + [{"table": f"t{i}", "sharding": "DP"} for i in range(1, 4)],
    }
    with pytest.raises(InputError) as err:
        plan_from_dict(data, w, 4, 2, "p.yaml")
    assert err.value.field == field and err.value.file == "p.yaml"


def test_plan_costs_report(tiny_cluster):
    """plan_costs gives one row per table and per-GPU totals with an imbalance ≥ 1."""
    w = load_workload("tiny")
    rows, totals = plan_costs(tiny_cluster, w, PLANNERS["greedy"](tiny_cluster, w))
    assert len(rows) == 4 and totals["imbalance"] >= 1.0
    assert TINY


def test_rebalance_splits_the_straggler_part():
    """On one DGX H100, MLPerf DCNv2's t21 (40 M rows, pooling 27) table-wise on one GPU next to
    every GPU's share of the RW t20 left that GPU 1.4x the mean; the rebalance stage splits the
    straggler's part until the estimated peak is within a few % of the mean."""
    from zionsim.dlrm.workload import with_global_batch

    c = Cluster.load("dgx_h100", nodes=1)
    w = with_global_batch(load_workload("mlperf_dlrm_dcnv2"), 55296, 8)
    plan = PLANNERS["greedy"](c, w)
    _, totals = plan_costs(c, w, plan)
    assert totals["imbalance"] < 1.1

    class PlaceOnly(Planner):
        def rebalance(self, ctx, costed, chosen):
            return self.place(ctx, chosen, ctx.w.zipf_alpha)

    # the placed plan itself, not the alternatives the compare stage would weigh against it
    _, before = plan_costs(c, w, PlaceOnly(compare=lambda c, w, plans, stack: plans[0]).plan(c, w))
    assert before["imbalance"] > totals["imbalance"]
    assert totals["gpu_estimated_s_max"] < before["gpu_estimated_s_max"]


def test_row_split_options_cost_the_largest_ceiling_block(two_nodes):
    """An RW or TWRW option's HBM bytes are those of its largest block, ceil(rows/k) rows (the
    split TorchRec runs), and its lookups that block's share of the table's."""
    from zionsim.dlrm.plan_cost import Option, context, estimate

    w = load_workload("mlperf_dlrm")
    ctx = context(two_nodes, w)
    t = w.tables[0]  # 39,884,406 rows: 2,492,776 per block over 16, 4,985,551 over 8
    per_row = estimate(ctx, t, Option(0, "TW", 1)).part_bytes / t.rows
    for kind, k, rows in (("RW", 16, 2_492_776), ("TWRW", 8, 4_985_551)):
        assert estimate(ctx, t, Option(0, kind, k)).part_bytes == pytest.approx(rows * per_row)


def test_fit_check_counts_the_parameter_servers_the_run_counts():
    """The planner's fit check reads the front-end network's service hosts, as the run does: a
    parameter-server plan over Zion's 16 servers fits (the check had counted its 8 CPU sockets
    as servers and refused it), and one needing more servers than the fabric has does not."""
    from zionsim.dlrm.planner import _fits, named_plan

    c = Cluster.load("zion", nodes=1)
    w = load_workload("mlperf_dlrm", batch_per_gpu=1024)
    plan = named_plan("ps", c, w)
    assert c.spec.front_end.servers > c.spec.host.sockets
    assert _fits(c, w, plan)
    simulate_run(c, w, plan, iterations=2)  # the run accepts it too
    few = Cluster.load("zion", nodes=1, overrides={"front_end.servers": 4})
    assert not _fits(few, w, plan)
