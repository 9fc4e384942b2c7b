"""Command line: ``zionsim topology|collective ...``.

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
    return parser


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


COMMANDS = {"topology": cmd_topology, "collective": cmd_collective}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"zionsim: error: {exc.one_line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
