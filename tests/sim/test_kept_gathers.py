"""What issue 29's seventh round keeps changes no number: the link loads and link bytes summed
from each routes array's valid link ids gathered once (``nccl_wire._gathered``,
``flows._valid_links``) equal the sums made from the padded arrays each time, rate solves found
by a fingerprint are used only where every array they read is equal, the kept traces' op counts
kept as they grow bound the caches as counting them anew did, and the engine's inline compute
timeouts run as simpy's own, and a workload's dense-twin key kept by identity is its own."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dlrm.test_speed_exact import _candidates
from tests.network.test_flow_classes import _cluster, _matrix, _run
from tests.sim.test_fast_paths import CASES, _lower, _records
from zionsim.dlrm import estimate, lowering
from zionsim.network import flows, nccl, nccl_wire
from zionsim.sim import engine


def _loads_padded(routes, per_row, n_links):
    """``nccl_wire._link_load`` as it summed before this round: from the padded arrays."""
    plain = routes if isinstance(routes, np.ndarray) else routes.plain
    valid = plain >= 0
    load = np.bincount(
        plain[valid],
        weights=np.broadcast_to(per_row[: len(plain), None], plain.shape)[valid],
        minlength=n_links,
    ).astype(float, copy=False)
    if not isinstance(routes, np.ndarray) and len(routes.classes):
        c_valid = routes.routes >= 0
        c_per = np.broadcast_to(per_row[len(plain) :, None], routes.routes.shape)[c_valid]
        load += np.bincount(
            routes.routes[c_valid], weights=c_per * routes.frac[c_valid], minlength=n_links
        )
    return load


@pytest.mark.parametrize("seed", range(3))
def test_gathered_link_loads_equal_the_padded_sums(seed, monkeypatch):
    """Every phase of an all-to-all in flow classes, a ring all-reduce and a tree: the same
    loads to the bit, the first time (gathered and kept) and again (from what was kept)."""
    monkeypatch.setattr(nccl_wire, "_GATHERED", {})
    rng = np.random.default_rng(seed)
    c = _cluster(rng, nodes=int(rng.choice([6, 9])), tiers=2)
    m = _matrix(rng, len(c.gpus), c.spec.gpus_per_node)
    choices = [
        nccl.choose(c, "all_to_all", c.gpus, 0, matrix=m),
        nccl.choose(c, "all_reduce", c.gpus, 2**22, algorithm="ring"),
        nccl.choose(c, "all_reduce", c.gpus, 2**20, algorithm="tree"),
    ]
    n_links = len(c.router.capacity_Bps)
    checked = 0
    for ch in choices:
        for phase, routes in zip(ch.schedule.phases, ch.routes, strict=True):
            per_row = rng.random(len(phase.nbytes)) * 1e6
            want = _loads_padded(routes, per_row, n_links)
            for _ in range(2):
                got = nccl_wire._link_load(routes, per_row, n_links)
                assert got.dtype == want.dtype and np.array_equal(got, want)
            assert nccl_wire._GATHERED[id(routes)][0] is routes
            checked += 1
    assert checked >= 3
    monkeypatch.setattr(nccl_wire, "KEEP_GATHERED_BYTES", 0)  # gathered anew: nothing kept
    monkeypatch.setattr(nccl_wire, "_GATHERED", {})
    nccl_wire._link_load(choices[0].routes[0], np.ones(len(choices[0].schedule.phases[0].nbytes)),
                         n_links)  # fmt: skip
    assert not nccl_wire._GATHERED


@pytest.mark.parametrize("seed", range(3))
def test_kept_valid_links_and_fingerprinted_solves_give_the_fresh_run(seed, monkeypatch):
    """An all-to-all in flow classes beside a ring: finish times, bytes per link, splits and
    flows as with nothing kept; then with every fingerprint alike (each solve finds another's
    entry), which must never be used for other arrays."""
    rng = np.random.default_rng(seed)
    c = _cluster(rng, nodes=int(rng.choice([6, 9])), tiers=2)
    m = _matrix(rng, len(c.gpus), c.spec.gpus_per_node)
    with monkeypatch.context() as fresh_only:
        fresh_only.setattr(flows, "KEEP_VALID_BYTES", 0)
        fresh_only.setattr(flows, "_VALID", {})
        fresh_only.setattr(flows, "REUSE_SOLVES", False)
        fresh = _run(c, m, True, "ring", monkeypatch)
    monkeypatch.setattr(flows, "_VALID", {})
    monkeypatch.setattr(flows, "_SOLVES", {})
    first = _run(c, m, True, "ring", monkeypatch)
    kept = len(flows._SOLVES)
    again = _run(c, m, True, "ring", monkeypatch)
    assert flows._VALID and len(flows._SOLVES) == kept > 2  # the second run solved nothing anew
    monkeypatch.setattr(flows, "_SOLVES", {})
    monkeypatch.setattr(flows, "_sampled_key", lambda a: 0)  # every solve collides
    collided = _run(c, m, True, "ring", monkeypatch)
    assert len(flows._SOLVES) <= 2  # one fingerprint with class rows, one without
    for got in (first, again, collided):
        assert got[0] == fresh[0]  # finish times, to the bit
        assert np.array_equal(got[1], fresh[1])  # bytes per link
        assert got[2:] == fresh[2:]  # rows split, flows


def test_the_kept_traces_counted_as_they_grow_are_bounded_as_before(monkeypatch):
    """``lowering._remember`` and ``estimate._ByTrace.put`` add a new entry's ops to the count
    they kept, count anew where the cache was cleared or an entry replaced, and drop the least
    recently used entries beyond the bound, as counting every time did."""
    inputs, cluster, plans = _candidates({"workload": "tiny", "nodes": 2})
    traces = [_lower(inputs, cluster, p) for p in plans[:3]]
    sizes = [len(t.ops) for t in traces]
    bound = sizes[0] + sizes[1] + 1
    memo = estimate._ByTrace()
    monkeypatch.setattr(estimate, "KEEP_OPS", bound)
    for i, t in enumerate(traces):
        memo.put(t, "x", i)
        assert memo.counted == (len(memo.entries), sum(len(e[0]) for e in memo.entries.values()))
    assert memo.get(traces[0], "x") is None and memo.get(traces[2], "x") == 2
    memo.put(traces[2], "x", 5)  # replaced: counted anew, the same
    assert memo.counted[1] == sum(len(e[0]) for e in memo.entries.values())
    memo.entries.clear()  # cleared from outside: counted anew
    memo.put(traces[1], "x", 6)
    assert memo.counted == (1, sizes[1]) and memo.get(traces[1], "x") == 6

    cache = lowering.OrderedDict()
    monkeypatch.setattr(lowering, "_CACHE", cache)
    monkeypatch.setattr(lowering, "CACHE_OPS", bound)
    for i, t in enumerate(traces):
        lowering._remember(("k", i), t)
        assert sum(len(x.ops) for x in cache.values()) == lowering._COUNTED[2] <= bound
    assert list(cache) in ([("k", 1), ("k", 2)], [("k", 2)])
    cache.clear()
    lowering._remember(("k", 0), traces[0])
    assert list(cache) == [("k", 0)] and lowering._COUNTED[2] == sizes[0]
    other = lowering.OrderedDict()  # another cache object: counted anew
    monkeypatch.setattr(lowering, "_CACHE", other)
    lowering._remember(("k", 1), traces[1])
    assert lowering._COUNTED[0] is other and lowering._COUNTED[2] == sizes[1]


class _OwnSchedule(engine.Environment):
    """An environment with its own ``schedule`` (the engine then makes every timeout through
    ``env.timeout``, not inline)."""

    def schedule(self, event, priority=1, delay=0):
        super().schedule(event, priority, delay)


@pytest.mark.parametrize("options", CASES[:3], ids=lambda c: "-".join(str(v) for v in c.values()))
def test_inline_timeouts_run_as_simpys(options, monkeypatch):
    inputs, cluster, plans = _candidates(options)
    trace = _lower(inputs, cluster, plans[0])
    inline = engine.simulate_trace(cluster, trace, iterations=2)
    monkeypatch.setattr(engine, "Environment", _OwnSchedule)
    simpys = engine.simulate_trace(cluster, trace, iterations=2)
    assert _records(inline) == _records(simpys)
    assert inline.events == simpys.events


def test_the_spec_reprs_are_kept_by_identity():
    """``estimate._repr_of`` and ``lowering._stack_key``: the ``repr`` of the object given,
    another object's own (an equal object's ``repr`` is equal)."""
    inputs, cluster, _ = _candidates({"workload": "tiny", "nodes": 1})
    stack, gpu = inputs.stack, cluster.spec.gpu
    assert estimate._repr_of(stack) == repr(stack) and estimate._repr_of(gpu) == repr(gpu)
    other = type(stack)(**{**stack.__dict__, "name": stack.name + "-other"})
    assert estimate._repr_of(other) == repr(other) != repr(stack)
    assert lowering._stack_key(stack) == repr(stack)
    assert lowering._stack_key(other) == repr(other)


def test_the_dense_twin_key_is_each_workloads_own():
    """``lowering.dense_twin``, kept for the last workload given: workloads given in turn get
    their own keys (equal for fp32 and tf32, other for another batch), as made anew."""
    from dataclasses import replace

    inputs, _, _ = _candidates({"workload": "tiny", "nodes": 1})
    w = inputs.workload
    ws = [replace(w, precision={**w.precision, "dense": d}) for d in ("fp32", "tf32")]
    ws.append(replace(ws[0], batch_per_gpu=w.batch_per_gpu * 2))
    lowering._LAST_TWIN[:] = [None, None]
    fresh = [lowering.dense_twin(x) for x in ws]
    for x, want in [
        *zip(ws, fresh, strict=True),
        *zip(ws[::-1], fresh[::-1], strict=True),
        (ws[0], fresh[0]),
    ]:
        assert lowering.dense_twin(x) == want
    assert fresh[0] == fresh[1] != fresh[2]
