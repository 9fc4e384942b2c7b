"""Resource guards: the estimate grows with every size, and absurd runs are refused before any
expensive step (graph, plan, lowering, simulation), with one line naming estimate and limit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import TINY
from zionsim.base.errors import CapacityError, ResourceError
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.topology import load_topology
from zionsim.sim import resources as rs

GIB = 2.0**30


def test_estimate_grows_with_every_size():
    """Doubling any one size never lowers memory or work; the memory parts sum to the total."""
    base = rs.Sizes(gpus=64, tables=26, ops=2000, op_runs=6000, matrix_cells=8192, pair_flows=4096)
    e0 = rs.estimate(base)
    assert e0.memory_bytes == pytest.approx(
        rs.load_model()["memory_bytes"]["base"] + sum(e0.parts.values())
    )
    for f in dataclasses.fields(rs.Sizes):
        bigger = dataclasses.replace(base, **{f.name: 2 * getattr(base, f.name)})
        e1 = rs.estimate(bigger)
        assert e1.memory_bytes >= e0.memory_bytes and e1.cpu_s >= e0.cpu_s, f.name


def test_estimate_from_inputs_is_monotone_in_nodes_and_iterations():
    """More nodes or more iterations of the same workload: a larger estimate."""
    w = load_workload("neo_model_a")
    est = [
        rs.estimate(rs.sizes_of_inputs(load_topology("zionex", nodes=n), w, it)).memory_bytes
        for n, it in ((1, 3), (16, 3), (256, 3), (256, 30))
    ]
    assert est == sorted(est) and len(set(est)) == 4


def test_trace_sizes_count_all_to_all_pairs(tiny_cluster):
    """The lowered tiny trace: every all-to-all adds its group size squared; ops are exact."""
    from zionsim.sim.run import build_trace

    trace, _ = build_trace(tiny_cluster, load_workload("tiny"))
    s = rs.sizes_of_trace(trace, iterations=3, passes=2)
    pairs = sum(len(c.ranks) ** 2 for c in trace.collectives if c.op == "all_to_all")
    assert s.pair_flows == pairs and s.ops == len(trace.ops) and s.op_runs == 6 * len(trace.ops)


def _fail(*_a, **_k):
    raise AssertionError("an expensive step ran before the guard refused")


@pytest.fixture
def no_expensive_steps(monkeypatch):
    """Building a cluster graph, planning, lowering or simulating fails the test."""
    import zionsim.dlrm.planner as planner
    import zionsim.sim.run as run
    from zionsim.hardware.cluster import Cluster

    monkeypatch.setattr(Cluster, "build", classmethod(_fail))
    monkeypatch.setattr(run, "simulate_trace", _fail)
    monkeypatch.setattr(run, "build_trace", _fail)
    for name in list(planner.PLANNERS):
        monkeypatch.setitem(planner.PLANNERS, name, _fail)


@pytest.mark.parametrize(
    "argv, says",
    [
        # a billion nodes is outside the input bounds, refused even before the estimate
        (["--workload", "tiny", "--nodes", "1000000000"], "outside the physical bound"),
        (["--workload", "neo_model_a", "--nodes", "2048"], "the limit is 1.07 GB"),
        # iterations past their bound are refused as input, as every run option is
        (["--workload", "tiny", "--nodes", "2", "--iterations", "1000000000000"], "outside the"),
    ],
)
def test_absurd_runs_are_refused_before_any_expensive_step(no_expensive_steps, argv, says, capsys):
    """`zionsim run` exits 2 with one line: the bound, or the estimate and the limit."""
    from zionsim.cli.main import main

    limit = "1GiB" if "1.07 GB" in says else "16GiB"
    assert main(["run", *argv, "--max-memory", limit]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err
    if "limit" in says:
        assert "--max-memory" in err and "of memory" in err


def test_run_point_refuses_before_building(no_expensive_steps):
    """The sweep path (run_point) applies the same guard."""
    from zionsim.sim.run import run_point

    with pytest.raises(ResourceError, match="limit is 1.07 GB"):
        run_point({"topology": "zionex", "workload": "neo_model_a", "nodes": 2048}, GIB)


def test_activations_alone_decide_before_planning(no_expensive_steps, tmp_path, capsys):
    """20,000 wide tables: activations overflow HBM whatever the plan; no planner runs."""
    from zionsim.cli.main import main

    wl = tmp_path / "wide.yaml"
    wl.write_text(
        "name: wide\nbatch_per_gpu: 4096\ndense_features: 64\n"
        "precision: {embedding: fp16, dense: tf32, communication: fp16}\n"
        "optimizer: {embedding: rowwise_adagrad, dense: adagrad}\n"
        "tables:\n  - {name: e, count: 20000, rows: 1000, dim: 128, pooling: 1}\n"
        "bottom_mlp: [64, 64]\ntop_mlp: [64, 1]\ninteraction: {kind: reduce, output_width: 64}\n"
    )
    assert main(["run", "--workload", str(wl), "--nodes", "1", "--max-memory", "none"]) == 2
    err = capsys.readouterr().err
    assert "activations" in err and "whatever the plan" in err


def test_tables_larger_than_the_whole_cluster_are_refused_up_front(no_expensive_steps):
    """neo_model_f (24 TB of rows) on one node: no plan can hold it."""
    with pytest.raises(CapacityError, match="whole cluster"):
        rs.check_inputs(load_topology("zionex", nodes=1), load_workload("neo_model_f"))


def test_a_run_within_the_limit_runs_and_no_limit_means_no_check(tmp_path):
    """The tiny world fits in 1 GiB and runs; `none` switches the guard off."""
    from zionsim.cli.main import main

    for limit in ("1GiB", "none"):
        out = tmp_path / limit
        args = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "2"]
        assert main([*args, "--no-plot", "--out", str(out), "--max-memory", limit]) == 0
        assert (out / "summary.json").is_file()


def test_trace_check_refuses_before_simulating(tiny_cluster, monkeypatch):
    """simulate_run with a limit below the estimate raises before the engine is called."""
    import zionsim.sim.run as run

    monkeypatch.setattr(run, "simulate_trace", _fail)
    with pytest.raises(ResourceError, match="this simulation needs about"):
        run.simulate_run(tiny_cluster, load_workload("tiny"), max_memory_bytes=1e6)


def test_memory_error_anywhere_is_one_line_exit_2(monkeypatch, capsys):
    """A MemoryError the guard did not foresee still ends in one line and status 2."""
    import zionsim.sim.run as run
    from zionsim.cli.main import main

    def oom(*_a, **_k):
        raise MemoryError("Unable to allocate 2.00 GiB for an array with shape (16384, 16384)")

    monkeypatch.setattr(run, "simulate_inputs", oom)
    assert main(["run", "--topology", TINY, "--workload", "tiny", "--max-memory", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zionsim: error: out of memory: Unable to allocate") and "\n" not in err


def test_collective_all_to_all_counts_its_flows(capsys):
    """`zionsim collective --op all_to_all` counts the flows it will hold: with a scale-up
    fabric its node pairs are flow classes and only the ranks' relay flows count; without one,
    a flow per pair (n²), which refuses 131,072 GPUs before building."""
    from zionsim.cli.main import main

    spec = load_topology("zionex", nodes=16384)
    assert rs.all_to_all_flows(spec, spec.gpus) == spec.gpus * 8
    assert rs.all_to_all_flows(spec, spec.gpus, matrix=np.ones((4, 4))) == 16
    flat = dataclasses.replace(spec, scale_up=dataclasses.replace(spec.scale_up, kind="none"))
    assert rs.all_to_all_flows(flat, flat.gpus) == flat.gpus**2
    assert rs.estimate(rs.Sizes(gpus=flat.gpus, pair_flows=flat.gpus**2)).memory_bytes > 64 * GIB
    argv = ["collective", "--op", "all_to_all", "--nodes", "16384", "--max-memory", "1GiB"]
    assert main(argv) == 2
    assert "gpus" in capsys.readouterr().err
