"""HugeCTR's MLPerf planner: the logged plans of real submissions, hier_auto as TWRW over whole
nodes, and the stack that selects it for ``plan: auto``."""

from collections import Counter

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.hugectr_plan import Problem, Settings, bucket_tables, hugectr_plan, problem
from zionsim.dlrm.planner import named_plan
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.stack import load_stack
from zionsim.dlrm.workload import DTYPE_BYTES, load_workload
from zionsim.sim.run import run_point

DCNV2 = load_workload("mlperf_dlrm_dcnv2")


def _costs(dp, buckets):
    """Hotness cost and shard count of each bucket, and each table's shard count."""
    shards = Counter(t for b in buckets for t in b)
    hot = [t.pooling for t in DCNV2.tables]
    return [sum(hot[t] / shards[t] for t in b) for b in buckets], [len(b) for b in buckets], shards


def test_reproduces_dell_v30_a100_logged_plan():
    """Dell's MLPerf v3.0 XE9680x8A100 log (auto, ratio 7, no DP threshold): hotness cost per GPU
    [29 28 28 28 27 25 25 24], shards per GPU [3 2 3 3 3 5 5 5], table 20 on 4 GPUs."""
    dp, buckets = bucket_tables(
        problem(
            DCNV2, 8, 1, "auto", Settings(dp_threshold_bytes=(("auto", 0.0), ("hier_auto", 12.5e6)))
        )
    )
    cost, count, shards = _costs(dp, buckets)
    assert dp == []
    assert cost == [29, 28, 28, 28, 27, 25, 25, 24]
    assert count == [3, 2, 3, 3, 3, 5, 5, 5]
    assert {t: k for t, k in shards.items() if k > 1} == {20: 4}


def test_reproduces_dell_v40_h100_logged_plan():
    """Dell's MLPerf v4.0 XE9680x8H100 log (auto, 7, DP below 0.008 GB): its 13 DP tables, hotness
    cost per GPU [26 26 24.5 23.5 23.5 23.5 22.5 21.5], table 20 on all 8 GPUs, table 21 on 2."""
    dp, buckets = bucket_tables(problem(DCNV2, 8, 1, "auto", Settings()))
    cost, count, shards = _costs(dp, buckets)
    assert dp == [3, 5, 6, 7, 8, 12, 13, 15, 16, 17, 18, 24, 25]
    assert cost == [26, 26, 24.5, 23.5, 23.5, 23.5, 22.5, 21.5]
    assert count == [2, 2, 2, 3, 3, 3, 3, 3]
    assert {t: k for t, k in shards.items() if k > 1} == {20: 8, 21: 2}


def test_reproduces_nvidia_v50_gb200_64_gpu_planner():
    """NVIDIA's v5.0 GB200 64-GPU run (config_GB200_16x4x2112.sh: auto, ratio 9,
    DP_SHARDING_THRESHOLD=0; train.py plans over num_nodes x --num_gpus_per_node = 16 x 4 GPU
    buckets).  Its log prints no plan, so the expected figures are those of NVIDIA's own
    ``sharding/planner.py`` and ``generate_plan.py`` from mlcommons/training_results_v5.0, run
    as they are with those arguments (numpy 2.4, with and without the AVX-512 sort: the same
    figures): table 20 on 32 GPUs, 21 on 8, 9/11/14/19/22 on 2, the others whole; hottest GPUs
    the two halves of table 19 and the whole tables 4 and 13 (6 lookups per sample each)."""
    s = Settings(
        mem_comm_bw_ratio=(("auto", 9.0), ("hier_auto", 67.0)),
        dp_threshold_bytes=(("auto", 0.0), ("hier_auto", 12.5e6)),
    )
    dp, buckets = bucket_tables(problem(DCNV2, 64, 1, "auto", s))
    cost, count, shards = _costs(dp, buckets)
    assert dp == []
    assert {t: k for t, k in shards.items() if k > 1} == {
        9: 2, 11: 2, 14: 2, 19: 2, 20: 32, 21: 8, 22: 2,
    }  # fmt: skip
    assert Counter(cost) == Counter(
        {3.125: 32, 3.375: 8, 2.0: 7, 6.0: 4, 5.0: 3, 3.0: 3, 4.5: 2, 4.0: 2, 3.5: 2, 1.0: 1}
    )
    assert Counter(count) == Counter({1: 59, 2: 5})


