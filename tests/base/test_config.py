"""The bounded YAML loader, ``--set`` parsing and typed field access of ``base.config``."""

from __future__ import annotations

import time

import pytest

from zionsim.base import config
from zionsim.base.config import Fields, load_yaml, parse_override, parse_yaml
from zionsim.base.errors import InputError

#: nine levels of nine aliases: 9^9 = 387 million nodes once expanded ("billion laughs")
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "text, match",
    [
        (BOMB, "aliases expand to more than"),
        ("a: &a [*a]\n", "alias refers to a node that contains it"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64"),
        ("{a: " * 3000 + "1" + "}" * 3000, "nested deeper than 64"),
        ("nodes: 1\nnodes: 2\n", "duplicate key 'nodes' at line 2"),
        ("1: 2\n", "key 1 is not a string"),
        ("? [1, 2]\n: 3\n", "is not a string"),
        ("a: .inf\n", "'.inf' is not a finite number"),
        ("a: .NaN\n", "is not a finite number"),
        ("a: 1.0e+400\n", "is not a finite number"),
        ("a: " + "9" * 5000 + "\n", "not valid YAML"),
        ("!!python/object/apply:os.system ['true']\n", "not valid YAML"),
        ("\x00 garbage", "not valid YAML"),
    ],
)
def test_hostile_yaml_is_refused_in_one_line(text, match):
    """Alias bombs, recursive aliases, deep nesting, duplicate and non-string keys, non-finite
    floats and unsafe tags are InputErrors naming the file, never a hang or a traceback."""
    t0 = time.process_time()
    with pytest.raises(InputError, match=match) as err:
        parse_yaml(text, "f.yaml")
    assert err.value.file == "f.yaml" and "\n" not in err.value.one_line()
    assert time.process_time() - t0 < 5  # loose: the bomb is refused before it is built


def test_yaml_merge_keys_and_aliases_still_work():
    """A merge key may override keys (YAML means it to); small aliases expand as usual."""
    data = parse_yaml("base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\nd: [*b, *b]\n")
    assert data["c"] == {"x": 1, "y": 3} and data["d"] == [{"x": 1, "y": 2}] * 2


def test_big_files_are_refused(tmp_path, monkeypatch):
    """A file above the size limit is refused before it is read."""
    monkeypatch.setattr(config, "MAX_YAML_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 200 + "\n")
    with pytest.raises(InputError, match="too large"):
        load_yaml(path, "topologies")


def test_override_values_go_through_the_bounded_loader():
    """``--set`` values are YAML read by the same loader: ``.inf`` and alias loops are refused,
    text that is not YAML stays text."""
    with pytest.raises(InputError, match="--set collectives.latency_scale"):
        parse_override("collectives.latency_scale=.inf")
    with pytest.raises(InputError, match="alias"):
        parse_override("x=&a [*a]")
    assert parse_override("x={") == ("x", "{")


@pytest.mark.parametrize(
    "value, match",
    [
        (float("inf"), "expected an integer"),
        (float("nan"), "expected an integer"),
        (2.7, "expected an integer"),
        (True, "expected an integer"),
        ("4", "expected an integer"),
        (10**400, "outside the physical bound"),
        (0, "must be >= 1"),
    ],
)
def test_integer_is_strict(value, match):
    """Integers are whole, finite numbers in their bounds; 4.0 is 4."""
    with pytest.raises(InputError, match=match):
        Fields({"nodes": value}, "f.yaml").integer("nodes")
    assert Fields({"nodes": 4.0}, "f.yaml").integer("nodes") == 4


def test_non_string_keys_are_named_not_a_type_error():
    """A mapping with int and str keys reports the unknown key (sorting mixed keys used to
    raise TypeError), and an error may name a non-string field."""
    with pytest.raises(InputError, match="f.yaml: 1: unknown field"):
        Fields({1: 2, "a": 3}, "f.yaml").check_keys({"a"})
    assert InputError("bad", field=7).one_line() == "7: bad"


def test_flag_text_and_choice_are_strict():
    """``"false"`` is not a boolean, 3 is not text."""
    f = Fields({"fused": "false", "name": 3}, "f.yaml")
    with pytest.raises(InputError, match="expected true or false"):
        f.flag("fused")
    with pytest.raises(InputError, match="expected a string"):
        f.text("name")


@pytest.mark.parametrize("kind", ["topologies", "workloads"])
def test_builtin_files_pass_the_bounded_parser(kind):
    """Built-in files are read with the C parser (start-up time); they must be what the bounded
    parser would accept and give the same data (no duplicate keys, no non-finite numbers)."""
    from zionsim.base.config import builtin_dir, builtin_names, safe_load

    for name in builtin_names(kind):
        text = (builtin_dir(kind) / f"{name}.yaml").read_text()
        assert parse_yaml(text, name) == safe_load(text), name
        assert load_yaml(name, kind)[0] == safe_load(text)
