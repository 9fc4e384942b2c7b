"""Short DLRM runs in the flow model: no link above 100 % in the utilisation links.csv reports,
whatever overlaps (all-to-alls, bucketed all-reduces, UVM and sync traffic)."""

import numpy as np
import pytest

from tests.network.test_fidelity import random_cluster
from zionsim.dlrm.planner import PLANNERS
from zionsim.dlrm.workload import load_workload
from zionsim.sim.run import run_point, simulate_run


@pytest.mark.parametrize(
    "options",
    [
        {"topology": "zion", "nodes": 2, "workload": "mlperf_dlrm"},
        {"topology": "zion", "nodes": 4, "workload": "tiny", "sync": "shadow-ma"},
        {"topology": "zionex", "nodes": 2, "workload": "mlperf_dlrm_dcnv2"},
        {"topology": "dgx_h100", "nodes": 2, "workload": "tiny", "sync": "shadow-easgd"},
    ],
)
def test_dlrm_runs_keep_links_within_capacity(options):
    """Built-in topologies, 2 iterations: every link's utilisation is at most 1."""
    r = run_point({**options, "iterations": 2})
    assert r.links["utilisation"].max() <= 1 + 1e-9
    assert r.links["utilisation"].max() > 0  # the run moved data


def test_dlrm_runs_on_random_clusters_keep_links_within_capacity():
    """The tiny DLRM on 8 random clusters (tiers, oversubscription, NICs, link rates drawn)."""
    rng = np.random.default_rng(5)
    w = load_workload("tiny")
    for _ in range(8):
        c = random_cluster(rng)
        r = simulate_run(c, w, PLANNERS["greedy"](c, w), iterations=2)
        assert r.links["utilisation"].max() <= 1 + 1e-9, c.spec.raw
