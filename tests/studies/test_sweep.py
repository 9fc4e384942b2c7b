"""Sweeps: grid expansion, validation, local pool vs Dask, resume, failing points."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.base.errors import InputError
from zionsim.studies import sweep as sw

TINY_SWEEP = {
    "base": {"topology": TINY, "workload": "tiny", "iterations": 2},
    "grid": {"nodes": [1, 2], "topology.scale_out.nic_bw": ["100Gbps", "200Gbps"]},
}


@pytest.fixture(scope="module")
def scheduler():
    """Address of a 2-process Dask LocalCluster over TCP, shared by the module."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, protocol="tcp", dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The tiny 4-point sweep run by a local pool of 2: (out_dir, table)."""
    out = tmp_path_factory.mktemp("local")
    return out, sw.run_sweep(sw.sweep_from_dict(TINY_SWEEP), out, workers=2, progress=False)


def test_points_are_the_cartesian_product_in_file_order():
    """4 points, last grid key fastest, each = base + grid values, ids unique and stable."""
    s = sw.sweep_from_dict(TINY_SWEEP)
    pts = sw.points(s)
    assert [(p["nodes"], p["topology.scale_out.nic_bw"]) for p in pts] == [
        (1, "100Gbps"),
        (1, "200Gbps"),
        (2, "100Gbps"),
        (2, "200Gbps"),
    ]
    assert all(p["workload"] == "tiny" and p["iterations"] == 2 for p in pts)
    assert len({p["point_id"] for p in pts}) == 4
    assert [p["point_id"] for p in sw.points(sw.sweep_from_dict(TINY_SWEEP))] == [
        p["point_id"] for p in pts
    ]


def test_point_id_depends_on_base_and_not_on_key_order():
    """Changing base changes the id; reordering keys does not."""
    assert sw.point_id({"a": 1, "b": 2}) == sw.point_id({"b": 2, "a": 1})
    assert sw.point_id({"a": 1, "b": 2}) != sw.point_id({"a": 1, "b": 3})


def test_load_sweep_reads_yaml(tmp_path):
    """A YAML file with base and grid loads; a sweep without grid is one point."""
    f = tmp_path / "s.yaml"
    f.write_text("base: {workload: tiny}\ngrid:\n  batch_per_gpu: [16, 32]\n")
    s = sw.load_sweep(f)
    assert s.grid == {"batch_per_gpu": [16, 32]} and s.file == str(f)
    assert len(sw.points(sw.sweep_from_dict({"base": {"nodes": 1}}))) == 1


@pytest.mark.parametrize(
    "data, field",
    [
        ({"base": {}, "grd": {}}, "grd"),
        ({"grid": {"nodez": [1]}}, "grid.nodez"),
        ({"base": {"topology.": 1}}, "base.topology."),
        ({"grid": {"nodes": []}}, "grid.nodes"),
        ({"grid": {"nodes": 2}}, "grid.nodes"),
        ({"grid": {"nodes": [1, 1]}}, "grid.nodes"),
        ({"base": [1]}, "base"),
    ],
)
def test_bad_sweeps_name_file_and_field(data, field):
    """Unknown keys, empty/repeated/non-list grid values: InputError naming file and field."""
    with pytest.raises(InputError) as err:
        sw.sweep_from_dict(data, "s.yaml")
    assert err.value.file == "s.yaml" and err.value.field == field


def test_missing_sweep_file_is_an_input_error(tmp_path):
    """A missing file is reported as such."""
    with pytest.raises(InputError, match="no such file"):
        sw.load_sweep(tmp_path / "nope.yaml")


def test_summary_row_flattens_dicts_and_drops_lists():
    """Nested dicts become dotted columns; list-valued fields are dropped."""
    row = sw.summary_row({"x": 1, "b": {"gemm": 2.0, "d": {"e": 3}}, "critical_path": [{}]})
    assert row == {"x": 1, "b.gemm": 2.0, "b.d.e": 3}


