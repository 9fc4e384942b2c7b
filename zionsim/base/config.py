"""Loading YAML inputs by built-in name or path, ``--set`` overrides, and validated field access.

Topologies and workloads share this code: a name such as ``zionex`` is looked up among the
built-ins (``topologies/`` or ``workloads/`` in the source tree, or their copies inside an
installed wheel), anything else is a path.  A file with a top-level ``base:`` is an overlay:
its other fields are merged over that base (``docs/calibration.md``).  ``--set a.b=VALUE``
overrides a field by dotted path.
:class:`Fields` reads one mapping with messages that name the file and the field.
"""

from __future__ import annotations

import math
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from zionsim.base import bounds
from zionsim.base.errors import InputError
from zionsim.base.units import parse_quantity, require_unit

_PACKAGE = Path(__file__).resolve().parent.parent
#: libyaml's parser when PyYAML was built with it (same documents, several times faster)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C parser where available (plain YAML types only).

    A text parsed before in this process is not parsed again: its document is kept pickled
    (up to :data:`KEEP_PARSED` texts of at most :data:`KEEP_PARSED_CHARS` characters) and each
    caller gets a fresh copy, equal to what parsing gives (a sweep's points read the same
    topology, workload and stack files; parsing them was 2.4 % of a point)."""
    if len(text) > KEEP_PARSED_CHARS:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
    kept = _PARSED.get(text)
    if kept is None:
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader
        if len(_PARSED) >= KEEP_PARSED:
            _PARSED.clear()
        _PARSED[text] = kept = pickle.dumps(data, pickle.HIGHEST_PROTOCOL)
        return data
    return pickle.loads(kept)  # noqa: S301 - our own bytes, pickled just above


@contextmanager
def recording_reads():
    """Within: every file :func:`load_yaml` reads is listed, as (path, text), in the list
    this yields (a cache of what was built from files checks them with :func:`unchanged`)."""
    reads: list[tuple[str, str]] = []
    _RECORDERS.append(reads)
    try:
        yield reads
    finally:
        _RECORDERS.remove(reads)


def unchanged(reads) -> bool:
    """Whether every (path, text) of ``reads`` still reads so (relative paths from here)."""
    for path, text in reads:
        try:
            if Path(path).read_text() != text:
                return False
        except (OSError, UnicodeDecodeError):
            return False
    return True


_RECORDERS: list[list] = []

#: :func:`safe_load` keeps the documents of at most this many texts, each at most this long
KEEP_PARSED = 64
KEEP_PARSED_CHARS = 1_000_000
_PARSED: dict[str, bytes] = {}


def builtin_dir(kind: str) -> Path:
    """Folder of built-in ``kind`` files (``topologies`` or ``workloads``)."""
    installed = _PACKAGE / "_builtin" / kind
    return installed if installed.is_dir() else _PACKAGE.parent / kind


def builtin_names(kind: str) -> list[str]:
    """Names of the built-in files of ``kind``, sorted."""
    return sorted(p.stem for p in builtin_dir(kind).glob("*.yaml"))


def load_yaml(name_or_path: str | Path, kind: str) -> tuple[dict, str]:
    """Return the mapping in a built-in name or YAML path, and the file it came from."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.exists()):
        path = builtin_dir(kind) / f"{text}.yaml"
        if not path.exists():
            singular = {"topologies": "topology", "workloads": "workload"}.get(kind, kind)
            raise InputError(
                f"unknown {singular} {text!r}",
                field=f"--{singular}",
                allowed=", ".join(builtin_names(kind)) + " or a YAML path",
            )
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    if path.stat().st_size > MAX_YAML_BYTES:
        raise InputError(
            f"file of {path.stat().st_size} bytes is too large",
            file=str(path),
            allowed=f"at most {MAX_YAML_BYTES} bytes",
        )
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the file ({type(exc).__name__})", file=str(path)) from None
    for reads in _RECORDERS:
        reads.append((str(path), text))
    if path.resolve().parent == builtin_dir(kind).resolve():
        data = safe_load(text)  # zionsim's own file: the C parser, checked by the test suite
    else:
        data = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise InputError("expected a mapping at the top level", file=str(path))
    return data, str(path)


