"""One way to assemble a run (``sim.inputs``): the CLI, ``run_point`` and sweeps read the same
options grammar; ``summary.json`` records the inputs and ``zionsim rerun`` reproduces it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TINY
from zionsim.base.errors import InputError
from zionsim.cli.main import build_parser, main
from zionsim.sim.inputs import OPTIONS, resolve_inputs, split_override
from zionsim.sim.run import run_point

BASE = ["--topology", TINY, "--workload", "tiny"]
RUN = ["run", *BASE, "--iterations", "2", "--no-plot"]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize("command", ["run", "plan", "trace"])
def test_stack_overrides_are_accepted_wherever_run_takes_them(command, tmp_path):
    """``--set stack.PATH=...`` (and workload paths) work for run, plan and trace alike."""
    out = tmp_path / ("r" if command == "run" else "f.json" if command == "trace" else "p.yaml")
    argv = [command, *BASE, "--set", "stack.host.per_step=0us", "--set", "batch_per_gpu=64"]
    if command == "run":
        argv += ["--iterations", "2", "--no-plot"]
    assert main([*argv, "--out", str(out)]) == 0


def test_cli_and_run_point_build_the_same_run(tmp_path):
    """The same options through the CLI and through ``run_point`` give the same summary."""
    out = tmp_path / "r"
    sets = ["stack.host.per_step=5us", "workload.batch_per_gpu=64", "scale_out.nic_bw=50Gbps"]
    argv = [*RUN, "--stack", "hugectr", "--out", str(out)]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 0
    options = {"topology": TINY, "workload": "tiny", "iterations": 2, "stack": "hugectr"}
    options.update(split_override(s) for s in sets)
    via_cli = _summary(out)
    block = via_cli.pop("inputs")
    assert block["overrides"] == {
        "stack.host.per_step": "5us",
        "workload.batch_per_gpu": 64,
        "topology.scale_out.nic_bw": "50Gbps",
    }
    assert json.dumps(run_point(options).summary, sort_keys=True) == json.dumps(
        via_cli, sort_keys=True
    )


def test_every_run_option_with_a_flag_is_on_its_commands():
    """``OPTIONS`` is the one table: each flagged option parses on the commands it names."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for o in OPTIONS:
        for command in o.commands:
            assert o.flag in sub[command]._option_string_actions, (o.name, command)
            assert sub[command]._option_string_actions[o.flag].dest == o.name


def test_batch_is_set_one_way():
    """batch_per_gpu and global_batch together are refused everywhere, not only on the CLI."""
    with pytest.raises(InputError, match="not both"):
        resolve_inputs({"topology": TINY, "workload": "tiny", "batch_per_gpu": 8,
                        "global_batch": 64})  # fmt: skip
    with pytest.raises(InputError, match="set twice"):
        resolve_inputs({"topology": TINY, "workload": "tiny", "global_batch": 64,
                        "workload.batch_per_gpu": 8})  # fmt: skip
    with pytest.raises(InputError, match="unknown override path"):
        resolve_inputs({"topology": TINY, "workload": "tiny", "wrkload.x": 1})


def _rerun_matches(out: Path, tmp_path: Path) -> None:
    again = tmp_path / (out.name + "_again")
    assert main(["rerun", str(out), "--out", str(again)]) == 0
    assert (again / "summary.json").read_bytes() == (out / "summary.json").read_bytes()


def test_rerun_reproduces_overrides_stack_and_plan_file(tmp_path, monkeypatch):
    """Runs made with --set overrides, a non-default stack file, a plan file, a sync mode and a
    replayed trace are rebuilt from their folder, summary.json byte for byte."""
    monkeypatch.chdir(tmp_path)
    stack = tmp_path / "mystack.yaml"
    stack.write_text("base: hugectr\ngpu_per_step: 7us\n")
    assert main(["plan", *BASE, "--plan", "round_robin", "--out", "plan.yaml"]) == 0
    assert main(["trace", *BASE, "--out", "t.json"]) == 0
    runs = {
        "sets": ["--set", "scale_out.nic_bw=400Gbps", "--set", "workload.batch_per_gpu=32"],
        "stack": ["--stack", str(stack), "--set", "stack.interference.comm_slowdown=0.1"],
        "plan": ["--plan", "plan.yaml", "--unfused"],
        "sync": ["--sync", "shadow-easgd", "--sync-servers", "2", "--iterations", "3"],
    }
    for name, extra in runs.items():
        out = tmp_path / name
        assert main([*RUN, *extra, "--out", str(out)]) == 0
        block = _summary(out)["inputs"]
        assert block["zionsim_version"] and block["gpu"]
        _rerun_matches(out, tmp_path)
    assert _summary(tmp_path / "sets")["inputs"]["overrides"]["topology.scale_out.nic_bw"] == (
        "400Gbps"
    )
    files = _summary(tmp_path / "plan")["inputs"]["files"]
    assert files["plan"]["path"] == "plan.yaml" and len(files["plan"]["sha256"]) == 64
    assert files["workload"]["path"] == "zionsim:workloads/tiny.yaml"  # the same on any install
    assert _summary(tmp_path / "stack")["inputs"]["stack"]["name"] == "mystack"
    out = tmp_path / "replay"
    assert main(["run", "--topology", TINY, "--trace", "t.json", "--iterations", "2",
                 "--no-plot", "--out", str(out)]) == 0  # fmt: skip
    _rerun_matches(out, tmp_path)


def test_rerun_refuses_a_changed_input_file(tmp_path, monkeypatch, capsys):
    """A plan file edited since the run: rerun says which file, exit 2."""
    monkeypatch.chdir(tmp_path)
    assert main(["plan", *BASE, "--plan", "round_robin", "--out", "plan.yaml"]) == 0
    assert main([*RUN, "--plan", "plan.yaml", "--out", "r"]) == 0
    Path("plan.yaml").write_text(Path("plan.yaml").read_text() + "\n# edited\n")
    assert main(["rerun", "r"]) == 2
    assert "plan file plan.yaml is missing or changed" in capsys.readouterr().err
    assert main(["rerun", str(tmp_path)]) == 2  # not a run folder


def test_every_command_help_has_a_description_and_parsing_examples():
    """``zionsim COMMAND --help``: a description, and examples that parse as written; run,
    trace and plan also list the built-in topologies, workloads and stacks."""
    import re
    import shlex

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for name, p in sub.items():
        assert p.description, name
        examples = re.findall(r"^  (zionsim .*?)(?:\s{2,}\(.*)?$", p.epilog or "", re.M)
        assert examples, name
        for line in examples:
            parser.parse_args(shlex.split(line)[1:])
    for name in ("run", "trace", "plan"):
        assert "built-in stacks: " in sub[name].epilog and "hugectr" in sub[name].epilog
        assert "stack.host.per_step" in sub[name].format_help()
