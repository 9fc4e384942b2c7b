"""Command line: ``zionsim run|trace|plan|topology|collective`` here; ``sweep|compare|plot`` in
``cli.studies`` (with ``studies``), ``validate|calibrate`` in ``cli.measure``.

Parses arguments, calls the pure model, prints and writes.  Bad input exits with status 2 and a
one-line message naming the file and field; never a traceback.  A NaN or infinite figure from
accepted input is a bug in the model: one line and status 3.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from zionsim.base.errors import InputError, ModelError
from zionsim.cli.common import (
    DEFAULT_WORKLOAD,
    Phases,
    common_options,
    default_out,
    force_option,
    guard_cluster,
    guard_inputs,
    memory_limit_of,
)
from zionsim.io.files import format_mapping, format_rows, to_json, write_result_dir

DESCRIPTION = (
    "A discrete-event performance simulator of ZionEX-style GPU clusters training DLRMs. "
    "With no command, runs `zionsim run` on the defaults."
)
EPILOG = "`zionsim COMMAND --help` lists a command's options; docs: README.md and docs/."


def _version() -> str:
    """The installed package's version (pyproject.toml), or ``unknown`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zionsim")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``: looks the installed version up only when asked (importlib.metadata costs
    ~20 ms, a tenth of a small command's start-up)."""

    def __call__(self, parser, namespace, values, option_string=None):
        """Print ``zionsim <version>`` and exit."""
        parser._print_message(f"zionsim {_version()}\n", sys.stdout)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``zionsim`` argument parser: one subcommand per entry of :func:`commands`."""
    parser = argparse.ArgumentParser(prog="zionsim", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--version", action=_VersionAction, nargs=0, help="show the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, helptext, add_options in (
        ("run", "simulate DLRM training iterations", _add_run_options),
        ("trace", "write (or import) the trace of one iteration", _add_trace_options),
        ("plan", "shard the tables of a workload and show the plan", _add_plan_options),
    ):
        p = sub.add_parser(name, help=helptext)
        _add_workload_options(p)
        add_options(p)
    _add_topology_parser(sub)
    _add_collective_parser(sub)
    from zionsim.cli import measure as cli_measure
    from zionsim.cli import studies as cli_studies

    cli_studies.add_parsers(sub)
    cli_measure.add_parsers(sub)
    return parser


def _add_topology_parser(sub) -> None:
    """``zionsim topology [NAME] [--plot FILE.png]``."""
    p = sub.add_parser("topology", help="describe a cluster topology")
    p.add_argument("name", nargs="?", default=None, help="built-in name or YAML path")
    common_options(p)
    p.add_argument("--plot", metavar="FILE.png", help="draw the first nodes and the fabric")


def _add_collective_parser(sub) -> None:
    """``zionsim collective``: one collective over a range of sizes, like nccl-tests."""
    p = sub.add_parser("collective", help="nccl-tests in simulation")
    common_options(p, nodes_default=None)
    p.add_argument(
        "--op",
        default="all_reduce",
        choices=("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"),
        help="the collective (default %(default)s)",
    )
    p.add_argument("--sizes", default="1K:8G", help="MIN:MAX bytes, doubling (K/M/G = 2^10..)")
    p.add_argument(
        "--algorithm",
        default=None,
        help="ring, tree, nvls, hierarchical, direct, pxn ... (default: what NCCL would choose)",
    )
    p.add_argument(
        "--protocol",
        default=None,
        choices=("LL", "LL128", "Simple"),
        help="NCCL protocol (default: what NCCL would choose)",
    )
    p.add_argument("--out", default=None, help="result folder (default results/runs/<name>_<hash>)")
    force_option(p)


def _trace_ranks_arg(text: str) -> str | list[int]:
    """``--trace-ranks``: auto, all or comma-separated rank numbers."""
    if text in ("auto", "all"):
        return text
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("auto, all or ranks such as 0,7,100") from None


def _add_workload_options(p) -> None:
    """Options that ``run``, ``trace`` and ``plan`` share: cluster, workload, plan and batch."""
    common_options(p)
    p.add_argument("--workload", default=DEFAULT_WORKLOAD, help="built-in name or YAML path")
    p.add_argument(
        "--plan",
        default="auto",
        help="auto (the stack's planner: greedy, or HugeCTR's for --stack hugectr), greedy, "
        "round_robin, ps (tables on CPU parameter servers), hugectr, or a plan YAML",
    )
    p.add_argument(
        "--batch-per-gpu", type=int, default=None, help="samples per GPU (default: the workload's)"
    )
    p.add_argument(
        "--global-batch", type=int, default=None, help="samples per iteration over all GPUs"
    )
    p.add_argument("--unfused", action="store_true", help="per-table embedding kernels")
    p.add_argument(
        "--stack",
        default=None,
        help="software stack profile: torchrec (default), hugectr, nvidia_pytorch_dlrm, "
        "tensorflow_sok, bare, or a YAML path (docs/stacks.md)",
    )


def _add_run_options(p) -> None:
    """``zionsim run``: trace replay, iterations, sync mode and the result folder."""
    p.add_argument(
        "--trace",
        dest="trace_file",
        default=None,
        help="replay a trace file instead of lowering the workload",
    )
    p.add_argument(
        "--iterations", type=int, default=3, help="iterations, warm-up included (default 3)"
    )
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
    p.add_argument(
        "--sync-trainer",
        default=None,
        choices=("rank", "node"),
        help="shadow/foreground: a trainer is one GPU (rank) or one node",
    )
    p.add_argument(
        "--warmup", type=int, default=1, help="iterations left out of the figures (default 1)"
    )
    p.add_argument(
        "--trace-ranks",
        default="auto",
        type=_trace_ranks_arg,
        help="ranks whose per-op spans are written: auto (all below 256 GPUs, else a sample), "
        "all, or a list such as 0,7,100",
    )
    p.add_argument("--out", default=None, help="result folder (default results/runs/<name>_<hash>)")
    force_option(p)
    p.add_argument("--no-plot", action="store_true", help="skip breakdown.png")


def _add_trace_options(p) -> None:
    """``zionsim trace``: the output file and the Kineto import."""
    p.add_argument("--out", required=True, help="trace file to write (.json)")
    force_option(p)
    p.add_argument(
        "--import-kineto",
        metavar="FILE",
        default=None,
        help="import a PyTorch profiler (Kineto) trace: a JSON(.gz) file, one per rank "
        "in a folder, or a list; --nodes/--gpus-per-node retarget it (docs/traces.md)",
    )
    p.add_argument("--step", type=int, default=None, help="kineto: ProfilerStep#N only")


def _add_plan_options(p) -> None:
    """``zionsim plan``: the planner and the plan file to write."""
    # the old spelling of --plan, kept working but hidden
    p.add_argument("--planner", dest="plan", action=_Deprecated, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="write the plan as YAML")
    force_option(p)
    from zionsim.cli import plan as cli_plan

    cli_plan.add_options(p)  # --refine, --budget, --max-evals, --seed, --to-torchrec


class _Deprecated(argparse.Action):
    """A hidden old spelling of an option: stores into the new one's ``dest`` with a note."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"zionsim: {option_string} is deprecated; use --{self.dest}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _cluster(args):
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology

    name = getattr(args, "name", None) or args.topology
    spec = load_topology(
        name, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=args.set
    )
    guard_cluster(args, spec)
    return Cluster.build(spec)


