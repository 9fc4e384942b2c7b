"""Point files of a sweep: one JSON record per finished point, sealed with hashes so that a
resumed sweep reuses only what this model computed for these inputs (``docs/sweeps.md``).

A record holds ``point_id``, ``parameters``, ``status``, ``error``, ``figures`` and
``sim_wall_s``, and four hashes (SHA-256, hex):

1. ``parameters_sha256``: of the parameters as sorted JSON (``point_id`` is its first 12 digits).
2. ``model_sha256``: of the model that computed it (:func:`model_version`: the zionsim version,
   the source of layers 0–4, ``zionsim/data`` and the built-in topologies, workloads and
   stacks), taken by the process that ran the point.
3. ``inputs_sha256``: of the files the parameters name by path (topology, workload, plan, stack
   YAML), taken by the parent when it writes the record.
4. ``record_sha256``: of the record's other fields, so an edited figure or status shows.

:func:`reuse_problem` says why a record cannot be reused (None when it can).  The hashes detect
edits, stale results and mix-ups, not forgery: whoever can write the folder can recompute them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

#: the hashes a sealed record carries (module docstring)
HASHES = ("parameters_sha256", "model_sha256", "inputs_sha256", "record_sha256")
#: subpackages whose source is the model (layers 0–4; io, studies and cli do not change figures)
MODEL_LAYERS = ("base", "hardware", "network", "dlrm", "sim")
#: parameters that may name a file
FILE_PARAMETERS = ("topology", "workload", "plan", "stack", "scenario")


def canonical(value) -> str:
    """A value as compact JSON with sorted keys (what every hash here is taken of)."""
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def sha256(text: str | bytes) -> str:
    """Hex SHA-256 of ``text`` (UTF-8 for a str)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def parameters_hash(params: dict) -> str:
    """Hash 1 of the module docstring."""
    return sha256(canonical(params))


@lru_cache(maxsize=1)
def model_version() -> str:
    """Hash 2: the zionsim version and every file the model computes from, in sorted order."""
    from zionsim.base.config import builtin_dir

    pkg = Path(__file__).resolve().parents[1]
    files = [f for layer in MODEL_LAYERS for f in (pkg / layer).rglob("*.py")]
    files += [f for f in (pkg / "data").rglob("*") if f.is_file()]
    for kind in ("topologies", "workloads", "stacks"):
        files += list(builtin_dir(kind).glob("*.yaml"))
    h = hashlib.sha256(_version().encode())
    for f in sorted(files, key=lambda p: p.relative_to(p.parents[1]).as_posix()):
        if "__pycache__" in f.parts:
            continue
        h.update(f.relative_to(f.parents[1]).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _version() -> str:
    """The installed zionsim's version string (``unknown`` when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zionsim")
    except PackageNotFoundError:
        return "unknown"


def inputs_hash(params: dict) -> str:
    """Hash 3: the contents of the files the parameters name by path (names that are not
    files, such as built-in names, count as their text only)."""
    h = hashlib.sha256()
    for key in FILE_PARAMETERS:
        value = params.get(key)
        path = Path(str(value)) if isinstance(value, str) else None
        h.update(f"{key}={value}\0".encode())
        if path is not None and path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _body_hash(record: dict) -> str:
    return sha256(canonical({k: v for k, v in record.items() if k != "record_sha256"}))


def seal(record: dict, inputs: str) -> dict:
    """``record`` with its parameters, inputs and record hashes (``model_sha256`` comes from
    the worker; a record without one gets the local model's)."""
    out = {
        **record,
        "parameters_sha256": parameters_hash(record["parameters"]),
        "model_sha256": record.get("model_sha256") or model_version(),
        "inputs_sha256": inputs,
    }
    out.pop("record_sha256", None)
    return {**out, "record_sha256": _body_hash(out)}


def read_record(path: str | Path) -> dict | None:
    """A point file's record, or None if it is missing or unreadable."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def reuse_problem(record: dict | None, point: dict, inputs: str) -> str | None:
    """Why ``record`` cannot stand for ``point`` (its parameters and ``point_id``) under the
    current model and ``inputs`` hash; None when it can be reused as is."""
    if record is None:
        return "missing"
    if record.get("status") != "ok":
        return "failed before"
    if any(not isinstance(record.get(k), str) for k in HASHES):
        return "not sealed (written by an older zionsim)"
    if record["record_sha256"] != _body_hash(record):
        return "edited since it was written (record hash does not match)"
    params = {k: v for k, v in point.items() if k != "point_id"}
    if record.get("point_id") != point["point_id"] or record["parameters_sha256"] != (
        parameters_hash(params)
    ):
        return "parameters differ from the sweep's"
    if record["parameters_sha256"] != parameters_hash(record.get("parameters")):
        return "parameters differ from their hash"
    if record["model_sha256"] != model_version():
        return "computed by another model version"
    if record["inputs_sha256"] != inputs:
        return "an input file changed"
    return None


def point_path(out: Path, pid: str) -> Path:
    """The file of point ``pid`` in sweep folder ``out``."""
    return Path(out) / "points" / f"{pid}.json"


#: reasons for rerunning a point that need no telling (never run, or failed: retried as before)
_QUIET = ("missing", "failed before")


def to_run(out: Path, pts: list[dict], inputs: dict, notify: Callable[[str], None]) -> list[dict]:
    """The points to run: those whose file cannot be reused (``points.reuse_problem``); one
    line to ``notify`` per reason other than a missing or failed point."""
    todo, why = [], {}
    for p in pts:
        path = point_path(out, p["point_id"])
        record = read_record(path)
        problem = reuse_problem(record, p, inputs[p["point_id"]])
        if record is None and path.exists():
            problem = "unreadable (truncated or not JSON)"
        if problem is not None:
            todo.append(p)
            if problem not in _QUIET:
                why.setdefault(problem, []).append(p["point_id"])
    for problem, ids in sorted(why.items()):
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        notify(f"sweep: recomputing {len(ids)} point file(s) in {out}/points: {problem}: {shown}")
    return todo
