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

# name -> (module, attribute): imported on first use, so ``import zionsim`` (and the CLI,
# which imports this package first) does not pay for pandas, matplotlib and networkx up front
_LAZY = {
    "Cluster": ("zionsim.hardware.cluster", "Cluster"),
    "InputError": ("zionsim.base.errors", "InputError"),
    "PLANNERS": ("zionsim.dlrm.planner", "PLANNERS"),
    "RunResult": ("zionsim.sim.run", "RunResult"),
    "STUDIES": ("zionsim.studies.standard", "STUDIES"),
    "SYNC_MODES": ("zionsim.dlrm.sync", "MODES"),
    "combine": ("zionsim.studies.sweep", "combine"),
    "compare_attribution": ("zionsim.studies.compare", "attribute"),
    "load_scenario": ("zionsim.io.scenario", "load_scenario"),
    "load_sweep": ("zionsim.studies.sweep", "load_sweep"),
    "load_workload": ("zionsim.dlrm.workload", "load_workload"),
    "plan_costs": ("zionsim.dlrm.planner", "plan_costs"),
    "plot_bars": ("zionsim.io.plots_study", "plot_bars"),
    "plot_breakdown": ("zionsim.io.plots_study", "plot_breakdown"),
    "placement_table": ("zionsim.studies.jobs", "placement_table"),
    "plot_compare": ("zionsim.io.plots_study", "plot_compare"),
    "plot_jobs": ("zionsim.io.plots_jobs", "plot_jobs"),
    "plot_link_utilisation": ("zionsim.io.plots_study", "plot_link_utilisation"),
    "plot_scaling": ("zionsim.io.plots_study", "plot_scaling"),
    "plot_scaling_efficiency": ("zionsim.io.plots_study", "plot_scaling_efficiency"),
    "plot_timeline": ("zionsim.io.plots_study", "plot_timeline"),
    "points": ("zionsim.studies.sweep", "points"),
    "read_plan": ("zionsim.io.files", "read_plan"),
    "read_trace": ("zionsim.io.files", "read_trace"),
    "round_robin": ("zionsim.dlrm.planner", "round_robin"),
    "run_plots": ("zionsim.io.plots_study", "run_plots"),
    "run_point": ("zionsim.sim.run", "run_point"),
    "run_study": ("zionsim.studies.standard", "run_study"),
    "run_sweep": ("zionsim.studies.sweep", "run_sweep"),
    "scaling_efficiency": ("zionsim.io.plots_study", "scaling_efficiency"),
    "simulate_collective": ("zionsim.network.simulate", "simulate_collective"),
    "simulate_jobs": ("zionsim.sim.jobs", "simulate_jobs"),
    "simulate_run": ("zionsim.sim.run", "simulate_run"),
    "study_sweeps": ("zionsim.studies.standard", "study_sweeps"),
    "summary_row": ("zionsim.sim.results", "summary_row"),
    "sweep_from_dict": ("zionsim.studies.sweep", "sweep_from_dict"),
    "sweep_plots": ("zionsim.io.plots_study", "sweep_plots"),
    "sync_table": ("zionsim.studies.standard", "sync_table"),
    "seeds_table": ("zionsim.studies.standard", "seeds_table"),
    "whatif_speedups": ("zionsim.studies.standard", "whatif_speedups"),
    "with_global_batch": ("zionsim.dlrm.workload", "with_global_batch"),
    "write_plan": ("zionsim.io.files", "write_plan"),
    "write_run": ("zionsim.io.files", "write_run"),
    "write_trace": ("zionsim.io.files", "write_trace"),
}


def __getattr__(name: str):
    """Import a public name on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'zionsim' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, imported or not."""
    return sorted(set(globals()) | set(_LAZY))


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
    "load_scenario",
    "load_sweep",
    "load_workload",
    "plan_costs",
    "plot_bars",
    "plot_breakdown",
    "placement_table",
    "plot_compare",
    "plot_jobs",
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
    "simulate_jobs",
    "simulate_run",
    "study_sweeps",
    "summary_row",
    "sweep_plots",
    "sync_table",
    "seeds_table",
    "sweep_from_dict",
    "with_global_batch",
    "write_plan",
    "write_run",
    "whatif_speedups",
    "write_trace",
]
