"""DLRM runs end to end: bounds, ideal network, monotonicity, replay, determinism, errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import TINY
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.io.files import read_trace, write_trace
from zionsim.sim.run import build_trace, simulate_run

IDEAL = [
    "scale_up.link_bw=1e18 B/s",
    "pcie.bw=1e18 B/s",
    "pcie.uplink_bw=1e18 B/s",
    "scale_out.nic_bw=1e18 B/s",
    "host.socket_link_bw=1e18 B/s",
    "host.dram_bw=1e18 B/s",
    "collectives.latency_scale=0",
    "links.nvlink.latency=0",
    "links.pcie.latency=0",
    "links.roce.latency=0",
    "links.upi.latency=0",
    "links.dram.latency=0",
    "front_end.nic_bw=1e18 B/s",
    "front_end.latency=0",
    "front_end.server.nic_bw=1e18 B/s",
    "front_end.server.dram_bw=1e18 B/s",
]


def _tw_plan(w, ranks):
    return Plan("tw", tuple(Shard(t.index, "TW", (t.index % ranks,)) for t in w.tables))


def _run(overrides=(), workload="tiny", **kw):
    """A run of the model's own work (the ``bare`` stack: no host time unless asked)."""
    c = Cluster.load(TINY, overrides=list(overrides))
    w = load_workload(workload)
    return simulate_run(c, w, _tw_plan(w, len(c.gpus)), **{"stack": "bare", **kw})


def test_breakdown_sums_to_iteration_time():
    """The critical-path categories add up to the iteration time."""
    s = _run().summary
    assert sum(s["breakdown_s"].values()) == pytest.approx(s["iteration_time_s"], rel=1e-9)


#: iterations overlap (the next input all-to-all is issued during the backward) and share links
#: max-min fairly, so consecutive iterations of the tiny run differ by up to ~1 µs in 9.3 ms
JITTER = 1e-4


def test_iteration_time_between_bounds():
    """Compute-stream work of the busiest rank ≤ iteration ≤ everything run one after another
    (the lower bound compares one iteration with the mean, to within :data:`JITTER`)."""
    r = _run()
    ev = r.events[(r.events.iteration == 2) & (r.events["rank"] >= 0)]
    compute = ev[ev.stream == "compute"].groupby("rank").duration_s.sum().max()
    colls = sum(c["time_s"] for c in r.summary["collectives"])
    t = r.summary["iteration_time_s"]
    assert compute <= t * (1 + JITTER)
    assert t <= ev[ev.stream == "compute"].groupby("rank").duration_s.sum().max() + colls + 1e-9


def test_ideal_network_exposes_no_communication():
    """Bandwidth → ∞ and latency → 0: no exposed communication, and the run is no slower than
    the tiny cluster's own (whose FP32 GEMMs may hide its communication) and faster than one
    whose communication is exposed (0.1 GB/s links)."""
    ideal, real = _run(IDEAL).summary, _run().summary
    slow = _run(["scale_up.link_bw=0.1 GB/s", "scale_out.nic_bw=0.1 GB/s"]).summary
    assert ideal["exposed_comm_s"] == pytest.approx(0.0, abs=1e-12)
    assert ideal["iteration_time_s"] <= real["iteration_time_s"] * (1 + 1e-12)  # float sums
    assert slow["exposed_comm_s"] > 0
    assert ideal["iteration_time_s"] < slow["iteration_time_s"]


def test_faster_nics_never_slow_an_iteration():
    """Doubling NIC bandwidth never lengthens the iteration."""
    base = _run().summary["iteration_time_s"]
    fast = _run(["scale_out.nic_bw=200Gbps"]).summary["iteration_time_s"]
    assert fast <= base * (1 + 1e-12)  # float sums


