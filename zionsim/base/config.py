"""Loading YAML inputs by built-in name or path, ``--set`` overrides, and validated field access.

Topologies and workloads share this code: a name such as ``zionex`` is looked up among the
built-ins (``topologies/`` or ``workloads/`` in the source tree, or their copies inside an
installed wheel), anything else is a path.  A file with a top-level ``base:`` is an overlay:
its other fields are merged over that base (``docs/calibration.md``).  ``--set a.b=VALUE``
overrides a field by dotted path.
:class:`Fields` reads one mapping with messages that name the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zionsim.base.errors import InputError
from zionsim.base.units import parse_quantity, require_unit

_PACKAGE = Path(__file__).resolve().parent.parent
#: libyaml's parser when PyYAML was built with it (same documents, several times faster)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the C parser where available (plain YAML types only)."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


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
    try:
        data = safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}", file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping at the top level", file=str(path))
    return data, str(path)


def load_with_overrides(
    name_or_path: str | Path,
    kind: str,
    overrides: dict[str, Any] | list[str] | None,
    defaults: dict[str, Any] | None = None,
) -> tuple[dict, str]:
    """:func:`load_yaml` (an overlay merged over its base), then optional top-level ``defaults``
    (a mapping fills in the fields the file leaves out), then ``--set`` overrides."""
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
    return apply_overrides(data, overrides or {}, file), file


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
        value = safe_load(raw)
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def apply_overrides(data: dict, overrides: dict[str, Any], file: str) -> dict:
    """A copy of ``data`` with each dotted path replaced; the path must already exist."""
    out = _deep_copy(data)
    for dotted, value in overrides.items():
        node, keys = out, dotted.split(".")
        for i, key in enumerate(keys):
            if not isinstance(node, dict) or key not in node:
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
        """A quantity in SI units, ``> minimum`` when ``strict`` else ``>= minimum``; a
        bytes/bandwidth/FLOPS/time value must carry its unit unless ``unit`` is False (for keys
        whose name states it, such as ``launch_overhead_us``) or it is 0."""
        raw = self.raw(key, default)
        if unit and key in self.data:
            require_unit(raw, dimension, field=self.path(key), file=self.file)
        value = parse_quantity(raw, dimension, field=self.path(key), file=self.file)
        if value != value or (value <= minimum if strict else value < minimum):
            op = ">" if strict else ">="
            raise self.error(key, f"must be {op} {minimum:g}, got {self.raw(key, default)!r}")
        return value

    def integer(self, key: str, default: Any = ..., *, minimum: int = 1) -> int:
        """A whole number ``>= minimum`` (``4`` or ``4.0``; not a bool, not ``4.5``)."""
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise self.error(key, f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value!r}")
        return int(value)

    def fraction(self, key: str, default: Any = ...) -> float:
        """A fraction in (0, 1], written as a number or a percentage (``0.8`` or ``80%``)."""
        value = self.quantity(key, "fraction", default)
        if value > 1.0:
            raise self.error(key, f"must be in (0, 1], got {self.raw(key, default)!r}")
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
        unknown = sorted(set(self.data) - set(allowed))
        if unknown:
            raise self.error(unknown[0], "unknown field", allowed=", ".join(sorted(allowed)))
