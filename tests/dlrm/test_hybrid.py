"""HugeCTR's hybrid embedding (``hybrid.py``): HugeCTR's frequency threshold, the plan it makes,
the bytes its exchanges move, and its settings' errors."""

import math
from dataclasses import replace

import numpy as np
import pytest

from zionsim.base.config import Fields
from zionsim.base.errors import InputError
from zionsim.dlrm.cache import harmonic
from zionsim.dlrm.hybrid import (
    HybridSettings,
    count_threshold,
    frequent_rows,
    plan_for,
    settings_from_fields,
)
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.planner import named_plan
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.stack import load_stack, stack_from_dict
from zionsim.dlrm.workload import DTYPE_BYTES, load_workload
from zionsim.sim.run import run_point

DLRM = load_workload("mlperf_dlrm")


def _w(batch_per_gpu):
    return replace(DLRM, batch_per_gpu=batch_per_gpu)


def test_thresholds_are_hugectrs_formulas():
    """calibration_data.cu calculate_threshold, by hand: single node from p_dup_max and the
    per-GPU batch, IB_NVLink and IB_NVLink_Hier from the bandwidth ratio."""
    s = HybridSettings()
    m = 55296 / 8
    want = 55296 * 20 * math.sqrt(2 * 0.03 / (m * (m - 1)))
    assert count_threshold(s, "NVLink_SingleNode", 8, 1, 55296) == pytest.approx(want)
    ratio = 1.9e11 / 1.3e11
    assert count_threshold(s, "IB_NVLink", 64, 8, 71680) == pytest.approx(20 * 64 * ratio * 64 / 63)
    assert count_threshold(s, "IB_NVLink_Hier", 64, 8, 71680) == pytest.approx(
        20 * 64 * ratio * 8 / 7
    )


def test_frequent_rows_are_the_zipf_head_over_the_threshold():
    """K hottest rows: expected count samples·p_K reaches the threshold, row K+1's does not;
    their share is H(K)/H(R); a small table is frequent whole; uniform: all or none."""
    rows, samples, thr = 1_000_000, 1e6, 50.0
    k, share = frequent_rows(rows, 1, 1.0, samples, thr)
    h = harmonic(rows, 1.0)
    assert samples / (k * h) >= thr > samples / ((k + 1) * h)
    assert share == pytest.approx(harmonic(k, 1.0) / h)
    assert frequent_rows(10, 1, 1.0, samples, thr) == (10, 1.0)
    assert frequent_rows(1000, 1, 0.0, 1e6, 50.0) == (1000, 1.0)
    assert frequent_rows(1000, 1, 0.0, 1e4, 50.0) == (0, 0.0)


@pytest.mark.parametrize("n, nodes, hier", [(8, 1, False), (64, 8, True)])
def test_plan_is_valid(n, nodes, hier):
    """One HYB shard per table over every GPU; frequent plus infrequent rows are the table."""
    w = _w(1120)
    p = plan_for(w, n, nodes, HybridSettings())
    assert [s.table for s in p.shards] == list(range(len(w.tables)))
    for s, t in zip(p.shards, w.tables, strict=True):
        assert s.kind == "HYB" and s.ranks == tuple(range(n)) and s.hierarchical == hier
        assert 0 <= s.frequent_rows <= t.rows and 0.0 <= s.frequent_share <= 1.0
        assert s.frequent_rows + sum(s.rows) == t.rows
    assert p.name == (
        "hugectr_hybrid_IB_NVLink_Hier" if hier else "hugectr_hybrid_NVLink_SingleNode"
    )


def _sent(w, p, n):
    """Infrequent vector bytes for all samples, per direction."""
    cb = DTYPE_BYTES[w.precision["communication"]]
    G = w.batch_per_gpu * n
    return sum(
        G * t.pooling * (1 - s.frequent_share) * t.dim * cb
        for s, t in zip(p.shards, w.tables, strict=True)
    )


def test_flat_exchange_conserves_bytes_and_lookups():
    """Single node: the pooled all-to-all carries every infrequent lookup's vector once (the
    gradients the same back); the all-reduce gets every frequent row; every lookup is served
    once; rows are held n times when frequent, once when not."""
    n, w = 8, _w(256)
    p = plan_for(w, n, 1, HybridSettings())
    lay = layout(w, p, n, 8, w.zipf_alpha)
    assert lay.pooled_matrix.sum() == pytest.approx(_sent(w, p, n))
    assert lay.pooled_matrix.T.sum() == pytest.approx(_sent(w, p, n))
    assert not lay.input_matrix.any() and not lay.twrw_matrix.any() and lay.hyb_intra_bytes == 0
    assert lay.dp_params == sum(
        s.frequent_rows * t.dim for s, t in zip(p.shards, w.tables, strict=True)
    )
    assert lay.lookups.sum() == pytest.approx(w.batch_per_gpu * n * len(w.tables))
    rows = sum(
        n * s.frequent_rows + t.rows - s.frequent_rows
        for s, t in zip(p.shards, w.tables, strict=True)
    )
    rb = 128 * DTYPE_BYTES[w.precision["embedding"]]
    assert lay.hbm_bytes.sum() == pytest.approx(rows * rb)


