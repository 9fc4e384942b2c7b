"""Scenarios of several jobs in sweeps and studies (``docs/jobs.md``, ``docs/sweeps.md``).

A sweep point whose parameters hold ``scenario`` (a scenario file or a built-in scenario name)
runs ``zionsim jobs`` on it instead of one run; its other keys are ``scenario.FIELD`` overrides
(``scenario.jobs.placement``, ``scenario.jobs.repeat``, ``scenario.cluster.nodes``,
``scenario.jobs[1].rate`` …: ``io.scenario.apply_scenario_overrides``).  Its figures are the
scenario's headline numbers over its training jobs (:func:`scenario_figures`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zionsim.base.errors import InputError

if TYPE_CHECKING:  # pandas is imported where a table is built (a sweep's worker needs none)
    import pandas as pd

#: the key of a sweep point that names a scenario, and the prefix of its field overrides
KEY, PREFIX = "scenario", "scenario."


def is_scenario_point(params: dict) -> bool:
    """Whether a sweep point runs a scenario (its parameters hold ``scenario``)."""
    return KEY in params


def scenario_of(params: dict, file: str = "sweep"):
    """The :class:`~zionsim.sim.jobs.Scenario` of a scenario point (InputError for a key that is
    neither ``scenario`` nor ``scenario.FIELD``)."""
    from zionsim.io.scenario import load_scenario

    bad = next((k for k in params if k != KEY and not str(k).startswith(PREFIX)), None)
    if bad is not None:
        raise InputError(
            "a scenario point takes scenario.FIELD overrides only (run options belong to the "
            "scenario's jobs)", file=file, field=bad, allowed="scenario, scenario.FIELD",
        )  # fmt: skip
    name = params[KEY]
    if not isinstance(name, str):
        raise InputError(f"expected a scenario file or name, got {name!r}", file=file, field=KEY)
    sets = {k[len(PREFIX) :]: v for k, v in params.items() if k != KEY}
    return load_scenario(name, sets)


def scenario_point(params: dict) -> tuple[dict, float]:
    """Run a scenario point: its figures (:func:`scenario_figures`) and the wall seconds."""
    from zionsim.sim.jobs import simulate_jobs

    result = simulate_jobs(scenario_of(params))
    return scenario_figures(result.to_dict()), float(result.timing["sim_wall_s"])


def scenario_figures(data: dict) -> dict:
    """Headline numbers of a scenario (``JobsResult.to_dict()``): training jobs and GPUs, mean
    iteration time, total samples/s, mean and worst slowdown (iteration time and makespan),
    mean exposed communication, shared links, and each job's slowdown (``slowdown.NAME``)."""
    train = [j for j in data["jobs"] if j["kind"] == "train"]
    mean = lambda k: float(np.mean([j[k] for j in train])) if train else 0.0  # noqa: E731
    worst = lambda k: float(max(j[k] for j in train)) if train else 0.0  # noqa: E731
    return {
        "jobs": len(train),
        "gpus": int(sum(j["gpus"] for j in train)),
        "iteration_time_s": mean("iteration_time_s"),
        "alone_iteration_time_s": mean("alone_iteration_time_s"),
        "samples_per_s": float(sum(j["samples_per_s"] for j in train)),
        "slowdown_mean": mean("slowdown"),
        "slowdown_max": worst("slowdown"),
        "makespan_slowdown_mean": mean("makespan_slowdown"),
        "makespan_slowdown_max": worst("makespan_slowdown"),
        "exposed_comm_s": mean("exposed_comm_s"),
        "shared_links": data["shared_links"],
        **{f"slowdown.{j['name']}": j["slowdown"] for j in data["jobs"]},
    }


def placement(fast: bool) -> dict:
    """The placement study's sweep: packed vs spread for 2, 4, 6 and 8 jobs of Neo model A on
    8 nodes each, on a 64-node ZionEX fabric oversubscribed 2:1 (``scenarios/placement.yaml``);
    fast: 2 and 4 tiny jobs of 2 nodes on 8 nodes."""
    if fast:
        base = {
            KEY: "placement", "scenario.cluster.nodes": 8, "scenario.jobs.workload": "tiny",
            "scenario.jobs.count": 2, "scenario.jobs.iterations": 3, "scenario.jobs.warmup": 1,
        }  # fmt: skip
        grid = {"scenario.jobs.repeat": [2, 4], "scenario.jobs.placement": ["packed", "spread"]}
        return {"placement": {"base": base, "grid": grid}}
    grid = {"scenario.jobs.repeat": [2, 4, 6, 8], "scenario.jobs.placement": ["packed", "spread"]}
    return {"placement": {"base": {KEY: "placement"}, "grid": grid}}


def placement_table(table: pd.DataFrame) -> pd.DataFrame:
    """Tidy placement table: per job count and policy, mean and worst slowdown, mean
    iteration time, total samples/s and the links the jobs share."""
    import pandas as pd

    ok = table[table["status"] == "ok"]
    out = pd.DataFrame(
        {
            "jobs": ok["scenario.jobs.repeat"].astype(int),
            "placement": ok["scenario.jobs.placement"],
            "gpus": ok["gpus"],
            "iteration_time_s": ok["iteration_time_s"],
            "alone_iteration_time_s": ok["alone_iteration_time_s"],
            "slowdown_mean": ok["slowdown_mean"],
            "slowdown_max": ok["slowdown_max"],
            "makespan_slowdown_mean": ok["makespan_slowdown_mean"],
            "samples_per_s": ok["samples_per_s"],
            "shared_links": ok["shared_links"],
        }
    )
    return out.sort_values(["jobs", "placement"], ignore_index=True)
