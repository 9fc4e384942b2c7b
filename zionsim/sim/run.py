"""One DLRM training run, end to end and pure: cluster + workload (+ plan or trace) → results.

:func:`simulate_run` lowers the workload under the plan (default: table-wise round-robin), checks
HBM capacity, executes the iterations, and returns a :class:`RunResult` of plain data: the summary
mapping behind ``summary.json`` and the tables behind the other files.  ``io.files`` writes them.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from zionsim.base.bounds import require_finite
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import (
    MEMORY_KINDS,
    Plan,
    check_fits,
    check_host_fits,
    default_plan,
    memory_by_rank,
)
from zionsim.dlrm.stack import StackSpec, apply_stack, check_trainer, resolve_stack
from zionsim.dlrm.sync import SyncSpec, gap_stats, sync_spec
from zionsim.dlrm.trace import Trace
from zionsim.dlrm.workload import WorkloadSpec
from zionsim.hardware.compute import architecture
from zionsim.sim.engine import simulate_trace
from zionsim.sim.inputs import RunInputs, plan_of, resolve_inputs
from zionsim.sim.resources import check_inputs, check_trace

if TYPE_CHECKING:  # pandas is imported where a table is built (a sweep's worker needs none)
    import pandas as pd
from zionsim.base.kept import kept_with
from zionsim.base.table import Table, strings
from zionsim.sim.perfetto import perfetto, perfetto_json
from zionsim.sim.results import (
    Analysis,
    link_table,
    link_utilisation,
    rank_totals,
    sample_events,
)


class _TableField:
    """A :class:`RunResult` table: kept as given (a ``Table`` of columns, a DataFrame or None)
    and read as a DataFrame, made from the columns when first read (``RunResult.table`` hands
    the columns to a writer that needs no pandas)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj._tables[self.name]
        if isinstance(value, Table):
            value = obj._tables[self.name] = value.to_frame()
        return value

    def __set__(self, obj, value) -> None:
        obj._tables[self.name] = value


class RunResult:
    """One run as plain data: ``summary`` (``summary.json``), ``timing`` (the simulator's own
    wall time and event count), the events, breakdown, links and per-GPU memory tables, and the
    trace that ran.  A lean result (a sweep point's: ``simulate_inputs(..., lean=True)``) has
    no tables (``events``, ``breakdown``, ``links`` and ``memory`` are None: a sweep's worker
    needs no pandas); its ``summary`` is a full run's.  The tables are pandas DataFrames when
    read; a run keeps them as columns (``base/table.py``) until then, so that ``zionsim run``
    writes its files without importing pandas (:meth:`table`)."""

    events: pd.DataFrame | None = _TableField()
    breakdown: pd.DataFrame | None = _TableField()
    links: pd.DataFrame | None = _TableField()
    memory: pd.DataFrame | None = _TableField()
    #: with variability: one row per measured iteration of every realisation (``samples.csv``)
    samples: pd.DataFrame | None = _TableField()

    def __init__(
        self,
        summary: dict,
        timing: dict,
        events,
        breakdown,
        links,
        memory,
        trace: Trace,
        samples=None,
    ):
        self.summary, self.timing, self.trace = summary, timing, trace
        self._tables = {
            "events": events,
            "breakdown": breakdown,
            "links": links,
            "memory": memory,
            "samples": samples,
        }

    def __repr__(self) -> str:
        return f"RunResult(summary={self.summary!r}, timing={self.timing!r})"

    def table(self, name: str):
        """The table ``name`` as kept: a ``Table`` of columns until its DataFrame was read, else
        the DataFrame (or None)."""
        return self._tables[name]

    def perfetto(self, ranks: list[int] | None = None) -> dict:
        """The events (of ``ranks`` only, network rows kept; default all) as a Chrome/Perfetto
        trace (see :func:`zionsim.sim.perfetto.perfetto`)."""
        events = self.table("events")
        return perfetto(events if ranks is None else sample_events(events, ranks))

    def perfetto_json(self, ranks: list[int] | None = None):
        """:meth:`perfetto` as JSON text in pieces, to stream to a file
        (:func:`zionsim.sim.perfetto.perfetto_json`)."""
        events = self.table("events")
        return perfetto_json(events if ranks is None else sample_events(events, ranks))

    def rank_totals(self) -> pd.DataFrame:
        """Seconds, spans and bytes per rank and category (every rank, see ``rank_totals``)."""
        return rank_totals(self.table("events"))


