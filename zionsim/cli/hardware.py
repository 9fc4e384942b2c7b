"""``zionsim topology`` and ``zionsim collective``: the commands that build a cluster without a
workload (its summary table and plot; one collective over a range of sizes, like nccl-tests)."""

from __future__ import annotations

import sys
from pathlib import Path

from zionsim.cli.common import (
    common_options,
    default_out,
    force_option,
    guard_cluster,
    memory_limit_of,
    topology_sets,
)
from zionsim.io.files import format_mapping, format_rows, to_json, write_result_dir


def add_parsers(sub) -> None:
    """The ``topology`` and ``collective`` subcommands."""
    _add_topology_parser(sub)
    _add_collective_parser(sub)


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


def _cluster(args):
    """The cluster of ``topology`` and ``collective``: ``--topology``, ``--nodes``,
    ``--gpus-per-node`` and ``--set`` topology paths, guarded before it is built."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.hardware.topology import load_topology

    name = getattr(args, "name", None) or args.topology
    spec = load_topology(
        name, nodes=args.nodes, gpus_per_node=args.gpus_per_node, overrides=topology_sets(args)
    )
    guard_cluster(spec, memory_limit_of(args), getattr(args, "op", None))
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
    from zionsim.io.files import check_result_target, prepare_parent
    from zionsim.network.simulate import simulate_collective

    sizes = parse_size_list(args.sizes)
    cluster = _cluster(args)
    name = f"collective_{cluster.spec.name}_{cluster.spec.nodes}n_{args.op}"
    out, ident = default_out("collective", name, args)
    out = Path(args.out) if args.out else out
    check_result_target(out, ident, args.force)  # before any simulation
    prepare_parent(out)
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


#: the commands defined here
COMMANDS = {"topology": cmd_topology, "collective": cmd_collective}
