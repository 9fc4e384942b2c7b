"""Physical bounds (``base.bounds``): every bounded field of the shipped inputs refuses a value
beyond its bound, and the model's outputs are never NaN."""

from __future__ import annotations

import math

import pytest
import yaml

from zionsim.base import bounds
from zionsim.base.errors import InputError, ModelError
from zionsim.base.units import _NUM, UNITS
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.topology import load_topology

from ..conftest import DATA, TINY

TOPOLOGY = yaml.safe_load((DATA / "tiny_cluster.yaml").read_text())


def _numeric_paths(doc: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the numbers and quantities (``"25 GB/s"``) in ``doc``."""
    out = []
    for k, v in doc.items():
        if isinstance(v, dict):
            out += _numeric_paths(v, f"{prefix}{k}.")
        elif (isinstance(v, int | float) and not isinstance(v, bool)) or (
            isinstance(v, str) and _NUM.match(v)
        ):
            out.append(f"{prefix}{k}")
    return out


def _beyond(path: str, value) -> str:
    """A value ten times the upper bound of ``path``, written in the field's own unit (so that
    it is refused by the bound, not by the unit parser's overflow guard)."""
    unit = _NUM.match(str(value)).group(2)
    dimension, factor = UNITS.get(unit, (None, 1.0))
    return f"{10 * bounds.bound_of(path, dimension).high / factor:g} {unit}".strip()


@pytest.mark.parametrize("path", _numeric_paths(TOPOLOGY))
def test_every_topology_number_has_an_upper_bound(path):
    """Each number of the tiny cluster, set far beyond any machine, is refused naming the
    field (not accepted to hang or overflow later)."""
    node = TOPOLOGY
    for k in path.split("."):
        node = node[k]
    with pytest.raises(InputError, match="outside the physical bound|must be in") as err:
        load_topology(TINY, overrides=[f"{path}={_beyond(path, node)}"])
    assert path in err.value.one_line()


@pytest.mark.parametrize(
    "override, match",
    [
        ("gpu.flops.fp16=1e-300 FLOPS", "physical bound"),
        ("gpu.hbm=1e400 GB", "not a finite quantity"),
        ("scale_out.nic_bw=1e308 TB/s", "not a finite quantity"),
        ("host.sockets=1.0e+308", "physical bound"),
        ("collectives.latency_scale=.inf", "not a finite number"),
        ("links.roce.efficiency=1e-9", "physical bound"),
        ("nodes=1000000000", "physical bound"),
    ],
)
def test_findings_of_the_audit_are_refused(override, match):
    """The out-of-range values the outside audits ran with are refused at load."""
    with pytest.raises(InputError, match=match):
        load_topology(TINY, overrides=[override])


@pytest.mark.parametrize(
    "override",
    ["batch_per_gpu=-128", "batch_per_gpu=100000000000", "tables=[]", "zipf_alpha=1e9",
     "bottom_mlp=[8, 2.5, 16]", "index_bytes=64"],
)  # fmt: skip
def test_workload_numbers_are_bounded(override):
    """Workload counts are whole and bounded; widths are integers."""
    with pytest.raises(InputError):
        load_workload("tiny", overrides=[override])


def test_total_gpus_are_bounded():
    """Nodes and GPUs per node each in bounds can still make too many GPUs together."""
    with pytest.raises(InputError, match="nodes x gpus_per_node"):
        load_topology(TINY, nodes=16384, gpus_per_node=64)


def test_non_finite_results_are_a_model_error():
    """A NaN or infinity in a result is a ModelError naming where (a bug, not bad input)."""
    assert bounds.non_finite_path({"a": [1.0, {"b": 2}]}) is None
    assert bounds.non_finite_path({"a": [1.0, {"b": math.nan}]}) == "a.1.b"
    with pytest.raises(ModelError, match="summary.json: non-finite value at x"):
        bounds.require_finite({"x": math.inf}, "summary.json")


def test_strict_json_output():
    """``to_json`` writes no NaN: it raises ModelError instead."""
    from zionsim.io.files import to_json

    assert to_json({"a": 1.5}) == '{\n  "a": 1.5\n}\n'
    with pytest.raises(ModelError):
        to_json({"a": [math.nan]})


def test_cli_exit_code_3_for_a_model_error(monkeypatch, capsys):
    """A model error ends the CLI with one line and status 3 (bad input is 2)."""
    import sys

    import zionsim.cli.main  # noqa: F401  (the package re-exports main(): take the module)

    cli_main = sys.modules["zionsim.cli.main"]

    def broken(args):
        raise ModelError("summary.json: non-finite value at iteration_time_s")

    from zionsim.cli import hardware as cli_hardware

    monkeypatch.setitem(cli_hardware.COMMANDS, "topology", broken)
    assert cli_main.main(["topology", "--topology", TINY]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zionsim: internal error: summary.json")


def test_every_bound_is_documented():
    """``docs/input_bounds.md`` lists every field and dimension of the bounds table."""
    from ..conftest import DATA as _data

    doc = (_data.parent.parent / "docs" / "input_bounds.md").read_text()
    missing = [k for k in bounds.FIELDS if f"| `{k}` |" not in doc]
    missing += [k for k in bounds.DIMENSIONS if f"| {k} |" not in doc]
    assert not missing, f"add to docs/input_bounds.md: {missing}"
