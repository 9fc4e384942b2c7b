"""What the command line does for its own start-up and speed leaves no trace on the process:
``zionsim run`` makes the cycle collector rare while it runs (``cli.main.cmd_run``) and puts
the collector's thresholds and frozen objects back as it found them."""

from __future__ import annotations

import gc

from tests.conftest import TINY
from zionsim.cli.main import main


def test_run_puts_the_collector_back(tmp_path):
    before = gc.get_threshold()
    out = tmp_path / "r"
    argv = ["run", "--topology", TINY, "--workload", "tiny", "--iterations", "2", "--warmup", "1"]
    assert main([*argv, "--no-plot", "--out", str(out)]) == 0
    assert (out / "summary.json").is_file()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
