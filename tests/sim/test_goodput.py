"""Goodput (``sim/goodput.py``): the checkpoint-interval optimum against Young and Daly, and
CPR's partial recovery."""

from __future__ import annotations

import math

import pytest

from zionsim.sim import goodput as gp
from zionsim.sim.run import run_point


@pytest.mark.parametrize(("delta_s", "mtbf_s"), [(60.0, 3600.0 * 24), (300.0, 3600.0 * 10)])
def test_optimum_matches_daly_and_young(delta_s, mtbf_s):
    rate = 1.0 / mtbf_s
    best = gp.optimal_interval(delta_s, 0.0, rate)
    assert best == pytest.approx(gp.daly_interval(delta_s, rate), rel=0.01)
    assert best == pytest.approx(gp.young_interval(delta_s, rate), rel=0.1)
    # the optimum is a maximum of the useful fraction
    f = gp.useful_fraction(best, delta_s, 0.0, rate)
    assert f >= gp.useful_fraction(best * 1.3, delta_s, 0.0, rate)
    assert f >= gp.useful_fraction(best / 1.3, delta_s, 0.0, rate)


def test_restart_cost_does_not_move_the_optimum():
    """e^{λR} scales E[T] by a constant: the optimum ignores R (Daly 2006)."""
    rate = 1 / 36000.0
    a, b = gp.optimal_interval(120.0, 0.0, rate), gp.optimal_interval(120.0, 900.0, rate)
    assert a == pytest.approx(b, rel=1e-6)
    assert gp.useful_fraction(a, 120.0, 900.0, rate) < gp.useful_fraction(a, 120.0, 0.0, rate)


def test_no_failures_pays_only_checkpoints():
    assert gp.useful_fraction(900.0, 100.0, 50.0, 0.0) == pytest.approx(0.9)


def test_llama3_failure_rate_is_reproduced():
    """16,384 GPUs, 2,048 nodes: the Llama 3 paper's 419 interruptions in 54 days less the
    ones not counted per component (software 54, NCCL watchdog 7, SDC 6, dependency 2, ...)."""
    counts = {"gpu": 16384, "nic": 16384, "node": 2048, "fabric_per_gpu": 16384}
    per_day = gp.failure_rate(counts, gp.MTBF_H) * 86400
    assert per_day * 54 == pytest.approx(262 + 7 + 46 + 35, rel=1e-9)


def test_partial_recovery_cuts_the_overhead():
    """CPR's direction: partial recovery spends less on failures and checkpoints than full."""
    cost = gp.CheckpointCost(write_s=120.0, restart_s=600.0, partial_restart_s=600.0)
    counts = {"gpu": 1024, "nic": 1024, "node": 128, "fabric_per_gpu": 1024}
    out = gp.goodput(1e6, counts, cost, nodes=128, max_lost_fraction=0.01)
    full, part = out["overhead_fraction"], out["partial_recovery"]["overhead_fraction"]
    assert part < full
    assert out["partial_recovery"]["goodput_samples_per_s"] > out["goodput_samples_per_s"]


def test_goodput_block_of_a_run():
    opts = {
        "topology": "zionex",
        "nodes": 2,
        "workload": "tiny",
        "variability.goodput": {"storage_bw": "10 GB/s", "relaunch": "5 min",
                                "partial_recovery": {"max_lost_fraction": 0.01}},
    }  # fmt: skip
    s = run_point(opts).summary
    g = s["goodput"]
    assert 0 < g["useful_fraction"] < 1
    assert g["goodput_samples_per_s"] < s["samples_per_s"]
    assert math.isclose(g["checkpoint_interval_s"], g["optimal_interval_s"])
    assert g["components"]["gpu"] == 16


def test_checkpoint_cost_is_bound_by_the_fullest_node_or_the_storage():
    c = gp.checkpoint_cost([10e9, 1e9, 1e9], node_bw_Bps=5e9, storage_bw_Bps=100e9, relaunch_s=60)
    assert c.write_s == pytest.approx(2.0)  # the 10 GB node over its 5 GB/s
    c = gp.checkpoint_cost([10e9] * 100, node_bw_Bps=5e9, storage_bw_Bps=100e9, relaunch_s=60)
    assert c.write_s == pytest.approx(10.0)  # 1 TB over the 100 GB/s storage
    assert c.restart_s == pytest.approx(70.0) and c.partial_restart_s == pytest.approx(62.0)
