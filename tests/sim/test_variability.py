"""Variability (``sim/variability.py``, ``sim/varied.py``): noise, stragglers, faults."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from zionsim.base.errors import InputError
from zionsim.dlrm.trace import Collective, Op, Trace
from zionsim.hardware.cluster import Cluster
from zionsim.sim.engine import simulate_trace
from zionsim.sim.results import Analysis
from zionsim.sim.run import run_point
from zionsim.sim.variability import lognormal_factors, variability_spec

TINY = {"topology": "zionex", "nodes": 2, "workload": "tiny", "stack": "bare"}


def _barrier_trace(ranks: int, nbytes: float) -> Trace:
    """Each rank: one memory kernel, then a small all-reduce of every rank (a barrier), both
    on the compute stream so the next iteration's kernel waits for the barrier."""
    ops = []
    for r in range(ranks):
        k = len(ops)
        ops.append(Op(k, r, "kernel", "memory", "optimizer", "compute", (), {"nbytes": nbytes}))
        ops.append(Op(k + 1, r, "barrier", "collective", "all_reduce", "compute", (k,),
                      {"coll": 0}))  # fmt: skip
    coll = Collective(0, "all_reduce", np.arange(ranks), 8.0)
    return Trace(ranks, ops, [coll], {"global_batch": ranks})


def test_barrier_mean_is_expected_max_of_lognormals():
    """E[iteration] = d · E[max of N iid lognormal(cv)] + the barrier's own time, E[max] by
    numerical integration of 1 - F(x)^N (the closed form of the expected maximum)."""
    cluster = Cluster.load("zionex", nodes=1)
    n, cv, iters = 8, 0.3, 600
    trace = _barrier_trace(n, 2e9)
    base = simulate_trace(cluster, trace, iterations=4)
    t0 = Analysis(base, 1).iteration_times()
    d = float(base.durations_s[0])
    c = float(t0.mean()) - d  # the barrier (collective) time, no noise on it
    spec = variability_spec({"kernel_cv": {"memory": cv}})
    rec = simulate_trace(cluster, trace, iterations=iters, variability=spec, seed=7)
    mean = float(Analysis(rec, 1).iteration_times().mean())
    s2 = np.log1p(cv * cv)
    f = stats.lognorm(s=np.sqrt(s2), scale=np.exp(-s2 / 2))
    e_max = integrate.quad(lambda x: 1 - f.cdf(x) ** n, 0, np.inf)[0]
    assert mean == pytest.approx(d * e_max + c, rel=0.02)
    assert e_max > 1.2  # the toy is not trivially the mean of one draw


def test_lognormal_factors_have_mean_one_and_cv():
    x = lognormal_factors(0.2, 200_000, np.random.default_rng(0))
    assert x.mean() == pytest.approx(1.0, abs=0.003)
    assert x.std() / x.mean() == pytest.approx(0.2, rel=0.02)


def test_zero_variance_reproduces_the_deterministic_run():
    plain = run_point(TINY).summary
    zero = run_point({**TINY, "variability.kernel_cv": 0.0, "samples": 3}).summary
    assert zero["iteration_time_s"] == plain["iteration_time_s"]
    d = zero["distribution"]["iteration_time_s"]
    assert d["p50"] == pytest.approx(plain["iteration_time_s"], rel=1e-3)
    assert "distribution" not in plain and "variability" not in plain


def test_no_variability_keeps_the_inputs_block():
    from zionsim.sim.inputs import resolve_inputs

    block = resolve_inputs(TINY).provenance("x")
    assert not {"variability", "fault", "samples"} & set(block["options"])


def test_noise_distribution_is_ordered_and_seeded():
    opts = {**TINY, "variability.kernel_cv": 0.2, "samples": 16}
    a = run_point(opts).summary["distribution"]
    t = a["iteration_time_s"]
    assert t["p50"] <= t["p95"] <= t["p99"]
    assert t["ci95"][0] < t["mean"] < t["ci95"][1]
    assert run_point(opts).summary["distribution"] == a  # same seed: same numbers
    other = run_point({**opts, "seed": 1}).summary["distribution"]
    assert other["iteration_time_s"]["mean"] != t["mean"]


