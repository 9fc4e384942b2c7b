"""A sweep's worker reuses what its points share (issue 29): clusters, lowered traces, NCCL
choices, rank classes.  Every point's record must be the one a lone run gives: here each point
is run again in this process with every shortcut off and every cache empty."""

from __future__ import annotations

import json

import pytest

from zionsim.base import config, kept
from zionsim.dlrm import estimate, lowering, planner
from zionsim.io.files import to_json
from zionsim.network import nccl
from zionsim.network.layout_key import layout_of
from zionsim.sim import engine, results
from zionsim.sim.results import summary_row
from zionsim.sim.run import run_point
from zionsim.studies import sweep as sw
from zionsim.studies.points import point_path, read_record

SWEEP = {
    "base": {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2},
    "grid": {
        "topology.scale_out.nic_bw": ["100Gbps", "400Gbps"],  # rates only: the same plans
        "batch_per_gpu": [512, 1024],  # the same cluster
        "workload.precision.communication": ["fp32", "fp16"],
    },
}


def _alone(params: dict, monkeypatch) -> dict:
    """``params`` run on their own, the long way: no trace cache, no shared ranks, every rank
    walked, NCCL's choices, schedules and estimates of copies together made anew, every input
    file parsed anew, the run's analysis derived anew, the cluster built for the point, every
    table built (not lean), every collective prepared anew."""
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    monkeypatch.setattr(lowering, "CACHE_OPS", 0)
    monkeypatch.setattr(lowering, "SHARE_RANKS", False)
    monkeypatch.setattr(lowering, "RETYPE", False)
    monkeypatch.setattr(lowering, "_TWINS", {})
    monkeypatch.setattr(estimate, "CLASSES", False)
    monkeypatch.setattr(estimate, "_CHOICES", {})
    monkeypatch.setattr(estimate, "_TOGETHER", {})
    monkeypatch.setattr(estimate, "MEMO_CHOICES", 0)
    monkeypatch.setattr(nccl, "_SCHEDULES", {})
    monkeypatch.setattr(nccl, "MEMO_SCHEDULES", 0)
    monkeypatch.setattr(config, "_PARSED", {})
    monkeypatch.setattr(config, "KEEP_PARSED_CHARS", 0)  # every input file parsed anew
    monkeypatch.setattr(kept, "_KEPT", [])
    monkeypatch.setattr(kept, "KEEP_OPS", 0)
    monkeypatch.setattr(engine, "_PREPARED", {})
    monkeypatch.setattr(engine, "KEEP_PREPARED", 0)  # every collective prepared anew
    monkeypatch.setattr(planner, "_CANDIDATES", {})
    monkeypatch.setattr(planner, "KEEP_CANDIDATES", 0)  # the greedy stages run anew
    figures = summary_row(run_point(params).summary)
    return json.loads(to_json(figures))  # as a point file holds them


@pytest.mark.parametrize("workers", [1])
def test_a_reused_sweep_gives_what_each_point_gives_alone(tmp_path, monkeypatch, workers):
    sweep = sw.sweep_from_dict(SWEEP)
    table = sw.run_sweep(sweep, tmp_path, workers=workers, progress=False)
    assert (table["status"] == "ok").all()
    for p in sw.points(sweep):
        record = read_record(point_path(tmp_path, p["point_id"]))
        params = {k: v for k, v in p.items() if k != "point_id"}
        assert record["figures"] == _alone(params, monkeypatch), params


def test_the_same_worker_reuses_and_matches_in_process(monkeypatch):
    """In one process (a warm worker): the points in reuse order, one after another, give the
    records of lone runs; the cluster of an earlier point is reused."""
    monkeypatch.setattr(sw, "_CLUSTERS", {})
    pts = sw.reuse_order(sw.points(sw.sweep_from_dict(SWEEP)))
    assert [p["batch_per_gpu"] for p in pts[:2]] == [512, 512]  # grouped: only nic_bw differs
    records = [sw.run_one(p) for p in pts]
    assert len(sw._CLUSTERS) == 2  # one cluster per NIC speed, reused by the other points
    for p, rec in zip(pts, records, strict=True):
        params = {k: v for k, v in p.items() if k != "point_id"}
        with monkeypatch.context() as m:
            assert json.loads(to_json(rec["figures"])) == _alone(params, m), params


def test_points_of_another_dense_format_of_one_width_match_lone_runs(monkeypatch):
    """Points whose dense precision is fp32 or tf32 (one width) lower each plan once and retype
    it for the other (``lowering.RETYPE``); each record is a lone run's."""
    sweep = {
        "base": {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2},
        "grid": {
            "workload.precision.dense": ["fp32", "tf32"],
            "topology.scale_out.nic_bw": ["100Gbps", "400Gbps"],
        },
    }
    monkeypatch.setattr(sw, "_CLUSTERS", {})
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    monkeypatch.setattr(lowering, "_TWINS", {})
    made = []
    retyped = lowering._retyped
    monkeypatch.setattr(lowering, "_retyped", lambda *a: made.append(retyped(*a)) or made[-1])
    pts = sw.reuse_order(sw.points(sw.sweep_from_dict(sweep)))
    records = [sw.run_one(p) for p in pts]
    assert any(t is not None for t in made)  # the tf32 points' plans retyped
    for p, rec in zip(pts, records, strict=True):
        assert rec["status"] == "ok", rec["error"]
        params = {k: v for k, v in p.items() if k != "point_id"}
        with monkeypatch.context() as m:
            assert json.loads(to_json(rec["figures"])) == _alone(params, m), params