def cmd_topology(args) -> int:
    """``zionsim topology``: print the cluster's summary table; ``--plot`` draws it to a PNG."""
    from zionsim.hardware.summary import topology_summary

    cluster = _cluster(args)
    print(format_mapping(topology_summary(cluster), args.format), end="")
    if args.plot:
        from zionsim.io.plots import plot_topology, save

        save(plot_topology(cluster), args.plot)
    return 0


def cmd_collective(args) -> int:
    """``zionsim collective``: one collective at each size of ``--sizes`` (bytes, doubling), like
    nccl-tests; prints the rows and writes ``collective.csv`` and ``summary.json``."""
    from zionsim.base.units import parse_size_list
    from zionsim.network.simulate import simulate_collective

    sizes = parse_size_list(args.sizes)
    cluster = _cluster(args)
    rows = [
        simulate_collective(
            cluster,
            args.op,
            s,
            algorithm=args.algorithm,
            protocol=args.protocol,
        ).row()
        for s in sizes
    ]
    shown = [nccl_tests_row(r, args.op) for r in rows] if args.format == "table" else rows
    print(format_rows(shown, args.format), end="")
    name = f"collective_{cluster.spec.name}_{cluster.spec.nodes}n_{args.op}"
    out, ident = default_out("collective", name, args)
    out = Path(args.out) if args.out else out
    summary = {
        "topology": cluster.spec.name,
        "nodes": cluster.spec.nodes,
        "gpus": cluster.spec.gpus,
        "op": args.op,
        "rows": rows,
    }
    files = {"collective.csv": format_rows(rows, "csv"), "summary.json": to_json(summary)}
    write_result_dir(out, files, "collective", ident, args.force)
    if args.format == "table":
        print(f"wrote {out}/", file=sys.stderr)
    return 0


#: nccl-tests' element type (its default, ``-d float``) and reduction per collective
NCCL_TESTS_TYPE = ("float", 4)
NCCL_TESTS_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}


