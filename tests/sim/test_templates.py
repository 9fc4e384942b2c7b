"""Rank templates (sim/templates.py): stepping alike ranks once per class writes the same result
files, byte for byte, as stepping every rank, for workloads, stacks, plans and sync modes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from zionsim.dlrm.planner import named_plan
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.io.files import write_run
from zionsim.sim import templates
from zionsim.sim.engine import op_durations
from zionsim.sim.run import build_trace, simulate_run

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def _files(tmp_path: Path, name: str, cluster, workload, monkeypatch, on: bool, **kw) -> dict:
    """Result files (timing.json aside: it holds wall times) of one run, templates on or off."""
    monkeypatch.setattr(templates, "ENABLED", on)
    r = simulate_run(cluster, workload, iterations=3, warmup=1, **kw)
    write_run(tmp_path / f"{name}_{on}", r, plot=False)
    out = tmp_path / f"{name}_{on}"
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "timing.json"}


@pytest.fixture
def slow_comm_stack(tmp_path) -> str:
    """TorchRec with NCCL slowed under compute (the path that counts members computing) and
    embeddings on their own stream (the path where a GPU's streams take turns)."""
    d = yaml.safe_load((STACKS / "torchrec.yaml").read_text())
    d["interference"]["comm_slowdown"] = 0.25
    d["embedding_stream"] = True
    path = tmp_path / "slow_comm.yaml"
    path.write_text(yaml.safe_dump(d))
    return str(path)


@pytest.mark.parametrize(
    "workload, nodes, kw",
    [
        ("neo_model_a", 16, {}),
        ("mlperf_dlrm_dcnv2", 2, {}),
        ("mlperf_dlrm", 4, {"sync": "foreground-bmuf", "sync_every": 2}),
        ("tiny", 3, {"plan": "round_robin"}),
        ("mlperf_dlrm", 2, {"sync": "shadow-ma"}),  # background threads: every rank alone
        ("tiny", 2, {"stack": "hugectr"}),
        ("mlperf_dlrm", 2, {"stack": "slow_comm"}),
    ],
)
def test_templates_write_the_per_rank_results(
    workload, nodes, kw, tmp_path, monkeypatch, slow_comm_stack
):
    cluster = Cluster.load("dgx_h100" if workload == "mlperf_dlrm_dcnv2" else "zionex", nodes=nodes)
    w = load_workload(workload)
    kw = dict(kw)
    if kw.get("stack") == "slow_comm":
        kw["stack"] = slow_comm_stack
    if "plan" in kw:
        kw["plan"] = named_plan(kw["plan"], cluster, w)
    on = _files(tmp_path, workload, cluster, w, monkeypatch, True, **kw)
    off = _files(tmp_path, workload, cluster, w, monkeypatch, False, **kw)
    assert on.keys() == off.keys() and "summary.json" in on
    for name in on:
        assert on[name] == off[name], name


@pytest.mark.parametrize("equal", [True, False])
def test_copies_of_node_collectives_run_as_a_class(equal, tmp_path, monkeypatch):
    """Table-row-wise shards, one table per node: each node's reduce-scatter and all-gather are
    copies of the others'.  With equal tables the nodes' ranks are alike and the copies form a
    class (stepped once); with unequal ones (other lookups, other kernel times) they do not.
    Either way the result files are the per-rank ones."""
    from zionsim.dlrm.plan import Plan, Shard

    d = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "workloads" / "tiny.yaml").read_text()
    )
    if equal:
        d["tables"] = [{"name": f"t{i}", "rows": 1000, "dim": 16, "pooling": 2} for i in range(4)]
    path = tmp_path / "tiny4.yaml"
    path.write_text(yaml.safe_dump(d))
    cluster = Cluster.load("zionex", nodes=4)
    w = load_workload(str(path))
    plan = Plan("twrw", tuple(Shard(t, "TWRW", tuple(range(8 * t, 8 * t + 8))) for t in range(4)))
    trace, _ = build_trace(cluster, w, plan)
    t = templates.templates(trace, op_durations(cluster, trace), alone=False, g=8)
    copied = [c for c in t.copies.values() if len(c) > 1]
    assert bool(copied) == equal and (len(t.members) < 32) == equal
    on = _files(tmp_path, "twrw", cluster, w, monkeypatch, True, plan=plan)
    off = _files(tmp_path, "twrw", cluster, w, monkeypatch, False, plan=plan)
    for name in on:
        assert on[name] == off[name], name


def test_alike_ranks_share_a_class_and_uneven_ones_do_not():
    """neo_model_a's table-wise plan gives every rank the same sequence: one class; a DCNv2
    plan on 16 nodes gives 112 ranks one sequence and 16 ranks holding other shards their own."""
    for workload, topology, nodes, most in (
        ("neo_model_a", "zionex", 16, 128),
        ("mlperf_dlrm_dcnv2", "dgx_h100", 16, 112),
    ):
        cluster = Cluster.load(topology, nodes=nodes)
        trace, _ = build_trace(cluster, load_workload(workload))
        t = templates.templates(trace, op_durations(cluster, trace), alone=False)
        sizes = sorted(len(m) for m in t.members.values())
        assert sum(sizes) == nodes * 8 and sizes[-1] == most
        assert (t.rep_of <= np.arange(nodes * 8)).all()  # a class's lowest rank represents it