#: limits of an input YAML file: its size, nesting depth, and size once aliases are expanded;
#: zionsim's own files are far below them (a 4,096-table plan is ~250 kB, depth < 10), and an
#: alias bomb ("billion laughs") or a file nested thousands deep is refused before it is built
MAX_YAML_BYTES = 64 * 2**20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 2_000_000


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit, refusing duplicate and non-string keys."""

    depth = 0

    def compose_node(self, parent, index):
        """Compose one node, refusing nesting deeper than :data:`MAX_YAML_DEPTH`."""
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _YamlLimit(f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_float(self, node):
        """A float, refusing ``.inf``, ``.nan`` and overflowing literals (``1.0e+400``): no
        zionsim input takes a non-finite number."""
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _YamlLimit(f"{node.value!r} is not a finite number", node.start_mark)
        return value

    def construct_mapping(self, node, deep=False):
        """A mapping whose own keys are distinct strings (YAML would keep the last of two;
        keys merged in with ``<<`` may be overridden, as YAML means them to be)."""
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise _YamlLimit(f"key {key!r} is not a string", key_node.start_mark)
            if key in seen:
                raise _YamlLimit(f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


class _YamlLimit(Exception):
    """A YAML document beyond the loader's limits (message and position)."""

    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem, self.mark = problem, mark


def parse_yaml(text: str, file: str | None = None, field: str | None = None) -> Any:
    """The data of one YAML document, read safely and within the limits above (an alias bomb,
    a recursive alias, deep nesting, duplicate or non-string keys are an :class:`InputError`)."""
    loader = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _YamlLimit as exc:
        where = f" at line {exc.mark.line + 1}" if exc.mark else ""
        raise InputError(f"{exc.problem}{where}", file=file, field=field) from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:  # ValueError: int("9" * 5000)
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}", file=file, field=field) from None
    finally:
        if loader is not None:
            loader.dispose()


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root) -> None:
    """Refuse a node graph whose aliases expand beyond :data:`MAX_YAML_NODES` nodes or
    :data:`MAX_YAML_DEPTH` levels, or that contains itself (a recursive alias)."""
    size: dict[int, tuple[int, int]] = {}  # id -> (expanded nodes, expanded depth)
    open_: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            open_.discard(id(node))
            kids = [size[id(c)] for c in _children(node)]
            n = 1 + sum(k[0] for k in kids)
            depth = 1 + max((k[1] for k in kids), default=0)
            if n > MAX_YAML_NODES:
                raise _YamlLimit(f"aliases expand to more than {MAX_YAML_NODES} nodes")
            if depth > MAX_YAML_DEPTH:
                raise _YamlLimit(f"aliases nest deeper than {MAX_YAML_DEPTH} levels")
            size[id(node)] = (n, depth)
        elif id(node) not in size:
            if id(node) in open_:
                raise _YamlLimit("an alias refers to a node that contains it", node.start_mark)
            open_.add(id(node))
            stack.append((node, True))
            stack += [(c, False) for c in _children(node) if id(c) not in size]


def load_with_overrides(
    name_or_path: str | Path,
    kind: str,
    overrides: dict[str, Any] | list[str] | None,
    defaults: dict[str, Any] | None = None,
    create: bool = False,
) -> tuple[dict, str]:
    """:func:`load_yaml` (an overlay merged over its base), then optional top-level ``defaults``
    (a mapping fills in the fields the file leaves out), then ``--set`` overrides (``create``:
    see :func:`apply_overrides`)."""
    data, file = load_yaml(name_or_path, kind)
    if "base" in data:
        data = resolve_overlay(data, file, kind)
    for key, value in (defaults or {}).items():  # mappings: the file's fields over the defaults
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = merge_fields(value, data[key])
        else:
            data.setdefault(key, value)
    if isinstance(overrides, list):
        overrides = dict(parse_override(o) for o in overrides)
    return apply_overrides(data, overrides or {}, file, create), file


#: top-level keys of an overlay that are not fields of the base: what it is laid over, and reports
OVERLAY_META = ("base", "fit", "provenance")


