"""Sync modes: ShadowSync never blocks training; foreground pauses; bytes and hot spots add up."""

import dataclasses

import pytest

from tests.conftest import TINY
from tests.sim.test_run import IDEAL
from zionsim.base.errors import InputError
from zionsim.dlrm.sync import sync_spec
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import simulate_run

ITER = 9


def _run(mode, overrides=(), every=4, **kw):
    c = Cluster.load(TINY, overrides=list(overrides))
    # the default plan replicates tiny's tables: sync is the only network traffic
    kw = {"stack": "bare", **kw}  # the sync's own traffic, no host time to hide it
    return simulate_run(
        c, load_workload("tiny"), iterations=ITER, warmup=1, sync=mode, sync_every=every, **kw
    ).summary


def test_shadow_never_blocks_the_compute_stream():
    """No compute op waits on sync in shadow mode; no sync time on the critical path."""
    s = _run("shadow-ma")
    assert s["breakdown_s"]["sync"] == 0.0 and "sync" not in s["exposed_comm_by_collective_s"]
    assert s["sync"]["rounds_total"] > 0


def test_ideal_network_shadow_equals_foreground():
    """With an infinitely fast network, shadow and foreground-every-K train equally fast."""
    for method in ("ma", "easgd"):
        shadow = _run(f"shadow-{method}", IDEAL)["samples_per_s"]
        fore = _run(f"foreground-{method}", IDEAL)["samples_per_s"]
        assert shadow == pytest.approx(fore, rel=1e-6)  # 1e18 B/s is not quite infinite


def test_slow_network_shadow_keeps_throughput_foreground_loses_it():
    """Slow NICs: shadow's throughput holds (its longer rounds only slow the kernels they overlap,
    by at most the stack's interference factor) and its sync gap grows; foreground slows down."""
    slow = ["scale_out.nic_bw=0.05Gbps"]
    fast_sh, slow_sh = _run("shadow-ma"), _run("shadow-ma", slow)
    fast_fg, slow_fg = _run("foreground-ma"), _run("foreground-ma", slow)
    assert slow_sh["samples_per_s"] <= fast_sh["samples_per_s"]
    assert slow_sh["samples_per_s"] >= fast_sh["samples_per_s"] / (1 + 0.189)
    assert (
        slow_sh["sync"]["sync_gap_iterations"]["mean"]
        > fast_sh["sync"]["sync_gap_iterations"]["mean"]
    )
    assert slow_fg["samples_per_s"] < 0.9 * fast_fg["samples_per_s"]
    assert slow_fg["sync"]["foreground_slowdown"] > fast_fg["sync"]["foreground_slowdown"]


def test_foreground_gap_is_k():
    """Foreground-every-K: each trainer syncs every K iterations."""
    s = _run("foreground-bmuf", every=3)["sync"]
    assert s["sync_gap_iterations"] == {"mean": 3.0, "p50": 3.0, "p95": 3.0}
    assert s["rounds_per_trainer"] == ITER // 3


def test_easgd_bytes_are_params_times_rounds_times_two():
    """EASGD: every round pushes and pulls the parameters: 2·P bytes per trainer round."""
    s = _run("foreground-easgd", every=2)
    w = load_workload("tiny")
    params_bytes = (w.dense_params + w.embedding_params) * 4  # tiny tables are replicated (DP)
    assert s["sync"]["sync_bytes"] == pytest.approx(2 * params_bytes * s["sync"]["rounds_total"])


def test_model_averaging_bytes_at_least_a_ring():
    """MA all-reduces the parameters: at least the ring's 2(n−1)/n·P per trainer and round."""
    s = _run("foreground-ma", every=2)
    w = load_workload("tiny")
    p = (w.dense_params + w.embedding_params) * 4
    n = 4
    assert s["sync"]["sync_bytes"] >= 2 * (n - 1) / n * p * s["sync"]["rounds_total"] * 0.999


def test_easgd_traffic_converges_on_the_servers(tmp_path):
    """EASGD with one server: the link into that server host carries every push (a service
    host by default; the DRAM of a training host with ``placement: trainers``)."""
    from zionsim.hardware.cluster import Cluster as C
    from zionsim.sim.run import simulate_run as sr

    c = C.load(TINY)
    r = sr(
        c,
        load_workload("tiny"),
        iterations=ITER,
        warmup=1,
        sync="foreground-easgd",
        sync_every=2,
        sync_servers=1,
    )
    links = r.links.set_index(["src", "dst"])
    into_server = links.loc[("fe", "svc15/cpu"), "bytes"]  # the last of the 16 service hosts
    into_other = links.loc[("fe", "svc0/cpu"), "bytes"]
    assert into_server >= r.summary["sync"]["sync_bytes"] / 2 * 0.999
    assert into_other == 0
    w = load_workload("tiny")
    w = dataclasses.replace(w, sync={"placement": "trainers"})
    r = sr(c, w, iterations=ITER, warmup=1, sync="foreground-easgd", sync_every=2, sync_servers=1)
    links = r.links.set_index(["src", "dst"])
    into_server = links.loc[("n0/cpu0", "n0/dram0"), "bytes"]
    into_other = links.loc[("n1/cpu0", "n1/dram0"), "bytes"]
    assert into_server >= r.summary["sync"]["sync_bytes"] / 2 * 0.999
    assert into_other < into_server / 10
    assert links.loc[("fe", "svc15/cpu"), "bytes"] == 0


def test_node_trainers_all_reduce_inside_nodes():
    """A node as trainer: dense all-reduce every iteration inside nodes, shards synced across."""
    s = _run("foreground-ma", sync_trainer="node")
    assert s["busy_s"]["all_reduce"] > 0 and s["sync"]["rounds_per_trainer"] == ITER // 4


def test_bad_sync_options():
    """Unknown modes and bad K are clear errors."""
    with pytest.raises(InputError, match="unknown sync mode"):
        sync_spec("sideways")
    with pytest.raises(InputError, match="sync.every"):
        sync_spec("foreground-ma", every=0)


def test_shadow_rounds_slow_the_kernels_they_overlap():
    """A background model-averaging round is NCCL work: with interference (the default stack's
    compute slowdown, here without its host time) a slow round costs the foreground something;
    without, nothing."""
    from zionsim.dlrm.stack import stack_from_dict

    slow = ["scale_out.nic_bw=0.05Gbps"]
    clean = stack_from_dict({"name": "clean", "interference": {"compute_slowdown": 0.0}})
    noisy = stack_from_dict({"name": "noisy", "interference": {"compute_slowdown": 0.189}})
    with_interference = _run("shadow-ma", slow, stack=noisy)["sync"]["foreground_slowdown"]
    without = _run("shadow-ma", slow, stack=clean)["sync"]["foreground_slowdown"]
    assert with_interference > 0.0
    assert without == pytest.approx(0.0, abs=1e-12)
