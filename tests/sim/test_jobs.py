"""Several jobs on one fabric (``sim/jobs.py``): identity with ``zionsim run``, the physics of
sharing (conservation, capacity, disjoint jobs, max-min bounds), placement and weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from zionsim.io.scenario import scenario_from_dict
from zionsim.network.maxmin import maxmin_rates
from zionsim.sim.jobs import simulate_jobs
from zionsim.sim.run import run_point
from zionsim.sim.scenario import node_leaves, place

OVERSUB = ["scale_out.switch_radix=32", "scale_out.oversubscription=3"]


def _scenario(jobs, nodes=6, sets=OVERSUB):
    return scenario_from_dict(
        {"cluster": {"topology": "zionex", "nodes": nodes, "set": list(sets)}, "jobs": jobs}
    )


def _dump(summary: dict) -> str:
    return json.dumps(summary, sort_keys=True, default=str)


def test_one_job_over_the_cluster_is_zionsim_run():
    """A one-job scenario over every node gives run's summary, byte for byte."""
    sc = _scenario([{"name": "a", "workload": "tiny", "count": 2, "iterations": 3}], 2, [])
    res = simulate_jobs(sc)
    ref = run_point({"topology": "zionex", "nodes": 2, "workload": "tiny", "iterations": 3})
    assert _dump(res.shared["a"].summary) == _dump(ref.summary)
    assert res.jobs[0]["slowdown"] == 0.0


def test_schema_of_the_issue_runs():
    sc = scenario_from_dict(
        {
            "cluster": {"topology": "zionex", "nodes": 4, "set": ["scale_out.switch_radix=16"]},
            "jobs": [
                {"name": "a", "workload": "mlperf_dlrm", "nodes": [0, 2], "iterations": 4},
                {"name": "b", "workload": "mlperf_dlrm", "count": 2, "placement": "spread",
                 "seed": 1, "weight": 1},
            ],
        }
    )  # fmt: skip
    d = simulate_jobs(sc).to_dict()
    assert [j["nodes"] for j in d["jobs"]] == [[0, 2], [1, 3]]
    for j in d["jobs"]:
        for key in ("iteration_time_s", "samples_per_s", "alone_iteration_time_s", "slowdown"):
            assert np.isfinite(j[key])


