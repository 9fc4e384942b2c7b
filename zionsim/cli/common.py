"""Command-line pieces shared by the subcommands' modules (no other zionsim CLI imports)."""

from __future__ import annotations

import argparse

from zionsim.io.files import FORMATS

DEFAULT_TOPOLOGY = "zionex"
DEFAULT_WORKLOAD = "neo_model_a"


def common_options(p: argparse.ArgumentParser, nodes_default: int | None = None) -> None:
    """Options every cluster-building command takes: topology, nodes, GPUs per node, --set,
    --format."""
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