def nccl_tests_row(row: dict, op: str) -> dict:
    """One result row in nccl-tests' columns: size (B), count (elements), type, redop, root,
    time (us), algbw and busbw (GB/s), then the algorithm and protocol NCCL would pick."""
    name, width = NCCL_TESTS_TYPE
    return {
        "size": int(row["size_bytes"]),
        "count": int(row["size_bytes"]) // width,
        "type": name,
        "redop": NCCL_TESTS_REDOP.get(op, "none"),
        "root": -1,
        "time_us": round(row["time_s"] * 1e6, 2),
        "algbw_GBps": round(row["algbw_GBps"], 2),
        "busbw_GBps": round(row["busbw_GBps"], 2),
        "algorithm": row["algorithm"],
        "protocol": row["protocol"],
    }


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
    from zionsim.base.errors import InputError
    from zionsim.dlrm.workload import WORKLOAD_KEYS, load_workload, with_global_batch
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology

    topo_sets, work_sets = _split_overrides(args.set)
    # bare workload fields (batch_per_gpu=..., precision.embedding=...) are accepted too
    work_sets += [v for v in topo_sets if v.split("=", 1)[0].split(".")[0] in WORKLOAD_KEYS]
    topo_sets = [v for v in topo_sets if v.split("=", 1)[0].split(".")[0] not in WORKLOAD_KEYS]
    spec = load_topology(
        args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=topo_sets
    )
    w = load_workload(args.workload, overrides=work_sets, batch_per_gpu=args.batch_per_gpu)
    if args.global_batch is not None:
        if args.batch_per_gpu is not None:
            raise InputError(
                "give --batch-per-gpu or --global-batch, not both", field="--global-batch"
            )
        w = with_global_batch(w, args.global_batch, spec.gpus)
    from zionsim.dlrm.stack import apply_stack, resolve_stack

    w = apply_stack(w, resolve_stack(args.stack))
    guard_inputs(args, spec, w)  # capacity and memory the specs alone decide, before any plan
    return Cluster.build(spec), w


def _plan(args, cluster, w):
    """The plan named by ``--plan``: a planner (auto = the stack's) or a plan YAML file."""
    from zionsim.dlrm.planner import PLANNERS, named_plan
    from zionsim.dlrm.stack import resolve_stack

    if args.plan == "auto" or args.plan in PLANNERS:
        return named_plan(args.plan, cluster, w, resolve_stack(getattr(args, "stack", None)))
    from zionsim.io.files import read_plan

    return read_plan(args.plan, w, len(cluster.gpus), cluster.spec.gpus_per_node, _servers(cluster))


def _servers(cluster) -> int:
    """Host sockets of the cluster: the parameter servers a plan may name."""
    return cluster.spec.nodes * cluster.spec.host.sockets


