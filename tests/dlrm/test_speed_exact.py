"""The planner's and the lowering's shortcuts change no number (issue 29): the estimate walks
one rank per class of alike ranks, the lowering copies a rank whose inputs equal an earlier
one's, and recent traces are reused; each gives exactly what the long way gives."""

from dataclasses import replace

import numpy as np
import pytest

from zionsim.dlrm import estimate, flat_walk, lowering
from zionsim.dlrm.plan import memory_by_rank
from zionsim.dlrm.planner import Planner, parameter_servers, round_robin
from zionsim.network import nccl
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.run import _build

CASES = [
    {"workload": "mlperf_dlrm", "nodes": 4},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "topology": "dgx_h100", "stack": "hugectr"},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 4, "sync": "foreground-ma", "sync_every": 2},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "sync": "foreground-easgd"},
    {"workload": "mlperf_dlrm", "nodes": 2, "fused": False, "stack": "nvidia_pytorch_dlrm"},
    {"workload": "neo_model_i", "nodes": 1, "batch_per_gpu": 256},  # UVM: host transfers
    {"workload": "tiny", "nodes": 2, "stack": "tensorflow_sok"},
]


def _candidates(options: dict):
    """The run's inputs, its cluster, and every plan the greedy planner compares (TWRW, RW, CW
    and DP among them), round-robin and parameter servers."""
    inputs = resolve_inputs(options)
    cluster = _build(inputs)
    seen = {}

    def keep(_cluster, _w, plans, _stack):
        seen["plans"] = plans
        return plans[0]

    replace(Planner(), compare=keep).plan(cluster, inputs.workload, inputs.stack)
    plans = [*seen["plans"], round_robin(cluster, inputs.workload)]
    if cluster.spec.front_end is not None:
        plans.append(parameter_servers(cluster, inputs.workload))
    return inputs, cluster, plans


@pytest.fixture(params=CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def case(request):
    return _candidates(request.param)


def _lower(inputs, cluster, plan):
    fused = inputs.options["fused"] and inputs.stack.fused_embedding
    g = cluster.spec.gpus_per_node
    w = inputs.workload
    return lowering.lower(w, plan, len(cluster.gpus), fused, g, w.zipf_alpha, inputs.sync,
                          inputs.stack)  # fmt: skip


def test_estimate_by_rank_class_equals_every_rank_walked(case, monkeypatch):
    """Also without the lowering's ``alike`` ranks (a trace from a file)."""
    inputs, cluster, plans = case
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    fast = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    monkeypatch.setattr(estimate, "CLASSES", False)
    monkeypatch.setattr(estimate, "_CHOICES", {})
    monkeypatch.setattr(estimate, "_TOGETHER", {})
    monkeypatch.setattr(estimate, "MEMO_CHOICES", 0)  # NCCL's choice made anew each time
    slow = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    assert fast == slow
    monkeypatch.setattr(estimate, "CLASSES", True)
    monkeypatch.setattr(lowering, "SHARE_RANKS", False)
    monkeypatch.setattr(lowering, "CACHE_OPS", 0)
    unknown = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    assert unknown == slow


def test_shared_ranks_and_the_trace_cache_lower_the_same_trace(case, monkeypatch):
    inputs, cluster, plans = case
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    fast = [_lower(inputs, cluster, p) for p in plans]
    again = [_lower(inputs, cluster, p) for p in plans]  # from the cache
    monkeypatch.setattr(lowering, "SHARE_RANKS", False)
    monkeypatch.setattr(lowering, "CACHE_OPS", 0)
    slow = [_lower(inputs, cluster, p) for p in plans]
    for a, b, c in zip(fast, again, slow, strict=True):
        assert a.ops == b.ops == c.ops
        assert a.meta == b.meta == c.meta
        assert [(x.id, x.op, x.size_bytes, x.ranks.tolist()) for x in a.collectives] == [
            (x.id, x.op, x.size_bytes, x.ranks.tolist()) for x in c.collectives
        ]


def test_a_cached_trace_is_not_changed_by_its_user(monkeypatch):
    inputs, cluster, plans = _candidates({"workload": "tiny", "nodes": 1})
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    first = _lower(inputs, cluster, plans[0])
    n = len(first.ops)
    first.ops.clear()
    first.meta["model"]["params"] = -1
    again = _lower(inputs, cluster, plans[0])
    assert len(again.ops) == n and again.meta["model"]["params"] > 0


def test_the_trace_cache_is_bounded_by_ops(monkeypatch):
    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 2})
    cache = lowering.OrderedDict()
    monkeypatch.setattr(lowering, "_CACHE", cache)
    size = len(_lower(inputs, cluster, plans[0]).ops)
    monkeypatch.setattr(lowering, "CACHE_OPS", size + 1)
    for p in plans:
        _lower(inputs, cluster, p)
    assert len(cache) == 1 and sum(len(t.ops) for t in cache.values()) <= size + 1


