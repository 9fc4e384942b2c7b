"""Input/output: formatting rows for the terminal and writing result files atomically.

Only this module, ``plots.py`` and the CLI touch the disk or print.  A result folder is written
into a temporary sibling and renamed into place, so a reader never sees half of it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

FORMATS = ("table", "csv", "json")


def _numpy_scalar(value: Any, kind: str = "generic") -> bool:
    """Whether ``value`` is a numpy scalar (of ``kind``: generic, floating); numpy is not
    imported for it (none can exist before numpy is), which keeps ``zionsim --help`` quick."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, getattr(np, kind))


def _plain(value: Any) -> Any:
    if _numpy_scalar(value):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def print_note(line: str) -> None:
    """One line for the user on stderr (a library's default notifier, e.g. ``run_sweep``'s)."""
    print(line, file=sys.stderr)


def to_json(obj: Any) -> str:
    """Deterministic, strict JSON: sorted keys, fixed float formatting by Python's repr, and no
    NaN or Infinity (a non-finite number is a :class:`~zionsim.base.errors.ModelError`)."""
    from zionsim.base.bounds import require_finite

    plain = _plain(obj)
    require_finite(plain, "JSON output")
    return json.dumps(plain, indent=2, sort_keys=True, allow_nan=False) + "\n"


def format_rows(rows: list[dict], fmt: str = "table") -> str:
    """Rows (dicts with the same keys) as an aligned table, CSV or a JSON list."""
    if fmt == "json":
        from zionsim.base.bounds import require_finite

        require_finite(_plain(rows), "JSON output")
        return json.dumps(_plain(rows), indent=2, allow_nan=False) + "\n"
    if not rows:
        return ""
    keys = list(rows[0])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(_plain(rows))
        return buf.getvalue()
    cells = [[_cell(r[k]) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines) + "\n"


def format_mapping(data: dict, fmt: str = "table") -> str:
    """A flat mapping as ``key  value`` lines, CSV (key,value) or JSON."""
    if fmt == "json":
        return to_json(data)
    rows = [{"field": k, "value": v} for k, v in data.items()]
    if fmt == "csv":
        return format_rows(rows, "csv")
    width = max(len(k) for k in data)
    return "".join(f"{k.ljust(width)}  {_cell(v)}\n" for k, v in data.items())


def _cell(v: Any) -> str:
    if isinstance(v, float) or _numpy_scalar(v, "floating"):
        if v == 0 or 1e-3 <= abs(v) < 1e7:
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return f"{v:.4g}"
    return str(v)


#: the file that marks a folder as a zionsim result (JSON: ``kind``, ``inputs``)
MARKER = ".zionsim-result"
#: prefix of the temporary sibling a result folder is written into before its rename
TMP_PREFIX = ".zionsim-tmp-"


def safe_name(text: str) -> str:
    """``text`` as one path component: letters, digits, ``-``, ``_`` and ``.`` kept, anything
    else (``/``, ``..``, spaces) replaced by ``_``; never empty, never hidden.

    >>> safe_name("../x y")
    'x_y'
    """
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))
    name = name.strip("._")
    return name[:120] or "unnamed"