def _trace_cluster(args):
    """The cluster a replayed ``--trace`` runs on (topology options and ``--set``)."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology

    topo_sets, _ = _split_overrides(args.set)
    spec = load_topology(
        args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=topo_sets
    )
    guard_cluster(args, spec)
    return Cluster.build(spec)


def cmd_run(args) -> int:
    """``zionsim run``: simulate a workload under a plan (or replay ``--trace``), write the result
    folder and print the summary (table, JSON, or the breakdown as CSV)."""
    from zionsim.io.files import write_run

    name = Path(args.trace_file or args.workload).stem
    bar = Phases(f"run {name}", ["load", "simulate", "write"])
    result = _simulate(args, bar)
    s = result.summary
    out, ident = default_out("run", f"{s['workload']}_{s['topology']}_{s['nodes']}n", args)
    out = Path(args.out) if args.out else out
    bar.start("write")
    write_run(
        out,
        result,
        plot=not args.no_plot,
        inputs=ident,
        force=args.force,
        trace_ranks=args.trace_ranks,
    )
    bar.close()
    if args.format == "table":
        print(format_run_summary(s), end="")
        print(f"wrote {out}/", file=sys.stderr)
    elif args.format == "json":
        print(to_json(s), end="")
    else:
        print(format_rows(result.breakdown.to_dict("records"), "csv"), end="")
    return 0


def _simulate(args, bar: Phases):
    """The run of ``zionsim run``: the workload under its plan, or the replayed ``--trace``."""
    from zionsim.io.files import read_trace
    from zionsim.sim.run import simulate_run

    if args.trace_file:
        cluster = _trace_cluster(args)
        trace = read_trace(args.trace_file)
        bar.start("simulate")
        return simulate_run(
            cluster, trace=trace, iterations=args.iterations, warmup=args.warmup,
            max_memory_bytes=memory_limit_of(args),
        )  # fmt: skip
    cluster, w = _run_inputs(args)
    plan = _plan(args, cluster, w)
    bar.start("simulate")
    return simulate_run(
        cluster,
        w,
        plan,
        iterations=args.iterations,
        warmup=args.warmup,
        fused=not args.unfused,
        sync=args.sync,
        sync_every=args.sync_every,
        sync_servers=args.sync_servers,
        sync_period_s=args.sync_period,
        sync_trainer=args.sync_trainer,
        stack=args.stack,
        max_memory_bytes=memory_limit_of(args),
    )


def cmd_trace(args) -> int:
    """``zionsim trace``: write the trace of one iteration, lowered from the workload or imported
    from a Kineto trace (``--import-kineto``)."""
    from zionsim.io.files import write_trace
    from zionsim.sim.run import build_trace

    if args.import_kineto:
        trace = _import_kineto(args)
    else:
        cluster, w = _run_inputs(args)
        trace, _ = build_trace(
            cluster, w, _plan(args, cluster, w), fused=not args.unfused, stack=args.stack
        )
    write_trace(args.out, trace, force=args.force)
    print(
        f"wrote {args.out} ({len(trace.ops)} ops, {len(trace.collectives)} collectives, "
        f"{trace.ranks} ranks)",
        file=sys.stderr,
    )
    return 0


def _import_kineto(args):
    """The Kineto trace of ``--import-kineto``, retargeted when ``--nodes``/``--gpus-per-node``
    are given (to nodes × GPUs per node of ``--topology``)."""
    from zionsim.dlrm.retarget import retarget
    from zionsim.hardware.topology import load_topology
    from zionsim.measure.kineto import read_kineto

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


def cmd_plan(args) -> int:
    """``zionsim plan``: the plan's estimated cost per table (top 20 in the table format) and per
    GPU; ``--refine`` improves it by simulation; ``--out`` writes the plan as YAML,
    ``--to-torchrec`` as a TorchRec plan dump."""
    from zionsim.dlrm.planner import plan_costs

    cluster, w = _run_inputs(args)
    plan = _plan(args, cluster, w)
    # ---- refinement and TorchRec export live in cli/plan.py
    from zionsim.cli import plan as cli_plan

    plan, refined = cli_plan.refine_plan(args, cluster, w, plan)
    # ----
    from zionsim.dlrm.stack import resolve_stack

    rows, totals = plan_costs(cluster, w, plan, resolve_stack(args.stack))
    if args.format == "json":
        print(to_json({"plan": plan.name, "tables": rows, "per_gpu": totals, **refined}), end="")
    elif args.format == "csv":
        print(format_rows(rows, "csv"), end="")
    else:
        shown = sorted(rows, key=lambda r: -r["estimated_s"])[:20]
        print(format_rows(shown), end="")
        if len(rows) > len(shown):
            print(f"... {len(rows) - len(shown)} more tables (--format csv lists all)")
        print()
        print(format_mapping({"plan": plan.name, **totals}), end="")
        cli_plan.print_refinement(refined)
    if args.out:
        from zionsim.io.files import write_plan

        write_plan(args.out, plan, w, force=args.force, gpus=len(cluster.gpus))
        print(f"wrote {args.out}", file=sys.stderr)
    cli_plan.export_torchrec(args, cluster, w, plan)
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


#: the commands defined here; ``commands()`` adds the study and measurement ones
CORE_COMMANDS = {
    "run": cmd_run,
    "trace": cmd_trace,
    "plan": cmd_plan,
    "topology": cmd_topology,
    "collective": cmd_collective,
}


def commands() -> dict:
    """Every subcommand's handler: core ones here, studies and measurements in their modules."""
    from zionsim.cli import measure as cli_measure
    from zionsim.cli import studies as cli_studies

    return {**CORE_COMMANDS, **cli_studies.COMMANDS, **cli_measure.COMMANDS}


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``; no arguments = ``run``); return
    the exit status: 0, 2 for bad input with one line on stderr."""
    import signal

    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)  # a killed command cleans up its temporaries
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv or ["run"])
    try:
        return commands()[args.command](args)
    except InputError as exc:
        print(f"zionsim: error: {exc.one_line()}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # the guard's estimate fell short: still one line, exit 2
        detail = f": {exc}" if str(exc) else ""
        print(
            f"zionsim: error: out of memory{detail} (docs/reliability.md: lower --max-memory "
            "so the guard refuses such runs up front)".replace("\n", " "),
            file=sys.stderr,
        )
        return 2
    except ModelError as exc:  # accepted input, non-finite result: a bug (docs/input_bounds.md)
        print(f"zionsim: internal error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
