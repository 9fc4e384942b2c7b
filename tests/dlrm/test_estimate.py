"""The planner keeps its word: its iteration estimate tracks the simulation, it returns the
candidate it estimates fastest, and FP16 communication is never a slow-down (issue 24, item 5)."""

import pytest

from zionsim.dlrm.estimate import iteration_estimate
from zionsim.dlrm.plan_cost import host_Bps_per_gpu
from zionsim.dlrm.planner import PLANNERS, Planner, best_estimated
from zionsim.dlrm.stack import apply_stack, resolve_stack
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import simulate_run

TORCHREC = resolve_stack("torchrec")


def _workload(name, **kw):
    return apply_stack(load_workload(name, **kw), TORCHREC)


def _simulated_s(cluster, w, plan) -> float:
    r = simulate_run(cluster, w, plan, iterations=3, warmup=1, stack=TORCHREC)
    return r.summary["iteration_time_s"]


def test_host_bandwidth_is_a_share_of_the_switch_uplink():
    """On ZionEX two GPUs sit behind each PCIe switch's x16 uplink to the CPU: when every GPU
    reads its UVM misses at once, one gets half the uplink, not a whole PCIe link."""
    c = Cluster.load("zionex", nodes=1)
    spec = c.spec
    per_switch = spec.gpus_per_node // spec.pcie.switches
    want = spec.pcie.uplink_bw_Bps * spec.links["pcie"].efficiency / per_switch
    assert host_Bps_per_gpu(c) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(
    "workload, nodes, batch",
    [("tiny", 2, None), ("mlperf_dlrm", 2, 1024), ("neo_model_i", 1, 256)],
)
def test_estimate_within_20_percent_of_the_simulation(workload, nodes, batch):
    """The estimate of the auto plan is within 20 % of the simulated iteration: small world,
    all-to-all bound, and UVM bound (neo_model_i does not fit one node's HBM)."""
    c = Cluster.load("zionex", nodes=nodes)
    w = _workload(workload, batch_per_gpu=batch)
    plan = PLANNERS["greedy"](c, w)
    est = iteration_estimate(c, w, plan, TORCHREC).iteration_s
    assert est == pytest.approx(_simulated_s(c, w, plan), rel=0.2)


@pytest.mark.parametrize(
    "topology, workload, stack, plan",
    [
        ("dgx_a100", "mlperf_dlrm_dcnv2", "hugectr", "auto"),  # embeddings on their own stream
        ("zion", "mlperf_dlrm", "torchrec", "ps"),  # tables on CPU parameter servers
    ],
)
def test_estimate_follows_other_stacks_and_tiers(topology, workload, stack, plan):
    """The estimate walks what the trace holds: a second compute stream taking turns with the
    first (HugeCTR), parameter-server transfers; within 20 % of the simulation there too."""
    from zionsim.dlrm.planner import named_plan

    c, st = Cluster.load(topology, nodes=1), resolve_stack(stack)
    w = apply_stack(load_workload(workload, batch_per_gpu=2048), st)
    p = named_plan(plan, c, w, st)
    est = iteration_estimate(c, w, p, st).iteration_s
    sim = simulate_run(c, w, p, iterations=3, warmup=1, stack=st).summary["iteration_time_s"]
    assert est == pytest.approx(sim, rel=0.2)


def test_estimate_counts_the_stack_host_time():
    """The stack's host thread is in the estimate as it is in a run: on the tiny model the host
    sets the pace, so dropping its batch preparation shortens the estimate by about that much,
    and the estimate follows the simulated iteration."""
    from dataclasses import replace

    from zionsim.sim.run import simulate_run

    c = Cluster.load("zionex", nodes=1)
    w = _workload("tiny")
    plan = PLANNERS["greedy"](c, w)
    full = iteration_estimate(c, w, plan, TORCHREC)
    light = replace(TORCHREC, host_per_step_s=0.0, host_per_sample_s=0.0)
    bare = iteration_estimate(c, w, plan, light)
    prepare = TORCHREC.host_per_step_s + TORCHREC.host_per_sample_s * w.batch_per_gpu
    assert full.host_s == pytest.approx(prepare) and prepare > 0
    assert full.iteration_s - bare.iteration_s == pytest.approx(prepare, rel=0.05)
    run = simulate_run(c, w, plan, iterations=3, stack=TORCHREC).summary["iteration_time_s"]
    assert full.iteration_s == pytest.approx(run, rel=0.2)


