"""Where points run: kill -9 of a sweep's parent leaves no process behind and nothing partial
is read; the Dask path refuses plain TCP to other hosts and runs over TLS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY
from tests.procs import GRACE_S, descendants, survivors, wait_for
from zionsim.base.errors import InputError
from zionsim.studies import pool
from zionsim.studies import sweep as sw


def start(argv: list[str], cwd: Path) -> subprocess.Popen:
    """``python -m zionsim ARGV`` in its own session, output discarded."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-m", "zionsim", *argv],
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_kill_9_of_a_sweep_leaves_no_process_and_nothing_partial(tmp_path):
    """SIGKILL only the parent while both workers compute: the fork server, the resource
    tracker and the workers are gone within the grace period; no table, and what is there is
    either a complete point file or ignored."""
    import yaml

    data = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 400},
        "grid": {"batch_per_gpu": [8, 16, 24, 32]},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    argv = ["sweep", "s.yaml", "--out", "out", "--workers", "2", "--no-progress"]
    proc, below = start(argv, tmp_path), set()
    try:
        assert wait_for(lambda: len(descendants(proc.pid)) >= 4), "pool never started"
        time.sleep(0.3)  # both workers inside a point
        below = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_for(lambda: not survivors(below), GRACE_S), survivors(below)
    finally:
        for p in survivors(below | descendants(proc.pid)):
            os.kill(p, signal.SIGKILL)
        proc.kill()
    out = tmp_path / "out"
    assert not (out / "results.parquet").exists() and not (out / "results.csv").exists()
    for f in out.glob("points/*.json"):  # finished points only, each whole and sealed
        assert sw.read_point(f)["record_sha256"]
    from zionsim.cli.main import main

    assert main(["plot", str(out)]) == 2  # no table to plot: refused, not half-read


def test_workers_exit_when_the_parent_is_gone():
    """The watchdog ends a process whose watched parent no longer exists (a dead pid)."""
    code = (
        "import time; from zionsim.studies.pool import watch_parent; "
        "watch_parent(2**22 + 7, '1'); time.sleep(30)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert proc.wait(timeout=GRACE_S + 5) == 1
    finally:
        proc.kill()


def test_process_start_identifies_a_live_process():
    """This process has a start time; a pid beyond pid_max has none."""
    assert pool.process_start(os.getpid()) and pool.process_start(2**22 + 7) is None


@pytest.mark.parametrize(
    "address, ok",
    [
        ("tcp://127.0.0.1:8786", True),
        ("tcp://localhost:8786", True),
        ("tcp://[::1]:8786", True),
        ("tls://10.0.0.5:8786", True),
        ("tcp://10.0.0.5:8786", False),
        ("10.0.0.5:8786", False),
        ("ws://sched.example:8786", False),
    ],
)
def test_plain_tcp_to_another_host_needs_allow_insecure(address, ok):
    """Plain transports only on the loopback, unless the user opts in."""
    if ok:
        pool.check_scheduler(address, secure=False, allow_insecure=False)
    else:
        with pytest.raises(InputError, match="allow-insecure"):
            pool.check_scheduler(address, secure=False, allow_insecure=False)
        pool.check_scheduler(address, secure=False, allow_insecure=True)


def test_tls_files_need_a_tls_address_and_all_three(tmp_path):
    """TLS files with tcp:// are refused; one or two of the three files too."""
    with pytest.raises(InputError, match="TLS files were given"):
        pool.check_scheduler("tcp://127.0.0.1:1", secure=True, allow_insecure=False)
    with pytest.raises(InputError, match="all of --tls-ca-file"):
        pool.dask_security(str(tmp_path / "ca.pem"), None, None)
    assert pool.dask_security(None, None, None) is None


def test_cli_refuses_insecure_scheduler_before_connecting(tmp_path, capsys):
    """`zionsim sweep --scheduler tcp://10.0.0.5:8786` exits 2 at once with one line."""
    from zionsim.cli.main import main

    (tmp_path / "s.yaml").write_text(f"base: {{topology: {TINY}, workload: tiny}}\n")
    argv = ["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main([*argv, "--scheduler", "tcp://10.0.0.5:8786"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "plain TCP" in err
    assert not (tmp_path / "o" / "points").exists()


def test_sweep_runs_on_a_tls_dask_cluster(tmp_path):
    """A LocalCluster with temporary certificates: the sweep runs over tls:// with them."""
    pytest.importorskip("cryptography")
    from distributed import LocalCluster
    from distributed.security import Security

    sec = Security.temporary()
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        protocol="tls",
        security=sec,
        dashboard_address=None,
    ) as cluster:
        addr = cluster.scheduler_address
        assert addr.startswith("tls://")
        s = sw.sweep_from_dict({"base": {"topology": TINY, "workload": "tiny", "iterations": 2}})
        table = sw.run_sweep(s, tmp_path, scheduler=addr, security=sec, progress=False)
    assert (table["status"] == "ok").all()