def test_reproduces_nvidia_v50_gb200_8_gpu_planner():
    """NVIDIA's v5.0 GB200 8-GPU run (config_GB200_2x4x6912.sh: auto, 9, DP below 0.008 GB), as
    NVIDIA's v5.0 planner computes it (see the 64-GPU test): 13 DP tables, table 20 on all 8
    GPUs and 21 on 2, hotness cost per GPU 26, 26, 24.5, 23.5 x3, 22.5, 21.5."""
    s = Settings(mem_comm_bw_ratio=(("auto", 9.0), ("hier_auto", 67.0)))
    dp, buckets = bucket_tables(problem(DCNV2, 8, 1, "auto", s))
    cost, count, shards = _costs(dp, buckets)
    assert dp == [3, 5, 6, 7, 8, 12, 13, 15, 16, 17, 18, 24, 25]
    assert {t: k for t, k in shards.items() if k > 1} == {20: 8, 21: 2}
    assert sorted(cost, reverse=True) == [26, 26, 24.5, 23.5, 23.5, 23.5, 22.5, 21.5]
    assert Counter(count) == Counter({3: 5, 2: 3})


def test_every_table_placed_once_per_shard_and_memory_respected():
    """Each model-parallel table sits in 1, 2, 4… distinct buckets; no bucket exceeds its cap."""
    p = Problem((5, 1, 1, 9), (4e9, 1e9, 1e9, 3e9), 4, 1.0, 5e9)
    dp, buckets = bucket_tables(p)
    shards = Counter(t for b in buckets for t in b)
    assert dp == [] and set(shards) == {0, 1, 2, 3}
    assert all(k in (1, 2, 4) and len(set(b)) == len(b) for b in buckets for k in shards.values())
    mem = [sum(p.table_bytes[t] / shards[t] for t in b) for b in buckets]
    assert max(mem) <= p.capacity_bytes


def test_whole_tables_when_they_fit_else_every_table_everywhere():
    """Two 8 GB tables on two buckets: with 9 GB each, one whole table per bucket (cost 2 against
    3 for both everywhere); with 5 GB no split placement fits and the search ends on its first
    candidate, every table in every bucket (HugeCTR's most memory-efficient plan)."""
    _, fits = bucket_tables(Problem((1, 1), (8e9, 8e9), 2, 1.0, 9e9))
    assert sorted(fits) == [[0], [1]]
    _, tight = bucket_tables(Problem((1, 1), (8e9, 8e9), 2, 1.0, 5e9))
    assert tight == [[0, 1], [0, 1]]