def resolve_overlay(data: dict, file: str, kind: str, seen: tuple[str, ...] = ()) -> dict:
    """The base named by ``data["base"]`` with the overlay's other fields merged over it.

    ``base`` is a built-in name or a YAML path (relative paths are tried from the overlay's
    folder first); it may itself be an overlay.  ``fit`` and ``provenance`` are reports and are
    dropped.  Without its own ``name`` the result is named after the overlay file.  The merged
    mapping is validated by the caller, whose errors then name the overlay file.
    """
    base = data["base"]
    if not isinstance(base, str) or not base:
        raise InputError(
            f"expected a built-in name or a YAML path, got {base!r}", file=file, field="base"
        )
    if file in seen:
        raise InputError("overlays form a cycle", file=file, field="base")
    near = Path(file).parent / base
    ref = near if base.endswith((".yaml", ".yml")) and near.exists() else base
    base_data, base_file = load_yaml(ref, kind)
    if "base" in base_data:
        base_data = resolve_overlay(base_data, base_file, kind, (*seen, file))
    fields = {k: v for k, v in data.items() if k not in OVERLAY_META}
    merged = merge_fields(base_data, fields)
    if "name" not in fields:
        merged["name"] = Path(file).stem
    return merged


def merge_fields(base: dict, overlay: dict) -> dict:
    """A copy of ``base`` with ``overlay`` merged in: mappings recursively, the rest replaced."""
    out = _deep_copy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_fields(out[key], value)
        else:
            out[key] = _deep_copy(value)
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=VALUE"`` → ``("a.b", value)``; the value is read as YAML (numbers stay numbers)."""
    if "=" not in text:
        raise InputError(f"cannot read override {text!r}", field="--set", allowed="PATH=VALUE")
    key, raw = text.split("=", 1)
    try:
        value = parse_yaml(raw, field=f"--set {key.strip()}")
    except InputError as exc:
        if "not valid YAML" not in exc.problem:
            raise
        value = raw
    return key.strip(), value


def apply_overrides(data: dict, overrides: dict[str, Any], file: str, create: bool = False) -> dict:
    """A copy of ``data`` with each dotted path replaced.  The path must already exist, unless
    ``create``: then missing mappings along it are made, for a caller whose validation checks the
    keys of every mapping it reads (so a misspelt field is still refused, with the fields the
    schema allows, and a valid field the file leaves out can be set)."""
    out = _deep_copy(data)
    for dotted, value in overrides.items():
        node, keys = out, dotted.split(".")
        for i, key in enumerate(keys):
            if create and isinstance(node, dict) and key not in node and i < len(keys) - 1:
                node[key] = {}
            if not isinstance(node, dict) or (key not in node and not create):
                here = ".".join(keys[:i]) or "top level"
                allowed = ", ".join(sorted(node)) if isinstance(node, dict) else "none"
                raise InputError(
                    f"unknown field {key!r} under {here}",
                    file=file,
                    field=f"--set {dotted}",
                    allowed=allowed,
                )
            if i == len(keys) - 1:
                node[key] = value
            else:
                node = node[key]
    return out


def _deep_copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj


