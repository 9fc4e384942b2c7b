"""What the command line does for its own start-up and speed leaves no trace on the process:
``zionsim run`` makes the cycle collector rare while it runs (``cli.main.cmd_run``) and puts
the collector's thresholds and frozen objects back as it found them; the progress bar is made
only where it shows."""

from __future__ import annotations

import gc
import io
import sys

import pytest

from tests.conftest import TINY
from zionsim.cli.common import Phases
from zionsim.cli.main import main


def test_run_puts_the_collector_back(tmp_path):
    before = gc.get_threshold()
    out = tmp_path / "r"
    argv = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "2", "--warmup", "1"]
    assert main([*argv, "--no-plot", "--out", str(out)]) == 0
    assert (out / "summary.json").is_file()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True])
def test_phases_bar_only_on_a_terminal(terminal, monkeypatch):
    """Off a terminal the progress bar is not made (tqdm, ~20 ms of start-up, not imported:
    what tqdm's own ``disable=None`` decides); on one it shows each phase."""
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = Phases("run x", ["plan", "simulate", "write"])
    assert (bar.bar is not None) == terminal
    bar.start("simulate")
    bar.close()
    assert ("run x" in err.getvalue()) == terminal
