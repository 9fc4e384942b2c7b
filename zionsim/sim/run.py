"""One DLRM training run, end to end and pure: cluster + workload (+ plan or trace) → results.

:func:`simulate_run` lowers the workload under the plan (default: table-wise round-robin), checks
HBM capacity, executes the iterations, and returns a :class:`RunResult` of plain data: the summary
mapping behind ``summary.json`` and the tables behind the other files.  ``io.files`` writes them.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from zionsim.base.bounds import require_finite
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
from zionsim.dlrm.trace import Trace, lower
from zionsim.dlrm.workload import WorkloadSpec
from zionsim.hardware.compute import architecture
from zionsim.sim.engine import simulate_trace
from zionsim.sim.resources import check_inputs, check_trace
from zionsim.sim.results import Analysis, links_table, perfetto, rank_totals, sample_events


@dataclass
class RunResult:
    """One run as plain data: ``summary`` (``summary.json``), ``timing`` (the simulator's own
    wall time and event count), the events, breakdown, links and per-GPU memory tables, and the
    trace that ran."""

    summary: dict
    timing: dict
    events: pd.DataFrame
    breakdown: pd.DataFrame
    links: pd.DataFrame
    memory: pd.DataFrame
    trace: Trace

    def perfetto(self, ranks: list[int] | None = None) -> dict:
        """The events (of ``ranks`` only, network rows kept; default all) as a Chrome/Perfetto
        trace (see :func:`zionsim.sim.results.perfetto`)."""
        return perfetto(self.events if ranks is None else sample_events(self.events, ranks))

    def rank_totals(self) -> pd.DataFrame:
        """Seconds, spans and bytes per rank and category (every rank, see ``rank_totals``)."""
        return rank_totals(self.events)


def build_trace(
    cluster,
    workload: WorkloadSpec,
    plan: Plan | None = None,
    fused: bool = True,
    sync: SyncSpec | None = None,
    stack: StackSpec | str | None = None,
) -> tuple[Trace, pd.DataFrame]:
    """The iteration trace and the per-GPU memory table, after the capacity checks, as the
    software ``stack`` (default ``torchrec``) runs the workload."""
    stack = resolve_stack(stack)
    check_trainer(stack, architecture(cluster.spec.gpu))
    workload = apply_stack(workload, stack)
    fused = fused and stack.fused_embedding
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
    table = pd.DataFrame(
        {"rank": range(gpus), "gpu": names, **{f"{k}_bytes": mem[k] for k in MEMORY_KINDS}}
    )
    table["hbm_bytes"] = sum(mem[k] for k in MEMORY_KINDS)
    table["hbm_capacity_bytes"] = cluster.spec.gpu.hbm_bytes
    table["host_dram_bytes"] = mem["host_dram"]
    sync = sync or sync_spec(base=workload.sync)
    return lower(workload, plan, gpus, fused, g, workload.zipf_alpha, sync, stack), table


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
    t0 = time.perf_counter()
    check_iterations(iterations, warmup)
    memory = pd.DataFrame()
    if trace is None:
        spec = sync_spec(
            sync, sync_every, sync_servers, sync_period_s, sync_trainer, base=workload.sync
        )
        trace, memory = build_trace(cluster, workload, plan, fused, spec, stack)
    _guard(trace, workload, iterations, max_memory_bytes, cluster.spec)
    with _few_gc_passes():
        rec = simulate_trace(cluster, trace, iterations=iterations)
    a = Analysis(rec, warmup)
    iter_s = float(a.iteration_times().mean())
    breakdown, busy, exposed = a.breakdown(), a.busy(), a.exposed()
    events = a.events()
    links = links_table(cluster, rec.network, rec.sim_time_s)
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
        "link_utilisation_by_kind": links.groupby("kind")["utilisation"].mean().to_dict(),
        "link_utilisation_by_role": links.groupby("role")["utilisation"].mean().to_dict(),
        "events": int(len(events)),
        "sync": _sync_summary(cluster, trace, rec, a, iterations, warmup),
    }
    require_finite(summary, "summary.json")  # a NaN from accepted input is a bug (ModelError)
    bd = _breakdown_table(breakdown, busy, exposed)
    return RunResult(summary, _timing(rec, wall), events, bd, links, memory, trace)


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
    passes = 1 if (trace.meta.get("sync") or {}).get("mode", "allreduce") == "allreduce" else 2
    tables = len(workload.tables) if workload is not None else 0
    check_trace(trace, iterations, limit_bytes, passes, tables, spec)


@contextmanager
def _few_gc_passes():
    """Python's cycle collector made rare while simpy runs: the trace built so far is frozen
    (never re-scanned) and young objects are collected every 100,000 allocations instead of
    700.  A full pass rescans every live object, so at the default thresholds its cost grows
    with the square of the cluster size (a quarter of the CPU time at 1,024 GPUs)."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _run_header(cluster, trace: Trace, iterations: int, warmup: int) -> dict:
    """The first fields of ``summary.json``: what was run (cluster, workload, plan, batch)."""
    return {
        "topology": cluster.spec.name,
        "nodes": cluster.spec.nodes,
        "gpus": len(cluster.gpus),
        "workload": trace.meta.get("workload"),
        "plan": trace.meta.get("plan"),
        "stack": (trace.meta.get("stack") or {}).get("name", "bare"),
        "model": trace.meta.get("model", {}),
        "global_batch": int(trace.meta.get("global_batch", 0)),
        "iterations": iterations,
        "warmup": warmup,
    }