def test_durations_of_copied_ranks_equal_their_own(case):
    """``op_durations`` gives a copied rank its original's seconds: the same as pricing every op
    (the trace without ``alike``)."""
    from zionsim.dlrm.op_costs import op_durations, stack_compute_model

    inputs, cluster, plans = case
    model = stack_compute_model(cluster, inputs.stack)
    for p in plans:
        trace = _lower(inputs, cluster, p)
        assert trace.alike is not None
        fast = op_durations(cluster, trace, model)
        slow = op_durations(cluster, replace(trace, alike=None), model)
        assert fast.tolist() == slow.tolist()


def test_estimates_of_copies_together_are_the_ones_made_anew(case, monkeypatch):
    """``estimate.together_of`` remembers NCCL's estimate of copies that run at once per
    cluster: every candidate estimated twice (the second time from the memo) equals the
    estimate made with nothing remembered."""
    inputs, cluster, plans = case
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    monkeypatch.setattr(estimate, "_TOGETHER", {})
    kept = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    again = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    monkeypatch.setattr(estimate, "REUSE", False)
    monkeypatch.setattr(estimate, "_TOGETHER", {})
    anew = [estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s for p in plans]
    assert kept == again == anew


def test_together_of_hands_out_its_own_list_and_checks_the_choices():
    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 2})
    trace = _lower(inputs, cluster, plans[0])
    choices = [estimate.choice_of(cluster, c) for c in trace.collectives[:2]]
    first = estimate.together_of(cluster, choices)
    first.append(-1.0)
    assert estimate.together_of(cluster, choices) == nccl.estimate_together_s(cluster, choices)
    other = [estimate.choice_of(cluster, c) for c in trace.collectives[:1]]
    assert estimate.together_of(cluster, other) == nccl.estimate_together_s(cluster, other)


def test_kept_fit_checks_are_the_checks(case, monkeypatch):
    """``planner._fits_kept`` answers as ``_fits`` does (the second time from what it kept)."""
    from zionsim.dlrm import planner

    inputs, cluster, plans = case
    w = inputs.workload
    monkeypatch.setattr(planner, "_FITS", {})
    spec = cluster.spec
    given = (repr(w), len(cluster.gpus), spec.gpus_per_node, spec.gpu.hbm_bytes,
             spec.host.dram_bytes, spec.host.sockets)  # fmt: skip
    for p in plans:
        assert planner._fits_kept(cluster, w, p, given) == planner._fits(cluster, w, p)
        assert planner._fits_kept(cluster, w, p, given) == planner._fits(cluster, w, p)
    assert len(planner._FITS) == len({(p.name, p.shards) for p in plans})


def _twrw(options: dict):
    """The candidate plan with table-row-wise shards, its trace, op seconds and transfers."""
    inputs, cluster, plans = _candidates(options)
    plan = next(p for p in plans if any(s.kind == "TWRW" for s in p.shards))
    trace = _lower(inputs, cluster, plan)
    model = estimate._compute_model(cluster, trace.stack or estimate.BARE)
    seconds = estimate.durations_of(cluster, trace, model)
    return inputs, cluster, plan, trace, seconds, estimate.transfer_seconds(cluster, trace)