def _contended(weight_b=1, iterations=8):
    return simulate_jobs(
        _scenario(
            [
                {"name": "a", "workload": "mlperf_dlrm", "nodes": [0, 3], "iterations": iterations},
                {"name": "b", "workload": "mlperf_dlrm", "nodes": [1, 4], "iterations": iterations,
                 "weight": weight_b},
            ]
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def contended():
    return _contended()


def test_jobs_sharing_uplinks_slow_each_other(contended):
    slow = [j["slowdown"] for j in contended.jobs]
    assert all(s > 0.05 for s in slow)
    assert contended.jobs[0]["waits_on"][0]["other_jobs_bytes"]["b"] > 0


def test_link_bytes_are_conserved(contended):
    """Per-job bytes add up to each link's total, and each job's bytes are what it put on
    the network alone (the same traffic, shared or not)."""
    links = contended.links
    assert np.allclose(links["bytes"], links["bytes:a"] + links["bytes:b"], rtol=1e-12)
    for name in ("a", "b"):
        alone = contended.alone[name].links["bytes"].to_numpy()
        assert np.allclose(links[f"bytes:{name}"], alone, rtol=1e-9)


def test_no_link_over_capacity(contended):
    assert contended.links["utilisation"].max() <= 1.0 + 1e-9
    for r in contended.shared.values():
        assert r.links["utilisation"].max() <= 1.0 + 1e-9


def test_weighted_maxmin_rates_respect_capacity_and_weights():
    """Random flows: no link over capacity, every flow bottlenecked, and on one shared link
    weights 3:1 split it 3:1."""
    rng = np.random.default_rng(0)
    routes = rng.integers(-1, 20, size=(200, 4)).astype(np.int32)
    cap = rng.uniform(1.0, 10.0, 20)
    w = rng.choice([1.0, 2.0, 5.0], 200)
    rate = maxmin_rates(routes, cap, w)
    load = np.zeros(20)
    for f, r in enumerate(routes):
        for e in r[r >= 0]:
            load[e] += rate[f]
    assert (load <= cap * (1 + 1e-9)).all()
    two = maxmin_rates(np.array([[0], [0]], dtype=np.int32), np.array([4.0]), np.array([3.0, 1.0]))
    assert two.tolist() == [3.0, 1.0]


def test_disjoint_jobs_do_not_slow_each_other():
    """Jobs on leaves of their own share no link: slowdown exactly 0."""
    res = simulate_jobs(
        _scenario(
            [
                {"name": "a", "workload": "mlperf_dlrm", "nodes": [0, 1], "iterations": 4},
                {"name": "b", "workload": "mlperf_dlrm", "nodes": [3, 4], "iterations": 4},
            ]
        )
    )
    assert [j["slowdown"] for j in res.jobs] == [0.0, 0.0]
    assert res.to_dict()["shared_links"] == 0


def test_slowdown_bounded_by_maxmin_share(contended):
    """Two alike jobs of equal weight each get at least half of every shared link, so their
    iterations take at most twice as long; at weight 3:1 the heavy job gets at least 3/4 (at
    most a third slower) and slows less than at equal weights, in iteration time and over the
    whole run."""
    assert all(j["slowdown"] <= 1.0 for j in contended.jobs)
    weighted = _contended(weight_b=3)
    a, b = weighted.jobs
    assert b["slowdown"] <= 1.0 / 3.0 + 1e-9
    assert b["slowdown"] < contended.jobs[1]["slowdown"]
    assert b["makespan_slowdown"] < contended.jobs[1]["makespan_slowdown"]
    assert b["makespan_slowdown"] <= 1.0 / 3.0 + 1e-9


def test_placement_policies():
    sc = _scenario(
        [
            {"name": "s", "workload": "tiny", "count": 2, "placement": "spread"},
            {"name": "p", "workload": "tiny", "count": 2, "placement": "packed"},
            {"name": "r", "workload": "tiny", "count": 1, "placement": "random", "seed": 3},
        ]
    )
    leaves = node_leaves(sc.cluster)
    got = place(sc)
    assert len({leaves[k] for k in got["s"]}) == 2  # one per leaf
    assert len({leaves[k] for k in got["p"]}) == 1  # fewest leaves
    assert len(set(got["p"]) | set(got["s"]) | set(got["r"])) == 5
    assert place(sc) == got  # seeded


def test_traffic_job_slows_and_is_slowed():
    res = simulate_jobs(
        _scenario(
            [
                {"name": "t", "workload": "mlperf_dlrm", "nodes": [0, 3], "iterations": 4},
                {"name": "c", "kind": "traffic", "src": ["t"], "dst": [4, 1],
                 "bytes": "2 GB", "period": "5 ms"},
            ]
        )
    )  # fmt: skip
    t, c = res.jobs
    assert c["bursts"] > 0 and c["bytes_sent"] > 0
    assert t["makespan_slowdown"] > 0.001 and c["slowdown"] > 0


def test_rank_templates_do_not_change_a_shared_run(contended, monkeypatch):
    """Alike ranks stepped once per job (classes never span jobs) give what every rank on its
    own gives, together and alone."""
    from zionsim.sim import templates

    monkeypatch.setattr(templates, "ENABLED", False)
    per_rank = _contended()
    for a, b in zip(contended.jobs, per_rank.jobs, strict=True):
        for key in ("iteration_time_s", "alone_iteration_time_s", "exposed_comm_s"):
            assert a[key] == pytest.approx(b[key], rel=1e-9)
    assert np.allclose(contended.links["bytes"], per_rank.links["bytes"], rtol=1e-9)