def test_table_has_one_row_per_point_and_is_written(local_run):
    """In grid order; parameters, figures, status, error, sim_wall_s; files agree."""
    out, table = local_run
    assert len(table) == 4
    assert list(table["point_id"]) == [
        p["point_id"] for p in sw.points(sw.sweep_from_dict(TINY_SWEEP))
    ]
    assert (table["status"] == "ok").all() and table["error"].isna().all()
    for col in ("nodes", "topology.scale_out.nic_bw", "breakdown_s.gemm", "gpus", "sim_wall_s"):
        assert col in table.columns
    assert "critical_path" not in table.columns and "summary.nodes" in table.columns
    assert sorted(p.stem for p in (out / "points").glob("*.json")) == sorted(table["point_id"])
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), table)
    assert len(pd.read_csv(out / "results.csv")) == 4


def test_more_nic_bandwidth_is_never_slower(local_run):
    """At 2 nodes, 200 Gb/s NICs give at least the samples/s of 100 Gb/s."""
    t = local_run[1].set_index(["nodes", "topology.scale_out.nic_bw"])["samples_per_s"]
    assert t[(2, "200Gbps")] >= t[(2, "100Gbps")] * (1 - 1e-12)  # float sums
    assert (t > 0).all()


def test_dask_cluster_gives_the_local_table(local_run, scheduler, tmp_path):
    """The same sweep on a 2-worker Dask LocalCluster over TCP: the same table."""
    table = sw.run_sweep(
        sw.sweep_from_dict(TINY_SWEEP), tmp_path, scheduler=scheduler, progress=False
    )
    pd.testing.assert_frame_equal(
        table.drop(columns="sim_wall_s"), local_run[1].drop(columns="sim_wall_s")
    )


def test_resume_redoes_only_missing_or_failed_points(local_run, tmp_path):
    """After a 'kill' (files lost, one truncated, a stray temp file) only those points rerun."""
    src, table = local_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    files = sorted((out / "points").glob("*.json"))
    files[0].unlink()
    files[1].write_text('{"point_id": "trunc')
    (out / "points" / f".{files[2].name}.tmp123").write_text("{")
    kept = {f.name: f.stat().st_mtime_ns for f in files[2:]}
    again = sw.run_sweep(sw.sweep_from_dict(TINY_SWEEP), out, workers=1, progress=False)
    assert {f.name: f.stat().st_mtime_ns for f in files[2:]} == kept
    assert all(f.exists() for f in files)
    pd.testing.assert_frame_equal(
        again.drop(columns="sim_wall_s"), table.drop(columns="sim_wall_s")
    )
    kept_ids = [f.stem for f in files[2:]]  # untouched points keep even their wall time
    pd.testing.assert_frame_equal(
        again.set_index("point_id").loc[kept_ids], table.set_index("point_id").loc[kept_ids]
    )


def test_a_bad_point_records_its_error_and_is_retried(scheduler, tmp_path):
    """A negative NIC bandwidth fails alone with its one-line message; a rerun retries it."""
    bad = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 2},
        "grid": {"topology.scale_out.nic_bw": ["-1Gbps", "100Gbps"]},
    }
    s = sw.sweep_from_dict(bad)
    table = sw.run_sweep(s, tmp_path, scheduler=scheduler, progress=False).set_index(
        "topology.scale_out.nic_bw"
    )
    assert table.loc["100Gbps", "status"] == "ok" and table.loc["100Gbps", "samples_per_s"] > 0
    assert table.loc["-1Gbps", "status"] == "error"
    assert "scale_out.nic_bw: must be > 0" in table.loc["-1Gbps", "error"]
    assert pd.isna(table.loc["-1Gbps", "samples_per_s"])
    ids = dict(zip(table.index, table["point_id"], strict=True))
    files = {k: tmp_path / "points" / f"{v}.json" for k, v in ids.items()}
    before = {k: f.stat().st_mtime_ns for k, f in files.items()}
    sw.run_sweep(s, tmp_path, scheduler=scheduler, progress=False)
    assert files["100Gbps"].stat().st_mtime_ns == before["100Gbps"]
    assert files["-1Gbps"].stat().st_mtime_ns != before["-1Gbps"]


def test_run_one_records_any_exception(monkeypatch):
    """A non-input failure is recorded as 'Type: message', not raised."""

    def boom(_options, _limit=None):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(sw, "_run_reusing", boom)
    rec = sw.run_one({"point_id": "abc", "nodes": 1})
    assert rec["status"] == "error" and rec["error"] == "RuntimeError: boom second line"
    assert rec["parameters"] == {"nodes": 1} and rec["figures"] == {}