def test_a_twrw_plan_walks_one_rank_for_alike_ranks_of_every_copy(monkeypatch):
    """Ranks alike but for which node's reduce-scatter or which rail's all-to-all they join are
    one class (``estimate.COPIES``): fewer ranks walked, the same estimate as classes within one
    collective and as every rank walked."""
    inputs, cluster, plan, trace, seconds, moved = _twrw({"workload": "mlperf_dlrm", "nodes": 4})
    merged = flat_walk.Shape(trace, seconds, moved, True, copies=True)
    plain = flat_walk.Shape(trace, seconds, moved, True)
    assert merged.valid and merged.spans
    assert sum(map(bool, merged.weight)) < sum(map(bool, plain.weight))
    joined: dict[int, int] = {}  # a walked collective's members, as its walked ranks count them
    for i in merged.walked_list:
        if merged.coll[i] >= 0:
            joined[merged.coll[i]] = joined.get(merged.coll[i], 0) + merged.joins[i]
    assert joined and all(n == merged.need[c] for c, n in joined.items())
    assert len(set(_three_walks(monkeypatch, inputs, cluster, plan))) == 1


def test_copies_priced_apart_are_walked_apart(monkeypatch):
    """On a cluster that prices one copy of a step apart from the others, the classes that span
    copies do not hold: the walk falls back to classes within one collective (the same estimate
    as without ``COPIES``)."""
    inputs, cluster, plan, trace, seconds, moved = _twrw({"workload": "mlperf_dlrm", "nodes": 4})
    real = estimate.together_of

    def apart(cl, choices):  # the second copy of each step slower (one no class walks)
        times = real(cl, choices)
        return [*times[:1], *(t * 100 for t in times[1:2]), *times[2:]]

    monkeypatch.setattr(estimate, "together_of", apart)
    merged = flat_walk.Shape(trace, seconds, moved, True, copies=True)
    walk = flat_walk.FlatWalk(
        cluster, trace, merged, trace.stack.compute_slowdown, moved,
        lambda c: estimate.choice_of(cluster, c), lambda ch: apart(cluster, ch),
    )  # fmt: skip
    assert merged.spans and not walk.copies_alike()
    assert len(set(_three_walks(monkeypatch, inputs, cluster, plan))) == 1


def _three_walks(monkeypatch, inputs, cluster, plan) -> tuple[float, float, float]:
    """The estimate with classes that span collective copies, with classes within one
    collective (``COPIES`` off) and with every rank walked (``CLASSES`` off too)."""
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    out = [estimate.iteration_estimate(cluster, w, plan, stack, sync).iteration_s]
    for switch in ("COPIES", "CLASSES"):
        monkeypatch.setattr(estimate, switch, False)
        out.append(estimate.iteration_estimate(cluster, w, plan, stack, sync).iteration_s)
    return tuple(out)


def _walk_of(inputs, cluster, plan):
    """The flat walk ``estimate.evaluate`` plays for ``plan`` (its shape with classes that span
    collective copies where that holds)."""
    from functools import partial

    trace = _lower(inputs, cluster, plan)
    stack = trace.stack or estimate.BARE
    seconds = estimate.durations_of(cluster, trace, estimate._compute_model(cluster, stack))
    moved = estimate.transfer_seconds(cluster, trace)
    choose = partial(estimate.choice_of, cluster)
    together = partial(estimate.together_of, cluster)
    for copies in (True, False):
        shape = estimate._shape(trace, seconds, moved, copies=copies)
        if shape.valid:
            walk = flat_walk.FlatWalk(cluster, trace, shape, stack.compute_slowdown, moved, choose,
                                  together)  # fmt: skip
            if not copies or walk.copies_alike():
                return walk