@pytest.mark.parametrize("field", ["host_overlap", "iteration_join"])
def test_a_step_that_waits_for_the_previous_one_waits_in_the_estimate_too(field):
    """A host that does not run ahead (``host.overlap: false``) or streams joined every
    iteration (``iteration_join``) start a step only once the previous one has ended on the GPU,
    in the engine and in the planner's walk.  With 3 ms of host work per step and a host that
    waits, the estimate is the host work plus the GPU's, as simulated, not the larger of the two
    (the walk had let the host run ahead, so two plans of different GPU time tied on the host
    and the choice between them turned on the last bit of host.per_step); HugeCTR's next
    lookups wait for this step's end."""
    from dataclasses import replace

    from zionsim.dlrm.planner import named_plan

    c = Cluster.load("dgx_a100", nodes=1)
    if field == "iteration_join":
        st, workload = resolve_stack("hugectr"), "mlperf_dlrm_dcnv2"
        assert st.iteration_join and st.embedding_stream
    else:
        st = replace(resolve_stack("tensorflow_sok"), host_per_step_s=3e-3, host_overlap=False)
        workload = "mlperf_dlrm"
    w = apply_stack(load_workload(workload, batch_per_gpu=2048), st)
    p = named_plan("greedy" if field == "host_overlap" else "auto", c, w, st)
    est = iteration_estimate(c, w, p, st).iteration_s
    sim = simulate_run(c, w, p, iterations=3, warmup=1, stack=st).summary["iteration_time_s"]
    if field == "host_overlap":
        assert est > 3e-3 * 1.2
    assert est == pytest.approx(sim, rel=0.02)


def test_planner_returns_the_candidate_it_estimates_fastest():
    """Of every candidate plan the greedy planner makes (DCNv2 on 2 nodes splits tables, so
    there are several), it returns one its estimate ranks fastest."""
    c = Cluster.load("zionex", nodes=2)
    w = _workload("mlperf_dlrm_dcnv2", batch_per_gpu=1024)
    seen = []

    def spy(cluster, w, plans, stack):
        seen.extend(plans)
        return best_estimated(cluster, w, plans, stack)

    plan = Planner(compare=spy).plan(c, w, TORCHREC)
    assert len(seen) > 1
    times = [iteration_estimate(c, w, p, TORCHREC).iteration_s for p in seen]
    assert iteration_estimate(c, w, plan, TORCHREC).iteration_s == min(times)
    assert PLANNERS["greedy"](c, w) == plan


@pytest.fixture(scope="module")
def model_f():
    """Neo model F on 16 ZionEX nodes (its tables fit no fewer nodes' host DRAM), per
    communication precision: the auto plan and its simulated iteration."""
    c = Cluster.load("zionex", nodes=16)
    out = {}
    for prec in ("fp16", "fp32"):
        w = _workload("neo_model_f", overrides=[f"precision.communication={prec}"])
        plan = PLANNERS["greedy"](c, w)
        out[prec] = (w, plan, _simulated_s(c, w, plan))
    return c, out


def test_fp16_communication_is_no_slower_under_the_auto_planner(model_f):
    """Model F: the plan the planner picks under FP16 communication simulates no slower than
    the one it picks under FP32 (at main it picked a TWRW plan 22 % slower)."""
    _, out = model_f
    assert out["fp16"][2] <= out["fp32"][2]


def test_fp16_communication_is_no_slower_with_a_plan_held_fixed(model_f):
    """Model F with a plan held fixed (the auto plan, and every table TWRW in UVM as the planner
    chose at main): FP16 communication halves the pooled bytes and never slows the iteration."""
    c, out = model_f
    twrw = Planner(
        choose=lambda ctx, t, costed, target: next(o for o, _ in costed if o.kind == "TWRW"),
        compare=lambda cluster, w, plans, stack: plans[0],
    ).plan(c, out["fp16"][0])
    assert {(s.kind, s.tier) for s in twrw.shards} == {("TWRW", "uvm")}
    for plan in (out["fp16"][1], twrw):
        t16 = _simulated_s(c, out["fp16"][0], plan)
        t32 = _simulated_s(c, out["fp32"][0], plan)
        assert t16 <= t32


def test_rail_copies_share_the_nics_in_the_estimate():
    """Every table TWRW on 16 Zion nodes: an all-to-all runs on every rail at once and the rails
    share NICs.  Priced alone, each rail's copy made the estimate 29 % short (67.6 against 95.7
    ms), and in the zion_vs_zionex study the planner returned such a plan 17 % slower
    (simulated) than a CW plan it also made; priced together they are within 20 %."""
    c = Cluster.load("zion", nodes=16)
    w = _workload("mlperf_dlrm")
    twrw = Planner(
        choose=lambda ctx, t, costed, target: next(
            (o for o, _ in costed if o.kind == "TWRW"), costed[0][0]
        ),
        compare=lambda cluster, w, plans, stack: plans[0],
    ).plan(c, w)
    assert "TWRW" in {s.kind for s in twrw.shards}
    est = iteration_estimate(c, w, twrw, TORCHREC).iteration_s
    assert est == pytest.approx(_simulated_s(c, w, twrw), rel=0.2)
