"""``zionsim plan`` beyond choosing a planner: simulator-judged refinement (``--refine``) and
TorchRec plan export (``--to-torchrec``).  TorchRec dumps are read wherever a plan file is
(``--plan dump.json``: recognised by its content, ``dlrm/plan_file.py``)."""

from __future__ import annotations

import sys

from zionsim.base.errors import InputError
from zionsim.io.files import format_mapping, format_rows

#: nominal seconds of refinement when --refine is given without --budget or --max-evals
DEFAULT_BUDGET_S = 60.0


def add_options(p) -> None:
    """The refinement and TorchRec options of ``zionsim plan``."""
    g = p.add_argument_group("refinement (docs/plans.md) and TorchRec export")
    g.add_argument(
        "--refine",
        action="store_true",
        help="improve the plan by local search judged by the simulator",
    )
    g.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"nominal seconds of search (default {DEFAULT_BUDGET_S:g}); turned into a number "
        "of simulations before starting, so the plan does not depend on machine load",
    )
    g.add_argument("--max-evals", type=int, default=None, help="at most this many simulations")
    g.add_argument("--seed", type=int, default=0, help="seed of the search (default 0)")
    g.add_argument(
        "--to-torchrec", metavar="FILE.json", default=None, help="also write a TorchRec plan dump"
    )


def refine_plan(args, cluster, w, plan, stack=None) -> tuple[object, dict]:
    """With ``--refine``: the refined plan and a report (simulations, times, changes), the
    search's progress on stderr.  Without it: ``plan`` unchanged and an empty report."""
    if not args.refine:
        for opt, value in (("--budget", args.budget), ("--max-evals", args.max_evals)):
            if value is not None:
                raise InputError("only applies with --refine", field=opt, allowed="--refine")
        return plan, {}
    from zionsim.studies.refine import refine

    if args.budget is not None and not 0 < args.budget < float("inf"):
        raise InputError(
            f"must be a finite number of seconds > 0, got {args.budget:g}",
            field="--budget",
            allowed="e.g. 60",
        )
    if args.max_evals is not None and args.max_evals < 1:
        raise InputError(f"must be >= 1, got {args.max_evals}", field="--max-evals")
    budget = args.budget if args.budget or args.max_evals else DEFAULT_BUDGET_S
    with _Progress(args.format == "table") as progress:
        result = refine(
            cluster, w, plan, seed=args.seed, max_evals=args.max_evals, budget_s=budget,
            stack=stack, on_eval=progress,
        )  # fmt: skip
    report = {
        "start_plan": result.start.name,
        "start_iteration_s": result.start_s,
        "refined_iteration_s": result.best_s,
        "gain": result.gain,
        "simulations": result.evaluations,
        "max_simulations": result.max_evals,
        "proposals": result.proposals,
        "rejected_memory": result.rejected_memory,
        "seed": args.seed,
        "judge": "2 iterations, 1 warm-up",
        "changes": result.changes(w),
    }
    return result.plan, {"refine": report}


def print_refinement(report: dict) -> None:
    """The refinement's figures and the tables whose placement changed (table format)."""
    r = report.get("refine")
    if not r:
        return
    head = {k: v for k, v in r.items() if k != "changes"}
    head["start_iteration_ms"] = round(head.pop("start_iteration_s") * 1e3, 3)
    head["refined_iteration_ms"] = round(head.pop("refined_iteration_s") * 1e3, 3)
    head["gain"] = f"{100 * head['gain']:.2f} % faster"
    print()
    print(format_mapping(head), end="")
    if r["changes"]:
        print()
        print(format_rows(r["changes"]), end="")


def torchrec_dump(args, cluster, w, plan) -> dict | None:
    """With ``--to-torchrec FILE``: ``plan`` as a TorchRec plan dump, checked before anything is
    printed or written (a plan TorchRec cannot train is an InputError naming the table)."""
    if not args.to_torchrec:
        return None
    from zionsim.dlrm.torchrec_plan import to_torchrec

    return to_torchrec(plan, w, len(cluster.gpus), cluster.spec.gpus_per_node)


def export_torchrec(args, data: dict | None) -> None:
    """Write the dump :func:`torchrec_dump` made (nothing without ``--to-torchrec``)."""
    if data is None:
        return
    from zionsim.io.files import write_torchrec_plan

    write_torchrec_plan(args.to_torchrec, data, force=args.force)
    print(f"wrote {args.to_torchrec}", file=sys.stderr)


class _Progress:
    """A tqdm bar over the search's simulations, on stderr (none when ``show`` is False)."""

    def __init__(self, show: bool):
        self.show, self.bar = show, None

    def __enter__(self):
        return self

    def __call__(self, done: int, total: int, best_s: float) -> None:
        if not self.show:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="refine", unit="sim", file=sys.stderr)
        self.bar.n = done
        self.bar.set_postfix_str(f"best {best_s * 1e3:.3f} ms", refresh=True)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
