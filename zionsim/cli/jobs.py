"""``zionsim jobs SCENARIO.yaml``: several jobs on one fabric (``docs/jobs.md``).  Parses,
calls ``sim.jobs``, prints and writes."""

from __future__ import annotations

import sys
from pathlib import Path

from zionsim.cli.common import force_option, format_option, memory_limit_of, memory_option
from zionsim.io.files import format_rows, inputs_id, safe_name, to_json, write_result_dir


def add_parser(sub) -> None:
    """Register ``jobs``."""
    p = sub.add_parser(
        "jobs",
        help="several jobs (and background traffic) sharing one fabric",
        description="Run the jobs of a scenario file together on one cluster, then each alone "
        "on the same nodes; print each job's slowdown and the links they share (docs/jobs.md).",
    )
    p.add_argument("scenario", help="scenario YAML (cluster: and jobs:)")
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE",
        help="override a scenario field (repeatable): cluster.nodes=8, jobs.placement=spread "
        "(every training job), jobs[1].weight=2, jobs.repeat=4 (the first job 4 times)",
    )  # fmt: skip
    p.add_argument("--out", default=None, help="also write the result folder DIR")
    force_option(p)
    p.add_argument("--no-plot", action="store_true", help="skip jobs.png in --out")
    format_option(p)
    memory_option(p)


def cmd_jobs(args) -> int:
    """``zionsim jobs``: load, guard, simulate, print (and with ``--out`` write)."""
    from zionsim.base.config import parse_override
    from zionsim.io.files import check_result_target, prepare_parent
    from zionsim.io.scenario import load_scenario
    from zionsim.sim.jobs import simulate_jobs
    from zionsim.sim.run import guard_inputs

    sets = dict(parse_override(t) for t in args.set)
    scenario = load_scenario(args.scenario, sets)
    text = Path(scenario.file).read_text()  # the file load_scenario read (or a built-in's)
    ident = inputs_id({"kind": "jobs", "scenario": text, "set": args.set})
    if args.out:
        check_result_target(Path(args.out), ident, args.force)  # before any simulation
        prepare_parent(args.out)
    for job in scenario.jobs:
        if job.inputs is not None:
            guard_inputs(job.inputs, memory_limit_of(args))
    result = simulate_jobs(scenario)
    data = result.to_dict()
    if args.out:
        write_result_dir(args.out, _files(scenario, result, data, args), "jobs", ident, args.force)
    if args.format == "json":
        print(to_json(data), end="")
    else:
        print(format_rows([job_row(j) for j in data["jobs"]], args.format), end="")
        if args.format == "table":
            _print_links(data)
    if args.out:
        print(f"wrote {args.out}/", file=sys.stderr)
    return 0


def job_row(j: dict) -> dict:
    """One job as a flat row (the table and ``jobs.csv``)."""
    ms = lambda v: None if v is None else round(v * 1e3, 4)  # noqa: E731
    return {
        "name": j["name"], "kind": j["kind"], "nodes": " ".join(str(k) for k in j["nodes"]),
        "weight": j["weight"], "iteration_ms": ms(j.get("iteration_time_s")),
        "alone_ms": ms(j.get("alone_iteration_time_s")),
        "slowdown_pct": round(100.0 * j["slowdown"], 2) + 0.0,  # no "-0"
        "samples_per_s": None if j.get("samples_per_s") is None else round(j["samples_per_s"]),
        "exposed_comm_ms": ms(j.get("exposed_comm_s")),
        "burst_ms": ms(j.get("burst_time_s")),
        "busiest_shared_link": j["waits_on"][0]["link"] if j["waits_on"] else "",
    }  # fmt: skip


def _print_links(data: dict, top: int = 5) -> None:
    links = data["links"][:top]
    if not links:
        print("no link carries traffic of two jobs")
        return
    print(f"\nmost used of {data['shared_links']} shared links:")
    rows = [
        {"link": f"{x['src']}->{x['dst']}", "utilisation_pct": round(100 * x["utilisation"], 2),
         **{f"{n}_pct": round(100 * u, 2) for n, u in x["by_job"].items()}}
        for x in links
    ]  # fmt: skip
    print(format_rows(rows, "table"), end="")


def _files(scenario, result, data: dict, args) -> dict:
    """The result folder: ``jobs.json`` (what ``--format json`` prints, plus timing),
    ``jobs.csv``, ``links.csv`` (every link, bytes and utilisation per job), each training
    job's ``summary.json`` together and alone (``NAME.summary.json``,
    ``NAME.alone.summary.json``, with ``zionsim run``'s ``inputs`` block: the job's run options
    on a cluster of its node count), and ``jobs.png``."""
    files = {
        "jobs.json": to_json({**data, "timing": result.timing}),
        "jobs.csv": format_rows([job_row(j) for j in data["jobs"]], "csv"),
        "links.csv": result.links.to_csv(index=False),
    }
    from zionsim.cli.common import package_version

    inputs = {j.name: j.inputs for j in scenario.jobs if j.inputs is not None}
    for name, r in result.shared.items():  # with the inputs block of zionsim run's summary
        block = {"inputs": inputs[name].provenance(package_version())}
        files[f"{safe_name(name)}.summary.json"] = to_json({**r.summary, **block})
        alone = result.alone[name].summary
        files[f"{safe_name(name)}.alone.summary.json"] = to_json({**alone, **block})
    if not args.no_plot:
        from zionsim.io.plots import png_bytes
        from zionsim.io.plots_jobs import plot_jobs

        files["jobs.png"] = png_bytes(plot_jobs(data, result.links))
    return files


COMMANDS = {"jobs": cmd_jobs}