class Fields:
    """Validated reads from one mapping of a file: every error names the file and the field."""

    def __init__(self, data: Any, file: str, prefix: str = ""):
        if not isinstance(data, dict):
            raise InputError("expected a mapping", file=file, field=prefix or None)
        self.data, self.file, self.prefix = data, file, prefix

    def path(self, key: str) -> str:
        """The dotted field name of ``key`` under this mapping's prefix (for error messages)."""
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, problem: str, allowed: str | None = None) -> InputError:
        """An :class:`InputError` naming the file and field ``key`` (to raise, not raised)."""
        return InputError(problem, file=self.file, field=self.path(key), allowed=allowed)

    def raw(self, key: str, default: Any = ...) -> Any:
        """The value of ``key`` as written; ``default`` when absent or null, an error when there
        is no default (``...``: the field is required)."""
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.error(key, "missing required field")
            return default
        return self.data[key]

    def sub(self, key: str, default: Any = ...) -> Fields:
        """The nested mapping ``key`` as :class:`Fields` (errors then name ``prefix.key.…``)."""
        return Fields(self.raw(key, default), self.file, self.path(key))

    def quantity(
        self,
        key: str,
        dimension: str,
        default: Any = ...,
        *,
        minimum: float = 0.0,
        strict: bool = True,
        unit: bool = True,
    ) -> float:
        """A quantity in SI units, ``> minimum`` when ``strict`` else ``>= minimum``, and inside
        its physical bound (``base.bounds``); a bytes/bandwidth/FLOPS/time value must carry its
        unit unless ``unit`` is False (for keys whose name states it, such as
        ``launch_overhead_us``) or it is 0."""
        raw = self.raw(key, default)
        if unit and key in self.data:
            require_unit(raw, dimension, field=self.path(key), file=self.file)
        value = parse_quantity(raw, dimension, field=self.path(key), file=self.file)
        if value != value or (value <= minimum if strict else value < minimum):
            op = ">" if strict else ">="
            raise self.error(key, f"must be {op} {minimum:g}, got {raw!r}")
        if key in self.data:
            bounds.check(value, key, dimension, file=self.file, field=self.path(key), shown=raw)
        return value

    def integer(self, key: str, default: Any = ..., *, minimum: int = 1) -> int:
        """A whole number ``>= minimum`` and inside its bound (``base.bounds``): ``4`` or
        ``4.0``; not a bool, not ``4.5``, not infinite.  ``default=None`` allows it absent."""
        value = self.raw(key, default)
        if value is None and default is None:
            return None
        return bounds.count(value, key, minimum=minimum, file=self.file, field=self.path(key))

    def fraction(self, key: str, default: Any = ...) -> float:
        """A fraction in (0, 1], written as a number or a percentage (``0.8`` or ``80%``)."""
        raw = self.raw(key, default)
        value = parse_quantity(raw, "fraction", field=self.path(key), file=self.file)
        if not 0.0 < value <= 1.0:
            raise self.error(key, f"must be in (0, 1], got {raw!r}")
        return self.quantity(key, "fraction", default)  # and within its bound

    def text(self, key: str, default: Any = ...) -> str:
        """A string (a number or a mapping where text belongs is refused)."""
        value = self.raw(key, default)
        if value is None and default is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        return value

    def choice(self, key: str, options: tuple[str, ...] | list[str], default: Any = ...) -> str:
        """One of ``options``, exactly as written (the error lists them)."""
        value = self.raw(key, default)
        if value not in options:
            raise self.error(key, f"unknown value {value!r}", allowed=", ".join(options))
        return value

    def flag(self, key: str, default: Any = ...) -> bool:
        """A YAML boolean (``true``/``false``); strings and numbers are rejected."""
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def check_keys(self, allowed: set[str] | list[str]) -> None:
        """Reject keys that are not in ``allowed`` (a typo must not be silently ignored)."""
        unknown = sorted(str(k) for k in self.data if k not in set(allowed))
        if unknown:
            raise self.error(unknown[0], "unknown field", allowed=", ".join(sorted(allowed)))


#: how a built-in file is named in ``summary.json`` (the same on every install)
BUILTIN_PREFIX = "zionsim:"


def portable_path(path: str | Path, kind: str) -> str:
    """``path`` as ``summary.json`` records it: ``zionsim:<kind>/<file>`` for a built-in file of
    ``kind`` (wherever zionsim is installed), else as given."""
    p = Path(path)
    if p.is_file() and p.resolve().parent == builtin_dir(kind).resolve():
        return f"{BUILTIN_PREFIX}{kind}/{p.name}"
    return str(path)


def file_sha256(path: str | Path) -> str | None:
    """SHA-256 of a file's bytes (an input's identity in ``summary.json``; a
    :func:`portable_path` is found where it lies); None if unreadable."""
    import hashlib

    text = str(path)
    if text.startswith(BUILTIN_PREFIX):
        kind, name = text[len(BUILTIN_PREFIX) :].split("/", 1)
        path = builtin_dir(kind) / name
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