def test_reuse_order_groups_points_by_their_options_outside_topology():
    pts = [
        {"point_id": "a", "topology.x": 1, "b": 1},
        {"point_id": "b", "topology.x": 1, "b": 2},
        {"point_id": "c", "topology.x": 2, "b": 1},
        {"point_id": "d", "topology.x": 2, "b": 2},
    ]
    assert [p["point_id"] for p in sw.reuse_order(pts)] == ["a", "c", "b", "d"]


def test_several_workers_get_each_group_of_points_as_one_task():
    """With several workers, points that differ only in ``topology.*`` run in one task (one
    worker lowers their plans), cut so that every worker gets several tasks; one worker gets
    one point per task."""
    pts = [{"point_id": f"{b}{x}", "topology.x": x, "b": b} for b in range(4) for x in range(3)]
    ids = [[p["point_id"] for p in t] for t in sw.reuse_tasks(pts, 2)]
    assert ids == [["00", "01"], ["02"], ["10", "11"], ["12"], ["20", "21"], ["22"],
                   ["30", "31"], ["32"]]  # fmt: skip
    assert [len(t) for t in sw.reuse_tasks(pts, 1)] == [1] * 12
    assert [len(t) for t in sw.reuse_tasks(pts[:3], 2)] == [1, 1, 1]
    flat = [p for t in sw.reuse_tasks(pts, 3) for p in t]
    assert flat == sw.reuse_order(pts)


def test_two_workers_give_what_each_point_gives_alone(tmp_path, monkeypatch):
    """Each group of points (two NIC speeds) one task of one of two workers."""
    monkeypatch.setattr(sw, "TASKS_PER_WORKER", 1)
    pts = sw.points(sw.sweep_from_dict(SWEEP))
    assert {len(t) for t in sw.reuse_tasks(pts, 2)} == {2}
    test_a_reused_sweep_gives_what_each_point_gives_alone(tmp_path, monkeypatch, 2)


def test_a_lean_point_has_the_summary_of_a_full_run():
    """A sweep point runs lean (no events table): its summary, the event count included, is
    a full run's."""
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import simulate_inputs

    params = {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2}
    full = simulate_inputs(resolve_inputs(params))
    lean = simulate_inputs(resolve_inputs(params), lean=True)
    assert lean.events is None and full.events is not None
    assert lean.links is None and lean.memory is None and lean.breakdown is None
    assert lean.summary["events"] == len(full.events) > 0
    assert to_json(lean.summary) == to_json(full.summary)


