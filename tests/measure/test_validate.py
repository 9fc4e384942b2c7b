"""Tests of zionsim/measure/validate.py and `zionsim validate`: loading, errors, CLI, geomeans."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from zionsim import cli
from zionsim.base.errors import InputError
from zionsim.measure.validate import (
    FAMILIES,
    WhatIf,
    default_cases_file,
    geomean_abs_error,
    gpu_label,
    load_cases,
    load_whatifs,
    run_cases,
    run_whatifs,
    split_end_to_end,
    summarize,
)

GEMM_CASE = {
    "id": "g",
    "family": "kernels",
    "calibrated": False,
    "fast": True,
    "source": "s",
    "simulate": {
        "kind": "gemm",
        "topology": "dgx_a100",
        "m": 64,
        "n": 64,
        "k": 64,
        "dtype": "fp16",
    },
    "measured": {"value": 1.0, "unit": "TFLOP/s"},
}


def _write(tmp_path, cases, sources=None):
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"sources": sources or {"s": "a citation"}, "cases": cases}))
    return str(path)


def test_builtin_cases_load_with_provenance():
    """Every built-in case names a family, a source with a citation, and a positive measurement."""
    cases = load_cases()
    assert default_cases_file().is_file()
    assert {c.family for c in cases} == set(FAMILIES)
    assert all(c.citation and c.measured > 0 for c in cases)
    assert any(c.calibrated for c in cases) and any(not c.calibrated for c in cases)


def test_fast_only_drops_slow_cases(tmp_path):
    """``fast_only`` keeps the cases marked fast and drops the others."""
    slow = {**GEMM_CASE, "id": "slow", "fast": False}
    path = _write(tmp_path, [GEMM_CASE, slow])
    assert [c.id for c in load_cases(path)] == ["g", "slow"]
    assert [c.id for c in load_cases(path, fast_only=True)] == ["g"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"family": "physics"}, "cases[0].family"),
        ({"source": "nowhere"}, "cases[0].source"),
        ({"measured": {"value": 1.0, "unit": "ms"}}, "cases[0].measured.unit"),
        ({"measured": {"value": -1, "unit": "TFLOP/s"}}, "cases[0].measured.value"),
        ({"simulate": {"kind": "gemm", "topology": "dgx_a100"}}, "cases[0].simulate.dtype"),
        ({"simulate": {"kind": "warp"}}, "cases[0].simulate.kind"),
        ({"calibrated": "yes"}, "cases[0].calibrated"),
        ({"typo": 1}, "cases[0].typo"),
    ],
)
def test_bad_case_names_file_and_field(tmp_path, change, field):
    """A bad case raises an InputError naming the file and the field."""
    path = _write(tmp_path, [{**GEMM_CASE, **change}])
    with pytest.raises(InputError) as exc:
        load_cases(path)
    assert exc.value.file == path and exc.value.field == field


def test_duplicate_ids_are_rejected(tmp_path):
    """Two cases with one id are an error on the second."""
    with pytest.raises(InputError, match="duplicate"):
        load_cases(_write(tmp_path, [GEMM_CASE, GEMM_CASE]))


def test_cli_bad_cases_file_exits_2(tmp_path, capsys):
    """`zionsim validate --cases` on a bad file exits 2 with one line naming file and field."""
    path = _write(tmp_path, [{**GEMM_CASE, "family": "physics"}])
    assert cli.main(["validate", "--cases", path, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and path in err and "cases[0].family" in err


def test_cli_validate_fast_writes_table(tmp_path, capsys):
    """`zionsim validate --fast` prints the table and writes validation.csv and summary.json."""
    out = tmp_path / "validation"
    assert cli.main(["validate", "--fast", "--out", str(out), "--plots", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "validation.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert set(table["family"]) == {*FAMILIES, "what_if"}
    singles = table[table["family"] != "what_if"]
    assert list(singles["case"]) == [c.id for c in load_cases(fast_only=True)]
    assert table["simulated"].gt(0).all() and table["error_pct"].notna().all()
    assert {r["family"] for r in summary["summary"]} == {*FAMILIES, "what_if", "all"}
    groups = {r["group"] for r in summary["end_to_end_split"]}
    assert {"held out, A100/H100 <= 8 nodes", "held out, beyond the fit"} <= groups
    assert (out / "split.csv").stat().st_size > 0
    assert "geomean_abs_error_held_out_pct" in printed
    assert (tmp_path / "validation_curves.png").stat().st_size > 0
    assert (tmp_path / "validation_parity.png").stat().st_size > 0


def test_run_cases_is_deterministic(tmp_path):
    """Two runs of the same cases give identical tables."""
    cases = load_cases(_write(tmp_path, [GEMM_CASE]))
    pd.testing.assert_frame_equal(run_cases(cases), run_cases(cases))


def test_geomean_of_abs_error():
    """Geomean of |error| over non-zero errors: |-2|, 8 -> 4; none left -> nan."""
    assert geomean_abs_error([-2.0, 8.0, 0.0]) == pytest.approx(4.0)
    assert math.isnan(geomean_abs_error([0.0]))


def test_summarize_splits_calibrated_from_held_out():
    """summarize groups by family and keeps calibrated and held-out cases apart."""
    table = pd.DataFrame(
        {
            "family": ["kernels", "kernels", "kernels", "collectives"],
            "calibrated": [True, False, False, False],
            "error_pct": [10.0, -1.0, 100.0, 5.0],
        }
    )
    s = summarize(table).set_index("family")
    assert s.loc["kernels", "geomean_abs_error_calibrated_pct"] == pytest.approx(10.0)
    assert s.loc["kernels", "geomean_abs_error_held_out_pct"] == pytest.approx(10.0)
    assert s.loc["kernels", "n_held_out"] == 2
    assert math.isnan(s.loc["collectives", "geomean_abs_error_calibrated_pct"])
    assert s.loc["all", "n_held_out"] == 3
    assert s.loc["all", "geomean_abs_error_held_out_pct"] == pytest.approx(500 ** (1 / 3))


def test_cli_case_that_cannot_simulate_exits_2(tmp_path, capsys):
    """A case naming an unknown topology fails with exit 2 and names the case."""
    bad = {**GEMM_CASE, "simulate": {**GEMM_CASE["simulate"], "topology": "nosuch"}}
    path = _write(tmp_path, [bad])
    assert cli.main(["validate", "--cases", path, "--out", str(tmp_path / "out")]) == 2
    assert "case g" in capsys.readouterr().err


def test_end_to_end_cases_name_a_stack_and_every_fitted_stack_has_calibration_cases():
    from zionsim.dlrm.stack import load_stack

    e2e = [c for c in load_cases() if c.family == "end_to_end"]
    stacks = {c.id: c.params["options"].get("stack") for c in e2e}
    assert all(stacks.values()), [i for i, s in stacks.items() if not s]
    calibrated = {stacks[c.id] for c in e2e if c.calibrated}
    held_out = {stacks[c.id] for c in e2e if not c.calibrated}
    fitted = {"hugectr", "hugectr_dlrm_v1", "nvidia_pytorch_dlrm", "tensorflow_sok", "torchrec"}
    assert fitted == calibrated  # every fitted stack's host terms are fitted on its own cases
    for s in fitted - {"hugectr_dlrm_v1"}:  # on two per-GPU batch sizes each (tools/
        # calibrate_stacks.py says why hugectr_dlrm_v1 has one)
        per_gpu = {
            c.params["options"]["global_batch"] // c.params["options"].get("gpus_per_node", 8)
            for c in e2e
            if c.calibrated and stacks[c.id] == s
        }
        assert len(per_gpu) >= 2, s
    assert all(load_stack(s).name == s for s in calibrated | held_out)
    assert len(held_out) >= 3 and sum(not c.calibrated for c in e2e) >= 12


RUN_CASE = {
    "id": "r",
    "family": "end_to_end",
    "calibrated": True,
    "fast": True,
    "source": "s",
    "simulate": {
        "kind": "run",
        "options": {"topology": "dgx_h100", "nodes": 1, "workload": "mlperf_dlrm_dcnv2"},
    },
    "measured": {"value": 3.5, "unit": "ms"},
}


@pytest.mark.parametrize(
    "extra",
    [
        {"system": {"gpu": "H200", "nodes": 1}},
        {"system": {"gpu": "B200", "nodes": 1}},
        {"system": {"gpu": "H100", "nodes": 16}},
        {"simulate": {**RUN_CASE["simulate"], "options": {"topology": "dgx_b200", "nodes": 1}}},
    ],
)
def test_only_a100_h100_up_to_8_nodes_may_be_calibrated(tmp_path, extra):
    """Issue 25: an H200, Blackwell or > 8-node end-to-end run cannot be a calibration case."""
    path = _write(tmp_path, [{**RUN_CASE, **extra}])
    with pytest.raises(InputError, match="cannot be calibrated"):
        load_cases(path)
    held = {**RUN_CASE, **extra, "calibrated": False}
    (case,) = load_cases(_write(tmp_path, [held]))
    assert case.gpu in ("H200", "B200", "H100") and not case.calibrated


def test_a_collective_on_more_than_8_nodes_cannot_be_calibrated(tmp_path):
    case = {
        "id": "c",
        "family": "collectives",
        "calibrated": True,
        "fast": True,
        "source": "s",
        "simulate": {
            "kind": "collective",
            "topology": "dgx_a100",
            "nodes": 16,
            "op": "all_reduce",
            "size": "8 GiB",
            "metric": "busbw",
        },
        "measured": {"value": 192, "unit": "GB/s"},
    }
    with pytest.raises(InputError, match="cannot be calibrated"):
        load_cases(_write(tmp_path, [case]))
    case["simulate"]["nodes"] = 8
    (loaded,) = load_cases(_write(tmp_path, [case]))
    assert loaded.calibrated and loaded.nodes == 8


def test_system_defaults_to_the_simulated_topology(tmp_path):
    """Without a `system` mapping, the measured GPU and nodes are the simulated topology's."""
    (case,) = load_cases(_write(tmp_path, [RUN_CASE]))
    assert (case.gpu, case.nodes) == ("H100", 1)
    assert gpu_label("GB200-B200-186GB") == "GB200" and gpu_label("H200-SXM5-141GB") == "H200"