def test_workers_must_be_positive(tmp_path):
    """workers=0 is an input error."""
    with pytest.raises(InputError, match="workers"):
        sw.run_sweep(sw.sweep_from_dict(TINY_SWEEP), tmp_path, workers=0)


def _yaml(path, data) -> str:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_killed_sweep_resumes_without_redoing_or_losing_points(tmp_path):
    """SIGKILL a running `zionsim sweep` after 2+ points are written; the rerun does the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    data = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 120},
        "grid": {"batch_per_gpu": [8, 16, 24, 32, 40, 48, 56, 64]},
    }
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "zionsim.cli", "sweep", _yaml(tmp_path / "s.yaml", data)]
    cmd += ["--out", str(out), "--workers", "1", "--no-progress", "--format", "csv"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    try:
        while len(list(out.glob("points/*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = {f.stem: f.stat().st_mtime_ns for f in out.glob("points/*.json")}
    all_ids = {p["point_id"] for p in sw.points(sw.sweep_from_dict(data))}
    assert 2 <= len(done) < len(all_ids) and not (out / "results.parquet").exists()
    table = sw.run_sweep(sw.sweep_from_dict(data), out, workers=1, progress=False)
    after = {f.stem: f.stat().st_mtime_ns for f in out.glob("points/*.json")}
    rerun = {pid for pid in after if done.get(pid) != after[pid]}
    assert rerun == all_ids - set(done)  # finished points untouched, the others run once
    assert set(table["point_id"]) == all_ids and (table["status"] == "ok").all()


def test_cli_sweep_gives_the_library_table(local_run, tmp_path, capsys):
    """`zionsim sweep FILE --out DIR`: the same table as run_sweep; one printed row per point."""
    from zionsim.cli.main import main

    f = _yaml(tmp_path / "s.yaml", TINY_SWEEP)
    out = tmp_path / "cli"
    assert main(["sweep", f, "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 + 4 and "samples_per_s" in printed[0]
    table = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(
        table.drop(columns="sim_wall_s"), local_run[1].drop(columns="sim_wall_s")
    )


def test_cli_sweep_with_a_bad_point_exits_1_and_keeps_the_others(tmp_path, capsys):
    """A failing point: exit status 1, its error in results.csv, the good point ok."""
    from zionsim.cli.main import main

    data = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 2},
        "grid": {"topology.scale_out.nic_bw": ["-1Gbps", "100Gbps"]},
    }
    out = tmp_path / "o"
    rc = main(
        [
            "sweep",
            _yaml(tmp_path / "s.yaml", data),
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
            "--format",
            "json",
        ]
    )
    assert rc == 1
    assert "1 of 2 points failed" in capsys.readouterr().err
    t = pd.read_csv(out / "results.csv").set_index("topology.scale_out.nic_bw")
    assert t.loc["100Gbps", "status"] == "ok"
    assert "scale_out.nic_bw: must be > 0" in t.loc["-1Gbps", "error"]


def test_cli_sweep_bad_file_is_one_line(tmp_path, capsys):
    """An unknown grid key: exit 2 and one line naming the field."""
    from zionsim.cli.main import main

    f = _yaml(tmp_path / "s.yaml", {"grid": {"nodez": [1]}})
    assert main(["sweep", f, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "grid.nodez" in err and "\n" not in err


def test_studies_command_rejects_unknown_names(capsys):
    """``zionsim studies NAME`` names the allowed studies when NAME is not one."""
    from zionsim.cli.main import main

    assert main(["studies", "nope"]) == 2
    assert "unknown study 'nope'" in capsys.readouterr().err


def test_points_over_the_memory_limit_are_error_records(tmp_path):
    """A point the resource guard refuses is an error record naming estimate and limit."""
    s = sw.sweep_from_dict({"base": {"topology": TINY, "workload": "tiny", "iterations": 2}})
    table = sw.run_sweep(s, tmp_path, max_memory="1MB", progress=False)
    assert list(table["status"]) == ["error"]
    assert "needs about" in table["error"][0] and "the limit is 0.001 GB" in table["error"][0]
