"""Plan refinement: deterministic for a seed, never worse than its start, memory respected."""

import json

import numpy as np
import pytest

from tests.conftest import TINY
from zionsim.cli.main import main
from zionsim.dlrm.plan import Plan, Shard, memory_by_rank
from zionsim.dlrm.planner import PLANNERS
from zionsim.dlrm.stack import apply_stack, resolve_stack
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import simulate_run
from zionsim.studies.refine import Judge, evals_for_budget, refine


def _inputs(cluster):
    w = apply_stack(load_workload("tiny"), resolve_stack("bare"))
    return w, PLANNERS["round_robin"](cluster, w)


def test_same_seed_same_plan(tiny_cluster):
    """Two searches with one seed give the same plan, time and moves; the judge's verdict on
    the refined plan is its reported time, and refinement is never slower than its start."""
    w, start = _inputs(tiny_cluster)
    a = refine(tiny_cluster, w, start, seed=3, max_evals=8, stack="bare")
    b = refine(tiny_cluster, w, start, seed=3, max_evals=8, stack="bare")
    assert (a.plan, a.best_s, a.moves, a.proposals) == (b.plan, b.best_s, b.moves, b.proposals)
    assert a.evaluations == 8 and a.best_s <= a.start_s
    judge = Judge(tiny_cluster, w, stack="bare")
    assert judge(a.plan) == a.best_s


def test_a_budget_is_a_number_of_simulations_not_a_clock(tiny_cluster):
    """The budget is converted to simulations from the first one's size: same budget, same
    simulations and the same plan, however long they take."""
    w, start = _inputs(tiny_cluster)
    runs = [refine(tiny_cluster, w, start, seed=0, budget_s=0.05, stack="bare") for _ in range(2)]
    assert runs[0].max_evals == runs[1].max_evals and runs[0].plan == runs[1].plan
    assert abs(evals_for_budget(2.0, 1000, 100) - 2 * evals_for_budget(1.0, 1000, 100)) <= 1


def test_judge_agrees_with_a_run(tiny_cluster):
    """The judge's iteration time is simulate_run's for the same iterations and warm-up."""
    w, start = _inputs(tiny_cluster)
    run = simulate_run(tiny_cluster, w, start, iterations=2, warmup=1, stack="bare")
    assert Judge(tiny_cluster, w, stack="bare")(start) == run.summary["iteration_time_s"]


def test_refined_plans_fit_in_hbm():
    """With HBM just large enough for the start plan, moves that overflow a GPU are rejected
    without a simulation and the refined plan still fits."""
    w = _inputs(Cluster.load(TINY))[0]
    start = Plan("tw", tuple(Shard(t.index, "TW", (t.index,)) for t in w.tables))
    mem = memory_by_rank(w, start, 4, 2)
    need = sum(mem[k] for k in ("embedding", "embedding_optimizer", "dense", "activations"))
    cluster = Cluster.load(TINY, overrides=[f"gpu.hbm={int(need.max()) + 1}B"])
    r = refine(cluster, w, start, seed=0, max_evals=10, stack="bare")
    mem = memory_by_rank(w, r.plan, 4, 2)
    total = sum(mem[k] for k in ("embedding", "embedding_optimizer", "dense", "activations"))
    assert r.rejected_memory > 0 and np.all(total <= cluster.spec.gpu.hbm_bytes)


def test_cli_refine_reports_gain_and_writes_both_plan_files(tmp_path, capsys):
    """zionsim plan --refine prints the gain and the changes; --out and --to-torchrec write the
    same refined plan, and a run of the TorchRec file simulates the reported time."""
    out, tr = tmp_path / "p.yaml", tmp_path / "p.json"
    args = ["plan", "--topology", TINY, "--workload", "tiny", "--stack", "bare", "--refine"]
    args += ["--max-evals", "6", "--format", "json", "--out", str(out), "--to-torchrec", str(tr)]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)["refine"]
    assert report["simulations"] == 6 and report["gain"] >= 0
    run = ["run", "--topology", TINY, "--workload", "tiny", "--stack", "bare", "--plan"]
    for plan in (out, tr):
        assert main([*run, str(plan), "--iterations", "2", "--format", "json", "--no-plot",
                     "--out", str(tmp_path / plan.suffix[1:])]) == 0  # fmt: skip
        summary = json.loads(capsys.readouterr().out)
        assert summary["iteration_time_s"] == pytest.approx(report["refined_iteration_s"])


def test_refine_options_need_refine(capsys):
    """--budget without --refine is bad input: exit 2 with one line."""
    assert main(["plan", "--topology", TINY, "--workload", "tiny", "--budget", "5"]) == 2
    assert "--budget" in capsys.readouterr().err
