"""Every bad input or broken environment of issue 30 ends in one line: exit 2 for bad input,
1 for the machine (a full disk, a Dask cluster without workers), 130 for Ctrl-C."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tests.conftest import TINY
from zionsim.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUN = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "2", "--no-plot"]


def _one_line(capsys, says: str) -> None:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["calibrate", "--nccl-log", "/no/such.log", "--out", "OUT/c.yaml"], "no such file"),
        (["calibrate", "--nccl-log", str(EXAMPLES), "--out", "OUT/c.yaml"], "is a folder"),
        (["plan", "--topology", TINY, "--workload", "tiny", "--refine", "--budget", "nan"],
         "finite"),
        (["plan", "--topology", TINY, "--workload", "tiny", "--refine", "--budget", "inf"],
         "finite"),
        (["plan", "--topology", TINY, "--workload", "tiny", "--refine", "--seed", "-1"], "seed"),
        ([*RUN, "--out", "/proc/no/such/folder"], "/proc/no"),
        (["sweep", str(EXAMPLES / "nic_speed.yaml"), "--scheduler", "garbage://x",
          "--out", "OUT/s"], "not a Dask scheduler address"),
        (["trace", "--import-kineto", str(EXAMPLES / "profile.json"), "--out", "OUT/t.json"],
         "--global-batch"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(argv, says, tmp_path, capsys):
    """Each of these used to end in a traceback (or a silent 0 samples/s)."""
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    _one_line(capsys, says)


def test_oversized_kernel_csv_cell(tmp_path, capsys):
    """A kernel CSV cell beyond csv's field limit (131,072 characters) is bad input."""
    big = tmp_path / "k.csv"
    big.write_text("kind,time_us,m,n,k,dtype\ngemm," + "1" * 140_000 + ",1,1,1,fp16\n")
    assert main(["calibrate", "--kernels", str(big), "--out", str(tmp_path / "c.yaml")]) == 2
    _one_line(capsys, "field limit")


def test_full_disk_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    """An OSError of the machine (no space left) is exit 1 with the file and a hint."""
    import zionsim.io.files as files

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "r"))

    monkeypatch.setattr(files, "write_run", full)
    assert main([*RUN, "--out", str(tmp_path / "r")]) == 1
    _one_line(capsys, "No space left on device")


def test_ctrl_c_in_a_sweep_is_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C while points run: exit 130, one line, no traceback."""
    import zionsim.studies.sweep as sweep

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_run_local", interrupted)
    out = tmp_path / "s"
    assert main(["sweep", str(EXAMPLES / "nic_speed.yaml"), "--out", str(out)]) == 130
    _one_line(capsys, "interrupted")


def test_grid_typo_is_refused_before_any_point(tmp_path, monkeypatch, capsys):
    """A misspelt grid path is caught up front, naming the grid key, with no point run."""
    import zionsim.studies.sweep as sweep

    monkeypatch.setattr(sweep, "_run_local", lambda *a, **k: pytest.fail("a point ran"))
    bad = tmp_path / "typo.yaml"
    bad.write_text(f"base: {{topology: {TINY}, workload: tiny}}\n"
                   "grid:\n  topology.scale_out.nic_bww: [100Gbps, 200Gbps]\n")  # fmt: skip
    assert main(["sweep", str(bad), "--out", str(tmp_path / "s")]) == 2
    _one_line(capsys, "grid.topology.scale_out.nic_bww")


def test_truncated_point_file_is_recomputed_with_a_message(tmp_path, capsys):
    """A point file cut short is recomputed, and the sweep says so."""
    out = tmp_path / "s"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {{topology: {TINY}, workload: tiny, iterations: 2}}\n"
                     "grid:\n  batch_per_gpu: [8, 16]\n")  # fmt: skip
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    point = sorted((out / "points").glob("*.json"))[0]
    point.write_text(point.read_text()[:40])
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    assert "unreadable (truncated or not JSON)" in capsys.readouterr().err


def test_dask_without_workers_fails_naming_the_scheduler(tmp_path, monkeypatch, capsys):
    """A scheduler with no worker: the sweep fails after the stated wait, naming it (exit 1)."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("ZIONSIM_DASK_WORKER_TIMEOUT", "1")
    with distributed.LocalCluster(
        n_workers=0, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        argv = ["sweep", str(EXAMPLES / "nic_speed.yaml"), "--out", str(tmp_path / "s"),
                "--scheduler", cluster.scheduler_address]  # fmt: skip
        assert main(argv) == 1
    _one_line(capsys, f"no live Dask worker at the scheduler {cluster.scheduler_address}")