def build_trace(
    cluster,
    workload: WorkloadSpec,
    plan: Plan | None = None,
    fused: bool = True,
    sync: SyncSpec | None = None,
    stack: StackSpec | str | None = None,
) -> tuple[Trace, pd.DataFrame]:
    """The iteration trace and the per-GPU memory table, after the capacity checks, as the
    software ``stack`` (default ``torchrec``) runs the ``workload`` (as written: the stack's
    precisions are applied here)."""
    stack = resolve_stack(stack)
    workload = apply_stack(workload, stack)
    sync = sync or sync_spec(base=workload.sync)
    return lower_checked(cluster, workload, plan, fused and stack.fused_embedding, sync, stack)


def lower_checked(
    cluster,
    workload: WorkloadSpec,
    plan: Plan | None,
    fused: bool,
    sync: SyncSpec,
    stack,
    lean: bool = False,
    columns: bool = False,
) -> tuple[Trace, pd.DataFrame | Table | dict]:
    """:func:`build_trace` of a workload the ``stack`` already applies to (``RunInputs.workload``):
    the capacity checks, the memory table, the lowered trace; ``fused`` as the stack allows.
    ``lean``: the table's byte columns as a dict of arrays (and ``hbm_capacity_bytes`` a
    number), no DataFrame; ``columns``: the table as a ``Table`` (``base/table.py``)."""
    check_trainer(stack, architecture(cluster.spec.gpu))
    gpus, g = len(cluster.gpus), cluster.spec.gpus_per_node
    plan = plan or default_plan(workload, gpus)
    mem = memory_by_rank(workload, plan, gpus, g, workload.zipf_alpha)
    names = [cluster.router.device_name(int(d)) for d in cluster.gpus]
    check_fits(mem, cluster.spec.gpu.hbm_bytes, names)
    fe = cluster.spec.front_end
    check_host_fits(
        mem["host_dram"],
        cluster.spec.host.dram_bytes,
        g,
        mem["ps_dram"],
        fe.servers if fe else 0,
        fe.server_dram_bytes if fe else 0.0,
    )
    trace = lower(workload, plan, gpus, fused, g, workload.zipf_alpha, sync, stack)
    if lean:
        columns = {f"{k}_bytes": np.asarray(mem[k]) for k in MEMORY_KINDS}
        columns["hbm_bytes"] = np.asarray(sum(mem[k] for k in MEMORY_KINDS))
        columns["hbm_capacity_bytes"] = cluster.spec.gpu.hbm_bytes
        columns["host_dram_bytes"] = np.asarray(mem["host_dram"])
        return trace, columns
    table = Table(
        {
            "rank": range(gpus),
            "gpu": strings(names),
            **{f"{k}_bytes": mem[k] for k in MEMORY_KINDS},
            "hbm_bytes": sum(mem[k] for k in MEMORY_KINDS),
            "hbm_capacity_bytes": cluster.spec.gpu.hbm_bytes,
            "host_dram_bytes": mem["host_dram"],
        }
    )
    return trace, table if columns else table.to_frame()


def simulate_run(
    cluster,
    workload: WorkloadSpec | None = None,
    plan: Plan | None = None,
    *,
    trace: Trace | None = None,
    iterations: int = 3,
    warmup: int = 1,
    fused: bool = True,
    sync: str | None = None,
    sync_every: int | None = None,
    sync_servers: int | None = None,
    sync_period_s: float | None = None,
    sync_trainer: str | None = None,
    stack: StackSpec | str | None = None,
    max_memory_bytes: float | None = None,
) -> RunResult:
    """Simulate ``iterations`` training iterations; figures average those after ``warmup``.

    ``stack``: the software stack (a profile, a name or a path; default ``torchrec``); a
    replayed ``trace`` carries its own.  ``max_memory_bytes``: refuse (``ResourceError``) a
    trace whose simulation is estimated to need more (``sim.resources``; None: no check)."""
    import pandas as pd

    t0 = time.perf_counter()
    check_iterations(iterations, warmup)
    memory = pd.DataFrame()
    # lowering and the results too: their full passes rescanned the trace built so far, a
    # cost that grew faster than the cluster (docs/performance.md)
    with few_gc_passes():
        if trace is None:
            stack = resolve_stack(stack)
            workload = apply_stack(workload, stack)
            spec = sync_spec(
                sync, sync_every, sync_servers, sync_period_s, sync_trainer, base=workload.sync
            )
            fused = fused and stack.fused_embedding
            trace, memory = lower_checked(cluster, workload, plan, fused, spec, stack)
        return _execute(cluster, trace, memory, workload, iterations, warmup, max_memory_bytes, t0)