def test_the_walks_lower_bound_is_below_every_candidates_estimate(case):
    """``FlatWalk.lower_bound`` (what the planner skips candidates by) never exceeds the walked
    estimate (but for rounding, ``estimate.PRUNE_MARGIN``), on every candidate of every case
    (UVM transfers, sync rounds every K-th iteration, a host thread, parameter servers, an
    embedding stream among them)."""
    inputs, cluster, plans = case
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    for p in plans:
        walk = _walk_of(inputs, cluster, p)
        bound = walk.lower_bound()
        walked = estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s
        assert bound > 0.0
        # tight bounds round apart from the walk by ulps: the planner skips only beyond them
        assert bound - walked <= estimate.PRUNE_MARGIN * bound


def test_the_planner_skipping_candidates_picks_the_plan_it_picks_walking_all(monkeypatch):
    """The greedy planner with candidates skipped by their lower bound (``estimate.PRUNE``) picks
    the plan it picks walking every candidate, on several workloads, clusters, NIC speeds and
    batches; a bound made too high (three times the true one) picks another plan somewhere, so
    this test can fail."""
    from zionsim.dlrm.planner import named_plan

    cases = [
        *CASES,
        {"workload": "mlperf_dlrm", "nodes": 16, "topology.scale_out.nic_bw": "100Gbps"},
        {"workload": "mlperf_dlrm", "nodes": 16, "batch_per_gpu": 6912},
        {"workload": "mlperf_dlrm", "nodes": 8, "workload.precision.communication": "fp16",
         "topology.scale_out.nic_bw": "200Gbps"},
    ]  # fmt: skip

    def plans() -> list:
        out = []
        for options in cases:
            inputs = resolve_inputs(options)
            cluster = _build(inputs)
            out.append(named_plan("greedy", cluster, inputs.workload, inputs.stack))
        return out

    runs = []
    real_run = flat_walk.FlatWalk.run
    monkeypatch.setattr(flat_walk.FlatWalk, "run", lambda s, n: runs.append(1) or real_run(s, n))
    monkeypatch.setattr(estimate, "REUSE", False)  # every walk that is not skipped walked
    skipped = plans()
    some = len(runs)
    monkeypatch.setattr(estimate, "PRUNE", False)
    walked = plans()
    assert skipped == walked
    assert some < len(runs) - some  # candidates were skipped
    real = flat_walk.FlatWalk.lower_bound
    monkeypatch.setattr(estimate, "PRUNE", True)
    monkeypatch.setattr(flat_walk.FlatWalk, "lower_bound", lambda s, *_: 3 * real(s))
    assert plans() != walked


def test_walks_kept_by_their_inputs_end_as_walks_made_anew(monkeypatch):
    """A walk kept on its shape (``Shape.ends``) is handed out only for equal inputs: the same
    plan on NIC speeds that price its collectives alike and apart, estimated with walks kept and
    with none."""
    estimates, runs = {}, []
    real_run = flat_walk.FlatWalk.run
    monkeypatch.setattr(flat_walk.FlatWalk, "run", lambda s, n: runs.append(1) or real_run(s, n))
    monkeypatch.setattr(estimate, "PRUNE", False)
    for reuse in (True, False):
        monkeypatch.setattr(estimate, "REUSE", reuse)
        for nic in ("100Gbps", "400Gbps", "800Gbps"):
            inputs, cluster, plans = _candidates(
                {"workload": "mlperf_dlrm", "nodes": 4, "topology.scale_out.nic_bw": nic}
            )
            w, stack, sync = inputs.workload, inputs.stack, inputs.sync
            for p in plans:
                est = estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s
                estimates.setdefault((nic, p.shards), []).append(est)
    assert all(a == b for a, b in estimates.values())
    assert len({v[0] for v in estimates.values()}) > 1
    assert len(runs) - len(estimates) < len(estimates)  # walks were handed out again


