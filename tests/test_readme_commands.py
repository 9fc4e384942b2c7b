"""Every ``zionsim ...`` command in the code blocks of README.md and docs/*.md runs as written.

The commands of one document run in order (a later one may read what an earlier one wrote, as in
``zionsim trace ... --out t.json && zionsim run --trace t.json``) in a fresh folder that holds only
a link to ``examples/``, so relative outputs land there and nothing committed is rewritten.
Commands that name a machine of yours (``tcp://HOST:8786``) are parsed, not run.  ``zionsim
studies`` runs with ``ZIONSIM_NOTEBOOK_FAST=1`` (every standard study shrunk to the tiny
workload, as the notebook tests do): the full studies take many minutes.  Documents whose
commands take more than a few seconds are marked ``slow``; they still run by default.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from zionsim.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: words that stand for something of the reader's (a Dask scheduler's address, or the loopback
#: scheduler the reader starts first)
PLACEHOLDERS = ("HOST", "127.0.0.1:8786")
#: documents whose commands take more than a few seconds in all
SLOW = {"README.md", "sweeps.md", "validation.md", "calibration.md", "jobs.md"}
SHELL_BLOCKS = ("", "bash", "sh", "console", "shell")


def doc_commands(path: Path) -> list[list[str]]:
    """The argument lists of every ``zionsim`` command in the shell code blocks of ``path``, in
    order: continuation lines joined, ``$ `` prompts and comments dropped, ``&&`` chains split."""
    commands = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", path.read_text(), re.S):
        if lang not in SHELL_BLOCKS:
            continue
        for line in re.sub(r"\\\n\s*", " ", body).splitlines():
            line = line.strip().removeprefix("$ ")
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["zionsim"]:
                    commands.append(words[1:])
    return commands


def _documents():
    for path in DOCS:
        if doc_commands(path):
            marks = [pytest.mark.slow] if path.name in SLOW else []
            yield pytest.param(path, id=path.name, marks=marks)


def test_extraction_finds_the_documented_commands():
    """The extractor sees the README's chains, prompts and continuation lines."""
    readme = doc_commands(ROOT / "README.md")
    assert ["run"] in readme  # the quick start, after `pip install -e . &&`
    assert ["compare", "results/runs/A", "results/runs/B", "--out", "results/runs/A_vs_B"] in readme
    calibration = doc_commands(ROOT / "docs" / "calibration.md")
    assert any(c[:1] == ["calibrate"] and "examples/alltoall.log" in c for c in calibration)
    assert {p.id for p in _documents()} >= {"README.md", "sweeps.md", "traces.md"}


def test_named_inputs_ship():
    """Every ``examples/`` file a command names is in the repository."""
    named = {w for p in DOCS for c in doc_commands(p) for w in c if w.startswith("examples/")}
    assert named
    assert sorted(n for n in named if not (ROOT / n).is_file()) == []


@pytest.mark.parametrize("doc", list(_documents()))
def test_documented_commands_run(doc, tmp_path, monkeypatch, capsys):
    """Each command of the document exits with status 0."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZIONSIM_NOTEBOOK_FAST", "1")
    for argv in doc_commands(doc):
        if any(p in w for w in argv for p in PLACEHOLDERS):
            build_parser().parse_args(argv)  # a valid command line, for a machine we lack
            continue
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 0, f"{doc.name}: zionsim {shlex.join(argv)} exited {status}: {err}"


#: options whose value is a path a command writes
OUTPUT_OPTIONS = ("--out", "--plot", "--plots", "--to-torchrec")


def test_documented_commands_write_under_results_only():
    """No README or docs command writes outside ``results/`` (git-ignored ``results/runs/`` for
    the README): following the documentation leaves the checkout clean."""
    outside = []
    for path in DOCS:
        allowed = ("results/runs/",) if path.name == "README.md" else ("results/", "docs/img")
        for argv in doc_commands(path):
            for flag, value in zip(argv, argv[1:], strict=False):
                if flag in OUTPUT_OPTIONS and not value.startswith(allowed):
                    outside.append(f"{path.name}: zionsim {shlex.join(argv)}")
    assert outside == []


def test_readme_is_short_and_ci_runs_its_test_command():
    """The README stays a front page (<= 150 lines), links every docs page, and `.ci/run` runs
    its second command verbatim."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    pages = sorted((ROOT / "docs").glob("*.md"))
    unlinked = [p.name for p in pages if f"docs/{p.name}" not in text]
    assert unlinked == []
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).splitlines()
    assert block[1] in (ROOT / ".ci" / "run").read_text().splitlines()
