"""Output safety of zionsim/io/files.py and the commands that write: nothing foreign replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import TINY
from zionsim.base.errors import InputError
from zionsim.cli.main import main
from zionsim.io.files import (
    MARKER,
    TMP_PREFIX,
    check_result_target,
    is_partial,
    safe_name,
    write_atomic,
    write_result_dir,
)

RUN = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "2", "--no-plot"]


def test_safe_name_keeps_one_plain_component():
    """Names from input files become one visible path component."""
    assert safe_name("../x") == "x"
    assert safe_name("/etc/passwd") == "etc_passwd"
    assert safe_name("..") == "unnamed"
    assert "/" not in safe_name("a/../../b")


def test_device_node_is_refused_without_touching_it():
    """``/dev/null`` (a device) is never a result folder, even with force."""
    for force in (False, True):
        with pytest.raises(InputError, match="device"):
            check_result_target(Path("/dev/null"), force=force)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_out_exits_2(tmp_path, capsys):
    """A pipe given as --out is refused with one line and left in place."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main([*RUN, "--out", str(fifo), "--force"]) == 2
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert "--out" in capsys.readouterr().err


def test_working_folder_and_root_are_refused(tmp_path, monkeypatch):
    """``.``, a parent of the working folder and ``/`` are refused even with --force."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    for out in (".", "..", "/"):
        assert main([*RUN, "--out", out, "--force"]) == 2
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_foreign_folder_is_never_replaced(tmp_path, capsys):
    """A non-empty folder without the marker is kept, --force or not; an empty one is used."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    assert main([*RUN, "--out", str(out)]) == 2
    assert main([*RUN, "--out", str(out), "--force"]) == 2
    assert "--force replaces only zionsim results" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "years of work"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*RUN, "--out", str(empty)]) == 0
    assert (empty / MARKER).is_file()


def test_tmp_is_refused_with_force(capsys):
    """``--out /tmp --force``: /tmp is a foreign folder (or, for a checkout below /tmp, one of
    the working folder's ancestors), refused before anything is moved."""
    assert main([*RUN, "--out", "/tmp", "--force"]) == 2
    err = capsys.readouterr().err
    below_tmp = Path.cwd().resolve().is_relative_to(Path("/tmp").resolve())
    assert ("working folder (or above it)" if below_tmp else "did not write") in err
    assert Path("/tmp").is_dir()


def test_foreign_out_is_refused_before_any_simulation(tmp_path, monkeypatch, capsys):
    """``run``, ``collective`` and ``validate`` check --out before they simulate anything."""
    import zionsim.measure.validate as validate
    import zionsim.network.simulate as network_simulate
    import zionsim.sim.run as run

    def fail(*_a, **_k):
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr(run, "simulate_inputs", fail)
    monkeypatch.setattr(run, "trace_of", fail)
    monkeypatch.setattr(network_simulate, "simulate_collective", fail)
    monkeypatch.setattr(validate, "run_cases", fail)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    neo = ["run", "--workload", "neo_model_a", "--iterations", "20", "--out", str(out)]
    assert main(neo) == 2
    assert main(["collective", "--topology", TINY, "--out", str(out), "--force"]) == 2
    assert main(["validate", "--fast", "--out", str(out)]) == 2
    assert main(["trace", "--workload", "tiny", "--out", str(out / "notes.txt")]) == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_result_of_other_inputs_needs_force(tmp_path):
    """--out onto a zionsim result of different inputs is refused; the same inputs replace it."""
    out = str(tmp_path / "r")
    assert main([*RUN, "--out", out]) == 0
    assert main([*RUN, "--out", out]) == 0  # same inputs: a rerun replaces its own result
    assert main([*RUN, "--out", out, "--plan", "round_robin"]) == 2
    assert main([*RUN, "--out", out, "--plan", "round_robin", "--force"]) == 0


def test_default_folders_differ_by_inputs(tmp_path, monkeypatch):
    """Two runs that differ only in --plan leave two folders."""
    monkeypatch.chdir(tmp_path)
    assert main(RUN) == 0
    assert main([*RUN, "--plan", "round_robin"]) == 0
    runs = sorted(p.name for p in (tmp_path / "results" / "runs").iterdir())
    assert len(runs) == 2 and all(r.startswith("tiny_") for r in runs)


def test_workload_name_cannot_escape_results(tmp_path, monkeypatch):
    """A workload ``name: ../x`` still writes inside results/runs/."""
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, "--set", "workload.name=../../escaped"]) == 0
    assert not any(p.name.startswith("escaped") for p in tmp_path.iterdir())
    assert not any(p.name.startswith("escaped") for p in (tmp_path / "results").iterdir())
    assert any(p.name.startswith("escaped") for p in (tmp_path / "results" / "runs").iterdir())