def test_group_means_are_pandas_to_the_bit():
    """The lean run's link means (no table) equal pandas' group means: Kahan sums per group in
    row order, NaN skipped, keys sorted."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 2000))
        x = rng.random(n) * 10 ** rng.uniform(-6, 6, n)
        x[rng.random(n) < 0.02] = np.nan
        keys = rng.choice(["nvlink", "roce", "pcie", "upi", "dram"], n).tolist()
        want = pd.DataFrame({"k": keys, "u": x}).groupby("k")["u"].mean().to_dict()
        got = results.group_means(keys, x.tolist())
        assert list(got) == list(want)
        assert np.array_equal(list(got.values()), list(want.values()), equal_nan=True)


def test_a_sweep_worker_imports_no_pandas():
    """A worker runs its points without pandas (its import is a third of a worker's start)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from zionsim.studies.sweep import run_one\n"
        "p = {'point_id': 'x', 'topology': 'zionex', 'nodes': 1, 'workload': 'tiny',"
        " 'iterations': 2}\n"
        "assert run_one(p)['status'] == 'ok'\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_schedule_is_shared_only_by_clusters_of_one_layout(monkeypatch):
    """Two clusters that differ in NIC rate share a collective's schedule and routes (the
    choice, whose time differs, is still made on each); another node count does not."""
    from zionsim.hardware.cluster import Cluster

    monkeypatch.setattr(nccl, "_SCHEDULES", {})
    a, b, c = (
        Cluster.load("zionex", nodes=n, overrides={"scale_out.nic_bw": bw})
        for n, bw in ((2, "100Gbps"), (2, "400Gbps"), (4, "100Gbps"))
    )
    assert layout_of(a) == layout_of(b) != layout_of(c)
    ranks = a.gpus
    ca, cb = (nccl.choose(x, "all_reduce", ranks, 64e6) for x in (a, b))
    assert ca.estimate_s > cb.estimate_s  # each cluster's own rates
    with monkeypatch.context() as m:
        m.setattr(nccl, "MEMO_SCHEDULES", 0)
        fresh = nccl.choose(b, "all_reduce", ranks, 64e6)
    assert (fresh.estimate_s, fresh.protocol) == (cb.estimate_s, cb.protocol)
    assert fresh.schedule.algorithm == cb.schedule.algorithm
    for p, q in zip(fresh.schedule.phases, cb.schedule.phases, strict=True):
        assert (p.src == q.src).all() and (p.dst == q.dst).all() and (p.nbytes == q.nbytes).all()
    nccl.choose(c, "all_reduce", c.gpus[: len(ranks)], 64e6)
    assert len({k[0] for k in nccl._SCHEDULES}) == 2  # one layout per node count


def test_the_analysis_of_equal_ops_is_derived_once(monkeypatch):
    """Runs of one lowered trace on clusters of other rates reuse the stream links and op
    codes of the first (the same objects), and give what a fresh derivation gives."""
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import simulate_inputs

    monkeypatch.setattr(kept, "_KEPT", [])
    # a fixed plan: the auto planner may choose differently at other rates (it does with the
    # lookups' L2 hits), and then the lowered traces differ
    base = {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2,
            "plan": "round_robin"}  # fmt: skip
    runs = [
        simulate_inputs(resolve_inputs({**base, "topology.scale_out.nic_bw": bw}))
        for bw in ("100Gbps", "400Gbps")
    ]
    assert len(kept._KEPT) == 1
    monkeypatch.setattr(kept, "KEEP_OPS", 0)
    again = simulate_inputs(resolve_inputs({**base, "topology.scale_out.nic_bw": "400Gbps"}))
    assert to_json(again.summary) == to_json(runs[1].summary)
    assert again.events.equals(runs[1].events)


def test_a_parsed_input_file_is_handed_out_as_a_fresh_copy():
    """``config.safe_load`` keeps each text's document: a caller that changes what it got (a
    ``--set`` override, a sweep's ``workload.*`` key) changes nobody else's copy."""
    text = "a: {b: [1, 2.5, x]}\nc: &k {d: 1}\ne: *k\n"
    first = config.safe_load(text)
    first["a"]["b"].append(3)
    first["c"]["d"] = 2
    again = config.safe_load(text)
    assert again == {"a": {"b": [1, 2.5, "x"]}, "c": {"d": 1}, "e": {"d": 1}}
    assert again is not first and again["a"] is not first["a"]
    assert again["c"] is again["e"]  # an alias stays one object, as the parser gives it


def test_one_worker_runs_the_points_in_this_process(tmp_path, monkeypatch):
    """One local worker is the sweep's own process (``studies/sweep.py``, assumption 7): no
    pool starts, every point runs here in reuse order, and the table is a pool's."""
    import gc
    import os

    from zionsim.studies import pool

    def no_pool(*args, **kwargs):
        raise AssertionError("a pool was started for one worker")

    monkeypatch.setattr(pool, "local_pool", no_pool)
    ran, run_one = [], sw.run_one
    monkeypatch.setattr(sw, "run_one", lambda p, limit=None: ran.append((os.getpid(), p)) or
                        run_one(p, limit))  # fmt: skip
    sweep = sw.sweep_from_dict(SWEEP)
    try:
        table = sw.run_sweep(sweep, tmp_path / "one", workers=1, progress=False)
    finally:
        gc.unfreeze()
    assert [pid for pid, _ in ran] == [os.getpid()] * len(table)
    assert [p for _, p in ran] == sw.reuse_order(sw.points(sweep))
    assert (table["status"] == "ok").all()
    monkeypatch.undo()
    pooled = sw.run_sweep(sweep, tmp_path / "two", workers=2, progress=False)
    cols = [c for c in table.columns if c != "sim_wall_s"]
    assert table[cols].equals(pooled[cols])


def test_a_sweep_keeps_loaded_specs_while_their_files_read_the_same(tmp_path, monkeypatch):
    """While a sweep's points run, a point's topology, workload and stack specs are kept for
    the next point with the same names and overrides; an edited file is read again; outside a
    sweep nothing is kept."""
    from tests.conftest import TINY
    from zionsim.sim.inputs import resolve_inputs

    topo = tmp_path / "topo.yaml"
    topo.write_text(open(TINY).read())
    params = {"topology": str(topo), "workload": "tiny", "nodes": 1}
    assert resolve_inputs(params).cluster is not resolve_inputs(params).cluster
    monkeypatch.setattr(sw, "_SPECS", None)
    with sw._keeping_specs():
        a, b = (resolve_inputs(params, memo=sw._SPECS) for _ in range(2))
        assert b.cluster is a.cluster and b.workload is a.workload and b.stack is a.stack
        other = resolve_inputs({**params, "topology.scale_out.nic_bw": "1Gbps"}, memo=sw._SPECS)
        assert other.cluster != a.cluster and other.workload is a.workload
        topo.write_text(open(TINY).read().replace("name:", "name: edited_", 1))
        c = resolve_inputs(params, memo=sw._SPECS)
        assert c.cluster is not a.cluster and c.cluster == resolve_inputs(params).cluster
    assert sw._SPECS is None
