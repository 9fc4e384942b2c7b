"""The fast analytic engine (``sim/fast.py``) reproduces the simpy engine in analytic fidelity:
the same summary, events and links, bit for bit, on several clusters, workloads and stacks."""

import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.planner import PLANNERS
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim import engine, fast
from zionsim.sim import run as run_module
from zionsim.sim.run import simulate_run


def _both(monkeypatch, cluster, workload, plan=None, **kw):
    """(fast, simpy) results of one analytic run."""
    a = simulate_run(cluster, workload, plan, fidelity="analytic", **kw)
    with monkeypatch.context() as m:
        m.setattr(run_module, "simulate_trace", engine.simulate_trace)
        b = simulate_run(cluster, workload, plan, fidelity="analytic", **kw)
    return a, b


def _assert_same(a, b):
    assert a.summary == b.summary
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.links, b.links, check_exact=True)


def _tiny_plan(w, ranks, tier="hbm", cache=0.0):
    return Plan(
        "tw", tuple(Shard(t.index, "TW", (t.index % ranks,), tier, cache) for t in w.tables)
    )


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"sync": "foreground-ma", "sync_every": 2},
        {"sync": "foreground-easgd", "sync_every": 2},
        {"stack": "hugectr"},
        {"stack": "nvidia_pytorch_dlrm"},
    ],
)
def test_tiny_cluster_matches_simpy(monkeypatch, kw):
    """Tiny cluster: default stack, foreground sync (skipped iterations, EASGD host transfers),
    an embedding stream (hugectr) and another stack give identical results."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    a, b = _both(monkeypatch, c, w, _tiny_plan(w, len(c.gpus)), iterations=4, **kw)
    _assert_same(a, b)
    if kw.get("stack") == "hugectr":
        assert (a.events["stream"] == "embedding").any()


def test_tiny_uvm_and_parameter_servers_match_simpy(monkeypatch):
    """UVM host transfers and the parameter-server tier run on the fast path identically."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    uvm, ref = _both(monkeypatch, c, w, _tiny_plan(w, len(c.gpus), "uvm", 0.5))
    _assert_same(uvm, ref)
    assert uvm.summary["busy_s"]["host_transfer"] > 0
    ps, ref = _both(monkeypatch, c, w, PLANNERS["ps"](c, w))
    _assert_same(ps, ref)
    assert ps.summary["busy_s"]["parameter_server"] > 0


@pytest.mark.parametrize(
    "workload,nodes,stack",
    [
        ("mlperf_dlrm", 2, None),
        ("mlperf_dlrm_dcnv2", 2, None),
        ("mlperf_dlrm_dcnv2", 2, "hugectr"),
        ("mlperf_dlrm_dcnv2", 16, None),
    ],
)
def test_zionex_matches_simpy(monkeypatch, workload, nodes, stack):
    """ZionEX clusters with MLPerf workloads under the greedy plan: identical results."""
    c = Cluster.load("zionex", nodes=nodes)
    w = load_workload(workload)
    _assert_same(*_both(monkeypatch, c, w, PLANNERS["greedy"](c, w), stack=stack))


def test_scaled_down_neo_model_a_matches_simpy(monkeypatch):
    """Neo model A with fewer, smaller tables on 4 ZionEX nodes: identical results."""
    c = Cluster.load("zionex", nodes=4)
    tables = "tables=[{name: emb, count: 256, rows: 200000, dim: 94, pooling: 15}]"
    w = load_workload("neo_model_a", overrides=[tables])
    _assert_same(*_both(monkeypatch, c, w, PLANNERS["greedy"](c, w)))


def test_bigbasin_matches_simpy(monkeypatch):
    """A Big Basin cluster (PCIe and NVLink cube-mesh) with DLRM small: identical results."""
    c = Cluster.load("bigbasin", nodes=2)
    w = load_workload("dle_dlrm_small")
    _assert_same(*_both(monkeypatch, c, w, PLANNERS["greedy"](c, w)))


def test_fast_path_avoids_simpy_and_shadow_falls_back(monkeypatch):
    """Analytic runs never call the simpy engine; ShadowSync runs and flow runs do."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    trace, _ = run_module.build_trace(c, w, _tiny_plan(w, len(c.gpus)))
    calls = []
    real = engine.simulate_trace
    monkeypatch.setattr(engine, "simulate_trace", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast.simulate_trace(c, trace, fidelity="analytic")
    assert calls == []
    fast.simulate_trace(c, trace, fidelity="flow")
    shadow, _ = run_module.build_trace(
        c, w, _tiny_plan(w, len(c.gpus)), sync=run_module.sync_spec("shadow-ma", 2)
    )
    fast.simulate_trace(c, shadow, fidelity="analytic")
    assert calls == [1, 1]
