"""The command line's surface: help on every option, --version, one spelling per option, the
nccl-tests columns of ``zionsim collective``, progress bars kept off pipes."""

from __future__ import annotations

import argparse

import pytest

from tests.conftest import TINY
from zionsim.cli.hardware import nccl_tests_row
from zionsim.cli.main import DESCRIPTION, build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_option_has_help():
    missing = [
        f"{name} {a.option_strings or a.dest}"
        for name, p in _subparsers().items()
        for a in p._actions
        if not a.help and not isinstance(a, argparse._HelpAction)
    ]
    assert missing == []


def test_one_spelling_per_option():
    """No two visible options of a command store into the same field."""
    for name, p in _subparsers().items():
        dests = [a.dest for a in p._actions if a.help != argparse.SUPPRESS]
        assert len(dests) == len(set(dests)), name


def test_top_level_help_is_whole_sentences(capsys):
    assert DESCRIPTION.endswith(".") and "``" not in DESCRIPTION
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    assert "runs `zionsim run`" in text and "calibrate" in text


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"zionsim {version('zionsim')}"


def test_planner_is_a_hidden_alias_of_plan(capsys):
    args = build_parser().parse_args(["plan", "--planner", "round_robin"])
    assert args.plan == "round_robin"
    assert "--planner is deprecated; use --plan" in capsys.readouterr().err
    assert "--planner" not in _subparsers()["plan"].format_help()


def test_nccl_tests_row():
    row = {"size_bytes": 1 << 20, "ranks": 8, "algorithm": "ring", "protocol": "LL128",
           "time_s": 50.0e-6, "algbw_GBps": 20.97152, "busbw_GBps": 36.70016}  # fmt: skip
    shown = nccl_tests_row(row, "all_reduce")
    assert list(shown) == ["size", "count", "type", "redop", "root", "time_us", "algbw_GBps",
                           "busbw_GBps", "algorithm", "protocol"]  # fmt: skip
    assert (shown["count"], shown["type"], shown["redop"], shown["time_us"]) == (
        262144,
        "float",
        "sum",
        50.0,
    )
    assert nccl_tests_row(row, "all_to_all")["redop"] == "none"


def test_collective_prints_nccl_tests_columns(tmp_path, capsys):
    argv = ["collective", "--topology", TINY, "--sizes", "1M:2M", "--out", str(tmp_path / "c")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    header = out.splitlines()[0].split()
    assert header[:6] == ["size", "count", "type", "redop", "root", "time_us"]
    assert out.splitlines()[1].split()[:3] == ["1048576", "262144", "float"]
    assert "\r" not in err  # no progress bar off a terminal


def test_default_outputs_are_git_ignored():
    """Where a command writes by default is under results/runs/ (git-ignored); only `studies`
    writes results/<study>/, which is what it is for."""
    for name, p in _subparsers().items():
        for a in p._actions:
            if a.dest in ("out", "runs") and isinstance(a.default, str):
                assert a.default.startswith("results/runs/"), (name, a.dest, a.default)
    studies = {a.dest: a.default for a in _subparsers()["studies"]._actions}
    assert studies["results"] == "results"
