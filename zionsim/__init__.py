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

from zionsim.base.errors import InputError
from zionsim.dlrm.planner import PLANNERS, plan_costs, round_robin
from zionsim.dlrm.sync import MODES as SYNC_MODES
from zionsim.dlrm.workload import load_workload, with_global_batch
from zionsim.hardware.cluster import Cluster
from zionsim.io.files import read_plan, read_trace, write_plan, write_run, write_trace
from zionsim.io.plots_study import (
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
from zionsim.network.simulate import simulate_collective
from zionsim.sim.results import summary_row
from zionsim.sim.run import RunResult, run_point, simulate_run
from zionsim.studies.compare import attribute as compare_attribution
from zionsim.studies.standard import STUDIES, run_study, study_sweeps, sync_table, whatif_speedups
from zionsim.studies.sweep import (
    combine,
    load_sweep,
    points,
    run_sweep,
    sweep_from_dict,
)

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