def _execute(
    cluster,
    trace: Trace,
    memory,
    workload,
    iterations: int,
    warmup: int,
    limit,
    t0: float,
    simulate=None,
    lean: bool = False,
) -> RunResult:
    """Simulate a lowered (or replayed) ``trace`` and gather the :class:`RunResult`;
    ``simulate(cluster, trace, iterations)`` runs it (default :func:`simulate_trace`)."""
    _guard(trace, workload, iterations, limit, cluster.spec)
    with few_gc_passes():
        rec = (simulate or simulate_trace)(cluster, trace, iterations=iterations)
        return run_result(cluster, trace, memory, rec, warmup, t0, lean)


def run_result(
    cluster, trace: Trace, memory, rec, warmup: int, t0: float, lean: bool = False
) -> RunResult:
    """The :class:`RunResult` of the records ``rec`` of ``trace`` run on ``cluster`` (``t0``:
    when the run began, for its wall time); ``sim/jobs.py`` gathers each job's so.  ``lean``:
    without its tables (the same summary; ``memory`` may be a lean run's columns)."""
    iterations = rec.iterations
    a = Analysis(rec, warmup)
    iter_s = float(a.iteration_times().mean())
    breakdown, busy, exposed = a.breakdown(), a.busy(), a.exposed()
    events = None if lean else a.event_table()
    links = None if lean else link_table(cluster, rec.network, rec.sim_time_s)
    wall = time.perf_counter() - t0
    summary = {
        **_run_header(cluster, trace, iterations, warmup),
        "iteration_time_s": iter_s,
        "samples_per_s": int(trace.meta.get("global_batch", 0)) / iter_s if iter_s else 0.0,
        "breakdown_s": breakdown,
        "busy_s": busy,
        "exposed_comm_s": sum(exposed.values()),
        "exposed_comm_by_collective_s": exposed,
        "critical_path": _path_summary(a.critical_path(iterations - 1)),
        "collectives": _collectives(rec, trace),
        "memory": _memory_summary(memory),
        **_link_means(cluster, rec, links),
        "events": a.event_count() if events is None else int(len(events)),
        "sync": _sync_summary(cluster, trace, rec, a, iterations, warmup),
    }
    require_finite(summary, "summary.json")  # a NaN from accepted input is a bug (ModelError)
    if lean:
        return RunResult(summary, _timing(rec, wall), None, None, None, None, trace)
    bd = _breakdown_table(breakdown, busy, exposed)
    return RunResult(summary, _timing(rec, wall), events, bd, links, memory, trace)


def _link_means(cluster, rec, links) -> dict:
    """``link_utilisation_by_kind`` and ``_by_role``: group means of ``links`` (the table), or
    the same means taken without it (``results.link_utilisation``)."""
    if links is None or isinstance(links, Table):
        by_kind, by_role = link_utilisation(cluster, rec.network, rec.sim_time_s)
    else:
        by_kind = links.groupby("kind")["utilisation"].mean().to_dict()
        by_role = links.groupby("role")["utilisation"].mean().to_dict()
    return {"link_utilisation_by_kind": by_kind, "link_utilisation_by_role": by_role}


def _timing(rec, wall_s: float) -> dict:
    """Wall time and simpy events of a simulation (``timing.json``)."""
    return {
        "sim_wall_s": wall_s,
        "simpy_events": rec.events,
        "events_per_s": rec.events / wall_s if wall_s else 0.0,
    }


def _guard(trace: Trace, workload, iterations: int, limit_bytes: float | None, spec=None) -> None:
    """Refuse a trace whose simulation would not fit in ``limit_bytes`` (None: no check); a
    sync mode other than ``allreduce`` simulates twice (with and without its traffic)."""
    if limit_bytes is None:
        return
    passes = 1 if trace.sync_spec.is_allreduce else 2
    tables = len(workload.tables) if workload is not None else 0
    check_trace(trace, iterations, limit_bytes, passes, tables, spec)


