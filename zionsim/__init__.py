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
from zionsim.errors import InputError
from zionsim.io import read_plan, read_trace, write_plan, write_run, write_trace
from zionsim.planner import PLANNERS, plan_costs, round_robin
from zionsim.plots_study import (
    plot_breakdown,
    plot_compare,
    plot_link_utilisation,
    plot_scaling,
    plot_scaling_efficiency,
    plot_timeline,
    scaling_efficiency,
)
from zionsim.run import RunResult, run_point, simulate_run
from zionsim.simulate import simulate_collective
from zionsim.sweep import combine, load_sweep, points, run_sweep, sweep_from_dict
from zionsim.sync import MODES as SYNC_MODES
from zionsim.workload import load_workload, with_global_batch

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "InputError",
    "PLANNERS",
    "RunResult",
    "SYNC_MODES",
    "combine",
    "load_sweep",
    "load_workload",
    "plan_costs",
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
    "run_point",
    "run_sweep",
    "scaling_efficiency",
    "simulate_collective",
    "simulate_run",
    "sweep_from_dict",
    "with_global_batch",
    "write_plan",
    "write_run",
    "write_trace",
]