def test_file_outputs_refuse_folders_and_foreign_files(tmp_path):
    """plan/trace --out onto a folder or someone's file exits 2 and leaves no temporary."""
    argv = ["plan", "--topology", TINY, "--workload", "tiny"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine: true\n")
    assert main([*argv, "--out", str(notes)]) == 2
    assert notes.read_text() == "mine: true\n"
    plan = tmp_path / "plan.yaml"
    assert main([*argv, "--out", str(plan)]) == 0
    assert main([*argv, "--out", str(plan)]) == 0  # its own file: replaced
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_failed_write_leaves_nothing(tmp_path):
    """An error half-way through a result folder removes the temporary and keeps the old one."""

    out = tmp_path / "r"
    write_result_dir(out, {"a.txt": "old"}, inputs="x")
    with pytest.raises(TypeError):
        write_result_dir(out, {"a.txt": "new", "b.txt": object()}, inputs="x")  # type: ignore[dict-item]
    assert (out / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r"]
    with pytest.raises(InputError):
        write_atomic(tmp_path, "x")


def test_partial_folders_are_not_read(tmp_path):
    """A temporary folder left by a killed run is refused by compare and plot."""
    out = tmp_path / "r"
    assert main([*RUN, "--out", str(out)]) == 0
    partial = tmp_path / f"{TMP_PREFIX}r.999999.abc"
    out.rename(partial)
    assert is_partial(partial)
    assert main(["compare", str(partial), str(partial), "--no-plot"]) == 2
    assert main(["plot", str(partial)]) == 2


#: a `zionsim` that pauses 0.5 s after each file it writes into a temporary result folder, so a
#: kill lands mid-write deterministically (instrumentation of the test, not of zionsim)
SLOW_WRITER = """
import pathlib, sys, time
_write = pathlib.Path.write_bytes
def _slow(self, data):
    n = _write(self, data)
    if ".zionsim-tmp-" in str(self):
        time.sleep(0.5)
    return n
pathlib.Path.write_bytes = _slow
from zionsim.cli.main import main
sys.exit(main())
"""


def _kill_mid_write(tmp_path, out: Path, sig: int = 9) -> list[Path]:
    """Start a slow `zionsim run --out OUT`, send ``sig`` (SIGKILL) once its temporary folder
    holds a file; return the temporary folders left; fail if any process of it survives."""
    import subprocess
    import sys
    import time

    from tests.procs import GRACE_S, descendants, survivors, wait_for

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-c", SLOW_WRITER, *RUN, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pattern = f"{TMP_PREFIX}{out.name}.*/*"
    try:
        assert wait_for(lambda: any(out.parent.glob(pattern)), 60), "never started writing"
        below = descendants(proc.pid)
        proc.send_signal(sig)
        assert proc.wait() in (-sig, 128 + sig)
        assert wait_for(lambda: not survivors(below), GRACE_S)
    finally:
        proc.kill()
    time.sleep(0.05)
    return [p for p in out.parent.glob(f"{TMP_PREFIX}{out.name}.*") if p.is_dir()]


def test_kill_9_mid_write_leaves_no_result_and_the_partial_is_never_read(tmp_path, capsys):
    """kill -9 while the result folder is being written: OUT does not exist, the temporary
    folder is refused by plot and compare, and the next run replaces it with a whole result."""
    out = tmp_path / "r"
    (partial,) = _kill_mid_write(tmp_path, out)
    assert not out.exists() and not (partial / MARKER).exists()
    assert main(["plot", str(out)]) == 2 and main(["plot", str(partial)]) == 2
    assert main(["compare", str(partial), str(partial), "--no-plot"]) == 2
    assert "unfinished write" in capsys.readouterr().err
    assert main([*RUN, "--out", str(out)]) == 0
    assert (out / MARKER).is_file() and (out / "summary.json").is_file()
    assert not partial.exists()  # the stale temporary of the dead writer is removed


def test_kill_9_while_replacing_keeps_the_old_result(tmp_path):
    """kill -9 of a run rewriting an existing result: the old folder is still whole in place."""
    out = tmp_path / "r"
    assert main([*RUN, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "timing.json"}
    _kill_mid_write(tmp_path, out)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "timing.json"}
    assert after == before


def test_sigterm_mid_write_removes_the_temporary(tmp_path):
    """SIGTERM while writing: the command exits 143 and leaves neither OUT nor a temporary."""
    import signal

    out = tmp_path / "r"
    assert _kill_mid_write(tmp_path, out, signal.SIGTERM) == []
    assert not out.exists()


def test_trace_ranks_sample_large_runs_only():
    """Below 256 ranks every rank is traced; above, node 0, an even spread and the last rank."""
    from zionsim.sim.results import trace_ranks

    assert trace_ranks(128, 8) == list(range(128))
    big = trace_ranks(2048, 8)
    assert big[:8] == list(range(8)) and big[-1] == 2047 and len(big) <= 17
    assert trace_ranks(2048, 8, "all") == list(range(2048))
    assert trace_ranks(16, 8, [5, 3, 5]) == [3, 5]
    with pytest.raises(InputError):
        trace_ranks(16, 8, [16])


def test_run_files_keep_network_rows_and_every_ranks_totals(tmp_path, tiny_cluster):
    """With --trace-ranks, events and trace.json hold those ranks' op spans and every network
    row; ranks.csv still sums every rank, and equals the totals of the full events."""
    import json

    import pandas as pd

    from zionsim.dlrm.workload import load_workload
    from zionsim.io.files import write_run
    from zionsim.sim.run import simulate_run

    r = simulate_run(tiny_cluster, load_workload("tiny"), iterations=2, warmup=1)
    out = write_run(tmp_path / "run", r, plot=False, trace_ranks=[1])
    ev = pd.read_parquet(out / "events.parquet")
    assert set(ev["rank"]) == {-1, 1}
    assert (ev["rank"] == -1).sum() == (r.events["rank"] == -1).sum()
    pids = {e["pid"] for e in json.loads((out / "trace.json").read_text())["traceEvents"]}
    assert pids == {-1, 1}
    totals = pd.read_csv(out / "ranks.csv")
    assert set(totals["rank"]) == set(r.events["rank"])
    assert totals["busy_s"].sum() == pytest.approx(r.events["duration_s"].sum())
