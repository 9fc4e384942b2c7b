"""Network physics: max-min fairness, capacity, conservation, agreement with the reservation
oracle."""

import numpy as np
import pytest
import simpy

from tests.network.reservation_oracle import ReservationNetwork
from zionsim.network.flows import FlowNetwork
from zionsim.network.maxmin import maxmin_rates


def _run(net_cls, cap, routes, nbytes, lat=0.0):
    env = simpy.Environment()
    net = net_cls(env, np.asarray(cap, dtype=float))
    ev = net.transfer(
        np.asarray(routes), np.asarray(nbytes, dtype=float), np.full(len(nbytes), lat)
    )
    env.run()
    return ev.value, net


def test_two_flows_on_one_link_each_get_half():
    """Two flows on one 10 B/s link each get 5 B/s."""
    rates = maxmin_rates(np.array([[0], [0]]), np.array([10.0]), np.ones(2))
    assert rates.tolist() == [5.0, 5.0]


def test_maxmin_textbook_case():
    """The bottleneck link fixes its flows first; the rest share what is left."""
    routes = np.array([[0, -1], [0, 1], [1, 2], [2, -1]])
    rates = maxmin_rates(routes, np.array([10.0, 10.0, 4.0]), np.ones(4))
    assert rates.tolist() == [5.0, 5.0, 2.0, 2.0]


def test_no_link_above_capacity():
    """Random flows never load a link past its capacity, and every flow is bottlenecked."""
    rng = np.random.default_rng(1)
    cap = rng.uniform(1, 10, 30)
    routes = np.array([rng.permutation(30)[:5] for _ in range(200)])  # distinct links per path
    routes[:, 1:] = np.where(rng.random((200, 4)) < 0.8, routes[:, 1:], -1)
    rates = maxmin_rates(routes, cap, np.ones(200))
    load = np.zeros(30)
    for r, x in zip(routes, rates, strict=True):
        for e in set(r[r >= 0]):
            load[e] += x
    assert (load <= cap * (1 + 1e-9)).all()
    saturated = load >= cap * (1 - 1e-9)
    for r in routes:  # max-min: each flow crosses at least one saturated link
        assert saturated[r[r >= 0]].any()


def test_weighted_flow_equals_its_members():
    """A merged flow of weight 3 finishes when 3 separate identical flows would."""
    t_merged, _ = _run(FlowNetwork, [10.0], [[0]], [30.0])
    env = simpy.Environment()
    net = FlowNetwork(env, np.array([10.0]))
    ev = net.transfer(np.array([[0]]), np.array([30.0]), np.zeros(1), weight=np.array([3.0]))
    net.transfer(np.array([[0]]), np.array([10.0]), np.zeros(1))
    env.run()
    assert ev.value == pytest.approx(4.0)  # gets 3/4 of the link: 30 B at 7.5 B/s
    assert t_merged == pytest.approx(3.0)


def test_conservation_of_bytes():
    """Every byte submitted is carried once by every link of its path."""
    routes = np.array([[0, 1], [1, 2], [2, -1]])
    _, net = _run(FlowNetwork, [5.0, 5.0, 5.0], routes, [10.0, 20.0, 30.0])
    assert net.stats.link_bytes.tolist() == [10.0, 30.0, 50.0]


def test_flow_and_reservation_agree_without_contention():
    """With disjoint paths the flow model and the reservation oracle agree (well within 1 %)."""
    routes = np.array([[0, 1], [2, -1], [3, 4]])
    cap, nbytes = [8.0, 4.0, 2.0, 16.0, 16.0], [40.0, 10.0, 160.0]
    t_flow, _ = _run(FlowNetwork, cap, routes, nbytes, lat=0.5)
    t_res, _ = _run(ReservationNetwork, cap, routes, nbytes, lat=0.5)
    assert t_flow == pytest.approx(t_res, rel=1e-9)
    assert t_flow == pytest.approx(10.5)


def test_later_flow_shares_then_speeds_up():
    """A flow that starts later shares the link, then runs alone after the first ends."""
    env = simpy.Environment()
    net = FlowNetwork(env, np.array([10.0]))
    out = {}

    def second():
        yield env.timeout(1.0)
        out["b"] = yield net.transfer(np.array([[0]]), np.array([20.0]), np.zeros(1))

    a = net.transfer(np.array([[0]]), np.array([20.0]), np.zeros(1))
    env.process(second())
    env.run()
    assert a.value == pytest.approx(3.0)  # 10 B alone, then 10 B at half rate
    assert out["b"] == pytest.approx(4.0)


def test_more_bandwidth_never_slower():
    """Scaling every capacity up never lengthens a transfer."""
    rng = np.random.default_rng(3)
    routes = rng.integers(0, 6, (40, 3))
    nbytes = rng.uniform(1, 100, 40)
    cap = rng.uniform(1, 10, 6)
    t1, _ = _run(FlowNetwork, cap, routes, nbytes)
    t2, _ = _run(FlowNetwork, cap * 1.5, routes, nbytes)
    assert t2 <= t1


def test_zero_byte_flow_costs_latency_only():
    """A zero-byte message arrives after its latency."""
    t, _ = _run(FlowNetwork, [1.0], [[0]], [0.0], lat=2e-6)
    assert t == pytest.approx(2e-6)


def _reference_maxmin(routes, capacity, weight, cap):
    """Progressive filling with a full pass over every (flow, hop) each round (the plain form
    that ``maxmin_rates`` restricts to the unfixed flows)."""
    n_links, hops = len(capacity), routes.shape[1]
    flat = np.where(routes >= 0, routes, n_links)
    rate = np.zeros(len(routes))
    active = (routes >= 0).any(axis=1)
    rate[~active] = np.minimum(np.inf, cap[~active])
    remaining = np.append(capacity.astype(float), np.inf)
    while active.any():
        w = np.where(active, weight, 0.0)
        load = np.bincount(flat.ravel(), weights=np.repeat(w, hops), minlength=n_links + 1)
        load[n_links] = 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(load > 0, remaining / load, np.inf)
        own = np.where(active, cap / weight, np.inf)
        level = min(share.min(), own.min())
        hit = active & (
            (share <= level * (1 + 1e-9))[flat].any(axis=1) | (own <= level * (1 + 1e-9))
        )
        rate[hit] = level * weight[hit]
        used = np.bincount(
            flat[hit].ravel(), weights=np.repeat(rate[hit], hops), minlength=n_links + 1
        )
        remaining = np.maximum(remaining - used, 0.0)
        remaining[n_links] = np.inf
        active &= ~hit
    return rate


@pytest.mark.parametrize("seed", range(6))
def test_maxmin_equals_the_full_pass_form_bit_for_bit(seed):
    """Working on the unfixed flows only gives exactly (==) the rates of full passes."""
    rng = np.random.default_rng(seed)
    n_links, n_flows, hops = 30, 400, 5
    routes = rng.integers(0, n_links, size=(n_flows, hops))
    routes[rng.random((n_flows, hops)) < 0.3] = -1
    routes[:5] = -1  # flows with no link
    capacity = rng.choice([1e9, 2e9, 5e9, 25e9], size=n_links)
    weight = rng.integers(1, 8, size=n_flows).astype(float)
    cap = np.where(rng.random(n_flows) < 0.2, rng.uniform(1e8, 1e9, n_flows), np.inf)
    got = maxmin_rates(routes, capacity, weight, cap)
    assert np.array_equal(got, _reference_maxmin(routes, capacity, weight, cap))
