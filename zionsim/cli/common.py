"""Command-line pieces shared by the subcommands' modules (no other zionsim CLI imports)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zionsim.base.errors import InputError
from zionsim.io.files import FORMATS

DEFAULT_TOPOLOGY = "zionex"
DEFAULT_WORKLOAD = "neo_model_a"


def package_version() -> str:
    """The installed package's version (pyproject.toml), or ``unknown`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zionsim")
    except PackageNotFoundError:
        return "unknown"


def common_options(
    p: argparse.ArgumentParser, nodes_default: int | None = None, overrides: bool = False
) -> None:
    """Options every cluster-building command takes: topology, nodes, GPUs per node, --set,
    --format (``overrides``: ``--set`` also takes workload and stack paths)."""
    p.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="built-in name or YAML path")
    p.add_argument(
        "--nodes", type=int, default=nodes_default, help="number of nodes (default: the topology's)"
    )
    p.add_argument(
        "--gpus-per-node", type=int, default=None, help="GPUs per node (default: the topology's)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field (repeatable): a topology path such as scale_out.nic_bw=400Gbps "
        "or gpu=h100"
        + (
            ", a workload path (workload.batch_per_gpu=512, or a bare workload field), or a "
            "stack path (stack.host.per_step=0us); docs/architecture.md 'Run options'"
            if overrides
            else ""
        ),
    )
    format_option(p)
    memory_option(p)


def format_option(p: argparse.ArgumentParser) -> None:
    """``--format table|csv|json``: what goes to stdout."""
    p.add_argument(
        "--format", choices=FORMATS, default="table", help="stdout: table (default), CSV or JSON"
    )


def memory_option(p: argparse.ArgumentParser) -> None:
    """``--max-memory``: the resource guard's limit (``docs/reliability.md``)."""
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="refuse runs estimated to need more memory, e.g. 16GiB, or none "
        "(default $ZIONSIM_MAX_MEMORY, else the available RAM)",
    )


def memory_limit_of(args) -> float | None:
    """The memory limit (bytes, None: none) of a command's ``--max-memory``, computed once."""
    if not hasattr(args, "_memory_limit"):
        from zionsim.io.limits import memory_limit

        args._memory_limit = memory_limit(getattr(args, "max_memory", None))
    return args._memory_limit


def guard_cluster(spec, limit_bytes: float | None, op: str | None = None) -> None:
    """Refuse (``ResourceError``) a cluster whose graph (and, for an ``all_to_all`` collective
    ``op``, its flows) would not fit in ``limit_bytes``, before building it."""
    from zionsim.sim.resources import Sizes, all_to_all_flows, check_memory, estimate

    n = spec.gpus
    pairs = all_to_all_flows(spec, n) if op == "all_to_all" else 0
    check_memory(estimate(Sizes(gpus=n, pair_flows=pairs)), limit_bytes, "command")


def force_option(p: argparse.ArgumentParser) -> None:
    """``--force``: allow ``--out`` to replace what zionsim would otherwise refuse to."""
    p.add_argument(
        "--force",
        action="store_true",
        help="let --out replace a zionsim result of other inputs (or, for a file output, a "
        "file zionsim did not write); never a foreign folder",
    )


def default_out(kind: str, name: str, args) -> tuple[Path, str]:
    """The default result folder ``results/runs/<name>_<hash>`` of a command and the hash of
    its inputs: every parsed option except where and how output goes, so two runs that differ
    in any input (``--plan``, ``--set``, ``--sync`` …) never share a folder."""
    from zionsim.io.files import inputs_id, safe_name

    skip = {"out", "format", "force", "no_plot", "plots", "func", "max_memory", "_memory_limit"}
    options = {k: v for k, v in sorted(vars(args).items()) if k not in skip}
    ident = inputs_id({"kind": kind, **options})
    return Path("results") / "runs" / f"{safe_name(name)}_{ident}", ident


class Phases:
    """A tqdm bar over the phases of a long command (``load``, ``simulate``, ``write`` …), with
    the phase under way as its text; shown only on a terminal, gone when the command ends."""

    def __init__(self, label: str, names: list[str]):
        self.names = names
        self.bar = None
        err = sys.stderr
        if hasattr(err, "isatty") and not err.isatty():
            return  # what tqdm's disable=None decides, without importing tqdm (~20 ms)
        from tqdm import tqdm

        self.bar = tqdm(total=len(names), desc=label, leave=False, disable=None, unit="step")

    def start(self, name: str) -> None:
        """Mark the phases before ``name`` done and show ``name`` as under way."""
        if self.bar is not None:
            self.bar.update(self.names.index(name) - self.bar.n)
            self.bar.set_postfix_str(name)

    def close(self) -> None:
        """Finish and remove the bar."""
        if self.bar is not None:
            self.bar.update(len(self.names) - self.bar.n)
            self.bar.close()


def topology_sets(args) -> dict:
    """``--set`` of a command that builds only a cluster: topology paths (``topology.`` prefix
    optional); a workload or stack path is refused."""
    from zionsim.sim.inputs import split_override

    out = {}
    for text in args.set:
        path, value = split_override(text)
        if not path.startswith("topology."):
            raise InputError(
                f"{path.split('.')[0]} fields do not apply to zionsim {args.command}",
                field=f"--set {text.split('=')[0]}",
                allowed="topology paths",
            )
        out[path[len("topology.") :]] = value
    return out