@pytest.mark.parametrize(
    "stragglers",
    [
        [{"ranks": [0], "factor": 2.0}],
        [{"nodes": ["n1"], "factor": 1.5}],
        [{"fraction": 0.25, "factor": 3.0}],
        [{"ranks": [3], "factor": 1.0}],
    ],
)
def test_stragglers_never_speed_a_run_up(stragglers):
    base = run_point(TINY).summary["iteration_time_s"]
    s = run_point({**TINY, "variability.stragglers": stragglers}).summary
    assert s["iteration_time_s"] >= base * (1 - 1e-12)
    if stragglers[0]["factor"] > 1:
        assert s["iteration_time_s"] > base  # a 2x straggler slows the step
        assert s["straggler_wait_s"]["total"] > 0
        assert s["variability"]["straggler_ranks"]


def test_failed_nic_run_completes_and_is_slower():
    opts = {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2}
    base = run_point(opts).summary["iteration_time_s"]
    s = run_point({**opts, "fault": ["nic=n1:0"]}).summary
    assert s["iteration_time_s"] > base
    assert s["faults"]["rerouted_pairs"] > 0


@pytest.mark.parametrize("fault", ["nic=n0:3", "uplink=leaf0:0", "nic=n1:7"])
def test_faults_never_speed_a_run_up(fault):
    base = run_point(TINY).summary["iteration_time_s"]
    s = run_point({**TINY, "fault": [fault]}).summary
    assert s["iteration_time_s"] >= base * (1 - 1e-12)


def test_degraded_links_never_speed_a_run_up():
    opts = {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm", "iterations": 2}
    base = run_point(opts).summary["iteration_time_s"]
    s = run_point({**opts, "variability.links": [{"kind": "roce", "factor": 0.5}]}).summary
    assert s["iteration_time_s"] > base


def test_failed_node_stops_the_job_with_a_record():
    s = run_point({**TINY, "fault": ["node=n1"]}).summary
    assert s["status"] == "stopped"
    assert "n1" in s["stopped_reason"] and "8..15" in s["stopped_reason"]


@pytest.mark.parametrize(
    ("data", "fault", "match"),
    [
        ({"kernel_cv": -0.1}, (), "kernel_cv"),
        ({"stragglers": [{"ranks": [0], "factor": 0.5}]}, (), "factor >= 1"),
        ({"stragglers": [{"factor": 2.0}]}, (), "exactly one"),
        ({"links": [{"kind": "roce", "factor": 1.5}]}, (), "factor"),
        ({"host_hiccup": {"probability": 0.1, "duration": 5}}, (), "duration"),
        ({"kernal_cv": 0.1}, (), "unknown field"),
    ],
)
def test_bad_variability_is_refused(data, fault, match):
    with pytest.raises(InputError, match=match):
        variability_spec(data, "v.yaml", fault)


def test_host_hiccups_never_speed_a_run_up():
    base = run_point({**TINY, "stack": "torchrec"}).summary["iteration_time_s"]
    hic = {"probability": 0.5, "duration": "2 ms"}
    s = run_point({**TINY, "stack": "torchrec", "variability.host_hiccup": hic}).summary
    assert s["iteration_time_s"] > base


def test_compare_names_the_straggler_wait():
    from zionsim.studies.compare import attribute, stragglers

    a = run_point(TINY).summary
    b = run_point({**TINY, "variability.stragglers": [{"ranks": [3], "factor": 2.0}]}).summary
    assert stragglers(a, a) is None
    w = stragglers(a, b)
    assert w["b_straggler_ranks"] == [3] and w["b_wait_s"] > w["a_wait_s"] == 0.0
    t = attribute(a, b).set_index("component")
    assert t.loc["imbalance", "delta_s"] > 0  # the slow rank's compute beyond the mean


def test_resolving_leaves_the_callers_options_untouched():
    """Nested variability keys set over a mapping (a sweep's base and grid) copy it."""
    import copy

    from zionsim.sim.inputs import resolve_inputs

    goodput = {"storage_bw": "10 GB/s", "relaunch": "5 min"}
    opts = {**TINY, "variability.goodput": goodput,
            "variability.goodput.checkpoint_interval": "1 h",
            "variability.stragglers": {"ranks": [1], "factor": 2.0}}  # fmt: skip
    before = copy.deepcopy(opts)
    spec = resolve_inputs(opts).variability
    assert opts == before
    assert spec.goodput["checkpoint_interval"] == "1 h" and spec.stragglers[0].ranks == (1,)


def test_deterministic_realisations_are_alike():
    """Stragglers named by rank draw nothing: every realisation is the first."""
    opts = {**TINY, "variability.stragglers": {"ranks": [1], "factor": 2.0}, "samples": 3}
    d = run_point(opts).summary["distribution"]["iteration_time_s"]
    assert d["ci95"][0] == pytest.approx(d["ci95"][1]) == pytest.approx(d["mean"])