@contextmanager
def few_gc_passes():
    """Python's cycle collector made rare while simpy runs: the trace built so far is frozen
    (never re-scanned) and young objects are collected every 100,000 allocations instead of
    700.  A full pass rescans every live object, so at the default thresholds its cost grows
    with the square of the cluster size (a quarter of the CPU time at 1,024 GPUs).  A sweep's
    worker runs each point so (``studies/sweep.py``: the traces and clusters kept from earlier
    points are not rescanned).  Nested in another (``simulate_run`` within ``zionsim run``), it
    leaves all to the outer one: what that froze stays frozen until it exits."""
    if _GC_DEPTH[0]:
        _GC_DEPTH[0] += 1
        try:
            yield
        finally:
            _GC_DEPTH[0] -= 1
        return
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    _GC_DEPTH[0] = 1
    try:
        yield
    finally:
        _GC_DEPTH[0] = 0
        gc.set_threshold(*old)
        gc.unfreeze()


_GC_DEPTH = [0]  # few_gc_passes blocks open now


def _run_header(cluster, trace: Trace, iterations: int, warmup: int) -> dict:
    """The first fields of ``summary.json``: what was run (cluster, workload, plan, batch)."""
    return {
        "topology": cluster.spec.name,
        "nodes": cluster.spec.nodes,
        "gpus": len(cluster.gpus),
        "workload": trace.meta.get("workload"),
        "plan": trace.meta.get("plan"),
        "stack": trace.stack.name if trace.stack is not None else "bare",
        "model": trace.meta.get("model", {}),
        "global_batch": int(trace.meta.get("global_batch", 0)),
        "iterations": iterations,
        "warmup": warmup,
    }


def _breakdown_table(breakdown: dict, busy: dict, exposed: dict) -> Table:
    """``breakdown.csv``: per category, critical-path, busy and exposed seconds per iteration."""
    return Table(
        {
            "category": strings(breakdown),
            "critical_path_s": np.array(list(breakdown.values()), dtype=np.float64),
            "busy_s": np.array([busy.get(k, 0.0) for k in breakdown], dtype=np.float64),
            "exposed_s": np.array([exposed.get(k, 0.0) for k in breakdown], dtype=np.float64),
        }
    )


def _sync_summary(cluster, trace: Trace, rec, a: Analysis, iterations, warmup) -> dict:
    """Rounds, sync gaps, bytes and the foreground slowdown caused by sync traffic."""
    if trace.sync is None:
        return {"mode": "allreduce"}
    spec = trace.sync.spec
    sync = spec.to_dict()
    if spec.is_allreduce:
        return sync
    completions: dict[int, list[int]] = {}
    if spec.is_shadow:
        for r in rec.sync_rounds:
            completions.setdefault(r.rank, []).append(r.last_iteration)
    else:
        first = {o.rank: o.id for o in reversed(trace.ops) if o.category == "sync"}
        for r in rec.ops:
            op = trace.ops[r.op]
            if (
                op.category == "sync"
                and first.get(op.rank) == r.op
                and (r.iteration + 1) % op.args.get("every", 1) == 0
            ):
                completions.setdefault(op.rank, []).append(r.iteration + 1)
    gaps = [b - a_ for c in completions.values() for a_, b in zip([0, *c[:-1]], c, strict=True)]
    spans = rec.network.spans if rec.network else []
    sync_colls = {o.args["coll"] for o in trace.ops if o.category == "sync" and "coll" in o.args}
    of_sync = {("collective", c) for c in sync_colls}
    sync_bytes = sum(
        s.bytes for s in spans if s.tag.kind in ("ps", "sync") or (s.tag[0], s.tag[2]) in of_sync
    )
    quiet = simulate_trace(cluster, trace, iterations=iterations, sync_traffic=False)
    base = float(Analysis(quiet, warmup).iteration_times().mean())
    with_sync = float(a.iteration_times().mean())
    rounds = [len(c) for c in completions.values()]
    return {
        **sync,
        "rounds_total": int(sum(rounds)),
        "rounds_per_trainer": float(np.mean(rounds)) if rounds else 0.0,
        "sync_gap_iterations": gap_stats(gaps),
        "sync_bytes": float(sync_bytes),
        "iteration_time_without_sync_traffic_s": base,
        "foreground_slowdown": with_sync / base - 1.0 if base else 0.0,
    }


