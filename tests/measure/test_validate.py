"""Tests of zionsim/measure/validate.py and `zionsim validate`: loading, errors, CLI, geomeans."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from zionsim import cli
from zionsim.base.errors import InputError
from zionsim.measure.validate import (
    FAMILIES,
    default_cases_file,
    geomean_abs_error,
    load_cases,
    run_cases,
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
    assert set(table["family"]) == set(FAMILIES)
    assert list(table["case"]) == [c.id for c in load_cases(fast_only=True)]
    assert table["simulated"].gt(0).all() and table["error_pct"].notna().all()
    assert {r["family"] for r in summary["summary"]} == {*FAMILIES, "all"}
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
    fitted = {"hugectr", "nvidia_pytorch_dlrm", "tensorflow_sok", "torchrec"}
    assert fitted == calibrated  # every fitted stack's host terms are fitted on its own cases
    for s in fitted:  # on two per-GPU batch sizes each
        per_gpu = {
            c.params["options"]["global_batch"] // c.params["options"].get("gpus_per_node", 8)
            for c in e2e
            if c.calibrated and stacks[c.id] == s
        }
        assert len(per_gpu) >= 2, s
    assert all(load_stack(s).name == s for s in calibrated | held_out)
    assert len(held_out) >= 3 and sum(not c.calibrated for c in e2e) >= 12
