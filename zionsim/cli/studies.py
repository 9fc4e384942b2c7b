"""Command line for what-if studies: ``zionsim sweep|compare|plot`` and
``zionsim studies`` (``docs/sweeps.md``).  Parses, calls, prints and writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zionsim.base.errors import InputError
from zionsim.cli.common import default_out, force_option, format_option, memory_option
from zionsim.io.files import format_rows, is_partial, to_json, write_result_dir


def add_parsers(sub) -> None:
    """Register ``sweep``, ``compare``, ``plot`` and ``studies``."""
    _study_parsers(sub)
    p = sub.add_parser("studies", help="run the standard studies and write results/<study>/")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help="default: all (zionsim/studies/standard.py)"
    )
    p.add_argument("--workers", type=int, default=None, help="local processes (default: CPUs)")
    p.add_argument("--runs", default="results/runs/studies", help="point files (resumable)")
    p.add_argument("--results", default="results", help="where results/<study>/ goes")


def _study_parsers(sub) -> None:
    """``sweep``, ``compare`` and ``plot`` (what-if studies, ``docs/sweeps.md``)."""
    p = sub.add_parser("sweep", help="run a sweep file's grid of points in parallel")
    p.add_argument("file", help="sweep YAML (base: and grid:)")
    p.add_argument("--out", default=None, help="sweep folder (default results/runs/sweep_<name>)")
    p.add_argument("--workers", type=int, default=None, help="local processes (default: CPUs)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address, tls://HOST:PORT")
    _dask_options(p)
    memory_option(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    format_option(p)
    p = sub.add_parser("compare", help="A vs B: attribute the iteration-time difference")
    p.add_argument("run_a", help="run folder (or its summary.json)")
    p.add_argument("run_b", help="run folder (or its summary.json)")
    p.add_argument("--names", nargs=2, default=None, metavar=("A", "B"), help="labels")
    p.add_argument("--out", default=None, help="default results/runs/compare_<A>_vs_<B>_<hash>")
    force_option(p)
    p.add_argument("--no-plot", action="store_true", help="skip compare.png")
    format_option(p)
    p = sub.add_parser("plot", help="write the plots of a sweep or run folder into DIR/plots/")
    p.add_argument("dir", help="sweep folder (results.parquet) or run folder (summary.json)")
    p.add_argument(
        "--x",
        default=None,
        help="x axis of a sweep's scaling plot: a column such as topology.scale_out.nic_bw "
        "(default: gpus if it varies, else the first swept parameter that does)",
    )


def _dask_options(p) -> None:
    """TLS files and the opt-in to plain TCP for ``--scheduler`` (docs/sweeps.md, Dask)."""
    p.add_argument("--tls-ca-file", default=None, metavar="PEM", help="CA of the Dask cluster")
    p.add_argument("--tls-cert", default=None, metavar="PEM", help="this client's certificate")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="this client's private key")
    p.add_argument(
        "--allow-insecure",
        action="store_true",
        help="allow a plain tcp:// scheduler on another host (trusted network only)",
    )


def cmd_sweep(args) -> int:
    """Run a sweep; print one line per point; exit 1 when any point failed."""
    import os

    from zionsim.studies.sweep import brief_rows, load_sweep, run_sweep

    sweep = load_sweep(args.file)
    out = Path(args.out) if args.out else Path("results") / "runs" / f"sweep_{Path(args.file).stem}"
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    from zionsim.studies.pool import dask_security

    table = run_sweep(
        sweep,
        out,
        workers=workers,
        scheduler=args.scheduler,
        progress=not args.no_progress,
        max_memory=args.max_memory,
        security=dask_security(args.tls_ca_file, args.tls_cert, args.tls_key),
        allow_insecure=args.allow_insecure,
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
    if is_partial(p.resolve()):
        raise InputError("is an unfinished write of a killed run; delete it", file=str(path))
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
    from zionsim.studies.compare import attribute, headline, largest_change, stragglers

    a, b = _read_summary(args.run_a, "RUN_A"), _read_summary(args.run_b, "RUN_B")
    names = tuple(args.names or (Path(args.run_a).name, Path(args.run_b).name))
    if names[0] == names[1]:
        names = ("A", "B")
    table = attribute(a, b)
    report = {**headline(a, b, names), "largest_change": largest_change(table)}
    waits = stragglers(a, b)
    if waits is not None:
        report["stragglers"] = waits
    clean = table.astype(object).where(table.notna(), None)
    files: dict = {
        "compare.csv": table.to_csv(index=False),
        "compare.json": to_json({**report, "components": clean.to_dict("records")}),
    }
    if not args.no_plot:
        import pandas as pd

        from zionsim.io.plots import png_bytes
        from zionsim.io.plots_study import plot_compare
        from zionsim.sim.results import summary_row

        frames = [pd.DataFrame([summary_row(s)]) for s in (a, b)]
        files["compare.png"] = png_bytes(plot_compare(*frames, names=names))
    out, ident = default_out("compare", "compare_" + "_vs_".join(names), args)
    out = Path(args.out) if args.out else out
    write_result_dir(out, files, "compare", ident, args.force)
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
        if waits is not None:
            print(f"\nwaiting for the slowest rank (ms per iteration, mean rank): "
                  f"{names[0]} {waits['a_wait_s'] * 1e3:.3f}, {names[1]} "
                  f"{waits['b_wait_s'] * 1e3:.3f}")  # fmt: skip
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

    from zionsim.io.files import write_atomic
    from zionsim.io.plots import png_bytes
    from zionsim.io.plots_study import run_plots, sweep_plots

    d = Path(args.dir)
    if is_partial(d.resolve()):
        raise InputError("is an unfinished write of a killed run; delete it", file=str(d))
    if (d / "results.parquet").is_file():
        grid = None
        if (d / "sweep.json").is_file():
            record = json.loads((d / "sweep.json").read_text())
            grid = record.get("grid_keys") or list(record.get("grid") or {})
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


def cmd_studies(args) -> int:
    """Run the standard studies (sweeps resumable under ``--runs``) and write results/<study>/."""
    from zionsim.studies.standard import STUDIES, run_study, write_results

    bad = [n for n in args.names if n not in STUDIES]
    if bad:
        raise InputError(f"unknown study {bad[0]!r}", field="NAME", allowed=", ".join(STUDIES))
    for name in args.names or list(STUDIES):
        tables = run_study(name, args.runs, args.workers or os.cpu_count() or 1, progress=True)
        for path in write_results(name, tables, args.results):
            print(path)
    return 0


COMMANDS = {"sweep": cmd_sweep, "compare": cmd_compare, "plot": cmd_plot, "studies": cmd_studies}