def _breakdown_table(breakdown: dict, busy: dict, exposed: dict) -> pd.DataFrame:
    """``breakdown.csv``: per category, critical-path, busy and exposed seconds per iteration."""
    return pd.DataFrame(
        {
            "category": list(breakdown),
            "critical_path_s": list(breakdown.values()),
            "busy_s": [busy.get(k, 0.0) for k in breakdown],
            "exposed_s": [exposed.get(k, 0.0) for k in breakdown],
        }
    )


def _sync_summary(cluster, trace: Trace, rec, a: Analysis, iterations, warmup) -> dict:
    """Rounds, sync gaps, bytes and the foreground slowdown caused by sync traffic."""
    sync = dict(trace.meta.get("sync") or {"mode": "allreduce"})
    sync.pop("background", None)
    sync.pop("bytes", None)
    if sync["mode"] == "allreduce":
        return sync
    completions: dict[int, list[int]] = {}
    if sync["mode"].startswith("shadow"):
        for rank, _, _, _, it_end in rec.sync_rounds:
            completions.setdefault(rank, []).append(it_end)
    else:
        first = {o.rank: o.id for o in reversed(trace.ops) if o.category == "sync"}
        for it, op, *_ in rec.ops:
            if (
                trace.ops[op].category == "sync"
                and first.get(trace.ops[op].rank) == op
                and (it + 1) % trace.ops[op].args.get("every", 1) == 0
            ):
                completions.setdefault(trace.ops[op].rank, []).append(it + 1)
    gaps = [b - a_ for c in completions.values() for a_, b in zip([0, *c[:-1]], c, strict=True)]
    spans = rec.network.spans if rec.network else []
    sync_colls = {o.args["coll"] for o in trace.ops if o.category == "sync" and "coll" in o.args}
    sync_bytes = sum(
        s[3]
        for s in spans
        if s[0][0] in ("ps", "sync") or (isinstance(s[0][0], int) and s[0][1] in sync_colls)
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
    names: dict[int, str] = {}  # each collective's name: its first op's (one pass over the ops)
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


def _memory_summary(memory: pd.DataFrame) -> dict:
    if memory.empty:
        return {}
    return {
        "hbm_bytes_max": float(memory["hbm_bytes"].max()),
        "hbm_bytes_mean": float(memory["hbm_bytes"].mean()),
        "hbm_capacity_bytes": float(memory["hbm_capacity_bytes"].iloc[0]),
        "host_dram_bytes_max": float(memory["host_dram_bytes"].max()),
        **{f"{k}_bytes_max": float(memory[f"{k}_bytes"].max()) for k in MEMORY_KINDS},
    }


#: run options shared by ``zionsim run``, sweeps (``base:``/``grid:``) and ``run_point``
RUN_OPTIONS = (
    "topology",
    "workload",
    "nodes",
    "gpus_per_node",
    "plan",
    "sync",
    "sync_every",
    "sync_servers",
    "sync_period_s",
    "sync_trainer",
    "iterations",
    "warmup",
    "batch_per_gpu",
    "global_batch",
    "seed",
    "fused",
    "stack",
)


def run_point(options: dict, max_memory_bytes: float | None = None) -> RunResult:
    """One run from a flat mapping of run options plus ``topology.*`` / ``workload.*`` paths;
    ``max_memory_bytes`` as in :func:`simulate_run`, checked before the cluster is built too.

    Every run option is validated with its type: integers are integers (``2.7`` is refused, not
    run as 2), ``fused`` is a YAML boolean (the string ``"false"`` is refused, not run as True).

    >>> run_point({"topology": "zionex", "nodes": 1, "workload": "tiny"}).summary["gpus"]
    8
    """
    from zionsim.dlrm.workload import load_workload, with_global_batch
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology

    o = run_options(options)
    topo_sets = {k[9:]: v for k, v in options.items() if k.startswith("topology.")}
    work_sets = {k[9:]: v for k, v in options.items() if k.startswith("workload.")}
    spec = load_topology(
        o["topology"], nodes=o["nodes"], gpus_per_node=o["gpus_per_node"], overrides=topo_sets
    )
    w = load_workload(o["workload"], overrides=work_sets, batch_per_gpu=o["batch_per_gpu"])
    if o["global_batch"] is not None:
        w = with_global_batch(w, o["global_batch"], spec.gpus)
    stack = _run_stack(o["stack"], options)
    w = apply_stack(w, stack)
    if max_memory_bytes is not None:
        check_inputs(spec, w, o["iterations"], max_memory_bytes, o["plan"])
    cluster = Cluster.build(spec)
    return simulate_run(
        cluster,
        w,
        _point_plan(o["plan"], cluster, w, stack),
        iterations=o["iterations"],
        warmup=o["warmup"],
        fused=o["fused"],
        stack=stack,
        sync=o["sync"],
        sync_every=o["sync_every"],
        sync_servers=o["sync_servers"],
        sync_period_s=o["sync_period_s"],
        sync_trainer=o["sync_trainer"],
        max_memory_bytes=max_memory_bytes,
    )


def run_options(options: dict, file: str = "run options") -> dict:
    """The run options of ``options`` (:data:`RUN_OPTIONS`; dotted paths pass through) checked
    and typed, absent ones at their defaults; an unknown option or a value of the wrong type or
    out of bounds is an :class:`InputError` naming it."""
    from zionsim.base.config import Fields

    _check_run_options(options)
    f = Fields(options, file)
    out = {k: f.text(k, None) for k in ("sync", "sync_trainer")}
    # a stack profile object (library use) passes as it is; from files it is a name or a path
    stack = options.get("stack")
    out["stack"] = stack if isinstance(stack, StackSpec) else f.text("stack", None)
    out.update({k: f.integer(k, None) for k in ("nodes", "gpus_per_node", "batch_per_gpu")})
    out.update({k: f.integer(k, None) for k in ("global_batch", "sync_every", "sync_servers")})
    period = f.raw("sync_period_s", None)
    out.update(
        topology=f.text("topology", "zionex"),
        workload=f.text("workload", "neo_model_a"),
        plan=f.text("plan", "auto"),
        iterations=f.integer("iterations", 3),
        warmup=f.integer("warmup", 1, minimum=0),
        seed=f.integer("seed", None, minimum=0),
        fused=f.flag("fused", True),
        sync_period_s=None
        if period is None
        else f.quantity("sync_period_s", "time", unit=False, strict=False),  # fmt: skip
    )
    return out


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


def _check_run_options(options: dict) -> None:
    """Every undotted key is one of :data:`RUN_OPTIONS` (InputError naming the first that isn't)."""
    from zionsim.base.errors import InputError

    if not isinstance(options, dict):
        raise InputError(f"expected a mapping of run options, got {options!r}", field="options")
    if "fidelity" in options:
        raise InputError(
            f"run option 'fidelity' ({options['fidelity']!r}) was removed: the flow model "
            "(max-min shared links) is the only network model",
            field="fidelity",
            allowed="delete the key",
        )
    unknown = sorted(str(k) for k in options if "." not in str(k) and k not in RUN_OPTIONS)
    if unknown:
        raise InputError(
            f"unknown run option {unknown[0]!r}",
            field=unknown[0],
            allowed=", ".join(RUN_OPTIONS) + ", topology.PATH, workload.PATH, stack.PATH",
        )


def _run_stack(stack, options: dict) -> StackSpec:
    """The run's stack profile, with the run's ``stack.PATH`` overrides applied to its file."""
    from zionsim.base.errors import InputError
    from zionsim.dlrm.stack import DEFAULT_STACK, load_stack

    sets = {k[6:]: v for k, v in options.items() if k.startswith("stack.")}
    if not sets:
        return resolve_stack(stack)
    if isinstance(stack, StackSpec):
        raise InputError(
            "stack.PATH overrides need a stack name or file, not a profile object",
            field=next(iter(sets)),
        )
    return load_stack(stack or DEFAULT_STACK, sets)


def _point_plan(name: str, cluster, w: WorkloadSpec, stack: StackSpec | None = None) -> Plan:
    """The plan of a run: a planner's (``auto`` is the stack's, greedy by default) or a plan
    file's."""
    from zionsim.dlrm.planner import PLANNERS, named_plan

    if name == "auto" or name in PLANNERS:
        return named_plan(name, cluster, w, stack)
    from zionsim.dlrm.plan_file import load_plan

    return load_plan(
        name,
        w,
        len(cluster.gpus),
        cluster.spec.gpus_per_node,
        cluster.spec.nodes * cluster.spec.host.sockets,
    )
