"""Command line: ``zionsim run|trace|plan|rerun`` and the dispatcher here; ``topology|collective``
in ``cli.hardware``, ``sweep|compare|plot|studies`` in ``cli.studies``, ``validate|calibrate`` in
``cli.measure``, ``jobs`` in ``cli.jobs``.

Parses arguments, calls the pure model, prints and writes.  Bad input exits with status 2 and a
one-line message naming the file and field; never a traceback.  A NaN or infinite figure from
accepted input is a bug in the model: one line and status 3.
"""

from __future__ import annotations

import argparse
import errno
import sys
import threading
from pathlib import Path

from zionsim.base.errors import InputError, ModelError
from zionsim.cli import hardware as cli_hardware
from zionsim.cli.common import (
    DEFAULT_WORKLOAD,
    Phases,
    common_options,
    force_option,
    format_option,
    memory_limit_of,
    memory_option,
    topology_sets,
)
from zionsim.io.files import format_mapping, format_rows, safe_name, to_json

DESCRIPTION = (
    "A discrete-event performance simulator of ZionEX-style GPU clusters training DLRMs. "
    "With no command, runs `zionsim run` on the defaults."
)
EPILOG = "`zionsim COMMAND --help` lists a command's options; docs: README.md and docs/."


def _version() -> str:
    """The installed package's version (pyproject.toml), or ``unknown`` outside an install."""
    from zionsim.cli.common import package_version

    return package_version()


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
        p = sub.add_parser(
            name,
            help=helptext,
            description=f"{helptext[0].upper()}{helptext[1:]}.",
            epilog=_EXAMPLES[name] + _builtins_epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_workload_options(p, name)
        add_options(p)
    cli_hardware.add_parsers(sub)
    _add_rerun_parser(sub)
    from zionsim.cli import jobs as cli_jobs
    from zionsim.cli import measure as cli_measure
    from zionsim.cli import studies as cli_studies

    cli_studies.add_parsers(sub)
    cli_measure.add_parsers(sub)
    cli_jobs.add_parser(sub)
    _describe_commands(sub)
    return parser


def _describe_commands(sub) -> None:
    """Give every subcommand's ``--help`` a description (its one-line help) and examples."""
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():
        if p.description is None:
            p.description = f"{helps[name][0].upper()}{helps[name][1:]}."
        if p.epilog is None and name in _MORE_EXAMPLES:
            p.epilog = "examples:\n" + "\n".join(f"  {e}" for e in _MORE_EXAMPLES[name])
            p.formatter_class = argparse.RawDescriptionHelpFormatter


#: examples under the ``--help`` of the commands defined in other modules (paths under results/)
_MORE_EXAMPLES = {
    "topology": ["zionsim topology zionex --nodes 16", "zionsim topology dgx_h100 --set gpu=h200"],
    "collective": [
        "zionsim collective --topology zionex --nodes 16 --op all_to_all --sizes 1M:1G",
        "zionsim collective --op all_reduce --sizes 8M:8M --algorithm ring --protocol Simple",
    ],
    "sweep": [
        "zionsim sweep examples/nic_speed.yaml --out results/runs/nic_speed --workers 2",
        "zionsim sweep examples/nic_speed.yaml --scheduler tcp://127.0.0.1:8786  (docs/sweeps.md)",
    ],
    "jobs": [
        "zionsim jobs examples/jobs_two_neo.yaml",
        "zionsim jobs examples/jobs_checkpoint.yaml --format json --out results/runs/ckpt",
        "zionsim jobs examples/jobs_two_neo.yaml --set jobs.placement=spread",
    ],
    "compare": ["zionsim compare results/runs/A results/runs/B --names 200G 400G"],
    "plot": ["zionsim plot results/runs/nic_speed --x topology.scale_out.nic_bw"],
    "studies": ["zionsim studies                  (all, into results/)", "zionsim studies scaling"],
    "validate": ["zionsim validate --fast", "zionsim validate --plots results/runs/validation"],
    "calibrate": [
        "zionsim calibrate --topology zionex --nccl-log examples/all_reduce.log "
        "--kernels examples/kernels.csv --out results/runs/zionex_mine.yaml",
    ],
}


#: examples shown under each core command's ``--help`` (written under results/, git-ignored)
_EXAMPLES = {
    "run": """examples:
  zionsim run --workload tiny --nodes 2
  zionsim run --nodes 16 --set scale_out.nic_bw=400Gbps --out results/runs/nic400
  zionsim run --workload dle_dlrm_small --stack nvidia_pytorch_dlrm --global-batch 4096
  zionsim run --set stack.host.per_step=0us --sync shadow-easgd --sync-servers 2
  zionsim rerun results/runs/nic400      (rebuilds the run from its summary.json)""",
    "trace": """examples:
  zionsim trace --workload tiny --nodes 1 --out results/tiny_trace.json
  zionsim trace --import-kineto examples/profile.json --global-batch 2048 --out results/k.json""",
    "plan": """examples:
  zionsim plan --workload neo_model_a --nodes 16
  zionsim plan --workload tiny --nodes 2 --set stack.host.per_step=0us --out results/plan.yaml
  zionsim plan --workload tiny --nodes 2 --refine --max-evals 20""",
}


def _builtins_epilog() -> str:
    """The built-in topologies, workloads and stacks, for a command's ``--help``."""
    from zionsim.base.config import builtin_names

    lists = {k: ", ".join(builtin_names(k)) for k in ("topologies", "workloads", "stacks")}
    return "\n\nbuilt-in " + "\nbuilt-in ".join(f"{k}: {v}" for k, v in lists.items())


def _add_rerun_parser(sub) -> None:
    """``zionsim rerun RESULT_DIR``: the run again from its ``summary.json``'s ``inputs``."""
    p = sub.add_parser(
        "rerun",
        help="rebuild a run from its result folder and check summary.json is reproduced",
        description="Rebuild the run of RESULT_DIR from the `inputs` block of its summary.json "
        "(options, --set overrides, stack, plan and trace files, checked by SHA-256), write it "
        "to --out and compare the two summary.json byte for byte: exit 0 when identical, 1 "
        "when not (the differing fields are named). Run it from the folder the run was made "
        "in: relative file paths are read as given.",
        epilog="example:\n  zionsim run --workload tiny --nodes 2 --out results/runs/a\n"
        "  zionsim rerun results/runs/a",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("result", metavar="RESULT_DIR", help="a folder written by zionsim run")
    p.add_argument("--out", default=None, help="where the rerun goes (default RESULT_DIR_rerun)")
    force_option(p)
    format_option(p)
    memory_option(p)
    p.add_argument("--no-plot", action="store_true", help="skip breakdown.png")


def cmd_rerun(args) -> int:
    """``zionsim rerun``: the run of a result folder again, from its ``inputs``; exit 1 when the
    new ``summary.json`` differs from the old one."""
    import json

    src = Path(args.result)
    summary_file = src / "summary.json"
    if not summary_file.is_file():
        raise InputError("no summary.json: not a zionsim run folder", file=str(src))
    old_text = summary_file.read_text()
    try:
        block = json.loads(old_text)["inputs"]
        options = {**block["options"], **block["overrides"]}
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(
            "summary.json has no inputs block (written by zionsim before rerun existed)",
            file=str(summary_file),
        ) from None
    _check_input_files(block, summary_file)
    out = Path(args.out) if args.out else src.with_name(src.name + "_rerun")
    rerun = argparse.Namespace(
        **{**vars(args), "trace_file": block.get("trace_file"), "out": str(out),
           "trace_ranks": "auto", "command": "run", "format": "none"}
    )  # fmt: skip
    run_and_write(rerun, _inputs(rerun, options))
    new_text = (out / "summary.json").read_text()
    if new_text == old_text:
        print(f"{out}/summary.json is identical to {summary_file}", file=sys.stderr)
        return 0
    old, new = json.loads(old_text), json.loads(new_text)
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    print(f"zionsim: rerun differs from {summary_file} in: {', '.join(keys)}", file=sys.stderr)
    return 1


def _check_input_files(block: dict, summary_file: Path) -> None:
    """Refuse to rerun when a file the run read has changed since (its SHA-256 differs)."""
    from zionsim.base.config import file_sha256

    for role, entry in (block.get("files") or {}).items():
        if entry and file_sha256(entry["path"]) != entry["sha256"]:
            raise InputError(
                f"the {role} file {entry['path']} is missing or changed since the run "
                f"(sha256 {entry['sha256'][:12]}...)",
                file=str(summary_file),
                field=f"inputs.files.{role}",
                allowed="the file as it was",
            )


def _trace_ranks_arg(text: str) -> str | list[int]:
    """``--trace-ranks``: auto, all or comma-separated rank numbers."""
    if text in ("auto", "all"):
        return text
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("auto, all or ranks such as 0,7,100") from None


def _add_workload_options(p, command: str = "run") -> None:
    """Options that ``run``, ``trace`` and ``plan`` share: cluster, workload, then the run
    options of ``sim.inputs.OPTIONS`` that ``command`` takes (flag, type, default and help come
    from that table: a new run option is added there, not here)."""
    from zionsim.sim.inputs import OPTIONS

    common_options(p, overrides=True)
    p.add_argument("--workload", default=DEFAULT_WORKLOAD, help="built-in name or YAML path")
    types = {"int": int, "int0": int, "time": float, "text": str}
    for o in OPTIONS:
        if command not in o.commands:
            continue
        if o.kind == "flag":
            store = "store_false" if o.flag.startswith(("--no", "--un")) else "store_true"
            p.add_argument(o.flag, dest=o.name, action=store, help=o.help)
        elif o.kind == "list":
            p.add_argument(o.flag, dest=o.name, action="append", default=None, help=o.help)
        else:
            p.add_argument(o.flag, dest=o.name, type=types[o.kind], default=o.default, help=o.help)


def _add_run_options(p) -> None:
    """``zionsim run``: trace replay, trace ranks and the result folder (the run options come
    from ``sim.inputs.OPTIONS``)."""
    p.add_argument(
        "--trace",
        dest="trace_file",
        default=None,
        help="replay a trace file instead of lowering the workload",
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


def _options(args) -> dict:
    """The run options (``sim.inputs`` grammar) of a parsed ``run``/``trace``/``plan`` command
    line: its run-option flags, then each ``--set`` as a ``topology.``/``workload.``/``stack.``
    path (``sim.inputs.split_override``)."""
    from zionsim.sim.inputs import OPTIONS, split_override

    options = {o.name: getattr(args, o.name) for o in OPTIONS if hasattr(args, o.name)}
    options.update(split_override(text) for text in args.set)
    return options


def _inputs(args, options: dict | None = None):
    """The :class:`~zionsim.sim.inputs.RunInputs` of a command (or of ``options``), guarded:
    capacity and the memory the specs alone decide are checked before any plan or cluster."""
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import guard_inputs

    trace_file = getattr(args, "trace_file", None)
    inputs = resolve_inputs(
        _options(args) if options is None else options, "command line", trace_file
    )
    guard_inputs(inputs, memory_limit_of(args), 1 if args.command != "run" else None)
    return inputs


def _read_trace(inputs):
    """The replayed trace of ``--trace`` (None when the workload is lowered)."""
    from zionsim.io.files import read_trace

    return read_trace(inputs.trace_file) if inputs.trace_file else None


def cmd_run(args) -> int:
    """``zionsim run``: simulate a workload under a plan (or replay ``--trace``), write the result
    folder and print the summary (table, JSON, or the breakdown as CSV).  The whole command runs
    with the cycle collector made rare, as the simulation alone did (``sim.run.few_gc_passes``):
    its full passes over the imported libraries and the lowered trace were a tenth of the
    headline run's CPU time."""
    from zionsim.sim.run import few_gc_passes

    with few_gc_passes():
        return run_and_write(args, _inputs(args))


def run_and_write(args, inputs) -> int:
    """Simulate ``inputs`` and write the result folder of ``zionsim run`` (``--out``, checked
    before any simulation; its ``summary.json`` carries ``inputs``); print the summary."""
    from zionsim.io.files import check_result_target, inputs_id, prepare_parent, write_run
    from zionsim.sim.run import simulate_inputs

    trace = _read_trace(inputs)
    spec = inputs.cluster
    name = trace.meta.get("workload") if trace is not None else inputs.workload.name
    block = inputs.provenance(_version())
    ident = inputs_id({"kind": "run", "inputs": block, "trace_ranks": args.trace_ranks})
    default = Path("results") / "runs" / f"{safe_name(f'{name}_{spec.name}_{spec.nodes}n')}_{ident}"
    out = Path(args.out) if args.out else default
    check_result_target(out, ident, args.force)  # before any simulation
    prepare_parent(out)
    bar = Phases(f"run {name}", ["plan", "simulate", "write"])
    result = simulate_inputs(
        inputs, trace=trace, max_memory_bytes=memory_limit_of(args), guarded=True,
        on_phase=bar.start,
    )  # fmt: skip
    result.summary["inputs"] = block
    bar.start("write")
    if result.summary.get("status") == "stopped":
        from zionsim.io.files import write_stopped

        write_stopped(out, result.summary, ident, args.force)
        bar.close()
        print(f"job stopped: {result.summary['stopped_reason']}", file=sys.stderr)
        print(to_json(result.summary) if args.format == "json" else "", end="")
        print(f"wrote {out}/", file=sys.stderr)
        return 0
    write_run(
        out, result, plot=not args.no_plot, inputs=ident, force=args.force,
        trace_ranks=args.trace_ranks,
    )  # fmt: skip
    bar.close()
    s = result.summary
    if args.format == "table":
        print(format_run_summary(s), end="")
        print(f"wrote {out}/", file=sys.stderr)
    elif args.format == "json":
        print(to_json(s), end="")
    elif args.format == "csv":
        bd = result.table("breakdown")  # columns (no pandas) unless read as a DataFrame
        rows = bd.to_dict("records") if hasattr(bd, "to_dict") else bd.records()
        print(format_rows(rows, "csv"), end="")
    return 0


def cmd_trace(args) -> int:
    """``zionsim trace``: write the trace of one iteration, lowered from the workload or imported
    from a Kineto trace (``--import-kineto``)."""
    from zionsim.dlrm.trace import SCHEMA
    from zionsim.io.files import check_file_target, prepare_parent, write_trace
    from zionsim.sim.run import trace_of

    check_file_target(args.out, SCHEMA, args.force)  # before any work
    prepare_parent(args.out)
    if args.import_kineto:
        trace = _import_kineto(args)
    else:
        trace, _, _ = trace_of(_inputs(args))
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

    if args.global_batch is None:  # else every replay reports 0 samples/s
        raise InputError(
            "a Kineto trace does not record the batch it trained on",
            field="--global-batch",
            allowed="--global-batch N: samples per iteration over the profiled GPUs",
        )
    trace = read_kineto(args.import_kineto, step=args.step, global_batch=args.global_batch)
    if args.nodes is None and args.gpus_per_node is None:
        return trace
    spec = load_topology(
        args.topology,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        overrides=topology_sets(args),
    )
    return retarget(trace, spec.gpus)


def cmd_plan(args) -> int:
    """``zionsim plan``: the plan's estimated cost per table (top 20 in the table format) and per
    GPU; ``--refine`` improves it by simulation; ``--out`` writes the plan as YAML,
    ``--to-torchrec`` as a TorchRec plan dump."""
    from zionsim.dlrm.plan_cost import plan_costs
    from zionsim.hardware.cluster import Cluster
    from zionsim.io.files import PLAN_HEADER, check_file_target, prepare_parent
    from zionsim.sim.inputs import plan_of

    if args.out:
        check_file_target(args.out, PLAN_HEADER.strip(), args.force)  # before any work
        prepare_parent(args.out)
    inputs = _inputs(args)
    cluster, w = Cluster.build(inputs.cluster), inputs.workload
    plan = plan_of(inputs, cluster)
    # ---- refinement and TorchRec export live in cli/plan.py
    from zionsim.cli import plan as cli_plan

    plan, refined = cli_plan.refine_plan(args, cluster, w, plan, inputs.stack)
    dump = cli_plan.torchrec_dump(args, cluster, w, plan)
    # ----
    from zionsim.dlrm.stack import resolve_stack

    rows, totals = plan_costs(cluster, w, plan, resolve_stack(args.stack))
    if args.format == "json":
        print(to_json({"plan": plan.name, "tables": rows, "per_gpu": totals, **refined}), end="")
    elif args.format == "csv":
        print(format_rows(rows, "csv"), end="")
    else:
        shown = sorted(rows, key=lambda r: -r["table_estimated_s"])[:20]
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
    cli_plan.export_torchrec(args, dump)
    return 0


def format_run_summary(s: dict) -> str:
    """The terminal summary of a run: headline figures and the critical-path breakdown."""
    from zionsim.dlrm.sync import SyncSpec

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
                if SyncSpec(sync["mode"]).is_foreground
                else sync["mode"],
                "sync_rounds_per_trainer": round(sync["rounds_per_trainer"], 2),
                "sync_gap_iterations": "n/a"
                if gap["mean"] is None
                else f"mean {gap['mean']:.2f} p50 {gap['p50']:.1f} p95 {gap['p95']:.1f}",
                "sync_bytes_GB": round(sync["sync_bytes"] / 1e9, 3),
                "foreground_slowdown_pct": round(100 * sync["foreground_slowdown"], 2),
            }
        )
    head.update(_variability_lines(s))
    return format_mapping(head) + "\n" + format_rows(rows)


def _variability_lines(s: dict) -> dict:
    """Summary lines of a run with variability: distribution, straggler wait, faults."""
    out = {}
    d = s.get("distribution")
    if d:
        t = d["iteration_time_s"]
        lo, hi = t["ci95"]
        out["iteration_ms_distribution"] = (
            f"mean {t['mean'] * 1e3:.3f} p50 {t['p50'] * 1e3:.3f} p95 {t['p95'] * 1e3:.3f} "
            f"p99 {t['p99'] * 1e3:.3f} ci95 [{lo * 1e3:.3f}, {hi * 1e3:.3f}] "
            f"({d['samples']} realisations)"
        )
    if s.get("straggler_wait_s"):
        out["straggler_wait_ms"] = round(s["straggler_wait_s"]["total"] * 1e3, 3)
    if s.get("faults"):
        out["faults"] = ", ".join(s["faults"]["failed"])
    g = s.get("goodput")
    if g:
        out["goodput_samples_per_s"] = round(g["goodput_samples_per_s"], 1)
        out["optimal_checkpoint_interval_min"] = round(g["optimal_interval_s"] / 60, 1)
    return out


#: the commands defined here; ``commands()`` adds the study and measurement ones
CORE_COMMANDS = {
    "run": cmd_run,
    "trace": cmd_trace,
    "plan": cmd_plan,
    "rerun": cmd_rerun,
}


def commands() -> dict:
    """Every subcommand's handler: core ones here, studies and measurements in their modules."""
    from zionsim.cli import jobs as cli_jobs
    from zionsim.cli import measure as cli_measure
    from zionsim.cli import studies as cli_studies

    return {
        **CORE_COMMANDS,
        **cli_hardware.COMMANDS,
        **cli_studies.COMMANDS,
        **cli_measure.COMMANDS,
        **cli_jobs.COMMANDS,
    }


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
    except KeyboardInterrupt:  # Ctrl-C: temporaries are removed on the way out
        print("zionsim: interrupted (finished sweep points are kept)", file=sys.stderr)
        return 130
    except OSError as exc:  # the machine, not the input: a full disk, a lost scheduler
        status = 1 if exc.errno in ENVIRONMENT_ERRNOS or exc.errno is None else 2
        print(f"zionsim: error: {_os_message(exc)}", file=sys.stderr)
        return status


#: errors of the machine (exit 1), not of the input (exit 2): full disk, quota, I/O, memory,
#: read-only file system, too many open files
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EROFS, errno.EMFILE, errno.ENFILE,
}  # fmt: skip


def _os_message(exc: OSError) -> str:
    """An ``OSError`` on one line: the file, what the system said, and for a full disk what to
    do."""
    where = f"{exc.filename}: " if exc.filename else ""
    what = exc.strerror or str(exc) or type(exc).__name__
    hint = " (free some space or write elsewhere with --out)" if exc.errno == errno.ENOSPC else ""
    return f"{where}{what}{hint}".replace("\n", " ")


if __name__ == "__main__":
    sys.exit(main())
