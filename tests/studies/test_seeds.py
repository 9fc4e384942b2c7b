"""The seed papers' directions hold with fixed plans (zionsim/studies/seeds.py, docs/seeds.md)."""

import dataclasses

import pytest

from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import run_point, simulate_run


def _samples(**options) -> float:
    return run_point({"topology": "zionex", **options}).summary["samples_per_s"]


@pytest.mark.parametrize("method", ["ma", "bmuf", "easgd"])
def test_shadow_sync_is_at_least_as_fast_as_foreground_every_4(method):
    """ShadowSync's background rounds (sync servers on service hosts) never make training
    slower than the same rounds in the foreground every 4 iterations."""
    common = {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "plan": "round_robin"}
    common.update(iterations=5, warmup=1, sync_every=4)
    shadow = _samples(**common, sync=f"shadow-{method}")
    fore = _samples(**common, sync=f"foreground-{method}")
    assert shadow >= fore * (1 - 1e-9)


def test_hbm_is_faster_than_uvm_is_faster_than_parameter_servers():
    """The same table-wise placement of MLPerf DLRM on one ZionEX node: rows in HBM, in host
    DRAM behind a half-size HBM cache, and on CPU parameter servers, in that order of speed."""
    from zionsim.dlrm.planner import PLANNERS

    c = Cluster.load("zionex", nodes=1)
    w = load_workload("mlperf_dlrm")
    hbm = PLANNERS["round_robin"](c, w)
    uvm = Plan("uvm", tuple(s if s.kind == "DP" else _in_uvm(s) for s in hbm.shards))
    plans = {"hbm": hbm, "uvm": uvm, "ps": PLANNERS["ps"](c, w)}
    t = {
        k: simulate_run(c, w, p, iterations=2, stack="bare").summary["iteration_time_s"]
        for k, p in plans.items()
    }
    assert t["hbm"] < t["uvm"] < t["ps"]


def _in_uvm(s: Shard) -> Shard:
    return dataclasses.replace(s, tier="uvm", cache_fraction=0.5)


def test_fused_embeddings_are_faster_than_per_table_kernels():
    """FBGEMM's table-batched kernels beat one kernel per table, end to end."""
    common = {"workload": "mlperf_dlrm", "nodes": 1, "plan": "round_robin", "stack": "bare"}
    assert _samples(**common, fused=True) > _samples(**common, fused=False)


@pytest.mark.parametrize("stack", ["bare", "torchrec"])
def test_fp16_communication_is_never_slower_with_a_fixed_plan(stack):
    """Halving the exchanged bytes with the plan held fixed never costs time."""
    common = {"workload": "mlperf_dlrm", "nodes": 2, "plan": "round_robin", "stack": stack}
    fp16 = _samples(**common, **{"workload.precision.communication": "fp16"})
    fp32 = _samples(**common, **{"workload.precision.communication": "fp32"})
    assert fp16 >= fp32 * (1 - 1e-9)


def test_more_nic_bandwidth_is_never_slower():
    """Doubling the NICs' speed never slows a run, with the default host model on."""
    common = {"workload": "mlperf_dlrm", "nodes": 2, "plan": "round_robin", "batch_per_gpu": 2048}
    slow = _samples(**common, **{"topology.scale_out.nic_bw": "200Gbps"})
    fast = _samples(**common, **{"topology.scale_out.nic_bw": "400Gbps"})
    assert fast >= slow * (1 - 1e-9)