def inputs_id(options: dict) -> str:
    """A short, stable hash of a run's inputs (names a default result folder)."""
    import hashlib

    blob = json.dumps(_plain(options), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


def _protected(path: Path) -> bool:
    """True for ``/``, the home folder, and the working directory or any folder above it."""
    here = Path.cwd().resolve()
    return (
        path == Path(path.anchor) or path == Path.home().resolve() or path in (here, *here.parents)
    )


def check_result_target(out: Path, inputs: str | None = None, force: bool = False) -> None:
    """Refuse (:class:`InputError`) to replace ``out`` unless it is absent, an empty folder, or a
    zionsim result folder (``MARKER``) of the same inputs; ``force`` also allows a zionsim result
    of other inputs — never anything else (a foreign folder, a file, ``/tmp``, a link, a device).
    Called before any work, and again at the write."""
    from zionsim.base.errors import InputError

    out = Path(out)

    def refuse(problem: str, allowed: str) -> None:
        raise InputError(problem, file=str(out), field="--out", allowed=allowed)

    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink():
        refuse("is a symbolic link; zionsim does not replace links", "a new or result folder")
    if _protected(out.resolve()):
        refuse("is /, the home folder or the working folder (or above it)", "a folder below it")
    if not out.is_dir():
        kind = "a file" if out.is_file() else "a device, socket or pipe"
        refuse(f"is {kind}, not a zionsim result folder", "a new, empty or result folder")
    marker = out / MARKER
    if marker.is_file():
        try:
            held = json.loads(marker.read_text()).get("inputs")
        except (json.JSONDecodeError, AttributeError, OSError):
            held = None
        if force or inputs is None or held == inputs:
            return
        refuse("holds a zionsim result of other inputs", "another --out, or --force to replace it")
    try:
        empty = not any(out.iterdir())
    except OSError as exc:
        refuse(f"cannot be read ({exc.strerror})", "a new, empty or result folder")
    if not empty:
        refuse(
            "is a folder that zionsim did not write" + (" (--force replaces only zionsim "
            "results)" if force else ""),
            "a new or empty folder, or a zionsim result folder",
        )  # fmt: skip


def prepare_parent(path: str | Path) -> None:
    """Create the folder ``path`` goes into, before any work, so that an output nobody can write
    (``--out /proc/x/y``) fails at once (``OSError``) and not after a long simulation."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write one file through a temporary sibling and a rename (refuses folders and devices; the
    temporary file is removed if anything fails)."""
    from zionsim.base.errors import InputError

    path = Path(path)
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise InputError("is a folder or a device, not a file", file=str(path), allowed="a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_file_target(path: str | Path, signature: str, force: bool = False) -> None:
    """Refuse (:class:`InputError`) to overwrite ``path`` unless it is absent, a file zionsim
    wrote (its first 4 KiB hold ``signature``) or ``force`` is given for a regular file."""
    from zionsim.base.errors import InputError

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return
    if p.is_symlink() or not p.is_file():
        raise InputError("is not a regular file", file=str(p), field="--out", allowed="a file")
    with open(p, "rb") as fh:
        head = fh.read(4096)
    if signature.encode() not in head and not force:
        raise InputError(
            "exists and was not written by zionsim",
            file=str(p),
            field="--out",
            allowed="a new file, or --force",
        )


def _remove_stale(out: Path) -> None:
    """Remove temporary siblings of ``out`` left by killed writers (their process is gone)."""
    for tmp in out.parent.glob(f"{TMP_PREFIX}{out.name}.*"):
        pid = tmp.name[len(TMP_PREFIX) + len(out.name) + 1 :].split(".", 1)[0]
        if tmp.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def is_partial(path: str | Path) -> bool:
    """True for a temporary folder (or a file in one) of an unfinished write: never read it."""
    return any(part.startswith(TMP_PREFIX) for part in Path(path).parts)


def _write_content(path: Path, content) -> None:
    """Write bytes, text, or an iterable of text pieces (streamed, one piece at a time)."""
    if isinstance(content, bytes | str):
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return
    with open(path, "w", encoding="utf-8") as f:
        for piece in content:
            f.write(piece)


def write_result_dir(
    out_dir: str | Path,
    files: dict,
    kind: str = "result",
    inputs: str | None = None,
    force: bool = False,
) -> Path:
    """Write ``files`` (name → bytes, text, or an iterable of text pieces streamed to the
    file) as the folder ``out_dir``, atomically.

    The folder is written as a temporary sibling (``.zionsim-tmp-<name>.<pid>.*``) with a
    ``MARKER`` file naming ``kind`` and ``inputs``, then renamed into place; the sibling is removed
    on every error.  An existing ``out_dir`` is replaced only as :func:`check_result_target`
    allows.  Stale siblings of killed writers are removed first.
    """
    out = Path(out_dir)
    check_result_target(out, inputs, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{TMP_PREFIX}{out.name}.{os.getpid()}."))
    old = None
    try:
        for name, content in files.items():
            _write_content(tmp / name, content)
        (tmp / MARKER).write_text(to_json({"kind": kind, "inputs": inputs}))
        if out.exists():
            old = Path(
                tempfile.mkdtemp(
                    dir=out.parent, prefix=f"{TMP_PREFIX}{out.name}.{os.getpid()}.old."
                )
            )
            old.rmdir()
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not out.exists():
            os.replace(old, out)
        raise
    if old is not None:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return out


def write_run(
    out_dir: str | Path,
    result,
    plot: bool = True,
    inputs: str | None = None,
    force: bool = False,
    trace_ranks: str | list[int] = "auto",
) -> Path:
    """All files of a DLRM run, written into ``out_dir`` at once (see ``docs/outputs.md``);
    ``inputs`` and ``force`` as in :func:`write_result_dir`.  Per-op spans in ``events.parquet``
    and ``trace.json`` are those of ``trace_ranks`` (``auto``, ``all`` or a list: see
    :func:`zionsim.sim.results.trace_ranks`); ``ranks.csv`` keeps every rank's totals."""
    from zionsim.sim.results import rank_total_table, sample_events
    from zionsim.sim.results import trace_ranks as pick

    gpus, nodes = int(result.summary["gpus"]), int(result.summary["nodes"])
    ranks = pick(gpus, gpus // max(1, nodes), trace_ranks)
    table = getattr(result, "table", lambda name: getattr(result, name))  # columns where kept
    all_events = table("events")
    events = sample_events(all_events, ranks)
    totals = rank_total_table(all_events) if _is_table(all_events) else None
    files: dict[str, bytes | str] = {
        "summary.json": to_json(result.summary),
        "timing.json": to_json(result.timing),
        "events.parquet": _parquet(events),
        "breakdown.csv": _csv(table("breakdown")),
        "links.csv": _csv(table("links")),
        "memory.csv": _csv(table("memory")),
        "ranks.csv": _csv(result.rank_totals() if totals is None else totals),
        "trace.json": result.perfetto_json(ranks),  # streamed: pieces of text
    }
    if plot:
        from zionsim.io.plots import plot_breakdown, png_bytes

        files["breakdown.png"] = png_bytes(plot_breakdown(result.summary))
    if getattr(result, "samples", None) is not None:
        files["samples.csv"] = result.samples.to_csv(index=False)
        if plot:
            from zionsim.io.plots import plot_distribution, png_bytes

            files["distribution.png"] = png_bytes(plot_distribution(result.samples, result.summary))
    return write_result_dir(out_dir, files, "run", inputs, force)


def write_stopped(out_dir: str | Path, summary: dict, inputs: str | None, force: bool) -> Path:
    """The result folder of a job its faults stopped: ``summary.json`` alone (its ``status``
    and ``stopped_reason`` say why; ``docs/variability.md``)."""
    return write_result_dir(out_dir, {"summary.json": to_json(summary)}, "run", inputs, force)


def _is_table(value) -> bool:
    """Whether ``value`` is a ``base.table.Table`` (not imported for it: none can exist before
    that module is, which keeps ``zionsim --help`` from importing numpy)."""
    mod = sys.modules.get("zionsim.base.table")
    return mod is not None and isinstance(value, mod.Table)


def _csv(table) -> str:
    """A run's table as CSV: its columns without pandas (``io/tables.py``, the same bytes), a
    DataFrame by pandas."""
    if _is_table(table):
        from zionsim.io.tables import table_csv

        return table_csv(table)
    return table.to_csv(index=False)


def _parquet(df) -> bytes:
    """A table as parquet: columns without pandas (``io/tables.py``, the same bytes), a
    DataFrame by pandas."""
    if _is_table(df):
        from zionsim.io.tables import table_parquet

        return table_parquet(df)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


#: first line of every plan YAML zionsim writes (recognised before overwriting one)
PLAN_HEADER = "# zionsim plan (docs/plans.md)\n"


def write_trace(path: str | Path, trace, force: bool = False) -> None:
    """A trace file (schema ``zionsim.trace/1``, ``docs/traces.md``), written atomically; an
    existing file is replaced only if zionsim wrote it, or with ``force``."""
    from zionsim.dlrm.trace import SCHEMA
    from zionsim.dlrm.trace_file import trace_to_dict

    check_file_target(path, SCHEMA, force)
    write_atomic(path, json.dumps(trace_to_dict(trace), separators=(",", ":")))


def read_trace(path: str | Path):
    """Load and validate a trace file; errors name the file and the field."""
    from zionsim.base.errors import InputError
    from zionsim.dlrm.trace_file import trace_from_dict

    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", file=str(p), field="--trace")
    return trace_from_dict(strict_json(p), str(p))


def strict_json(path: Path):
    """The data of a JSON input file; NaN and Infinity (which Python's reader would take) and
    undecodable text are an :class:`InputError` naming the file."""
    from zionsim.base.errors import InputError

    def refuse(name: str):
        raise InputError(f"{name} is not a finite number", file=str(path), allowed="JSON numbers")

    try:
        return json.loads(path.read_bytes(), parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON (line {exc.lineno})", file=str(path)) from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"not valid JSON ({type(exc).__name__})", file=str(path)) from None


def write_plan(
    path: str | Path, plan, workload, force: bool = False, gpus: int | None = None
) -> None:
    """A plan YAML (``docs/plans.md``), written atomically; an existing file is replaced only if
    zionsim wrote it, or with ``force`` (``gpus``: the cluster's, so RW over all omits ranks)."""
    import yaml

    from zionsim.dlrm.plan_file import plan_to_dict

    check_file_target(path, PLAN_HEADER.strip(), force)
    body = yaml.safe_dump(
        plan_to_dict(plan, workload, gpus), sort_keys=False, default_flow_style=None
    )
    write_atomic(path, PLAN_HEADER + body)


def write_torchrec_plan(path: str | Path, data: dict, force: bool = False) -> None:
    """A TorchRec plan dump (``dlrm/torchrec_plan.py``) as JSON, written atomically; an existing
    file is replaced only if it is a TorchRec plan dump too, or with ``force``."""
    check_file_target(path, '"world_size"', force)
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def read_plan(
    path: str | Path, workload, gpus: int, gpus_per_node: int, servers: int | None = None
):
    """Load and validate a plan YAML against the workload and the cluster (``servers``: service
    hosts that can be parameter servers)."""
    from zionsim.dlrm.plan_file import load_plan

    return load_plan(path, workload, gpus, gpus_per_node, servers)


#: significant digits of the floats in committed study tables (``results/<study>/*.csv``): the
#: simulation is deterministic, but sums taken by another numpy or BLAS build can differ in the
#: last of Python's 17 digits; at 6 they are the same on every install
STUDY_DIGITS = 6


def study_csv(table) -> str:
    """A study table as CSV, floats at :data:`STUDY_DIGITS` significant digits."""
    return table.to_csv(index=False, float_format=f"%.{STUDY_DIGITS}g")


def write_tables_and_figures(out_dir: str | Path, files: dict) -> list[Path]:
    """Write each DataFrame as CSV (:func:`study_csv`) and each matplotlib axes as PNG,
    atomically; return the paths."""
    from zionsim.io.plots import png_bytes

    written = []
    for name, obj in files.items():
        path = Path(out_dir) / name
        write_atomic(path, png_bytes(obj) if name.endswith(".png") else study_csv(obj))
        written.append(path)
    return written


def write_sweep_table(out_dir: str | Path, table) -> None:
    """A sweep's combined table as ``results.parquet`` and ``results.csv`` in ``out_dir``, each
    written atomically (``docs/sweeps.md``)."""
    out = Path(out_dir)
    write_atomic(out / "results.parquet", _parquet(_arrow_safe(table)))
    write_atomic(out / "results.csv", table.to_csv(index=False))


def _arrow_safe(table):
    """Object columns mixing types (e.g. ``[512, "1k"]``) as strings, so parquet accepts them."""
    import pandas as pd

    out = table.copy()
    for col in [c for c in out.columns if pd.api.types.is_object_dtype(out[c])]:
        kinds = {type(v) for v in out[col] if v is not None and v == v}
        if len(kinds) > 1:
            out[col] = out[col].map(lambda v: None if v is None else str(v))
    return out