def _path_summary(segs) -> list[dict]:
    """Critical path of one iteration, earliest first, consecutive same-name segments merged."""
    out: list[dict] = []
    for name, cat, rank, s, e in reversed(segs):
        if out and out[-1]["name"] == name and out[-1]["rank"] == rank:
            out[-1]["duration_s"] += e - s
        else:
            out.append(
                {"name": name, "category": cat, "rank": rank, "start_s": s, "duration_s": e - s}
            )
    return out


def _collectives(rec, trace: Trace) -> list[dict]:
    it = rec.iterations - 1
    out = []
    kept = kept_with(trace.ops)  # derived from the ops alone: kept with them (base/kept.py)
    names: dict[int, str] | None = kept.get("coll_names")
    if names is None:  # each collective's name: its first op's (one pass over the ops)
        names = kept["coll_names"] = {}
        for o in trace.ops:
            if o.kind == "collective":
                names.setdefault(o.args["coll"], o.name)
    for c in trace.collectives:
        cr = rec.collectives.get((it, c.id))
        if cr is None:
            continue
        name = names[c.id]
        out.append(
            {
                "name": name,
                "op": c.op,
                "size_bytes": c.size_bytes,
                "algorithm": cr.algorithm,
                "protocol": cr.protocol,
                "time_s": cr.end_s - cr.start_s,
            }
        )
    return out


def _memory_summary(memory: pd.DataFrame | Table | dict) -> dict:
    if isinstance(memory, Table) and not memory.empty:  # the columns: as a lean run's
        memory = {**memory.columns, "hbm_capacity_bytes": memory["hbm_capacity_bytes"][0]}
    if isinstance(memory, dict):  # a lean run's columns (lower_checked): the same figures
        return {
            "hbm_bytes_max": float(memory["hbm_bytes"].max()),
            "hbm_bytes_mean": float(memory["hbm_bytes"].mean()),
            "hbm_capacity_bytes": float(memory["hbm_capacity_bytes"]),
            "host_dram_bytes_max": float(memory["host_dram_bytes"].max()),
            **{f"{k}_bytes_max": float(memory[f"{k}_bytes"].max()) for k in MEMORY_KINDS},
        }
    if memory is None or memory.empty:
        return {}
    return {
        "hbm_bytes_max": float(memory["hbm_bytes"].max()),
        "hbm_bytes_mean": float(memory["hbm_bytes"].mean()),
        "hbm_capacity_bytes": float(memory["hbm_capacity_bytes"].iloc[0]),
        "host_dram_bytes_max": float(memory["host_dram_bytes"].max()),
        **{f"{k}_bytes_max": float(memory[f"{k}_bytes"].max()) for k in MEMORY_KINDS},
    }


def run_point(options: dict, max_memory_bytes: float | None = None) -> RunResult:
    """One run from a flat mapping of run options plus ``topology.*`` / ``workload.*`` /
    ``stack.*`` paths (``sim.inputs``); ``max_memory_bytes`` as in :func:`simulate_run`, checked
    before the cluster is built too.

    Every run option is validated with its type: integers are integers (``2.7`` is refused, not
    run as 2), ``fused`` is a YAML boolean (the string ``"false"`` is refused, not run as True).

    >>> run_point({"topology": "zionex", "nodes": 1, "workload": "tiny"}).summary["gpus"]
    8
    """
    return simulate_inputs(resolve_inputs(options), max_memory_bytes=max_memory_bytes)


def guard_inputs(inputs: RunInputs, limit_bytes: float | None, iterations: int | None = None):
    """Refuse what the specs alone decide (capacity, a memory lower bound against
    ``limit_bytes``; ``sim.resources.check_inputs``) before the cluster is built or a plan
    searched; ``iterations`` defaults to the run's."""
    n = inputs.options["iterations"] if iterations is None else iterations
    if inputs.workload is None:  # a replayed trace: the cluster's graph only
        from zionsim.sim.resources import Sizes, check_memory, estimate

        return check_memory(estimate(Sizes(gpus=inputs.cluster.gpus)), limit_bytes, "command")
    return check_inputs(inputs.cluster, inputs.workload, n, limit_bytes, inputs.options["plan"])