def test_whatif_ratio_error_and_split():
    """A what-if's error is that of the simulated ratio; the split keeps GPUs and scales apart."""
    table = pd.DataFrame(
        {
            "case": ["a", "b", "c"],
            "family": ["end_to_end"] * 3,
            "calibrated": [True, False, False],
            "measured": [4.0, 2.0, 3.0],
            "simulated": [4.0, 2.2, 2.7],
            "unit": ["ms"] * 3,
            "error_pct": [0.0, 10.0, -10.0],
            "source": ["s"] * 3,
            "curve": [""] * 3,
            "citation": [""] * 3,
            "gpu": ["H100", "B200", "H100"],
            "nodes": [1, 1, 16],
        }
    )
    w = run_whatifs(table, [WhatIf("w", "gpu_swap", "a", "b"), WhatIf("x", "batch", "a", "zz")])
    assert list(w["case"]) == ["w"]  # a what-if whose case was not run is left out
    assert w.loc[0, "error_pct"] == pytest.approx(10.0) and not w.loc[0, "calibrated"]
    split = split_end_to_end(pd.concat([table, w], ignore_index=True)).set_index("group")
    assert split.loc["held out, beyond the fit", "n"] == 2
    assert split.loc["held out, B200", "mean_error_pct"] == pytest.approx(10.0)
    assert split.loc["held out, > 8 nodes", "mean_error_pct"] == pytest.approx(-10.0)
    assert split.loc["held out, gpu_swap", "geomean_abs_error_pct"] == pytest.approx(10.0)


def test_whatif_must_name_two_cases_of_the_file(tmp_path):
    path = Path(_write(tmp_path, [RUN_CASE]))
    data = yaml.safe_load(path.read_text())
    data["whatif"] = [{"id": "w", "kind": "batch", "base": "r", "other": "nosuch"}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="no case 'nosuch'"):
        load_whatifs(str(path))