def test_the_trace_cache_tells_plans_apart_as_their_repr_does():
    """``lowering._plan_key`` (the cache's key of a plan): equal plans (other objects) alike,
    a ``0`` and a ``0.0`` fraction apart, a shard holding a list by its ``repr``."""
    from zionsim.dlrm.plan import Plan, Shard

    a = Plan("p", (Shard(0, "TW", (0,)), Shard(1, "RW", (0, 1))))
    b = Plan("p", (Shard(0, "TW", (0,)), Shard(1, "RW", (0, 1))))
    c = Plan("p", (Shard(0, "TW", (0,), cache_fraction=0), Shard(1, "RW", (0, 1))))
    d = Plan("p", (Shard(0, "TW", [0]), Shard(1, "RW", (0, 1))))
    assert lowering._plan_key(a) == lowering._plan_key(b)
    assert lowering._plan_key(a) != lowering._plan_key(c)
    assert lowering._plan_key(d) == repr(d)


def test_the_walks_lower_bound_is_tight_where_one_chain_sets_the_pace():
    """On MLPerf DLRM over 4 nodes the bound comes within 0.1 % of some candidate's estimate:
    a bound that loses its chains (or stops them early without a cutoff) fails
    here, where the test above still passes."""
    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 4})
    w, stack, sync = inputs.workload, inputs.stack, inputs.sync
    ratios = []
    for p in plans:
        walked = estimate.iteration_estimate(cluster, w, p, stack, sync).iteration_s
        ratios.append(_walk_of(inputs, cluster, p).lower_bound() / walked)
    assert max(ratios) > 0.999


def test_least_loaded_single_gpu_is_the_sorts_first():
    """``planner._least_loaded`` for one GPU (argmin) picks what the sort picks: the least
    loaded GPU with room, the lowest rank among equals, any GPU where none has room."""
    import numpy as np

    from zionsim.dlrm.planner import _least_loaded

    rng = np.random.default_rng(7)
    for _ in range(200):
        load = rng.integers(0, 4, 16).astype(float)  # many equal loads
        room = rng.integers(0, 3, 16).astype(float)
        need = float(rng.integers(0, 4))
        ok = np.flatnonzero(room >= need)
        pool = ok if len(ok) else np.arange(16)
        want = int(pool[np.lexsort((pool, load[pool]))][0])
        assert _least_loaded(load, room, need, 1) == (want,)


@pytest.mark.parametrize("pair", [("fp32", "tf32"), ("bf16", "fp16")])
def test_a_trace_retyped_from_its_twin_is_the_trace_lowered(case, monkeypatch, pair):
    """A workload whose dense precision differs from a kept trace's only by a format of the same
    width and kind (``lowering.RETYPE``) gets that trace with its GEMMs retyped: the same ops,
    collectives and meta as lowering it anew, for every candidate plan of each case."""
    from zionsim.dlrm.workload import with_precision

    inputs, cluster, plans = case
    made = []
    retyped = lowering._retyped

    def counting(*args):
        out = retyped(*args)
        made.append(out is not None)
        return out

    monkeypatch.setattr(lowering, "_retyped", counting)
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    monkeypatch.setattr(lowering, "_TWINS", {})
    first, second = (replace(inputs, workload=with_precision(inputs.workload, {"dense": d}))
                     for d in pair)  # fmt: skip
    for p in plans:
        _lower(first, cluster, p)
    fast = [_lower(second, cluster, p) for p in plans]
    assert made[-len(plans) :] == [True] * len(plans)  # each from its twin
    monkeypatch.setattr(lowering, "RETYPE", False)
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    slow = [_lower(second, cluster, p) for p in plans]
    for a, c in zip(fast, slow, strict=True):
        assert a.ops == c.ops
        assert a.meta == c.meta and a.alike == c.alike
        assert [(x.id, x.op, x.size_bytes, x.ranks.tolist()) for x in a.collectives] == [
            (x.id, x.op, x.size_bytes, x.ranks.tolist()) for x in c.collectives
        ]
        gemms = [op.args["dtype"] for op in a.ops if op.kind == "gemm"]
        assert gemms and set(gemms) == {pair[1]}


