"""``zionsim run --variability/--fault/--samples/--seed`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from zionsim.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "variability.yaml")
BASE = ["run", "--workload", "tiny", "--nodes", "2", "--stack", "bare"]


def test_samples_write_a_distribution_and_rerun_identically(tmp_path, capsys):
    out = tmp_path / "v"
    args = [*BASE, "--variability", EXAMPLE, "--samples", "16", "--seed", "4", "--out", str(out)]
    assert main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    t = s["distribution"]["iteration_time_s"]
    assert s["distribution"]["samples"] == 16
    assert t["p50"] <= t["p95"] and t["ci95"][0] <= t["mean"] <= t["ci95"][1]
    assert (out / "samples.csv").exists() and (out / "distribution.png").exists()
    assert s["inputs"]["options"]["samples"] == 16
    assert main(["rerun", str(out), "--out", str(tmp_path / "again")]) == 0


def test_plain_run_has_no_variability_files(tmp_path):
    out = tmp_path / "p"
    assert main([*BASE, "--out", str(out), "--no-plot"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert "distribution" not in s and not (out / "samples.csv").exists()
    assert not {"variability", "fault", "samples"} & set(s["inputs"]["options"])


def test_failed_node_is_a_record_not_a_traceback(tmp_path, capsys):
    out = tmp_path / "n"
    assert main([*BASE, "--fault", "node=n1", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "stopped" and "node n1" in s["stopped_reason"]
    assert "job stopped" in capsys.readouterr().err


def test_bad_fault_exits_2_with_one_line(tmp_path, capsys):
    assert main([*BASE, "--fault", "nic=n7:0", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no NIC n7/nic0" in err[0]