def test_hierarchical_exchange_conserves_bytes():
    """IB_NVLink_Hier: each rank's intra-node stage and its rail stage each carry all it owes."""
    n, g, w = 16, 4, _w(128)
    p = plan_for(w, n, n // g, HybridSettings())
    lay = layout(w, p, n, g, w.zipf_alpha)
    per_rank = _sent(w, p, n) / n
    assert not lay.pooled_matrix.any()
    assert lay.hyb_intra_bytes * g == pytest.approx(per_rank)
    assert np.allclose(lay.twrw_matrix.sum(1), per_rank)
    trace = lower(w, p, n, gpus_per_node=g, zipf_alpha=w.zipf_alpha)
    names = {c.op for c in trace.collectives}
    assert names == {"all_to_all", "all_reduce"}
    ops = {o.name for o in trace.ops}
    assert {"hyb_intra_a2a", "hyb_intra_a2a_bwd", "twrw_a2a", "twrw_a2a_bwd"} <= ops


def test_no_frequent_rows_is_plain_model_parallel():
    """Frequent share 0: nothing replicated or all-reduced, and the lookups, rows and exchanged
    vectors of a table-wise plan (each lookup's vector travels once from its row's owner)."""
    n, w = 8, _w(256)
    split = [[t.rows // n + (1 if i < t.rows % n else 0) for i in range(n)] for t in w.tables]
    hyb = Plan(
        "h",
        tuple(Shard(t.index, "HYB", tuple(range(n)), rows=tuple(split[t.index])) for t in w.tables),
    )
    tw = Plan("tw", tuple(Shard(t.index, "TW", (t.index % n,)) for t in w.tables))
    a, b = layout(w, hyb, n, 8), layout(w, tw, n, 8)
    assert a.dp_params == 0 == b.dp_params
    assert a.pooled_matrix.sum() == pytest.approx(b.pooled_matrix.sum())
    assert a.lookups.sum() == pytest.approx(b.lookups.sum())
    assert a.hbm_bytes.sum() == pytest.approx(b.hbm_bytes.sum())


def test_settings_errors_name_the_field():
    """Bad hybrid settings are InputErrors naming the field."""
    bad = [
        ({"p_dup_max": 2}, "p_dup_max"),
        ({"p_dup_max": -0.1}, "p_dup_max"),
        ({"max_all_reduce_bandwidth": 0}, "max_all_reduce_bandwidth"),
        ({"max_all_to_all_bandwidth": "fast"}, "max_all_to_all_bandwidth"),
        ({"efficiency_bandwidth_ratio": -1}, "efficiency_bandwidth_ratio"),
        ({"num_iterations_statistics": 0}, "num_iterations_statistics"),
        ({"communication_type": {"multi_node": "NVLink_SingleNode"}}, "multi_node"),
        ({"communication_type": {"single_node": "Ethernet"}}, "single_node"),
        ({"frequent_fraction": 0.5}, "frequent_fraction"),
    ]
    for data, field in bad:
        with pytest.raises(InputError, match=field):
            settings_from_fields(Fields(data, "<stack>", "planner.hybrid"))
    with pytest.raises(InputError, match="hybrid"):
        stack_from_dict({"name": "s", "planner": {"name": "hugectr", "hybrid": {"p_dup_max": 5}}})


def test_workload_and_cap_errors():
    """Multi-hot tables and too many frequent categories are InputErrors naming the field."""
    multi = replace(DLRM, tables=[replace(DLRM.tables[0], pooling=2), *DLRM.tables[1:]])
    with pytest.raises(InputError, match="pooling"):
        plan_for(multi, 8, 1, HybridSettings())
    with pytest.raises(InputError, match="max_num_frequent_categories"):
        plan_for(_w(256), 8, 1, HybridSettings(max_num_frequent_categories=1e-6))
    with pytest.raises(InputError, match="IB_NVLink_Hier"):
        count_threshold(HybridSettings(), "IB_NVLink_Hier", 8, 1, 1024)


def test_stack_settings_reach_the_plan(tiny_cluster):
    """``plan: hugectr_hybrid`` takes the stack's ``planner.hybrid`` settings: IB_NVLink instead
    of the hierarchical exchange."""
    w = _w(256)
    stack = stack_from_dict(
        {
            "name": "s",
            "planner": {
                "name": "hugectr",
                "hybrid": {"communication_type": {"multi_node": "IB_NVLink"}},
            },
        }  # fmt: skip
    )
    assert named_plan("hugectr_hybrid", tiny_cluster, w, stack).name == "hugectr_hybrid_IB_NVLink"
    assert named_plan("hugectr_hybrid", tiny_cluster, w, load_stack("hugectr")).name == (
        "hugectr_hybrid_IB_NVLink_Hier"
    )


def test_runs_end_to_end():
    """A run with ``plan: hugectr_hybrid`` plans, lowers and simulates."""
    out = run_point(
        {
            "topology": "dgx_a100",
            "nodes": 2,
            "gpus_per_node": 2,
            "iterations": 2,
            "workload": "mlperf_dlrm",
            "batch_per_gpu": 64,
            "stack": "hugectr",
            "plan": "hugectr_hybrid",
        }
    )
    assert out.summary["plan"] == "hugectr_hybrid_IB_NVLink_Hier"
    assert out.summary["iteration_time_s"] > 0


def test_plan_cost_table_prices_hybrid_shards(tiny_cluster):
    """``zionsim plan``'s cost table prices HYB shards by their own lookups and exchanges: far
    below the same table all-reduced whole (the DP estimate a HYB shard would otherwise get)."""
    from zionsim.dlrm.plan_cost import Option, context, estimate, plan_costs

    w = _w(256)
    p = named_plan("hugectr_hybrid", tiny_cluster, w, load_stack("hugectr"))
    rows, totals = plan_costs(tiny_cluster, w, p, load_stack("hugectr"))
    assert {r["sharding"] for r in rows} == {"HYB"}
    big = max(range(len(w.tables)), key=lambda i: w.tables[i].rows)
    dp = estimate(context(tiny_cluster, w), w.tables[big], Option(big, "DP", 4))
    assert rows[big]["table_estimated_s"] < dp.total_s
    assert np.isfinite(totals["estimated_iteration_s"])
