"""Command line: ``zionsim run|trace|topology|collective ...``.

Parses arguments, calls the pure model, prints and writes.  Bad input exits with status 2 and a
one-line message naming the file and field; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zionsim.errors import InputError
from zionsim.io import FORMATS, format_mapping, format_rows, to_json, write_result_dir

DEFAULT_TOPOLOGY = "zionex"
DEFAULT_WORKLOAD = "neo_model_a"


def _common(p: argparse.ArgumentParser, nodes_default: int | None = None) -> None:
    p.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="built-in name or YAML path")
    p.add_argument("--nodes", type=int, default=nodes_default, help="number of nodes")
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a topology field, e.g. scale_out.nic_bw=400Gbps",
    )
    p.add_argument("--format", choices=FORMATS, default="table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zionsim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("topology", help="describe a cluster topology")
    p.add_argument("name", nargs="?", default=None, help="built-in name or YAML path")
    _common(p)
    p.add_argument("--plot", metavar="FILE.png", help="draw the first nodes and the fabric")

    p = sub.add_parser("collective", help="nccl-tests in simulation")
    _common(p, nodes_default=None)
    p.add_argument(
        "--op",
        default="all_reduce",
        choices=("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"),
    )
    p.add_argument("--sizes", default="1K:8G", help="MIN:MAX bytes, doubling (K/M/G = 2^10..)")
    p.add_argument("--algorithm", default=None, help="default: what NCCL would choose")
    p.add_argument("--protocol", default=None, choices=("LL", "LL128", "Simple"))
    p.add_argument("--fidelity", default="flow", choices=("flow", "analytic"))
    p.add_argument("--out", default=None, help="result folder (default results/runs/<name>)")
    for name, helptext in (
        ("run", "simulate DLRM training iterations"),
        ("trace", "write (or import) the trace of one iteration"),
        ("plan", "shard the tables of a workload and show the plan"),
    ):
        p = sub.add_parser(name, help=helptext)
        _common(p)
        p.add_argument("--workload", default=DEFAULT_WORKLOAD, help="built-in name or YAML path")
        p.add_argument(
            "--plan",
            default="auto",
            help="auto (greedy planner), round_robin, ps (tables on CPU parameter servers), "
            "or a plan YAML",
        )
        p.add_argument("--batch-per-gpu", type=int, default=None)
        p.add_argument("--global-batch", type=int, default=None)
        p.add_argument("--unfused", action="store_true", help="per-table embedding kernels")
        if name == "run":
            p.add_argument(
                "--trace",
                dest="trace_file",
                default=None,
                help="replay a trace file instead of lowering the workload",
            )
            p.add_argument("--iterations", type=int, default=3)
            p.add_argument(
                "--sync",
                default=None,
                help="allreduce (default), foreground-ma|bmuf|easgd, shadow-ma|bmuf|easgd",
            )
            p.add_argument("--sync-every", type=int, default=None, help="foreground: every K")
            p.add_argument("--sync-servers", type=int, default=None, help="EASGD servers")
            p.add_argument(
                "--sync-period",
                type=float,
                default=None,
                help="shadow: minimum seconds between a trainer's rounds",
            )
            p.add_argument("--sync-trainer", default=None, choices=("rank", "node"))
            p.add_argument("--warmup", type=int, default=1)
            p.add_argument("--fidelity", default="flow", choices=("flow", "analytic"))
            p.add_argument(
                "--out", default=None, help="result folder (default results/runs/<name>)"
            )
            p.add_argument("--no-plot", action="store_true", help="skip breakdown.png")
        elif name == "trace":
            p.add_argument("--out", required=True, help="trace file to write (.json)")
            p.add_argument(
                "--import-kineto",
                metavar="FILE",
                default=None,
                help="import a PyTorch profiler (Kineto) trace: a JSON(.gz) file, one per rank "
                "in a folder, or a list; --nodes/--gpus-per-node retarget it (docs/traces.md)",
            )
            p.add_argument("--step", type=int, default=None, help="kineto: ProfilerStep#N only")
        else:
            p.add_argument("--planner", default=None, help="greedy (default), round_robin or ps")
            p.add_argument("--out", default=None, help="write the plan as YAML")
    _study_parsers(sub)
    _validate_parser(sub)
    _calibrate_parser(sub)
    return parser


def _study_parsers(sub) -> None:
    """``sweep``, ``compare`` and ``plot`` (what-if studies, ``docs/sweeps.md``)."""
    p = sub.add_parser("sweep", help="run a sweep file's grid of points in parallel")
    p.add_argument("file", help="sweep YAML (base: and grid:)")
    p.add_argument("--out", default=None, help="sweep folder (default results/runs/sweep_<name>)")
    p.add_argument("--workers", type=int, default=None, help="local processes (default: CPUs)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, tcp://HOST:PORT")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--format", choices=FORMATS, default="table")
    p = sub.add_parser("compare", help="A vs B: attribute the iteration-time difference")
    p.add_argument("run_a", help="run folder (or its summary.json)")
    p.add_argument("run_b", help="run folder (or its summary.json)")
    p.add_argument("--names", nargs=2, default=None, metavar=("A", "B"), help="labels")
    p.add_argument("--out", default=None, help="default results/runs/compare_<A>_vs_<B>")
    p.add_argument("--no-plot", action="store_true", help="skip compare.png")
    p.add_argument("--format", choices=FORMATS, default="table")
    p = sub.add_parser("plot", help="write the plots of a sweep or run folder into DIR/plots/")
    p.add_argument("dir", help="sweep folder (results.parquet) or run folder (summary.json)")
    p.add_argument("--x", default="gpus", help="scaling x column of a sweep (default gpus)")


def _cluster(args):
    from zionsim.cluster import Cluster

    name = getattr(args, "name", None) or args.topology
    return Cluster.load(
        name, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=args.set
    )


def cmd_topology(args) -> int:
    from zionsim.tables import topology_summary

    cluster = _cluster(args)
    print(format_mapping(topology_summary(cluster), args.format), end="")
    if args.plot:
        from zionsim.plots import plot_topology, save

        save(plot_topology(cluster), args.plot)
    return 0


def cmd_collective(args) -> int:
    from zionsim.simulate import simulate_collective
    from zionsim.units import parse_size_list

    sizes = parse_size_list(args.sizes)
    cluster = _cluster(args)
    rows = [
        simulate_collective(
            cluster,
            args.op,
            s,
            algorithm=args.algorithm,
            protocol=args.protocol,
            fidelity=args.fidelity,
        ).row()
        for s in sizes
    ]
    print(format_rows(rows, args.format), end="")
    name = f"collective_{cluster.spec.name}_{cluster.spec.nodes}n_{args.op}"
    out = Path(args.out) if args.out else Path("results") / "runs" / name
    summary = {
        "topology": cluster.spec.name,
        "nodes": cluster.spec.nodes,
        "gpus": cluster.spec.gpus,
        "op": args.op,
        "fidelity": args.fidelity,
        "rows": rows,
    }
    write_result_dir(
        out, {"collective.csv": format_rows(rows, "csv"), "summary.json": to_json(summary)}
    )
    if args.format == "table":
        print(f"wrote {out}/", file=sys.stderr)
    return 0


def _split_overrides(values: list[str]) -> tuple[list[str], list[str]]:
    """``--set`` paths go to the topology unless prefixed ``workload.`` (or ``topology.``)."""
    topo, work = [], []
    for v in values:
        if v.startswith("workload."):
            work.append(v[len("workload.") :])
        else:
            topo.append(v[len("topology.") :] if v.startswith("topology.") else v)
    return topo, work


def _run_inputs(args):
    from zionsim.cluster import Cluster
    from zionsim.errors import InputError
    from zionsim.workload import WORKLOAD_KEYS, load_workload, with_global_batch

    topo_sets, work_sets = _split_overrides(args.set)
    # bare workload fields (batch_per_gpu=..., precision.embedding=...) are accepted too
    work_sets += [v for v in topo_sets if v.split("=", 1)[0].split(".")[0] in WORKLOAD_KEYS]
    topo_sets = [v for v in topo_sets if v.split("=", 1)[0].split(".")[0] not in WORKLOAD_KEYS]
    cluster = Cluster.load(
        args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=topo_sets
    )
    w = load_workload(args.workload, overrides=work_sets, batch_per_gpu=args.batch_per_gpu)
    if args.global_batch is not None:
        if args.batch_per_gpu is not None:
            raise InputError(
                "give --batch-per-gpu or --global-batch, not both", field="--global-batch"
            )
        w = with_global_batch(w, args.global_batch, len(cluster.gpus))
    return cluster, w


def _plan(args, cluster, w):
    """The plan named by ``--plan``: a planner (auto = greedy) or a plan YAML file."""
    from zionsim.planner import PLANNERS

    name = {"auto": "greedy"}.get(args.plan, args.plan)
    if name in PLANNERS:
        return PLANNERS[name](cluster, w)
    from zionsim.io import read_plan

    return read_plan(args.plan, w, len(cluster.gpus), cluster.spec.gpus_per_node, _servers(cluster))


def _servers(cluster) -> int:
    """Host sockets of the cluster: the parameter servers a plan may name."""
    return cluster.spec.nodes * cluster.spec.host.sockets


def cmd_run(args) -> int:
    from zionsim.io import read_trace, write_run
    from zionsim.run import simulate_run

    if args.trace_file:
        from zionsim.cluster import Cluster

        topo_sets, _ = _split_overrides(args.set)
        cluster = Cluster.load(
            args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=topo_sets
        )
        result = simulate_run(
            cluster,
            trace=read_trace(args.trace_file),
            iterations=args.iterations,
            warmup=args.warmup,
            fidelity=args.fidelity,
        )
    else:
        cluster, w = _run_inputs(args)
        result = simulate_run(
            cluster,
            w,
            _plan(args, cluster, w),
            iterations=args.iterations,
            warmup=args.warmup,
            fidelity=args.fidelity,
            fused=not args.unfused,
            sync=args.sync,
            sync_every=args.sync_every,
            sync_servers=args.sync_servers,
            sync_period_s=args.sync_period,
            sync_trainer=args.sync_trainer,
        )
    s = result.summary
    name = f"{s['workload']}_{s['topology']}_{s['nodes']}n"
    out = Path(args.out) if args.out else Path("results") / "runs" / name
    write_run(out, result, plot=not args.no_plot)
    if args.format == "table":
        print(format_run_summary(s), end="")
        print(f"wrote {out}/", file=sys.stderr)
    elif args.format == "json":
        print(to_json(s), end="")
    else:
        print(format_rows(result.breakdown.to_dict("records"), "csv"), end="")
    return 0


def cmd_trace(args) -> int:
    from zionsim.io import write_trace
    from zionsim.run import build_trace

    if args.import_kineto:
        trace = _import_kineto(args)
    else:
        cluster, w = _run_inputs(args)
        trace, _ = build_trace(cluster, w, _plan(args, cluster, w), fused=not args.unfused)
    write_trace(args.out, trace)
    print(
        f"wrote {args.out} ({len(trace.ops)} ops, {len(trace.collectives)} collectives, "
        f"{trace.ranks} ranks)",
        file=sys.stderr,
    )
    return 0


def _import_kineto(args):
    """The Kineto trace of ``--import-kineto``, retargeted when ``--nodes``/``--gpus-per-node``
    are given (to nodes × GPUs per node of ``--topology``)."""
    from zionsim.kineto import read_kineto, retarget
    from zionsim.topology import load_topology

    trace = read_kineto(args.import_kineto, step=args.step, global_batch=args.global_batch)
    if args.nodes is None and args.gpus_per_node is None:
        return trace
    spec = load_topology(
        args.topology,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        overrides=_split_overrides(args.set)[0],
    )
    return retarget(trace, spec.gpus)


def _calibrate_parser(sub) -> None:
    """``calibrate``: fit the collective and compute models to measurements."""
    p = sub.add_parser("calibrate", help="fit NCCL and compute parameters to your measurements")
    _common(p)
    p.add_argument(
        "--nccl-log", action="append", default=[], metavar="FILE", help="nccl-tests output"
    )
    p.add_argument("--kernels", default=None, metavar="CSV", help="measured kernel times")
    p.add_argument("--out", required=True, metavar="OVERLAY.yaml", help="overlay to write")


def cmd_calibrate(args) -> int:
    """Fit, print the fit quality, write the overlay (docs/calibration.md)."""
    import os

    import yaml

    from zionsim.calibration import calibrate, fitted_rows, overlay
    from zionsim.cluster import Cluster
    from zionsim.io import write_atomic
    from zionsim.kernel_times import read_kernel_csv
    from zionsim.nccl_logs import read_nccl_log, world_of

    frames = [read_nccl_log(f) for f in args.nccl_log]
    kernels = read_kernel_csv(args.kernels) if args.kernels else None
    if not frames and kernels is None:
        raise InputError("nothing to fit", field="--nccl-log/--kernels", allowed="either or both")
    nodes, gpn = args.nodes, args.gpus_per_node
    if frames and nodes is None and gpn is None:
        nodes, gpn = world_of(frames) or (None, None)  # the world the logs ran on
    cluster = Cluster.load(args.topology, nodes=nodes, gpus_per_node=gpn, overrides=args.set)
    cal = calibrate(cluster, frames, kernels)
    spec, topo = cluster.spec, args.topology
    if topo.endswith((".yaml", ".yml")) or Path(topo).exists():
        topo = os.path.relpath(Path(topo).resolve(), Path(args.out).resolve().parent)
    provenance = {
        "cluster": f"{spec.name} x {spec.nodes} nodes x {spec.gpus_per_node} GPUs",
        "nccl_logs": list(args.nccl_log),
        "kernels": args.kernels,
        "set": list(args.set),
        "notes": cal.notes,
    }
    data = overlay(cal, topo, {k: v for k, v in provenance.items() if v})
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    write_atomic(args.out, "# Written by `zionsim calibrate` (docs/calibration.md).\n" + text)
    if args.format == "json":
        print(to_json({"fields": cal.fields, "fit": cal.summary, "notes": cal.notes}), end="")
    elif args.format == "csv":
        print(format_rows(cal.summary, "csv"), end="")
    else:
        print(format_rows(fitted_rows(cal.fields)) + "\n" + format_rows(cal.summary), end="")
        for note in cal.notes:
            print(f"note: {note}", file=sys.stderr)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_plan(args) -> int:
    from zionsim.planner import plan_costs

    cluster, w = _run_inputs(args)
    if args.planner:
        args.plan = args.planner
    plan = _plan(args, cluster, w)
    rows, totals = plan_costs(cluster, w, plan)
    if args.format == "json":
        print(to_json({"plan": plan.name, "tables": rows, "per_gpu": totals}), end="")
    elif args.format == "csv":
        print(format_rows(rows, "csv"), end="")
    else:
        shown = sorted(rows, key=lambda r: -r["estimated_s"])[:20]
        print(format_rows(shown), end="")
        if len(rows) > len(shown):
            print(f"... {len(rows) - len(shown)} more tables (--format csv lists all)")
        print()
        print(format_mapping({"plan": plan.name, **totals}), end="")
    if args.out:
        from zionsim.io import write_plan

        write_plan(args.out, plan, w)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_sweep(args) -> int:
    """Run a sweep; print one line per point; exit 1 when any point failed."""
    import os

    from zionsim.sweep import brief_rows, load_sweep, run_sweep

    sweep = load_sweep(args.file)
    out = Path(args.out) if args.out else Path("results") / "runs" / f"sweep_{Path(args.file).stem}"
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    table = run_sweep(
        sweep, out, workers=workers, scheduler=args.scheduler, progress=not args.no_progress
    )
    print(format_rows(brief_rows(table, list(sweep.grid), args.format), args.format), end="")
    failed = int((table["status"] != "ok").sum())
    if args.format == "table":
        print(f"wrote {out}/ ({len(table)} points, {failed} failed)", file=sys.stderr)
    if failed:
        msg = f"zionsim: {failed} of {len(table)} points failed: {out}/results.csv"
        print(msg, file=sys.stderr)
        return 1
    return 0


def _read_summary(path: str, field: str) -> dict:
    """``summary.json`` of a run folder (or the file itself)."""
    import json

    p = Path(path)
    p = p / "summary.json" if p.is_dir() else p
    if not p.is_file():
        raise InputError("no summary.json (not a run folder)", file=str(path), field=field)
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON (line {exc.lineno})", file=str(p), field=field) from None
    if not isinstance(s, dict) or "iteration_time_s" not in s or "breakdown_s" not in s:
        raise InputError("not a run summary (no iteration_time_s)", file=str(p), field=field)
    return s


def cmd_compare(args) -> int:
    """A vs B: print the attribution, write compare.csv/.json (and compare.png)."""
    from zionsim.compare import attribute, headline, largest_change

    a, b = _read_summary(args.run_a, "RUN_A"), _read_summary(args.run_b, "RUN_B")
    names = tuple(args.names or (Path(args.run_a).name, Path(args.run_b).name))
    if names[0] == names[1]:
        names = ("A", "B")
    table = attribute(a, b)
    report = {**headline(a, b, names), "largest_change": largest_change(table)}
    clean = table.astype(object).where(table.notna(), None)
    files: dict = {
        "compare.csv": table.to_csv(index=False),
        "compare.json": to_json({**report, "components": clean.to_dict("records")}),
    }
    if not args.no_plot:
        import pandas as pd

        from zionsim.plots import png_bytes
        from zionsim.plots_study import plot_compare
        from zionsim.sweep import summary_row

        frames = [pd.DataFrame([summary_row(s)]) for s in (a, b)]
        files["compare.png"] = png_bytes(plot_compare(*frames, names=names))
    slug = "_vs_".join("".join(c if c.isalnum() or c in "-_." else "_" for c in n) for n in names)
    out = Path(args.out) if args.out else Path("results") / "runs" / f"compare_{slug}"
    write_result_dir(out, files)
    if args.format == "table":
        ms = {"a_s": f"{names[0]}_ms", "b_s": f"{names[1]}_ms", "delta_s": "delta_ms"}
        shown = table.rename(columns=ms)
        for col in ms.values():
            shown[col] = (shown[col] * 1e3).round(3)
        shown["delta_pct_of_a"] = shown["delta_pct_of_a"].round(1)
        shown["share_pct"] = (100 * shown["share_of_delta"]).round(1) + 0.0
        keep = ["component", *ms.values(), "delta_pct_of_a", "share_pct"]
        speed = report["speedup_b_over_a"]
        print(f"{names[0]}: {report['a_run']}\n{names[1]}: {report['b_run']}")
        print(f"{names[1]} is x{speed:.3f} the speed of {names[0]}; ", end="")
        print(f"largest change: {report['largest_change']}\n")
        print(format_rows(shown[keep].to_dict("records")), end="")
        print(f"wrote {out}/", file=sys.stderr)
    elif args.format == "json":
        print(files["compare.json"], end="")
    else:
        print(files["compare.csv"], end="")
    return 0


def cmd_plot(args) -> int:
    """Write the plots that apply to a sweep or run folder into DIR/plots/."""
    import json

    import pandas as pd

    from zionsim.io import write_atomic
    from zionsim.plots import png_bytes
    from zionsim.plots_study import run_plots, sweep_plots

    d = Path(args.dir)
    if (d / "results.parquet").is_file():
        grid = None
        if (d / "sweep.json").is_file():
            grid = list(json.loads((d / "sweep.json").read_text()).get("grid") or {})
        axes = sweep_plots(pd.read_parquet(d / "results.parquet"), grid, x=args.x)
    elif (d / "summary.json").is_file():
        links = pd.read_csv(d / "links.csv") if (d / "links.csv").is_file() else None
        ev = d / "events.parquet"
        events = pd.read_parquet(ev) if ev.is_file() else None
        axes = run_plots(_read_summary(str(d), "DIR"), links, events)
    else:
        raise InputError("neither results.parquet nor summary.json", file=str(d), field="DIR")
    for name, ax in axes.items():
        write_atomic(d / "plots" / f"{name}.png", png_bytes(ax))
        print(d / "plots" / f"{name}.png")
    return 0


def format_run_summary(s: dict) -> str:
    """The terminal summary of a run: headline figures and the critical-path breakdown."""
    it = s["iteration_time_s"]
    head = {
        "topology": f"{s['topology']} x {s['nodes']} nodes ({s['gpus']} GPUs)",
        "workload": f"{s['workload']} (global batch {s['global_batch']})",
        "iteration_time_ms": round(it * 1e3, 3),
        "samples_per_s": round(s["samples_per_s"], 1),
        "exposed_comm_ms": round(s["exposed_comm_s"] * 1e3, 3),
    }
    rows = [
        {
            "category": k,
            "critical_path_ms": round(v * 1e3, 3),
            "share_pct": round(100 * v / it, 1) if it else 0.0,
            "busy_ms": round(s["busy_s"].get(k, 0.0) * 1e3, 3),
        }
        for k, v in s["breakdown_s"].items()
        if v > 0 or s["busy_s"].get(k, 0.0) > 0
    ]
    sync = s.get("sync") or {}
    if sync.get("mode", "allreduce") != "allreduce":
        gap = sync["sync_gap_iterations"]
        head.update(
            {
                "sync": f"{sync['mode']} (every {sync['every']})"
                if sync["mode"].startswith("foreground")
                else sync["mode"],
                "sync_rounds_per_trainer": round(sync["rounds_per_trainer"], 2),
                "sync_gap_iterations": "n/a"
                if gap["mean"] is None
                else f"mean {gap['mean']:.2f} p50 {gap['p50']:.1f} p95 {gap['p95']:.1f}",
                "sync_bytes_GB": round(sync["sync_bytes"] / 1e9, 3),
                "foreground_slowdown_pct": round(100 * sync["foreground_slowdown"], 2),
            }
        )
    return format_mapping(head) + "\n" + format_rows(rows)


def _validate_parser(sub) -> None:
    """``validate``: simulated vs published measurements (``docs/validation.md``)."""
    p = sub.add_parser("validate", help="compare the simulator with published measurements")
    p.add_argument("--fast", action="store_true", help="only the cases that run in seconds")
    p.add_argument("--cases", default=None, help="cases YAML (default validation/cases.yaml)")
    p.add_argument("--out", default="results/validation", help="result folder")
    p.add_argument("--plots", default=None, metavar="DIR", help="also write validation_*.png")
    p.add_argument("--format", choices=FORMATS, default="table")


def cmd_validate(args) -> int:
    """Run the validation cases; print and write the table and the geomean |error| per family."""
    from zionsim import validate

    cases = validate.load_cases(args.cases, fast_only=args.fast)
    table = validate.run_cases(cases)
    summary = validate.summarize(table)
    report = validate.report(table, summary, args.cases or "validation/cases.yaml", args.fast)
    if args.format == "json":
        print(to_json(report), end="")
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        rows, totals = validate.display_rows(table), validate.display_summary(summary)
        print(format_rows(rows) + "\n" + format_rows(totals), end="")
    out = write_result_dir(
        args.out, {"validation.csv": table.to_csv(index=False), "summary.json": to_json(report)}
    )
    if args.plots:
        from zionsim.io import write_atomic
        from zionsim.plots import png_bytes
        from zionsim.plots_validation import plot_parity, plot_validation_curves

        curves = png_bytes(plot_validation_curves(table, cases))
        write_atomic(Path(args.plots) / "validation_curves.png", curves)
        write_atomic(Path(args.plots) / "validation_parity.png", png_bytes(plot_parity(table)))
    if args.format == "table":
        print(f"wrote {out}/", file=sys.stderr)
    return 0


COMMANDS = {
    "run": cmd_run,
    "trace": cmd_trace,
    "plan": cmd_plan,
    "topology": cmd_topology,
    "collective": cmd_collective,
    "sweep": cmd_sweep,
    "compare": cmd_compare,
    "plot": cmd_plot,
    "validate": cmd_validate,
    "calibrate": cmd_calibrate,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv or ["run"])
    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"zionsim: error: {exc.one_line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
