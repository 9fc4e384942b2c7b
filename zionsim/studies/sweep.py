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
3. A rerun into the same folder reuses a point file only if it says ``status: ok`` and its
   hashes match (``studies/points.py``: its parameters, the model version, the input files, and
   the record itself); failed, missing, unreadable, edited or stale files are run again, and the
   user is told which and why.
4. The combined table is built from the point files of this sweep only (not from memory), so a
   resumed sweep and a fresh one give the same table.  ``sim_wall_s`` is the only wall-clock
   column.
5. Parameter columns carry the values as written; a summary figure with the same name as a
   parameter (``topology``, ``nodes``, ``plan``, ...) is kept as ``summary.<name>``.
6. A worker stays up for many points and reuses what they share: the cluster of an earlier point
   with the same spec (graph, routes and flow classes), and, through the lowering's and the
   planner's own caches (``dlrm/lowering.py``, ``dlrm/estimate.py``), the lowered traces of plans
   it met before (points that differ only in the cluster's rates lower the same plans), and,
   while a sweep's points run, the topology, workload and stack specs loaded for an earlier
   point with the same names and overrides (while their files read the same).  A local
   pool is handed the points grouped by their options outside ``topology.*`` (grid order kept
   otherwise) so that such points follow one another; with several workers each such group is
   one task (cut in pieces so that every worker gets several), so one worker lowers its plans
   and writes its point files when the task ends.  Every reuse is of values equal to what
   the point would build alone, so its record is the one a lone run gives (tested).
7. One local worker is this process: its points run here, one after another in the order of
   assumption 6, each written as it ends.  No pool starts and the model is not imported a
   second time (a pool's worker imports it anew: a third of a CPU-second).  What the points
   kept (clusters, traces, the planner's memos) is then frozen for Python's cycle collector
   (``gc.freeze``, as ``sim.run.few_gc_passes`` does while a point runs, and undone by the
   next simulation's): long-lived, it is not rescanned by later collections, those the
   interpreter makes as it exits included (about half a CPU-second after bench/sweep.py's 64
   points at 128 GPUs; a pool's worker exits without them).  The price: a point that kills
   the process (out of memory past the guard, a crash of the interpreter) ends the sweep
   instead of failing alone; a rerun resumes after the points already written.

This module reads and writes files (the point files and the table); the simulation stays pure.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zionsim.base.errors import InputError
from zionsim.io.files import print_note, to_json, write_atomic, write_sweep_table
from zionsim.sim.inputs import ALLOWED_KEYS, OVERRIDE_PREFIXES, RUN_OPTIONS
from zionsim.sim.results import summary_row
from zionsim.sim.run import RunResult
from zionsim.studies.points import (
    canonical,
    inputs_hash,
    model_version,
    parameters_hash,
    point_path,
    read_record,
    seal,
    to_run,
)

if TYPE_CHECKING:  # pandas is imported where a table is built (a worker needs none)
    import pandas as pd

PREFIXES = OVERRIDE_PREFIXES
SWEEP_KEYS = ("base", "grid")
_ALLOWED_KEYS = ALLOWED_KEYS


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
        if len({canonical(v) for v in values}) < len(values):
            raise InputError("repeated value", file=file, field=f"grid.{key}", allowed="distinct")
    return Sweep(dict(base), {k: list(v) for k, v in grid.items()}, file)


def _check_key(key, file: str, section: str) -> None:
    """Raise unless ``key`` is a run option or a ``topology.``/``workload.``/``stack.`` path."""
    ok = isinstance(key, str) and (
        key in RUN_OPTIONS
        or (key.startswith(PREFIXES) and len(key.split(".", 1)[1]) > 0)
        or key == "scenario"
        or (key.startswith("scenario.") and len(key) > 9)  # studies/jobs
    )
    if not ok:
        raise InputError(
            "unknown run option", file=file, field=f"{section}.{key}", allowed=_ALLOWED_KEYS
        )


def check_grid(sweep: Sweep) -> None:
    """Refuse up front (:class:`InputError` naming ``grid.KEY``) a grid key or value that names
    something that does not exist — a misspelt ``topology.``/``workload.``/``stack.`` path, an
    unknown topology, workload or stack — by resolving the base with each grid value in turn
    (``sim.inputs.resolve_inputs``; files only, nothing simulated).  Other problems, which may
    hold for some combinations only, are left to the points."""
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.studies.jobs import is_scenario_point, scenario_of

    for key, values in sweep.grid.items():
        for value in values:
            try:
                params = {**sweep.base, key: value}
                if is_scenario_point(params):
                    scenario_of(params, sweep.file)
                    continue
                resolve_inputs(params, sweep.file)
            except InputError as exc:
                if "unknown" in exc.problem or exc.problem == "no such file":
                    raise InputError(
                        exc.one_line(), file=sweep.file, field=f"grid.{key}={value!r}"
                    ) from None


def point_id(params: dict) -> str:
    """Stable 12-hex-digit id of a point: a hash of its parameters as sorted JSON."""
    return parameters_hash(params)[:12]


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


def run_one(point: dict, max_memory_bytes: float | str | None = None) -> dict:
    """Simulate one point (worker side, no files): the record its point file will hold.

    ``status`` is ``"ok"`` or ``"error"``; ``error`` is an :class:`InputError`'s one-line message
    (a run refused by the resource guard included) or ``"ExceptionType: message"``;
    ``sim_wall_s`` (s) is wall-clock; ``model_sha256`` the model that ran it.
    ``max_memory_bytes``: the guard's limit, or ``"here"`` for this machine's own
    (``io.limits.memory_limit``).
    """
    params = {k: v for k, v in point.items() if k != "point_id"}
    record = {
        "point_id": point["point_id"],
        "parameters": params,
        "figures": {},
        "model_sha256": model_version(),
    }
    if max_memory_bytes == "here":
        from zionsim.io.limits import memory_limit

        max_memory_bytes = memory_limit()
    from zionsim.studies.jobs import is_scenario_point, scenario_point

    try:
        if is_scenario_point(params):  # several jobs on one fabric (studies/jobs.py)
            figures, wall = scenario_point(params)
        else:
            result = _run_reusing(params, max_memory_bytes)
            figures, wall = summary_row(result.summary), float(result.timing["sim_wall_s"])
    except InputError as exc:
        return {**record, "status": "error", "error": exc.one_line(), "sim_wall_s": None}
    except Exception as exc:  # any failure is recorded; the other points go on
        return {**record, "status": "error", "error": _describe(exc), "sim_wall_s": None}
    return {**record, "figures": figures, "status": "ok", "error": None, "sim_wall_s": wall}


#: clusters built for earlier points of this process, by their spec (``repr``): at most this
#: many GPUs in all (a sweep's points differ mostly in fields that do not change the cluster)
KEEP_CLUSTER_GPUS = 4096
_CLUSTERS: dict[str, object] = {}
#: the topology, workload and stack specs loaded for the points of the sweep under way (a dict
#: while its points run in this process, :func:`_keeping_specs`; None: none kept)
_SPECS: dict | None = None


@contextmanager
def _keeping_specs():
    """Within: a point's topology, workload and stack specs are kept for the next points
    (``sim.inputs.resolve_inputs``: while the files they came from read the same); they are
    forgotten when the sweep's points have run (assumption 6)."""
    global _SPECS
    outer, _SPECS = _SPECS, {} if _SPECS is None else _SPECS
    try:
        yield
    finally:
        _SPECS = outer


def _run_reusing(params: dict, limit) -> RunResult:
    """:func:`~zionsim.sim.run.run_point` of ``params``, on the cluster an earlier point of this
    process built when its spec is the same (assumption 6); the memory guard runs first, as in
    ``run_point``."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import check_iterations, few_gc_passes, guard_inputs, simulate_inputs

    inputs = resolve_inputs(params, memo=_SPECS)
    check_iterations(inputs.options["iterations"], inputs.options["warmup"])
    guard_inputs(inputs, limit)
    key = repr(inputs.cluster)
    cluster = _CLUSTERS.pop(key, None) or Cluster.build(inputs.cluster)
    _CLUSTERS[key] = cluster  # the most recent last
    while sum(c.spec.gpus for c in _CLUSTERS.values()) > KEEP_CLUSTER_GPUS:
        del _CLUSTERS[next(iter(_CLUSTERS))]
    with few_gc_passes():  # what earlier points left (kept traces, clusters) is not rescanned
        return simulate_inputs(inputs, cluster, max_memory_bytes=limit, guarded=True, lean=True)


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` on one line."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def run_sweep(
    sweep: Sweep | str | Path,
    out_dir: str | Path,
    workers: int = 1,
    scheduler: str | None = None,
    progress: bool | str = True,
    *,
    max_memory: str | None = None,
    security=None,
    allow_insecure: bool = False,
    notify: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run every point not already done in ``out_dir``; return and write the combined table.

    ``workers`` local processes, or the Dask cluster at ``scheduler`` (``tls://host:port``;
    plain ``tcp://`` only on the loopback or with ``allow_insecure``; ``security`` a
    ``distributed.security.Security``, default Dask's configuration).  ``max_memory``: each
    point's memory limit as written (``16GiB``, ``none``); default ``$ZIONSIM_MAX_MEMORY`` or
    the available memory (divided by ``workers`` locally, each Dask worker's own).  Writes
    ``points/<point_id>.json`` per finished point, then ``results.parquet`` and ``results.csv``
    (one row per point, in grid order).  ``notify`` gets one line per kind of point file that
    could not be reused (default: printed on stderr).  ``progress``: show a tqdm bar on a
    terminal; a string is its label (default ``sweep <name>`` of ``out_dir``).
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", field="workers")
    if scheduler:
        from zionsim.studies.pool import check_scheduler

        check_scheduler(scheduler, security is not None, allow_insecure)
    check_grid(sweep)
    out = Path(out_dir)
    pts = points(sweep)
    inputs = {p["point_id"]: inputs_hash(p) for p in pts}
    todo = to_run(out, pts, inputs, notify or print_note)
    _write_sweep_file(out, sweep)
    label = progress if isinstance(progress, str) else f"sweep {out.name}"
    bar = _Progress(len(pts), len(pts) - len(todo), bool(progress), label)
    run = _Run(out, bar, inputs, notify or print_note)
    try:
        if todo and scheduler:
            _run_dask(todo, scheduler, run, _limit(max_memory, None), security)
        elif todo:
            _run_local(todo, workers, run, _limit(max_memory, workers))
    finally:
        bar.close()
    table = combine(out, [p["point_id"] for p in pts])
    write_sweep_table(out, table)
    return table


#: a point file's record, or None if it is missing or unreadable
read_point = read_record


def _limit(option: str | None, workers: int | None) -> float | str | None:
    """The memory limit handed to ``run_one``: parsed here for a local pool (available memory
    shared by ``workers``), or ``"here"`` for a Dask worker to find its own when no option or
    environment variable says."""
    import os

    from zionsim.io.limits import ENV_MAX_MEMORY, memory_limit

    if workers is None and option is None and not os.environ.get(ENV_MAX_MEMORY):
        return "here"
    return memory_limit(option, workers or 1)


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


@dataclass
class _Run:
    """Where finished points go: the sweep folder, the progress bar, the inputs hash per id,
    and where to tell the user about workers running another model."""

    out: Path
    bar: _Progress
    inputs: dict
    notify: Callable[[str], None]
    foreign: int = 0

    def check_model(self, record: dict) -> None:
        """Tell (once) when a worker's model differs from this process's: its points will be
        recomputed on every resume."""
        if record["model_sha256"] != model_version() and not self.foreign:
            self.foreign = 1
            self.notify(
                f"sweep: point {record['point_id']} was computed by a worker running another "
                "zionsim model version than this process; such points are recomputed on resume"
            )


def reuse_order(todo: list[dict]) -> list[dict]:
    """The points in the order a worker reuses most (assumption 6): those with the same options
    apart from ``topology.*`` overrides (the cluster's rates, mostly) next to each other, grid
    order kept within and among such groups."""
    first: dict[str, int] = {}
    for i, p in enumerate(todo):
        first.setdefault(canonical(_beside_cluster(p)), i)
    return sorted(todo, key=lambda p: first[canonical(_beside_cluster(p))])


def _beside_cluster(point: dict) -> dict:
    return {k: v for k, v in point.items() if k != "point_id" and not k.startswith("topology.")}


#: with several local workers, each gets at least about this many tasks (:func:`reuse_tasks`)
TASKS_PER_WORKER = 4


def reuse_tasks(todo: list[dict], workers: int) -> list[list[dict]]:
    """The points in :func:`reuse_order`, cut into the tasks of a local pool: one point each
    with one worker; with several, each run of points with the same options outside
    ``topology.*`` is one task (in pieces of at most ``len(todo) / (workers ·``
    :data:`TASKS_PER_WORKER` ``)`` points, so that every worker gets several), so that one
    worker lowers their candidate plans and the others do not lower them again."""
    if workers <= 1:
        return [[p] for p in reuse_order(todo)]
    most = max(1, -(-len(todo) // (workers * TASKS_PER_WORKER)))
    tasks: list[list[dict]] = []
    last = None
    for p in reuse_order(todo):
        key = canonical(_beside_cluster(p))
        if key != last or len(tasks[-1]) >= most:
            tasks.append([])
        tasks[-1].append(p)
        last = key
    return tasks


def run_points(points: list[dict], max_memory_bytes: float | str | None = None) -> list[dict]:
    """:func:`run_one` of each of ``points`` in turn (one task of a local pool)."""
    with _keeping_specs():
        return [run_one(p, max_memory_bytes) for p in points]


def _run_local(todo: list[dict], workers: int, run: _Run, limit) -> None:
    """Run ``todo`` in a local pool whose workers die with this process (``studies/pool.py``),
    as :func:`reuse_tasks` cuts it; with one worker, in this process (assumption 7)."""
    from concurrent.futures import as_completed

    from zionsim.studies.pool import local_pool

    if workers == 1:
        run.bar.running(1)
        with _keeping_specs():
            for i, p in enumerate(reuse_order(todo), 1):
                _finish(run_one(p, limit), run)
                run.bar.running(min(1, len(todo) - i))
        gc.freeze()  # what the points kept is long-lived: not rescanned (assumption 7)
        return

    with local_pool(workers) as pool:
        pending = {pool.submit(run_points, t, limit): t for t in reuse_tasks(todo, workers)}
        run.bar.running(min(workers, len(todo)))
        left = len(todo)
        for fut in as_completed(list(pending)):
            task = pending.pop(fut)
            try:
                records = fut.result()
            except Exception as exc:  # the worker died (killed, out of memory)
                records = [_failed(p, exc) for p in task]
            for record in records:
                _finish(record, run)
            left -= len(task)
            run.bar.running(min(workers, left))


#: seconds a Dask sweep waits for a live worker (at the start, or after the last one left)
#: before it fails naming the scheduler (environment variable ``ZIONSIM_DASK_WORKER_TIMEOUT``)
DASK_WORKER_TIMEOUT_S = 60.0


def _run_dask(todo: list[dict], scheduler: str, run: _Run, limit, security=None) -> None:
    """Run ``todo`` on the Dask distributed cluster at ``scheduler`` (``security``: TLS).  With
    no live worker for :data:`DASK_WORKER_TIMEOUT_S` (none joins, or all die) it raises
    ``TimeoutError`` naming the scheduler; points already written stay for a resume."""
    import os

    from distributed import Client

    wait_s = float(os.environ.get("ZIONSIM_DASK_WORKER_TIMEOUT", DASK_WORKER_TIMEOUT_S))
    kwargs = {"security": security} if security is not None else {}
    with Client(scheduler, timeout=f"{wait_s}s", **kwargs) as client:
        _wait_for_worker(client, scheduler, wait_s)
        slots = max(1, sum(client.nthreads().values()))
        pending = {client.submit(run_one, p, limit, pure=False): p for p in todo}
        _drain_dask(client, pending, slots, run, scheduler, wait_s)


def _no_worker(scheduler: str, wait_s: float) -> TimeoutError:
    return TimeoutError(
        f"no live Dask worker at the scheduler {scheduler} for {wait_s:g} s (start one with "
        f"`dask worker {scheduler}`; finished points are kept for a resume)"
    )


def _wait_for_worker(client, scheduler: str, wait_s: float) -> None:
    """Return once the scheduler has a worker; TimeoutError naming it after ``wait_s``."""
    try:
        client.wait_for_workers(1, timeout=wait_s)
    except TimeoutError:
        raise _no_worker(scheduler, wait_s) from None


def _drain_dask(client, pending: dict, slots: int, run: _Run, scheduler: str, wait_s) -> None:
    """:func:`_drain` for Dask, polling so that a cluster whose workers all died fails after
    ``wait_s`` instead of waiting forever."""
    import time

    from distributed import wait

    alone_since = None
    run.bar.running(min(slots, len(pending)))
    while pending:
        try:
            done = wait(list(pending), timeout=2.0, return_when="FIRST_COMPLETED").done
        except TimeoutError:
            done = set()
        for fut in done:
            _finish(_result(fut, pending.pop(fut)), run)
            run.bar.running(min(slots, len(pending)))
        if done or client.nthreads():
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > wait_s:
            raise _no_worker(scheduler, wait_s)


def _finish(record: dict, run: _Run) -> None:
    """Seal a finished point's record and write its file atomically."""
    record = seal(record, run.inputs[record["point_id"]])
    run.check_model(record)
    write_atomic(point_path(run.out, record["point_id"]), to_json(record))
    run.bar.finished(record["status"] == "ok")


def _result(fut, point: dict) -> dict:
    """The future's record, or an error record if the worker itself failed (crash, kill)."""
    try:
        return fut.result()
    except Exception as exc:  # the worker died (killed, out of memory) or could not unpickle
        return _failed(point, exc)


def _failed(point: dict, exc: BaseException) -> dict:
    """The error record of ``point`` whose worker failed with ``exc``."""
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
    import pandas as pd

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
