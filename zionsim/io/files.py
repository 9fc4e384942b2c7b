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
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("table", "csv", "json")


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def to_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, fixed float formatting by Python's repr."""
    return json.dumps(_plain(obj), indent=2, sort_keys=True) + "\n"


def format_rows(rows: list[dict], fmt: str = "table") -> str:
    """Rows (dicts with the same keys) as an aligned table, CSV or a JSON list."""
    if fmt == "json":
        return json.dumps(_plain(rows), indent=2) + "\n"
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
    if isinstance(v, float | np.floating):
        if v == 0 or 1e-3 <= abs(v) < 1e7:
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return f"{v:.4g}"
    return str(v)


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write one file through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def write_result_dir(out_dir: str | Path, files: dict[str, bytes | str]) -> Path:
    """Write ``files`` (name → content) as the folder ``out_dir``, replacing it atomically."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        for name, content in files.items():
            (tmp / name).write_bytes(content.encode() if isinstance(content, str) else content)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_run(out_dir: str | Path, result, plot: bool = True) -> Path:
    """All files of a DLRM run, written into ``out_dir`` at once (see ``docs/outputs.md``)."""
    files: dict[str, bytes | str] = {
        "summary.json": to_json(result.summary),
        "timing.json": to_json(result.timing),
        "events.parquet": _parquet(result.events),
        "breakdown.csv": result.breakdown.to_csv(index=False),
        "links.csv": result.links.to_csv(index=False),
        "memory.csv": result.memory.to_csv(index=False),
        "trace.json": json.dumps(result.perfetto(), separators=(",", ":")),
    }
    if plot:
        from zionsim.io.plots import plot_breakdown, png_bytes

        files["breakdown.png"] = png_bytes(plot_breakdown(result.summary))
    return write_result_dir(out_dir, files)


def _parquet(df) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def write_trace(path: str | Path, trace) -> None:
    """A trace file (schema ``zionsim.dlrm.trace/1``, ``docs/traces.md``), written atomically."""
    from zionsim.dlrm.trace import trace_to_dict

    write_atomic(path, json.dumps(trace_to_dict(trace), separators=(",", ":")))


def read_trace(path: str | Path):
    """Load and validate a trace file; errors name the file and the field."""
    from zionsim.base.errors import InputError
    from zionsim.dlrm.trace import trace_from_dict

    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", file=str(p), field="--trace")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON (line {exc.lineno})", file=str(p)) from None
    return trace_from_dict(data, str(p))


def write_plan(path: str | Path, plan, workload) -> None:
    """A plan YAML (``docs/plans.md``), written atomically."""
    import yaml

    from zionsim.dlrm.plan import plan_to_dict

    write_atomic(
        path, yaml.safe_dump(plan_to_dict(plan, workload), sort_keys=False, default_flow_style=None)
    )


def read_plan(
    path: str | Path, workload, gpus: int, gpus_per_node: int, servers: int | None = None
):
    """Load and validate a plan YAML against the workload and the cluster (``servers``: host
    sockets that can be parameter servers)."""
    from zionsim.dlrm.plan import load_plan

    return load_plan(path, workload, gpus, gpus_per_node, servers)


def write_tables_and_figures(out_dir: str | Path, files: dict) -> list[Path]:
    """Write each DataFrame as CSV and each matplotlib axes as PNG, atomically; return paths."""
    from zionsim.io.plots import png_bytes

    written = []
    for name, obj in files.items():
        path = Path(out_dir) / name
        write_atomic(path, png_bytes(obj) if name.endswith(".png") else obj.to_csv(index=False))
        written.append(path)
    return written