def simulate_inputs(
    inputs: RunInputs,
    cluster=None,
    plan: Plan | None = None,
    *,
    trace: Trace | None = None,
    max_memory_bytes: float | None = None,
    guarded: bool = False,
    on_phase=None,
    lean: bool = False,
) -> RunResult:
    """The run ``inputs`` describe: its workload under ``plan`` (default: :func:`plan_of`) on
    ``cluster`` (default: built from the spec), or the replayed ``trace``.  ``guarded``: the
    caller already ran :func:`guard_inputs`; ``on_phase(name)`` is told ``plan`` and
    ``simulate`` as they start (a progress bar); ``lean``: no tables (a sweep point,
    :class:`RunResult`; a run with variability is never lean)."""
    t0 = time.perf_counter()
    o = inputs.options
    check_iterations(o["iterations"], o["warmup"])
    if not guarded:
        guard_inputs(inputs, max_memory_bytes)
    varied = inputs.variability is not None or o["samples"] > 1
    lean = lean and not varied
    if trace is None:
        (on_phase or _quiet)("plan")
        trace, memory, cluster = trace_of(inputs, cluster, plan, lean=lean, columns=not varied)
    else:
        import pandas as pd

        memory = None if lean else pd.DataFrame()
        cluster = cluster or _build(inputs)
    (on_phase or _quiet)("simulate")
    if varied:
        return _execute_varied(inputs, cluster, trace, memory, max_memory_bytes, t0)
    return _execute(
        cluster,
        trace,
        memory,
        inputs.workload,
        o["iterations"],
        o["warmup"],
        max_memory_bytes,
        t0,
        lean=lean,
    )


def _execute_varied(inputs: RunInputs, cluster, trace: Trace, memory, limit, t0: float):
    """A run with variability (``sim/varied.py``); a job its faults stop is a result whose
    summary says ``status: stopped`` and why."""
    from zionsim.hardware.faults import JobStopped
    from zionsim.sim.varied import execute_varied

    o = inputs.options
    iterations, warmup = o["iterations"], o["warmup"]

    def execute(c, simulate):
        return _execute(c, trace, memory, inputs.workload, iterations, warmup, limit, t0, simulate)

    try:
        return execute_varied(inputs, cluster, trace, memory, execute)
    except JobStopped as stop:
        summary = {
            **_run_header(cluster, trace, iterations, warmup),
            "status": "stopped",
            "stopped_reason": stop.reason,
            "variability": inputs.variability.to_dict(),
        }
        import pandas as pd

        empty = pd.DataFrame()
        return RunResult(summary, {"sim_wall_s": 0.0}, empty, empty, empty, memory, trace)


def trace_of(
    inputs: RunInputs,
    cluster=None,
    plan: Plan | None = None,
    lean: bool = False,
    columns: bool = False,
):
    """The lowered iteration trace of ``inputs``, its per-GPU memory table and the cluster (built
    from the spec unless given), under ``plan`` (default: :func:`plan_of`); ``lean``: the
    table's byte columns as a dict, ``columns``: the table as a ``Table``
    (:func:`lower_checked`)."""
    cluster = cluster or _build(inputs)
    plan = plan or plan_of(inputs, cluster)
    fused = inputs.options["fused"] and inputs.stack.fused_embedding
    trace, memory = lower_checked(
        cluster, inputs.workload, plan, fused, inputs.sync, inputs.stack, lean, columns
    )
    return trace, memory, cluster


def _build(inputs: RunInputs):
    from zionsim.hardware.cluster import Cluster

    return Cluster.build(inputs.cluster)


def _quiet(phase: str) -> None:
    """No progress to show."""


def check_iterations(iterations: int, warmup: int) -> None:
    """``iterations`` and ``warmup`` are whole numbers in bounds, with at least one iteration
    after the warmup (an :class:`InputError` naming the option otherwise)."""
    from zionsim.base import bounds
    from zionsim.base.errors import InputError

    bounds.count(iterations, "iterations", field="iterations")
    bounds.count(warmup, "warmup", minimum=0, field="warmup")
    if warmup >= iterations:
        raise InputError(
            f"warmup {warmup} leaves no iteration to measure of {iterations}",
            field="warmup",
            allowed=f"0..{iterations - 1}",
        )
