"""Command line for measurements: ``zionsim validate`` (published cases) and ``zionsim
calibrate`` (fit to your own logs and kernel times).  Parses, calls, prints and writes."""

from __future__ import annotations

import sys
from pathlib import Path

from zionsim.base.errors import InputError
from zionsim.cli.common import Phases, common_options, force_option, format_option
from zionsim.io.files import format_rows, to_json, write_result_dir


def add_parsers(sub) -> None:
    """Register ``validate`` and ``calibrate``."""
    _validate_parser(sub)
    _calibrate_parser(sub)


def _validate_parser(sub) -> None:
    """``validate``: simulated vs published measurements (``docs/validation.md``)."""
    p = sub.add_parser("validate", help="compare the simulator with published measurements")
    p.add_argument("--fast", action="store_true", help="only the cases that run in seconds")
    p.add_argument("--cases", default=None, help="cases YAML (default validation/cases.yaml)")
    p.add_argument(
        "--out", default="results/runs/validation", help="result folder (default %(default)s)"
    )
    force_option(p)
    p.add_argument("--plots", default=None, metavar="DIR", help="also write validation_*.png")
    format_option(p)


def cmd_validate(args) -> int:
    """Run the validation cases; print and write the table and the geomean |error| per family."""
    import pandas as pd

    from zionsim.io.files import check_result_target, prepare_parent
    from zionsim.measure import validate

    check_result_target(Path(args.out), None, args.force)  # before any work
    prepare_parent(args.out)
    from tqdm import tqdm

    cases = validate.load_cases(args.cases, fast_only=args.fast)
    with tqdm(total=len(cases), desc="validate", unit="case", leave=False, disable=None) as bar:
        table = validate.run_cases(cases, on_case=lambda _id: bar.update(1))
    whatifs = validate.run_whatifs(table, validate.load_whatifs(args.cases))
    if len(whatifs):
        table = pd.concat([table, whatifs], ignore_index=True)
    summary = validate.summarize(table)
    split = validate.split_end_to_end(table)
    report = validate.report(
        table, summary, args.cases or "validation/cases.yaml", args.fast, split
    )
    if args.format == "json":
        print(to_json(report), end="")
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        rows, totals = validate.display_rows(table), validate.display_summary(summary)
        parts = format_rows(rows) + "\n" + format_rows(totals)
        print(parts + "\n" + format_rows(validate.display_summary(split)), end="")
    files = {
        "validation.csv": table.to_csv(index=False),
        "summary.json": to_json(report),
        "split.csv": split.to_csv(index=False),
    }
    out = write_result_dir(args.out, files, "validation", force=args.force)
    if args.plots:
        from zionsim.io.files import write_atomic
        from zionsim.io.plots import png_bytes
        from zionsim.io.plots_validation import plot_parity, plot_validation_curves

        curves = png_bytes(plot_validation_curves(table, cases))
        write_atomic(Path(args.plots) / "validation_curves.png", curves)
        write_atomic(Path(args.plots) / "validation_parity.png", png_bytes(plot_parity(table)))
    if args.format == "table":
        print(f"wrote {out}/", file=sys.stderr)
    return 0


def _calibrate_parser(sub) -> None:
    """``calibrate``: fit the collective and compute models to measurements."""
    p = sub.add_parser("calibrate", help="fit NCCL and compute parameters to your measurements")
    common_options(p)
    p.add_argument(
        "--nccl-log", action="append", default=[], metavar="FILE", help="nccl-tests output"
    )
    p.add_argument("--kernels", default=None, metavar="CSV", help="measured kernel times")
    p.add_argument("--out", required=True, metavar="OVERLAY.yaml", help="overlay to write")
    force_option(p)


#: first line of every overlay ``zionsim calibrate`` writes (recognised before overwriting one)
CALIBRATE_HEADER = "# Written by `zionsim calibrate` (docs/calibration.md).\n"


def cmd_calibrate(args) -> int:
    """Fit, print the fit quality, write the overlay (docs/calibration.md)."""
    import os

    import yaml

    from zionsim.hardware.cluster import Cluster
    from zionsim.io.files import check_file_target, prepare_parent, write_atomic
    from zionsim.measure.calibration import calibrate, fitted_rows, overlay
    from zionsim.measure.kernel_times import read_kernel_csv
    from zionsim.measure.nccl_logs import read_nccl_log, world_of

    check_file_target(args.out, CALIBRATE_HEADER.strip(), args.force)  # before any work
    prepare_parent(args.out)
    bar = Phases(f"calibrate {Path(args.out).name}", ["read", "fit", "write"])
    frames = [read_nccl_log(f) for f in args.nccl_log]
    kernels = read_kernel_csv(args.kernels) if args.kernels else None
    if not frames and kernels is None:
        raise InputError("nothing to fit", field="--nccl-log/--kernels", allowed="either or both")
    nodes, gpn = args.nodes, args.gpus_per_node
    if frames and nodes is None and gpn is None:
        nodes, gpn = world_of(frames) or (None, None)  # the world the logs ran on
    cluster = Cluster.load(args.topology, nodes=nodes, gpus_per_node=gpn, overrides=args.set)
    bar.start("fit")
    cal = calibrate(cluster, frames, kernels)
    bar.start("write")
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
    write_atomic(args.out, CALIBRATE_HEADER + text)
    bar.close()
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


COMMANDS = {"validate": cmd_validate, "calibrate": cmd_calibrate}
