"""``zionsim jobs``: the JSON of the issue's schema, the result folder, and bad scenarios
refused in one line with exit status 2."""

from __future__ import annotations

import json

import pytest

from zionsim.cli.main import main

ISSUE = """cluster: {topology: zionex, nodes: 4, set: ["scale_out.switch_radix=16"]}
jobs:
  - {name: a, workload: mlperf_dlrm, nodes: [0, 2], iterations: 4}
  - {name: b, workload: mlperf_dlrm, count: 2, placement: spread, seed: 1, weight: 1}
"""


def _write(tmp_path, text: str):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


def test_json_has_each_jobs_slowdown(tmp_path, capsys):
    assert main(["jobs", _write(tmp_path, ISSUE), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = {"name", "nodes", "iteration_time_s", "samples_per_s", "alone_iteration_time_s",
            "slowdown"}  # fmt: skip
    assert [j["name"] for j in data["jobs"]] == ["a", "b"]
    assert all(keys <= set(j) for j in data["jobs"])
    assert "links" in data


def test_out_folder_and_table(tmp_path, capsys):
    out = tmp_path / "res"
    argv = ["jobs", _write(tmp_path, ISSUE), "--out", str(out), "--set", "jobs.weight=2"]
    assert main(argv) == 0
    assert "slowdown_pct" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"jobs.json", "jobs.csv", "links.csv", "jobs.png", "a.summary.json"} <= names


@pytest.mark.parametrize(
    "text, words",
    [
        ("cluster: {nodes: 4}\njobs: []\n", "jobs"),
        ("jobs: [{name: a, workload: tiny, count: 1}]\n", "cluster"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny}]\n", "nodes"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 9}]\n", "count"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 2, placement: x}]\n",
         "placement"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: nope, count: 2}]\n", "workload"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 2, itertions: 2}]\n",
         "itertions"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, nodes: [0, 7]}]\n", "nodes"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, nodes: [0]},"
         " {name: b, workload: tiny, nodes: [0]}]\n", "already used"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 2, weight: -1}]\n",
         "weight"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 1},"
         " {name: c, kind: traffic, src: [zz], dst: [3], bytes: 1 GB, period: 1 ms}]\n", "zz"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 1},"
         " {name: c, kind: traffic, src: [a], dst: [3], bytes: 1, period: 1 ms}]\n", "bytes"),
        ("cluster: {nodes: 4, set: [nonsense]}\njobs: [{name: a, workload: tiny, count: 1}]\n",
         "set"),
        ("cluster: {nodes: 4}\njobs: [{name: a, workload: tiny, count: 1,"
         " topology.gpu: h100}]\n", "cluster"),
    ],
)  # fmt: skip
def test_bad_scenarios_are_refused_in_one_line(tmp_path, capsys, text, words):
    path = _write(tmp_path, text)
    assert main(["jobs", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zionsim: error: ")
    assert path in err and words in err


def test_missing_file_and_bad_set(tmp_path, capsys):
    assert main(["jobs", str(tmp_path / "none.yaml")]) == 2
    assert main(["jobs", _write(tmp_path, ISSUE), "--set", "jobs.x.y=1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(e.startswith("zionsim: error: ") for e in err)


def test_one_job_scenario_writes_zionsim_runs_summary(tmp_path, capsys):
    """The acceptance check from outside: a one-job scenario over the whole cluster writes the
    ``summary.json`` that ``zionsim run`` writes for the same job, byte for byte."""
    scenario = _write(tmp_path, "cluster: {topology: zionex, nodes: 2}\n"
                                "jobs: [{name: a, workload: tiny, count: 2}]\n")  # fmt: skip
    run, jobs = tmp_path / "run", tmp_path / "jobs"
    assert main(["run", "--workload", "tiny", "--nodes", "2", "--out", str(run)]) == 0
    assert main(["jobs", scenario, "--out", str(jobs), "--no-plot"]) == 0
    assert (run / "summary.json").read_bytes() == (jobs / "a.summary.json").read_bytes()
