"""Flow classes (network.flows assumption 6): PXN's node-pair flows as one row per rail, colour
pair and fabric relation must give what one flow each gives, alone and next to other traffic."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import simpy
import yaml

from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import cluster_from_dict
from zionsim.network import nccl, point_to_point
from zionsim.network.flows import FlowNetwork
from zionsim.network.peer_bytes import OuterSum

from .test_fidelity import TINY


def _cluster(rng, nodes: int, tiers: int) -> Cluster:
    """A multi-leaf cluster of ``nodes`` nodes (radix, NICs, rails and oversubscription drawn)."""
    while True:
        d = copy.deepcopy(yaml.safe_load(open(TINY)))
        d["nodes"] = nodes
        d["gpus_per_node"] = int(rng.choice([2, 4]))
        d["scale_out"] = {
            **d["scale_out"],
            "nics_per_node": int(rng.choice([1, 2, 4])),
            "tiers": tiers,
            "switch_radix": int(rng.choice([4, 8])),
            "oversubscription": float(rng.choice([1.0, 2.0])),
            "rail_optimized": bool(rng.random() < 0.5),
        }
        try:
            return Cluster.build(cluster_from_dict(d, TINY))
        except InputError:
            continue


def _matrix(rng, n: int, g: int) -> OuterSum:
    """Per-rank vectors with few distinct values (so that nodes share colours), one node odd."""
    row = np.full(n, rng.choice([1e5, 3e5]))
    col = np.tile(rng.choice([0.0, 2e5], g), n // g)
    row[:g] = 7e5  # node 0 sends more: a colour of its own
    return OuterSum(row=row, col=col)


def _run(cluster, matrix, classes: bool, other: str | None, monkeypatch, ranks=None):
    """(finish time of each collective, bytes per link, class rows split) of an all-to-all,
    with ``other`` (a ring all_reduce, or a send/recv between two nodes) started part-way."""
    monkeypatch.setattr(point_to_point, "CLASSES", classes)
    monkeypatch.setattr(point_to_point, "CLASSES_FROM", 0)  # classes however small
    env = simpy.Environment()
    net = FlowNetwork(env, cluster.router.capacity_Bps, router=cluster.router)
    ends = {}

    def go(name, prep, delay):
        yield env.timeout(delay)
        yield from nccl.execute(env, net, prep)
        ends[name] = env.now

    ranks = cluster.gpus if ranks is None else ranks
    choice = nccl.choose(cluster, "all_to_all", ranks, 0, matrix=matrix)
    assert classes or choice.schedule.phases[0].classes is None
    a2a = nccl.prepare(cluster, choice)
    env.process(go("a2a", a2a, 0.0))
    if other == "ring":
        ring = nccl.choose(cluster, "all_reduce", cluster.gpus, 2**22, algorithm="ring")
        env.process(go("ring", nccl.prepare(cluster, ring), 1e-5))
    elif other == "send_recv":
        ranks = cluster.gpus[[1, len(cluster.gpus) - 1]]
        env.process(
            go("p2p", nccl.prepare(cluster, nccl.choose(cluster, "send_recv", ranks, 2**24)), 2e-5)
        )
    env.run()
    return ends, net.stats.link_bytes, net.stats.splits, net.stats.flows


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("other", [None, "ring", "send_recv"])
def test_classes_give_the_per_flow_answer(seed, other, monkeypatch):
    """Same finish times, bytes per link and flow count as one flow per node pair and rail, on
    random 2- and 3-tier fabrics, alone and with other traffic that breaks the symmetry (then
    rows are split, and the answer still agrees)."""
    rng = np.random.default_rng(seed)
    c = _cluster(rng, nodes=int(rng.choice([6, 9, 12])), tiers=int(rng.choice([2, 3])))
    m = _matrix(rng, len(c.gpus), c.spec.gpus_per_node)
    ends, link_bytes, _, flows = _run(c, m, True, other, monkeypatch)
    ends_f, link_bytes_f, _, flows_f = _run(c, m, False, other, monkeypatch)
    assert ends.keys() == ends_f.keys()
    for k in ends:
        assert ends[k] == pytest.approx(ends_f[k], rel=1e-9), k
    np.testing.assert_allclose(link_bytes, link_bytes_f, rtol=1e-9, atol=1e-3)
    assert flows == flows_f


@pytest.mark.parametrize("seed", range(4))
def test_rail_groups_give_the_per_flow_answer(seed, monkeypatch):
    """The same GPUs of every node (one rail, as TWRW's all-to-alls; or two of them): classes
    give the per-flow answer, next to a ring all_reduce."""
    rng = np.random.default_rng(100 + seed)
    c = _cluster(rng, nodes=int(rng.choice([9, 12])), tiers=int(rng.choice([2, 3])))
    g = c.spec.gpus_per_node
    lanes = [0] if seed % 2 == 0 or g < 2 else [0, g - 1]
    ranks = c.gpus.reshape(-1, g)[:, lanes].ravel()
    k = len(ranks) // len(lanes)
    row = np.full(len(ranks), 2e5)
    row[: len(lanes)] = 5e5  # node 0's GPUs send more
    m = OuterSum(row=row, col=np.zeros(len(ranks)))
    got = _run(c, m, True, "ring", monkeypatch, ranks)
    want = _run(c, m, False, "ring", monkeypatch, ranks)
    for k_ in want[0]:
        assert got[0][k_] == pytest.approx(want[0][k_], rel=1e-9), k_
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-3)
    assert got[3] == want[3] and k >= 9
    monkeypatch.setattr(point_to_point, "CLASSES", True)
    (phase,) = nccl.choose(c, "all_to_all", ranks, 0, matrix=m).schedule.phases
    assert phase.classes is not None  # the classes ran, not one flow each


def test_other_traffic_splits_rows_and_the_answer_holds(monkeypatch):
    """A send/recv between two nodes started beside a uniform all-to-all on 16 ZionEX nodes
    loads two NICs more than the others: the check splits class rows, and finish times and link
    bytes stay the per-flow ones."""
    c = Cluster.load("zionex", nodes=16)
    m = OuterSum(row=np.full(len(c.gpus), 1e6), col=np.zeros(len(c.gpus)))
    ends, link_bytes, splits, flows = _run(c, m, True, "send_recv", monkeypatch)
    ends_f, link_bytes_f, _, flows_f = _run(c, m, False, "send_recv", monkeypatch)
    assert splits > 0 and flows == flows_f
    for k in ends_f:
        assert ends[k] == pytest.approx(ends_f[k], rel=1e-9), k
    np.testing.assert_allclose(link_bytes, link_bytes_f, rtol=1e-9, atol=1e-3)


def test_an_all_to_all_alone_travels_as_a_few_rows(monkeypatch):
    """A uniform all-to-all on 16 ZionEX nodes (4 leaves): 8 rails × 2 relations, no split."""
    c = Cluster.load("zionex", nodes=16)
    monkeypatch.setattr(point_to_point, "CLASSES_FROM", 0)
    sched = nccl.choose(c, "all_to_all", c.gpus, 2**26).schedule
    (phase,) = sched.phases
    assert phase.classes is not None and len(phase.classes.classes) == 16
    m = OuterSum(row=np.full(len(c.gpus), 1e6), col=np.zeros(len(c.gpus)))
    *_, splits, flows = _run(c, m, True, None, monkeypatch)
    assert splits == 0 and flows == 16 * 15 * 8 + 16 * 8 * 7  # node pairs × rails + relays


def test_class_route_counts_every_member_path(monkeypatch):
    """A class row's edges and fractions are the member flows' own paths, counted: each member
    crosses exactly one edge of each position (group)."""
    rng = np.random.default_rng(11)
    for tiers in (2, 3):
        c = _cluster(rng, nodes=12, tiers=tiers)
        r, g = c.router, c.spec.gpus_per_node
        devs = c.gpus.reshape(-1, g)[:, 1 % g]
        for rel in (0, 1, 2):
            src, dst = devs[rng.random(len(devs)) < 0.6], devs[rng.random(len(devs)) < 0.7]
            if not len(src) or not len(dst):
                continue
            edges, frac, group, members = r.class_route(src, dst, rel)
            s, d = r.class_pairs(src, dst, rel)
            assert members == len(s)
            if not members:
                continue
            paths = r.routes(s, d)
            want = np.bincount(paths[paths >= 0], minlength=len(r.capacity_Bps))
            got = np.bincount(edges, weights=frac * members, minlength=len(want))
            np.testing.assert_allclose(got, want, rtol=1e-12)
            for pos in np.unique(group):
                at = paths[:, pos]
                assert (at >= 0).all()
                assert np.sum(frac[group == pos]) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(3))
def test_remembered_solves_give_the_fresh_answer(seed, monkeypatch):
    """Rate solves kept by all they read (``flows.REUSE_SOLVES``) give the very numbers of
    solving anew, class rows split included: the same all-to-all beside a ring run twice with
    the memo (the second run from what the first kept) and once without."""
    from zionsim.network import flows

    rng = np.random.default_rng(seed)
    c = _cluster(rng, nodes=int(rng.choice([6, 9])), tiers=2)
    m = _matrix(rng, len(c.gpus), c.spec.gpus_per_node)
    monkeypatch.setattr(flows, "_SOLVES", {})
    monkeypatch.setattr(flows, "REUSE_SOLVES", False)
    fresh = _run(c, m, True, "ring", monkeypatch)
    monkeypatch.setattr(flows, "REUSE_SOLVES", True)
    first = _run(c, m, True, "ring", monkeypatch)
    kept = len(flows._SOLVES)
    again = _run(c, m, True, "ring", monkeypatch)
    assert kept and len(flows._SOLVES) == kept  # the second run solved nothing anew
    for got in (first, again):
        assert got[0] == fresh[0]  # finish times, to the bit
        assert np.array_equal(got[1], fresh[1])  # bytes per link
        assert got[2:] == fresh[2:]  # rows split, flows