def test_no_twin_across_widths_or_plans(monkeypatch):
    """A dense precision of another width (fp32 and fp16: other bytes per element) or another
    plan is lowered anew, not retyped."""
    from zionsim.dlrm.workload import with_precision

    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 2})
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    monkeypatch.setattr(lowering, "_TWINS", {})
    calls = []
    lowered = lowering._lower
    monkeypatch.setattr(lowering, "_lower", lambda *a: calls.append(1) or lowered(*a))
    w32, w16, tf = (with_precision(inputs.workload, {"dense": d}) for d in ("fp32", "fp16", "tf32"))
    _lower(replace(inputs, workload=w32), cluster, plans[0])
    _lower(replace(inputs, workload=w16), cluster, plans[0])
    _lower(replace(inputs, workload=tf), cluster, plans[1])
    assert len(calls) == 3
    _lower(replace(inputs, workload=tf), cluster, plans[0])
    assert len(calls) == 3


@pytest.mark.parametrize("pair", [("fp32", "tf32"), ("bf16", "fp16")])
def test_the_greedy_stages_read_no_dense_format_of_one_width(case, monkeypatch, pair):
    """``Planner.compared`` keeps its candidates for workloads that differ in a dense format of
    one width and kind: made anew, they are the same plans; kept, they are handed out again."""
    from zionsim.dlrm import planner
    from zionsim.dlrm.workload import with_precision

    inputs, cluster, _ = case
    monkeypatch.setattr(planner, "_CANDIDATES", {})
    a, b = (with_precision(inputs.workload, {"dense": d}) for d in pair)
    fresh = [planner.Planner()._compared(cluster, w) for w in (a, b)]
    assert fresh[0] == fresh[1]
    g = cluster.spec.gpus_per_node
    for p in fresh[0]:  # what planner._fits checks, which it keeps by lowering.dense_twin too
        mem = [memory_by_rank(w, p, len(cluster.gpus), g, w.zipf_alpha) for w in (a, b)]
        assert mem[0].keys() == mem[1].keys()
        assert all(np.array_equal(mem[0][k], mem[1][k]) for k in mem[0])
    kept = planner.Planner().compared(cluster, a)
    assert kept == fresh[0] and planner.Planner().compared(cluster, b) == fresh[0]
    assert len(planner.kept_for(planner._CANDIDATES, cluster)) == 1
    other = with_precision(inputs.workload, {"dense": "fp16" if pair[0] == "fp32" else "fp32"})
    planner.Planner().compared(cluster, other)  # another width: kept apart
    assert len(planner.kept_for(planner._CANDIDATES, cluster)) == 2


def test_ranks_that_join_other_copies_are_copied_with_their_collectives_swapped(monkeypatch):
    """A TWRW plan's ranks on other nodes and rails (``lowering.REMAP``) are lowered as copies
    of one rank's ops with its node's and rail's collectives swapped for their own: fewer ranks
    lowered, the very trace lowered rank by rank."""
    inputs, cluster, plans = _candidates({"workload": "mlperf_dlrm", "nodes": 4})
    plan = next(p for p in plans if any(s.kind == "TWRW" for s in p.shards))
    lowered = []
    rank = lowering._lower_rank
    monkeypatch.setattr(lowering, "_lower_rank", lambda *a, **k: lowered.append(1) or rank(*a, **k))
    monkeypatch.setattr(lowering, "_CACHE", lowering.OrderedDict())
    monkeypatch.setattr(lowering, "CACHE_OPS", 0)
    fast = _lower(inputs, cluster, plan)
    n_fast, lowered[:] = len(lowered), []
    monkeypatch.setattr(lowering, "REMAP", False)
    slow = _lower(inputs, cluster, plan)
    assert n_fast < len(lowered)
    assert fast.ops == slow.ops and fast.alike == slow.alike
    swapped = {op.args["coll"] for op in fast.ops if op.kind == "collective"}
    assert swapped == {op.args["coll"] for op in slow.ops if op.kind == "collective"}