def test_replay_equals_in_memory(tmp_path):
    """A trace written to a file and replayed gives the same summary."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    trace, _ = build_trace(c, w, _tw_plan(w, 4))
    write_trace(tmp_path / "t.json", trace)
    a = simulate_run(c, trace=trace).summary
    b = simulate_run(c, trace=read_trace(tmp_path / "t.json")).summary
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_warmup_is_excluded():
    """With alike iterations, measured time does not depend on the warm-up count (to within
    the iterations' :data:`JITTER`)."""
    a = _run(iterations=4, warmup=1).summary["iteration_time_s"]
    b = _run(iterations=4, warmup=2).summary["iteration_time_s"]
    assert a == pytest.approx(b, rel=JITTER)


def test_default_plan_replicates_tiny_tables():
    """The default plan keeps tables under 1 MiB data-parallel: no all-to-all at all."""
    c = Cluster.load(TINY)
    r = simulate_run(c, load_workload("tiny"))
    assert {x["op"] for x in r.summary["collectives"]} == {"all_reduce"}
    assert r.summary["breakdown_s"]["all_to_all"] == 0.0


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "zionsim.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def test_cli_run_writes_everything_deterministically(tmp_path):
    """Two runs: every file but timing.json byte-identical; all promised files present."""
    outs = []
    for i in range(2):
        d = tmp_path / f"r{i}"
        r = _cli("run", "--topology", TINY, "--workload", "tiny", "--out", str(d))
        assert r.returncode == 0, r.stderr
        outs.append(d)
    names = {
        "summary.json",
        "timing.json",
        "events.parquet",
        "breakdown.csv",
        "links.csv",
        "memory.csv",
        "trace.json",
        "breakdown.png",
    }
    assert names <= {p.name for p in outs[0].iterdir()}
    for n in names - {"timing.json"}:
        assert (outs[0] / n).read_bytes() == (outs[1] / n).read_bytes(), n
    s = json.loads((outs[0] / "summary.json").read_text())
    for key in (
        "topology",
        "nodes",
        "gpus",
        "workload",
        "global_batch",
        "iteration_time_s",
        "samples_per_s",
        "breakdown_s",
        "busy_s",
        "exposed_comm_s",
        "critical_path",
        "memory",
        "events",
    ):
        assert key in s
    assert s["samples_per_s"] == pytest.approx(s["global_batch"] / s["iteration_time_s"])


def test_neo_model_f_too_big_for_two_nodes():
    """Neo model F (24 TB) cannot fit 2 nodes' HBM and DRAM: one clear line, exit 2."""
    r = _cli("run", "--workload", "neo_model_f", "--nodes", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1
    # decided before planning: all the rows exceed all the HBM and DRAM (sim/resources.py)
    assert "tables need 23.99 TB but the whole cluster has 3.64 TB" in r.stderr


def test_hbm_capacity_error_names_gpu(tmp_path):
    """A plan file pinning a too-large table in HBM names the GPU, bytes needed and available."""
    plan = tmp_path / "p.yaml"
    plan.write_text(
        "name: pinned\ntables:\n"
        + "".join(f"- {{table: t{i:02d}, sharding: TW, ranks: [0]}}\n" for i in range(26))
    )
    r = _cli("run", "--workload", "mlperf_dlrm_dcnv2", "--nodes", "2", "--plan", str(plan))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "n0/gpu0 needs" in r.stderr and "GB of HBM" in r.stderr and "has 40.0 GB" in r.stderr


def test_global_batch_option(tmp_path):
    """--global-batch sets the per-GPU batch; a non-multiple is an error."""
    out = str(tmp_path / "t.json")
    r = _cli(
        "trace", "--topology", TINY, "--workload", "tiny", "--global-batch", "256", "--out", out
    )
    assert r.returncode == 0, r.stderr
    assert read_trace(out).meta["global_batch"] == 256
    r = _cli("trace", "--topology", TINY, "--workload", "tiny", "--global-batch", "3", "--out", out)
    assert r.returncode == 2 and "not a multiple" in r.stderr


def test_events_have_positive_durations():
    """Every recorded span ends at or after it starts."""
    ev = _run().events
    assert (np.asarray(ev.duration_s) >= 0).all()


def test_neo_model_f_runs_through_uvm_on_16_nodes():
    """Neo model F on 16 ZionEX nodes runs, with host transfers on its critical path."""
    c = Cluster.load("zionex", nodes=16)
    w = load_workload("neo_model_f")
    from zionsim.dlrm.planner import PLANNERS

    plan = PLANNERS["greedy"](c, w)
    assert any(s.tier == "uvm" for s in plan.shards)
    s = simulate_run(c, w, plan, iterations=2, warmup=1).summary
    assert s["breakdown_s"]["host_transfer"] > 0
    assert s["memory"]["host_dram_bytes_max"] > 0
    assert s["memory"]["hbm_bytes_max"] <= c.spec.gpu.hbm_bytes


@pytest.mark.parametrize(
    "options, match",
    [
        ({"iterations": 2.7}, "iterations: expected an integer"),
        ({"fused": "false"}, "fused: expected true or false"),
        ({"nodes": float("inf")}, "nodes: expected an integer"),
        ({"global_batch": -128}, "global_batch: must be >= 1"),
        ({"warmup": 3, "iterations": 3}, "warmup 3 leaves no iteration"),
        ({"workload": 5}, "workload: expected a string"),
        ({"sync_period_s": float("nan")}, "sync_period_s"),
        ({"bogus": 1}, "unknown run option 'bogus'"),
        ({"fidelity": "analytic"}, "fidelity: run option 'fidelity' .* was removed"),
        ({"fidelity": "flow"}, "the flow model .* is the only network model"),
    ],
)
def test_run_options_are_typed(options, match):
    """Sweep and run_point options are read with their types: 2.7 iterations is not 2 and the
    string "false" is not a boolean (both used to run)."""
    from zionsim.base.errors import InputError
    from zionsim.sim.run import run_point

    base = {"topology": TINY, "workload": "tiny", "iterations": 1, "warmup": 0}
    with pytest.raises(InputError, match=match):
        run_point({**base, **options})