def test_hier_auto_places_tables_on_whole_nodes(tiny_cluster):
    """On several nodes NVIDIA's settings give hier_auto: every model-parallel table is TWRW over
    all GPUs of the nodes holding it; small tables are DP."""
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    plan = hugectr_plan(tiny_cluster, w)
    assert plan.name == "hugectr_hier_auto"
    g = tiny_cluster.spec.gpus_per_node
    for s in plan.shards:
        assert s.kind in ("TWRW", "DP")
        if s.kind == "TWRW":
            nodes = {r // g for r in s.ranks}
            assert sorted(s.ranks) == [n * g + i for n in sorted(nodes) for i in range(g)]
    assert any(len(s.ranks) == 2 * g for s in plan.shards)  # table 20 split over both nodes


def test_hier_auto_plan_round_trips_through_a_plan_file(tiny_cluster):
    """``zionsim plan --out`` then ``run --plan``: hier_auto's table split over both node buckets
    (TWRW over all four GPUs) is written and read back as the same shards."""
    from zionsim.dlrm.plan_file import plan_from_dict, plan_to_dict

    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    plan = hugectr_plan(tiny_cluster, w)
    n, g = len(tiny_cluster.gpus), tiny_cluster.spec.gpus_per_node
    back = plan_from_dict(plan_to_dict(plan, w, n), w, n, g, "plan.yaml")
    assert [(s.table, s.kind, s.ranks, s.rows) for s in back.shards] == [
        (s.table, s.kind, s.ranks, s.rows) for s in plan.shards
    ]


def test_twrw_over_two_nodes_reduces_on_each_and_sums_partials(tiny_cluster):
    """A TWRW table on both nodes: each node reduce-scatters G·d and sends B·d to every node; the
    rows and lookups are split over all four GPUs (nothing lost, nothing doubled)."""
    from zionsim.dlrm.plan import Plan, Shard

    w = load_workload("tiny", batch_per_gpu=32)
    n, g = 4, 2
    shards = [Shard(0, "TWRW", (0, 1, 2, 3))] + [Shard(t.index, "TW", (0,)) for t in w.tables[1:]]
    lay = layout(w, Plan("p", tuple(shards)), n, g)
    t = w.tables[0]
    G, cb = 32 * n, 4
    assert lay.twrw_rs == {0: G * t.dim * cb, 1: G * t.dim * cb}
    assert np.allclose(lay.twrw_matrix, 32 * t.dim * cb)
    tw = sum(x.pooling for x in w.tables[1:]) * G
    assert lay.lookups.sum() == pytest.approx(G * t.pooling + tw)


def test_stack_selects_planner_for_auto(tiny_cluster):
    """``plan: auto`` under hugectr is HugeCTR's planner; under torchrec it is greedy."""
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    assert named_plan("auto", tiny_cluster, w, load_stack("hugectr")).name == "hugectr_hier_auto"
    assert named_plan("auto", tiny_cluster, w, load_stack("torchrec")).name == "greedy"


#: a small 2-node HugeCTR DLRM-DCNv2 run (2 GPUs a node, 64 samples per GPU)
TWO_NODES_HUGECTR = {
    "topology": "dgx_h100",
    "nodes": 2,
    "gpus_per_node": 2,
    "iterations": 2,
    "workload": "mlperf_dlrm_dcnv2",
    "batch_per_gpu": 64,
    "stack": "hugectr",
}


def test_stack_override_of_planner_settings_reaches_the_run():
    """A run option ``stack.planner.sharding_plan.multi_node: auto`` plans GPUs as buckets."""
    base = dict(TWO_NODES_HUGECTR)
    assert run_point(base).summary["plan"] == "hugectr_hier_auto"
    over = run_point({**base, "stack.planner.sharding_plan.multi_node": "auto"})
    assert over.summary["plan"] == "hugectr_auto"


def test_bad_planner_settings_name_the_field():
    """An unknown plan kind or field is an InputError naming it."""
    with pytest.raises(InputError, match="multi_node"):
        load_stack("hugectr", {"planner.sharding_plan.multi_node": "uniform"})
    with pytest.raises(InputError, match="dp_sharding_threshold"):
        load_stack("hugectr", {"planner.dp_sharding_threshold.auto": "-1 GB"})


def test_split_tables_hold_hugectr_modulo_rows(tiny_cluster):
    """HugeCTR sends key k of a table split m ways to shard k % m: a split table whose rows do not
    divide states rows // m (+1 on the first rows % m shards), not TorchRec's ceiling blocks."""
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    plan = hugectr_plan(tiny_cluster, w)
    split = [s for s in plan.shards if s.kind in ("TWRW", "RW")]
    assert split
    for s in split:
        rows, m = w.tables[s.table].rows, len(s.ranks)
        if rows % m:
            assert s.rows == tuple(rows // m + (i < rows % m) for i in range(m))
        else:
            assert s.rows is None  # equal blocks, which both rules give
    assert any(s.rows is not None for s in split)


def test_auto_on_several_nodes_communicates_hierarchically(tiny_cluster):
    """v3.1/v4.1 train.py picks CommunicationStrategy.Hierarchical on several nodes whatever the
    plan: under ``auto`` a table on one GPU first sends each other GPU of its node the vectors
    for that GPU's rail ((nodes)·B·d), then the rail's GPU sends each other node its samples'
    B·d once; nothing goes through the flat pooled all-to-all.  NVIDIA's v5.0 train.py
    (``hierarchical: hier_auto``) keeps the flat exchange under ``auto``."""
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    auto = Settings(multi_node="auto")
    plan = hugectr_plan(tiny_cluster, w, auto)
    assert plan.name == "hugectr_auto"
    assert all(s.hierarchical for s in plan.shards if s.kind in ("TW", "RW"))
    n, g = len(tiny_cluster.gpus), tiny_cluster.spec.gpus_per_node
    lay = layout(w, plan, n, g)
    assert not lay.pooled_matrix.any()
    cb = DTYPE_BYTES[w.precision["communication"]]
    mp = [s for s in plan.shards if s.kind == "TW"]
    for r in range(n):
        own = sum(w.tables[x.table].dim for x in mp if x.ranks[0] == r)
        expect = (n // g) * 64 * own * cb + _rw_part(plan, w, r, n, g) * cb
        assert lay.hier_intra[r] == pytest.approx(expect)
    # across nodes: each node's rail GPU sends B·d per table part the node holds, once
    per_node = [
        sum(
            w.tables[s.table].dim
            for s in plan.shards
            if s.kind in ("TW", "RW") and node in {x // g for x in s.ranks}
        )
        for node in range(n // g)
    ]
    assert np.allclose(np.asarray(lay.twrw_matrix)[0, 1], 64 * per_node[0] * cb)
    # table 0, row-split over every GPU, reduces inside each node (TWRW), not over all GPUs
    every = [s for s in plan.shards if s.kind == "RW" and len(s.ranks) == n]
    assert every and lay.rw_bytes == 0
    assert set(lay.twrw_rs) == set(range(n // g))
    flat = hugectr_plan(tiny_cluster, w, Settings(multi_node="auto", hierarchical="hier_auto"))
    assert not any(s.hierarchical for s in flat.shards)
    lay_flat = layout(w, flat, n, g)
    assert lay_flat.pooled_matrix.any() and not lay_flat.hier_intra.any()


def _rw_part(plan, w, r, n, g):
    """Intra-node bytes rank ``r`` sends for the row-split tables it holds a part of."""
    return sum(
        (n // g) * 64 * w.tables[s.table].dim
        for s in plan.shards
        if s.kind == "RW" and r in s.ranks and sorted(s.ranks) != list(range(n))
    )


def test_hierarchical_auto_adds_the_intra_node_stage_to_the_run():
    """The 2-node auto run gets an intra-node all-to-all before the rail all-to-all, forward and
    backward, and no flat pooled all-to-all."""
    base = {**TWO_NODES_HUGECTR, "stack.planner.sharding_plan.multi_node": "auto"}
    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.planner import named_plan as plan_of

    res = run_point(base)
    assert res.summary["plan"] == "hugectr_auto"
    stack = load_stack("hugectr", {"planner.sharding_plan.multi_node": "auto"})
    from zionsim.hardware.cluster import Cluster

    c = Cluster.load("dgx_h100", nodes=2, gpus_per_node=2)
    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    names = [op.name for op in lower(w, plan_of("auto", c, w, stack), 4, True, 2, stack=stack).ops]
    assert "hier_intra_a2a" in names and "hier_intra_bwd" in names and "twrw_a2a" in names
    assert "pooled_a2a" not in names
    assert names.index("hier_intra_a2a") < names.index("twrw_a2a")
    assert names.index("twrw_a2a_bwd") < names.index("hier_intra_bwd")


def test_hierarchical_flag_survives_a_plan_file(tiny_cluster):
    """A saved HugeCTR multi-node auto plan reloads with its hierarchical exchange (not silently
    flat); the flag on a sharding that does not use it is an InputError naming the field."""
    from zionsim.dlrm.plan_file import plan_from_dict, plan_to_dict

    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    plan = hugectr_plan(tiny_cluster, w, Settings(multi_node="auto"))
    n, g = len(tiny_cluster.gpus), tiny_cluster.spec.gpus_per_node
    back = plan_from_dict(plan_to_dict(plan, w, n), w, n, g)
    assert [s.hierarchical for s in back.shards] == [s.hierarchical for s in plan.shards]
    data = plan_to_dict(plan, w, n)
    dp = next(row for row in data["tables"] if row["sharding"] == "DP")
    dp["hierarchical"] = True
    with pytest.raises(InputError, match="hierarchical"):
        plan_from_dict(data, w, n, g)
