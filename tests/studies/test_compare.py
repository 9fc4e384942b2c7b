"""A-vs-B attribution: components sum to the iteration time; the CLI prints and writes it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.cli.main import main
from zionsim.sim.run import run_point
from zionsim.studies import compare as cmp


def _summary(it, cp, busy):
    return {"iteration_time_s": it, "breakdown_s": cp, "busy_s": busy, "samples_per_s": 1 / it}


@pytest.fixture(scope="module")
def runs():
    """Two tiny runs (2 nodes x 2 GPUs, round-robin plan) that differ only in NIC speed."""
    return [
        run_point(
            {
                "topology": TINY,
                "workload": "tiny",
                "iterations": 2,
                "plan": "round_robin",
                "stack": "bare",  # the network's own difference, no host time to hide it
                "topology.scale_out.nic_bw": bw,
            }
        )
        for bw in ("2Gbps", "25Gbps")
    ]


def test_components_split_balanced_compute_from_imbalance():
    """Compute on the path beyond the rank mean, plus idle, is imbalance; comm counts whole."""
    s = _summary(
        10.0,
        {"embedding": 4.0, "gemm": 3.0, "all_to_all": 2.0, "idle": 1.0},
        {"embedding": 3.0, "gemm": 3.5, "all_to_all": 5.0},
    )
    c = cmp.components(s)
    assert c["embedding"] == 3.0 and c["gemm"] == 3.0 and c["all_to_all"] == 2.0
    assert c["imbalance"] == pytest.approx(1.0 + 1.0)
    assert sum(c.values()) == pytest.approx(10.0)


def test_attribution_rows_sum_to_the_difference(runs):
    """Component deltas sum to the iteration-time delta; shares sum to 1; subtotal is comm."""
    a, b = (r.summary for r in runs)
    t = cmp.attribute(a, b).set_index("component")
    parts = t.drop(index=["exposed_communication", "iteration_time"])
    for col in ("a_s", "b_s", "delta_s"):
        assert parts[col].sum() == pytest.approx(t.loc["iteration_time", col], rel=1e-9)
    assert parts["share_of_delta"].sum() == pytest.approx(1.0)
    exposed = (
        t.loc[t["group"] == "exposed_communication", "delta_s"].sum()
        - t.loc["exposed_communication", "delta_s"]
    )
    assert t.loc["exposed_communication", "delta_s"] == pytest.approx(exposed)
    assert t.loc["iteration_time", "a_s"] == a["iteration_time_s"]


def test_faster_nics_save_communication_not_compute(runs):
    """12.5x NIC bandwidth: the time saved is exposed communication; GEMM time is unchanged."""
    a, b = (r.summary for r in runs)
    t = cmp.attribute(a, b).set_index("component")
    assert t.loc["iteration_time", "delta_s"] < 0
    assert t.loc["exposed_communication", "delta_s"] < 0
    assert t.loc["gemm", "delta_s"] == pytest.approx(0.0, abs=1e-12)
    assert cmp.largest_change(cmp.attribute(a, b)) in cmp.COMMUNICATION


def test_identical_runs_have_zero_delta_and_no_share(runs):
    """A vs A: every delta is 0, shares are NaN, speed-up 1."""
    s = runs[0].summary
    t = cmp.attribute(s, s)
    assert (t["delta_s"] == 0).all() and t["share_of_delta"].isna().all()
    assert cmp.headline(s, s)["speedup_b_over_a"] == 1.0


def test_cli_compare_prints_and_writes(runs, tmp_path, capsys):
    """zionsim compare RUN_A RUN_B: table on stdout; compare.csv/.json/.png in --out."""
    from zionsim.io.files import write_run

    dirs = [tmp_path / "slow", tmp_path / "fast"]
    for d, r in zip(dirs, runs, strict=True):
        write_run(d, r, plot=False)
    out = tmp_path / "cmp"
    assert main(["compare", str(dirs[0]), str(dirs[1]), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "slow_ms" in text and "fast_ms" in text and "exposed_communication" in text
    table = pd.read_csv(out / "compare.csv")
    assert (
        set(cmp.ROWS) <= set(table["component"]) and table["component"].iloc[-1] == "iteration_time"
    )
    report = json.loads((out / "compare.json").read_text())
    assert report["a"] == "slow" and report["speedup_b_over_a"] > 1
    assert report["components"][-1]["component"] == "iteration_time"
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")
    assert (
        main(
            [
                "compare",
                str(dirs[0] / "summary.json"),
                str(dirs[1]),
                "--format",
                "json",
                "--out",
                str(out),
                "--no-plot",
                "--force",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["b"] == "fast"


def test_cli_compare_bad_run_is_one_line(tmp_path, capsys):
    """A folder without summary.json: exit 2, one line naming it."""
    assert main(["compare", str(tmp_path), str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "RUN_A" in err and "summary.json" in err


def test_host_time_is_its_own_row_not_communication():
    """The stack's ``framework`` host time is group ``host``: never in exposed_communication."""
    path = {"gemm": 2.0, "framework": 7.0, "all_to_all": 1.0}
    busy = {"gemm": 2.0, "framework": 7.0, "all_to_all": 3.0}
    a = {"iteration_time_s": 10.0, "breakdown_s": path, "busy_s": busy}
    b = {**a, "iteration_time_s": 8.0, "breakdown_s": {**a["breakdown_s"], "framework": 5.0}}
    t = cmp.attribute(a, b).set_index("component")
    assert t.loc["framework", "group"] == "host" and t.loc["framework", "delta_s"] == -2.0
    assert t.loc["exposed_communication", "a_s"] == 1.0
    parts = t.drop(index=["exposed_communication", "iteration_time"])
    assert parts["a_s"].sum() == pytest.approx(10.0) and parts["b_s"].sum() == pytest.approx(8.0)
