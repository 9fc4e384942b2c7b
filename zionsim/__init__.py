"""zionsim: a discrete-event performance simulator of ZionEX-style GPU clusters training DLRMs.

The public API (what the notebooks use)::

    >>> import zionsim as zs
    >>> r = zs.run_point({"topology": "zionex", "nodes": 1, "workload": "tiny"})
    >>> r.summary["gpus"]
    8

Load → plan → lower → simulate → tables are the pure steps (``Cluster.load``,
``load_workload``, ``PLANNERS``, ``simulate_run``); ``write_run`` and the plot functions are the
only ones that touch files or draw.
"""

from zionsim.cluster import Cluster
from zionsim.compare import attribute as compare_attribution
from zionsim.errors import InputError
from zionsim.io import read_plan, read_trace, write_plan, write_run, write_trace
from zionsim.planner import PLANNERS, plan_costs, round_robin
from zionsim.plots_study import (
    plot_bars,
    plot_breakdown,
    plot_compare,
    plot_link_utilisation,
    plot_scaling,
    plot_scaling_efficiency,
    plot_timeline,
    run_plots,
    scaling_efficiency,
    sweep_plots,
)
from zionsim.run import RunResult, run_point, simulate_run
from zionsim.simulate import simulate_collective
from zionsim.studies import STUDIES, run_study, study_sweeps, sync_table, whatif_speedups
from zionsim.sweep import (
    combine,
    load_sweep,
    points,
    run_sweep,
    summary_row,
    sweep_from_dict,
)
from zionsim.sync import MODES as SYNC_MODES
from zionsim.workload import load_workload, with_global_batch

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "InputError",
    "PLANNERS",
    "RunResult",
    "STUDIES",
    "SYNC_MODES",
    "combine",
    "compare_attribution",
    "load_sweep",
    "load_workload",
    "plan_costs",
    "plot_bars",
    "plot_breakdown",
    "plot_compare",
    "plot_link_utilisation",
    "plot_scaling",
    "plot_scaling_efficiency",
    "plot_timeline",
    "points",
    "read_plan",
    "read_trace",
    "round_robin",
    "run_plots",
    "run_point",
    "run_study",
    "run_sweep",
    "scaling_efficiency",
    "simulate_collective",
    "simulate_run",
    "study_sweeps",
    "summary_row",
    "sweep_plots",
    "sync_table",
    "sweep_from_dict",
    "with_global_batch",
    "write_plan",
    "write_run",
    "whatif_speedups",
    "write_trace",
]
