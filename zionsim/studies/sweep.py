"""What-if sweeps: a grid of run options, run in parallel, one result file per point, one table.

A sweep file (``docs/sweeps.md``) has a ``base:`` mapping and a ``grid:`` of lists; each point of
the cartesian product is ``base`` updated by one value per grid key, run by
:func:`zionsim.sim.run.run_point`.  Points run in a local process pool or on a Dask distributed
cluster.  Assumptions and choices:

1. A point's id is a short hash of its sorted parameters, so the same point (base included) gets
   the same id in every run of the sweep; changing ``base`` changes every id.
2. Workers only simulate: :func:`run_one` calls ``run_point`` and returns a plain dict.  The
   parent writes each point file (``points/<point_id>.json``) atomically as soon as the point
   finishes, so Dask workers need no shared filesystem and a killed sweep loses only the points
   in flight.
3. A rerun into the same folder skips points whose file says ``status: ok``; failed, missing or
   unreadable files are run again.
4. The combined table is built from the point files of this sweep only (not from memory), so a
   resumed sweep and a fresh one give the same table.  ``sim_wall_s`` is the only wall-clock
   column.
5. Parameter columns carry the values as written; a summary figure with the same name as a
   parameter (``topology``, ``nodes``, ``plan``, ...) is kept as ``summary.<name>``.

This module reads and writes files (the point files and the table); the simulation stays pure.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from zionsim.base.errors import InputError
from zionsim.io.files import to_json, write_atomic, write_sweep_table
from zionsim.sim.results import summary_row
from zionsim.sim.run import RUN_OPTIONS, run_point

PREFIXES = ("topology.", "workload.")
SWEEP_KEYS = ("base", "grid")
_ALLOWED_KEYS = ", ".join(RUN_OPTIONS) + ", topology.PATH, workload.PATH"


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: fixed ``base`` options and a ``grid`` of values per key (file order)."""

    base: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    file: str = "<sweep>"


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep YAML; errors name the file, the field and what is allowed."""
    from zionsim.base.config import load_yaml

    if not Path(path).is_file():
        raise InputError("no such file", file=str(path), field="sweep")
    data, file = load_yaml(path, "sweeps")
    return sweep_from_dict(data, file)


def sweep_from_dict(data: dict, file: str = "<sweep>") -> Sweep:
    """A :class:`Sweep` from a mapping with ``base:`` and ``grid:`` (both optional)."""
    unknown = sorted(str(k) for k in data if k not in SWEEP_KEYS)
    if unknown:
        raise InputError("unknown key", file=file, field=unknown[0], allowed="base, grid")
    base, grid = data.get("base") or {}, data.get("grid") or {}
    for name, section in (("base", base), ("grid", grid)):
        if not isinstance(section, dict):
            raise InputError("expected a mapping", file=file, field=name)
        for key in section:
            _check_key(key, file, name)
    for key, values in grid.items():
        if not isinstance(values, list):
            raise InputError(
                f"expected a list of values, got {values!r}",
                file=file,
                field=f"grid.{key}",
                allowed="[v1, v2, ...]",
            )
        if not values:
            raise InputError("empty list", file=file, field=f"grid.{key}", allowed="1+ values")
        if len({_canonical(v) for v in values}) < len(values):
            raise InputError("repeated value", file=file, field=f"grid.{key}", allowed="distinct")
    return Sweep(dict(base), {k: list(v) for k, v in grid.items()}, file)


def _check_key(key, file: str, section: str) -> None:
    """Raise unless ``key`` is a run option or a ``topology.``/``workload.`` dotted path."""
    ok = isinstance(key, str) and (
        key in RUN_OPTIONS or (key.startswith(PREFIXES) and len(key.split(".", 1)[1]) > 0)
    )
    if not ok:
        raise InputError(
            "unknown run option", file=file, field=f"{section}.{key}", allowed=_ALLOWED_KEYS
        )


def _canonical(value) -> str:
    """A value as compact JSON with sorted keys (what ids are hashed from)."""
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def point_id(params: dict) -> str:
    """Stable 12-hex-digit id of a point: a hash of its parameters as sorted JSON."""
    return hashlib.sha256(_canonical(params).encode()).hexdigest()[:12]


def points(sweep: Sweep) -> list[dict]:
    """Every grid point (base updated by one value per key) with its ``point_id``.

    Order: the cartesian product of the grid keys in file order, the last key varying fastest.

    >>> [p["nodes"] for p in points(Sweep({"workload": "tiny"}, {"nodes": [1, 2]}))]
    [1, 2]
    """
    keys = list(sweep.grid)
    out = []
    for values in itertools.product(*(sweep.grid[k] for k in keys)):
        params = {**sweep.base, **dict(zip(keys, values, strict=True))}
        out.append({"point_id": point_id(params), **params})
    return out


def run_one(point: dict) -> dict:
    """Simulate one point (worker side, no files): the record its point file will hold.

    ``status`` is ``"ok"`` or ``"error"``; ``error`` is an :class:`InputError`'s one-line message
    or ``"ExceptionType: message"``; ``sim_wall_s`` (s) is wall-clock.
    """
    params = {k: v for k, v in point.items() if k != "point_id"}
    record = {"point_id": point["point_id"], "parameters": params, "figures": {}}
    try:
        result = run_point(params)
    except InputError as exc:
        return {**record, "status": "error", "error": exc.one_line(), "sim_wall_s": None}
    except Exception as exc:  # any failure is recorded; the other points go on
        return {**record, "status": "error", "error": _describe(exc), "sim_wall_s": None}
    figures = summary_row(result.summary)
    return {
        **record,
        "figures": figures,
        "status": "ok",
        "error": None,
        "sim_wall_s": float(result.timing["sim_wall_s"]),
    }


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` on one line."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def run_sweep(
    sweep: Sweep | str | Path,
    out_dir: str | Path,
    workers: int = 1,
    scheduler: str | None = None,
    progress: bool | str = True,
) -> pd.DataFrame:
    """Run every point not already done in ``out_dir``; return and write the combined table.

    ``workers`` local processes, or the Dask cluster at ``scheduler`` (``tcp://host:port``).
    Writes ``points/<point_id>.json`` per finished point, then ``results.parquet`` and
    ``results.csv`` (one row per point, in grid order).  ``progress``: show a tqdm bar on a
    terminal; a string is its label (default ``sweep <name>`` of ``out_dir``).
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", field="workers")
    out = Path(out_dir)
    pts = points(sweep)
    todo = [p for p in pts if not _is_done(_point_path(out, p["point_id"]))]
    _write_sweep_file(out, sweep)
    label = progress if isinstance(progress, str) else f"sweep {out.name}"
    bar = _Progress(len(pts), len(pts) - len(todo), bool(progress), label)
    try:
        if todo and scheduler:
            _run_dask(todo, scheduler, out, bar)
        elif todo:
            _run_local(todo, workers, out, bar)
    finally:
        bar.close()
    table = combine(out, [p["point_id"] for p in pts])
    write_sweep_table(out, table)
    return table


def _point_path(out: Path, pid: str) -> Path:
    return out / "points" / f"{pid}.json"


def read_point(path: str | Path) -> dict | None:
    """A point file's record, or None if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _is_done(path: Path) -> bool:
    record = read_point(path)
    return isinstance(record, dict) and record.get("status") == "ok"


def _write_sweep_file(out: Path, sweep: Sweep) -> None:
    """Keep the sweep's definition next to its results (``sweep.json``; JSON keys are sorted, so
    ``grid_keys`` keeps the grid's order for plots)."""
    record = {"base": sweep.base, "grid": sweep.grid, "grid_keys": list(sweep.grid)}
    write_atomic(out / "sweep.json", to_json(record))


class _Progress:
    """A tqdm bar of finished points; postfix: ok / running / failed / skipped counts."""

    def __init__(self, total: int, skipped: int, enabled: bool, label: str = "sweep"):
        from tqdm import tqdm

        self.counts = {"ok": 0, "running": 0, "failed": 0, "skipped": skipped}
        # disable=None: shown only on a terminal (quiet in pipes, logs and tests)
        off = None if enabled else True
        self.bar = tqdm(total=total, initial=skipped, unit="pt", desc=label, disable=off)
        self.bar.set_postfix(self.counts)

    def running(self, n: int) -> None:
        """Show ``n`` points in flight."""
        self.counts["running"] = n
        self.bar.set_postfix(self.counts)

    def finished(self, ok: bool) -> None:
        """Count one point done, ``ok`` or failed."""
        self.counts["ok" if ok else "failed"] += 1
        self.bar.update(1)
        self.bar.set_postfix(self.counts)

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()


def _run_local(todo: list[dict], workers: int, out: Path, bar: _Progress) -> None:
    """Run ``todo`` in a process pool (forkserver: the parent may hold threads)."""
    from concurrent.futures import as_completed

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    try:
        pending = {pool.submit(run_one, p): p for p in todo}
        _drain(pending, workers, as_completed, out, bar)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_dask(todo: list[dict], scheduler: str, out: Path, bar: _Progress) -> None:
    """Run ``todo`` on the Dask distributed cluster at ``scheduler``."""
    from distributed import Client, as_completed

    with Client(scheduler) as client:
        slots = max(1, sum(client.nthreads().values()))
        pending = {client.submit(run_one, p, pure=False): p for p in todo}
        _drain(pending, slots, as_completed, out, bar)


def _drain(pending: dict, slots: int, as_completed, out: Path, bar: _Progress) -> None:
    """Write each point's file atomically as its future finishes (parent side)."""
    bar.running(min(slots, len(pending)))
    for fut in as_completed(list(pending)):
        record = _result(fut, pending.pop(fut))
        write_atomic(_point_path(out, record["point_id"]), to_json(record))
        bar.finished(record["status"] == "ok")
        bar.running(min(slots, len(pending)))


def _result(fut, point: dict) -> dict:
    """The future's record, or an error record if the worker itself failed (crash, kill)."""
    try:
        return fut.result()
    except Exception as exc:
        params = {k: v for k, v in point.items() if k != "point_id"}
        return {
            "point_id": point["point_id"],
            "parameters": params,
            "figures": {},
            "status": "error",
            "error": _describe(exc),
            "sim_wall_s": None,
        }


def combine(out_dir: str | Path, ids: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per point file: those of ``ids`` in that order (a sweep's grid order), or all of
    them sorted by ``point_id``.

    Columns: ``point_id``, parameters, figures, ``status``, ``error``, ``sim_wall_s``.
    """
    folder = Path(out_dir) / "points"
    if ids is None:
        ids = sorted(p.stem for p in folder.glob("*.json"))
    records = [r for r in (read_point(folder / f"{i}.json") for i in ids) if r]
    return table_from_records(records)


def table_from_records(records: list[dict]) -> pd.DataFrame:
    """The combined table of point records, in their order (see :func:`combine`); integer
    columns as ``Int64``."""
    rows, params, figures = [], set(), set()
    for rec in records:
        p = rec["parameters"]
        f = {(f"summary.{k}" if k in p else k): v for k, v in rec["figures"].items()}
        params.update(p)
        figures.update(f)
        rows.append({"point_id": rec["point_id"], **p, **f, **_tail(rec)})
    columns = ["point_id", *sorted(params), *sorted(figures), "status", "error", "sim_wall_s"]
    table = pd.DataFrame(rows, columns=columns)
    for col in [*params, *figures]:
        values = [r[col] for r in rows if r.get(col) is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            table[col] = table[col].astype("Int64")
    table["sim_wall_s"] = table["sim_wall_s"].astype(float)
    return table.reset_index(drop=True)


def _tail(rec: dict) -> dict:
    return {k: rec.get(k) for k in ("status", "error", "sim_wall_s")}


def brief_rows(table: pd.DataFrame, keys: list[str], fmt: str = "table") -> list[dict]:
    """One short row per point for the terminal: id, swept values, status, headline figures.

    ``iteration_time_ms`` and ``samples_per_s`` are empty for failed points; in ``table`` format
    long errors are cut to 60 characters (the table files keep them whole).
    """
    rows = []
    for _, r in table.iterrows():
        ok = r["status"] == "ok"
        empty = "" if fmt == "table" else None
        err = "" if ok or r["error"] is None else str(r["error"])
        if fmt == "table" and len(err) > 60:
            err = err[:57] + "..."
        rows.append(
            {
                "point_id": r["point_id"],
                **{k: r[k] for k in keys if k in table.columns},
                "status": r["status"],
                "iteration_time_ms": round(float(r["iteration_time_s"]) * 1e3, 4) if ok else empty,
                "samples_per_s": round(float(r["samples_per_s"]), 1) if ok else empty,
                "error": err,
            }
        )
    return rows
