"""Structure-aware fuzzing of zionsim's inputs, shared by ``tests/fuzz/test_fuzz_*.py`` and
``bench/fuzz.py``.

A fuzz case starts from a real shipped input (``topologies/``, ``workloads/``, ``tests/data/``
or a file zionsim itself writes), applies a few mutations that know its structure (replace a
value with another type, an extreme number or a unit string; delete a key; add an unknown key;
nest deeply) or, for text formats, edits its lines, and feeds the result to the loader and a
small simulation.  :func:`outcome` then holds zionsim to its contract: either the input is
accepted and every output is finite, or it is refused with an :class:`InputError` whose one-line
message names the file or the field.  Any other exception, or a case running past
:data:`CASE_LIMIT_S`, is a bug.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import tempfile
from pathlib import Path

import yaml
from hypothesis import strategies as st

from zionsim.base.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TINY = str(DATA / "tiny_cluster.yaml")
#: seconds one case may run before it counts as a hang (small clusters run in well under 1 s;
#: the limit is wide for a loaded machine); ``ZIONSIM_FUZZ_LIMIT_S`` changes it
CASE_LIMIT_S = float(os.environ.get("ZIONSIM_FUZZ_LIMIT_S", "30"))
OK, REFUSED = "ok", "refused"
_SCRATCH = Path(tempfile.mkdtemp(prefix="zionsim-fuzz-"))


class Hang(Exception):
    """A fuzz case ran past :data:`CASE_LIMIT_S`."""


class Unclean(AssertionError):
    """A case ended neither accepted-and-finite nor refused with a one-line InputError."""


def scratch(name: str) -> Path:
    """A path in this process's scratch folder (files are overwritten case after case)."""
    return _SCRATCH / name


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hang` in the block after ``seconds`` (SIGALRM: main thread, POSIX), and
    again every second until it is not swallowed (an exception raised inside a garbage-collector
    callback is ignored by Python)."""

    def _raise(signum, frame):
        raise Hang(f"case ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def outcome(target, case) -> str:
    """Run ``target(case)``: ``"ok"`` when it returns finite outputs, ``"refused"`` when it
    raises a well-formed :class:`InputError`; anything else propagates (:class:`Hang`,
    :class:`Unclean`, or the bug's own exception)."""
    try:
        with time_limit(CASE_LIMIT_S):
            out = target(case)
    except InputError as exc:
        check_message(exc)
        return REFUSED
    check_finite(out)
    return OK


def check_message(exc: InputError) -> None:
    """The refusal is one line and names a file or a field."""
    text = exc.one_line()
    if "\n" in text or not (exc.file or exc.field) or not exc.problem:
        raise Unclean(f"badly formed refusal: {text!r}")


def check_finite(obj) -> None:
    """Every number in ``obj`` (nested dicts, lists, DataFrames, numpy arrays) is finite."""
    bad = _first_non_finite(obj, "out")
    if bad:
        raise Unclean(f"accepted input produced a non-finite output at {bad}")


def _first_non_finite(obj, where: str) -> str | None:
    import numpy as np
    import pandas as pd

    if isinstance(obj, pd.DataFrame):
        num = obj.select_dtypes("number")
        ok = np.isfinite(num.to_numpy(dtype=float)).all() if len(num.columns) else True
        return None if ok else where
    if isinstance(obj, np.ndarray):
        return None if np.isfinite(obj.astype(float)).all() else where
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return None
    if isinstance(obj, int | float | np.number):
        return None if math.isfinite(float(obj)) else where
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list | tuple):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        bad = _first_non_finite(v, f"{where}.{k}")
        if bad:
            return bad
    return None


# --------------------------------------------------------------------------------- strategies

#: unit suffixes to glue onto random numbers (valid ones of every dimension, and nonsense)
UNITS = ["", "B", "GiB", "TB", "Gbps", "GB/s", "TB/s", "TFLOPS", "FLOPS", "us", "ms", "s", "%"]
UNITS += ["parsecs", "GiBps", "µs", "PB", "bit/s"]
#: values that have broken parsers before: extremes, wrong types, unit strings, YAML specials
#: (containers here are copied before use: a case may mutate what it drew)
NASTY = [
    0, -1, 1, 2.7, -0.0, 1e308, -1e308, 1e-300, 10**12, 2**63, 10**400, 1e30, 1e31,
    math.inf, -math.inf, math.nan, True, False, None, "", "abc", "false", "true", "null",
    "1e400 GB", "1e308 TB/s", "1e-300 FLOPS", "-5 GiB", "nan GB", "inf", ".inf", "-.inf",
    ".nan", "NaN", "1 us", "200 Gbps", "80%", "0", "1e9", "0 GB", "1000000000", "2.5",
    [], {}, [1, 2], [[1]], {"a": 1}, {1: 2}, {None: 1}, {(1, 2): 3},
]  # fmt: skip


def scalars() -> st.SearchStrategy:
    """A value that could replace a field: a nasty pick, a random number, text or quantity."""
    numbers = st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-3, max_value=20),
    )
    quantity = st.builds(
        lambda x, u: f"{x:g} {u}".strip(), st.floats(allow_nan=True), st.sampled_from(UNITS)
    )
    return st.one_of(st.sampled_from(NASTY), numbers, quantity, st.text(max_size=12), st.booleans())


def deep(depth: int):
    """A value nested ``depth`` levels (lists or dicts)."""
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _paths(doc, prefix=()) -> list[tuple]:
    """Every path to a value inside ``doc`` (dict keys and list indices), containers included."""
    out: list[tuple] = []
    if len(prefix) > 24:  # inside a value nested deep on purpose: no need to go further
        return out
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _copy(obj, depth: int = 0):
    """A copy of nested dicts and lists; below 24 levels (a value nested deep on purpose, which
    no mutation reaches into: see :func:`_paths`) the original is shared."""
    if depth > 24:
        return obj
    if isinstance(obj, dict):
        return {k: _copy(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v, depth + 1) for v in obj]
    return obj


@st.composite
def mutated(draw, docs: list, max_mutations: int = 3, focus: tuple = ()):
    """One of ``docs`` (nested dicts and lists) with 1..``max_mutations`` structure-aware
    mutations.  ``focus``: path prefixes to mutate more often (e.g. a trace's ``ops``)."""
    doc = _copy(draw(st.sampled_from(docs)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, max_mutations]))):
        paths = _paths(doc)
        if focus and draw(st.booleans()):
            paths = [p for p in paths if p[: len(focus)] == focus] or paths
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        op = draw(st.sampled_from(["replace", "replace", "replace", "scale", "delete", "add",
                                   "nest", "dup"]))  # fmt: skip
        if op == "replace":
            parent[key] = _copy(draw(scalars()))
        elif op == "scale" and isinstance(parent[key], int | float):
            parent[key] = parent[key] * draw(st.sampled_from([-1, 0, 1e-9, 1e6, 1e30, 1e300]))
        elif op == "delete":
            parent.pop(key) if isinstance(parent, dict) else parent.pop(key)
        elif op == "add" and isinstance(parent.get(key) if isinstance(parent, dict) else None,
                                        dict):  # fmt: skip
            parent[key][draw(st.sampled_from(["bogus", "Nodes", "latency", "1", "x.y"]))] = draw(
                scalars()
            )
        elif op == "nest":
            parent[key] = deep(draw(st.sampled_from([3, 60, 400, 2000])))
        elif op == "dup" and isinstance(parent, list):
            parent.append(_copy(parent[key]))
        else:
            parent[key] = _copy(draw(scalars()))
    return doc


#: text-level YAML attacks: alias bombs, duplicate keys, deep flow nesting, tags, garbage
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
YAML_ATTACKS = [
    _BOMB,
    "nodes: 1\nnodes: 2\n",
    "[" * 5000 + "]" * 5000,
    "{a: " * 3000 + "1" + "}" * 3000,
    "- " * 2000 + "x\n",
    "!!python/object/apply:os.system ['true']\n",
    "? [1, 2]\n: 3\n",
    "1: 2\n",
    "\x00\xff garbage",
    "a: *undefined\n",
    "&x a: 1\n",
    "",
    "---\n- 1\n---\n- 2\n",
]


def yaml_text(doc) -> str:
    """``doc`` as YAML: block style when PyYAML's dumper can write it, else flow style (a value
    nested thousands deep is too deep for the recursive dumper)."""
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, RecursionError):
        return flow_text(doc, "yaml")


def flow_text(doc, style: str = "json") -> str:
    """``doc`` as JSON text (or YAML flow style: ``.nan``/``.inf`` for non-finite floats),
    written without recursion so that any nesting depth can be written."""
    special = {"json": ("NaN", "Infinity"), "yaml": (".nan", ".inf")}[style]
    out: list[str] = []
    stack: list = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            parts: list = [_Raw("{")]
            for i, (k, v) in enumerate(item.items()):
                parts += [_Raw(", ")] if i else []
                parts += [_Raw(json.dumps(str(k)) + ": "), v]
            stack += reversed([*parts, _Raw("}")])
        elif isinstance(item, list | tuple):
            parts = [_Raw("[")]
            for i, v in enumerate(item):
                parts += [_Raw(", "), v] if i else [v]
            stack += reversed([*parts, _Raw("]")])
        elif isinstance(item, float) and not math.isfinite(item):
            text = special[0] if item != item else special[1]
            out.append(("-" if item < 0 else "") + text)
        elif isinstance(item, bool) or item is None:
            out.append({True: "true", False: "false", None: "null"}[item])
        elif isinstance(item, int | float):
            out.append(repr(item))
        else:
            out.append(json.dumps(str(item)))
    return "".join(out)


class _Raw:
    """Text :func:`flow_text` writes as it is."""

    def __init__(self, text: str):
        self.text = text


@st.composite
def yaml_files(draw, docs: list, focus: tuple = ()):
    """YAML text: a mutated ``doc``, sometimes with a text attack spliced in or appended."""
    text = yaml_text(draw(mutated(docs, focus=focus)))
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.sampled_from(YAML_ATTACKS))
    if choice == 1:
        lines = text.splitlines(keepends=True)
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        return "".join(lines[: i + 1] + lines[i:])  # a duplicated line: a duplicate key
    if choice == 2:
        return text + draw(st.sampled_from(YAML_ATTACKS))
    return text


@st.composite
def json_files(draw, docs: list, focus: tuple = ()):
    """JSON text of a mutated ``doc`` (NaN and Infinity written as Python's reader takes them),
    sometimes cut short."""
    text = flow_text(draw(mutated(docs, focus=focus)), "json")
    if draw(st.integers(0, 19)) == 0:
        return text[: draw(st.integers(0, len(text)))]
    return text


@st.composite
def text_lines(draw, texts: list[str], tokens: list[str]):
    """Line-level mutations of a text file: replace a numeric token, delete or repeat a line,
    truncate, or insert a line of random tokens."""
    lines = draw(st.sampled_from(texts)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["token", "token", "token", "delete", "repeat", "cut", "junk"]))
        if op == "token":
            parts = lines[i].replace(",", " , ").split()
            if parts:
                j = draw(st.integers(0, len(parts) - 1))
                parts[j] = draw(st.sampled_from(tokens))
                lines[i] = " ".join(parts).replace(" , ", ",")
        elif op == "delete":
            lines.pop(i)
        elif op == "repeat":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines = lines[:i]
        else:
            lines.insert(i, " ".join(draw(st.lists(st.sampled_from(tokens), max_size=14))))
    return "\n".join(lines) + "\n"


#: tokens a text mutation may write: numbers of every size and sign, NaN/inf spellings, words
TEXT_TOKENS = [
    "0", "-1", "1", "-5.5", "2.7", "1e308", "1e400", "-1e400", "1e-300", "nan", "NaN", "inf",
    "-inf", "Infinity", "N/A", "", "x", "#", "9999999999999999999999", "0x10", "1,000", "fp16",
    "gemm", "embedding_fwd", "true", "false", "all_reduce", "sum", "float", "-1e-9", "12.5",
]  # fmt: skip


def capture(fn, *args) -> tuple[object, str, str]:
    """``fn(*args)`` with stdout and stderr captured: (its value, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        value = fn(*args)
    return value, out.getvalue(), err.getvalue()


def load_json(path: Path):
    """A JSON file as data."""
    return json.loads(path.read_text())
