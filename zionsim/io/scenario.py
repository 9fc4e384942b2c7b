"""Scenario files of ``zionsim jobs``: YAML → :class:`~zionsim.sim.jobs.Scenario`
(``docs/jobs.md``).

Every error is one :class:`~zionsim.base.errors.InputError` naming the file, the field
(``jobs[1].placement``) and what is allowed.  A training job's run options are the grammar of
``zionsim run`` (``sim/inputs.py``), checked by it: a job accepts exactly what a run accepts,
less what the cluster decides (``topology``, ``nodes``, ``gpus_per_node``).
"""

from __future__ import annotations

import re
from pathlib import Path

from zionsim.base.config import Fields, load_yaml
from zionsim.base.errors import InputError
from zionsim.sim.inputs import RUN_OPTIONS, split_override
from zionsim.sim.scenario import KINDS, PLACEMENTS, JobSpec, Scenario

CLUSTER_KEYS = ("topology", "nodes", "gpus_per_node", "set")
#: job fields that are not run options
JOB_KEYS = ("name", "kind", "nodes", "count", "placement", "seed", "start", "weight", "set")
TRAFFIC_KEYS = ("name", "kind", "src", "dst", "bytes", "period", "rate", "start", "weight",
                "duration")  # fmt: skip
#: run options the cluster decides, not a job
CLUSTER_OPTIONS = ("topology", "nodes", "gpus_per_node", "seed")
JOB_OPTIONS = tuple(o for o in RUN_OPTIONS if o not in CLUSTER_OPTIONS)
MAX_JOBS = 256
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def load_scenario(path: str | Path, overrides: dict | None = None) -> Scenario:
    """The scenario in YAML file ``path`` (or a built-in name: ``scenarios/``); ``overrides``
    (dotted field → value, e.g. ``jobs.placement``: every job, ``jobs[1].count``,
    ``cluster.nodes``) applied first (sweeps)."""
    from zionsim.base.config import builtin_dir, builtin_names

    path = str(path)
    if not Path(path).is_file():
        if not (builtin_dir("scenarios") / f"{path}.yaml").is_file():
            raise InputError(
                "no such scenario file or built-in scenario", file=path,
                allowed="a YAML file or " + ", ".join(builtin_names("scenarios")),
            )  # fmt: skip
    data, file = load_yaml(path, "scenarios")
    return scenario_from_dict(apply_scenario_overrides(data, overrides or {}, file), file)


def apply_scenario_overrides(data: dict, overrides: dict, file: str) -> dict:
    """``data`` with each ``overrides`` entry set: ``cluster.FIELD``, ``jobs.FIELD`` (every job
    of kind train; ``jobs.count`` too), ``jobs[i].FIELD``, or ``jobs.repeat`` (the first job
    repeated N times, named ``NAME1``..``NAMEN``: a job-count sweep)."""
    if not overrides:
        return data
    cluster, jobs = data.get("cluster") or {}, data.get("jobs") or []
    if not isinstance(cluster, dict) or not isinstance(jobs, list):
        raise InputError("expected cluster: (a mapping) and jobs: (a list)", file=file)
    out = {**data, "cluster": dict(cluster)}
    jobs = [dict(j) if isinstance(j, dict) else j for j in jobs]
    for key, value in overrides.items():
        m = re.fullmatch(r"jobs\[(\d+)\]\.(\w+)", key)
        if key.startswith("cluster.") and key.count(".") == 1:
            out["cluster"][key[8:]] = value
        elif key == "jobs.repeat":
            n = Fields({"jobs.repeat": value}, file).integer("jobs.repeat")
            if not jobs or not isinstance(jobs[0], dict) or n > MAX_JOBS:
                raise InputError("needs a first job to repeat", file=file, field=key,
                                 allowed=f"1..{MAX_JOBS} with a first job")  # fmt: skip
            first = jobs[0]
            jobs = [{**first, "name": f"{first.get('name', 'job')}{k + 1}"} for k in range(n)]
            jobs += [j for j in data["jobs"][1:] if _kind(j) != "train"]
        elif key.startswith("jobs.") and key.count(".") == 1:
            for j in jobs:
                if isinstance(j, dict) and _kind(j) == "train":
                    j[key[5:]] = value
                    if key[5:] == "count":
                        j.pop("nodes", None)
        elif m and int(m[1]) < len(jobs) and isinstance(jobs[int(m[1])], dict):
            jobs[int(m[1])][m[2]] = value
        else:
            raise InputError(
                "unknown scenario field", file=file, field=key,
                allowed="cluster.FIELD, jobs.FIELD, jobs[i].FIELD, jobs.repeat",
            )  # fmt: skip
    out["jobs"] = jobs
    return out


def _kind(job) -> str:
    return job.get("kind", "train") if isinstance(job, dict) else "train"


def scenario_from_dict(data: dict, file: str = "scenario") -> Scenario:
    """A :class:`Scenario` from its mapping (module docstring); InputError naming the field."""
    from zionsim.hardware.topology import load_topology

    top = Fields(data, file)
    top.check_keys(("cluster", "jobs", "description"))
    c = top.sub("cluster")
    c.check_keys(CLUSTER_KEYS)
    sets = _sets(c, "set")
    topo = {k[9:]: v for k, v in sets.items() if k.startswith("topology.")}
    common = {k: v for k, v in sets.items() if not k.startswith("topology.")}
    try:
        spec = load_topology(
            c.text("topology", "zionex"), nodes=c.integer("nodes", None),
            gpus_per_node=c.integer("gpus_per_node", None), overrides=topo,
        )  # fmt: skip
    except InputError as exc:
        raise _located(exc, file, "cluster") from None
    raw = top.raw("jobs")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_JOBS:
        raise top.error("jobs", "expected a list of 1 to 256 jobs", f"a list of 1..{MAX_JOBS}")
    base = {"topology": c.text("topology", "zionex")}
    base.update({f"topology.{k}": v for k, v in topo.items()})
    if c.integer("gpus_per_node", None) is not None:
        base["gpus_per_node"] = c.integer("gpus_per_node", None)
    jobs = tuple(
        _job(Fields(j, file, f"jobs[{i}]"), spec, {**base, **common}) for i, j in enumerate(raw)
    )
    names = [j.name for j in jobs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InputError(f"job name {dup!r} is used twice", file=file, field="jobs",
                         allowed="a unique name per job")  # fmt: skip
    trains = {j.name for j in jobs if j.kind == "train"}
    for i, j in enumerate(jobs):
        bad = next((x for x in (*j.src, *j.dst) if isinstance(x, str) and x not in trains), None)
        if bad is not None:
            raise InputError(f"no training job named {bad!r}", file=file, field=f"jobs[{i}]",
                             allowed=", ".join(sorted(trains)) or "node indices")  # fmt: skip
    if not trains and any(j.duration_s is None for j in jobs):
        raise InputError("traffic jobs without a training job need a duration", file=file,
                         field="jobs", allowed="duration: 1 s, or add a training job")  # fmt: skip
    return Scenario(spec, jobs, file)


def _sets(f: Fields, key: str) -> dict:
    """``--set``-style ``PATH=VALUE`` strings of list ``key`` as dotted run-option paths."""
    raw = f.raw(key, [])
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise f.error(key, f"expected a list of PATH=VALUE strings, got {raw!r}",
                      '["scale_out.switch_radix=16"]')  # fmt: skip
    try:
        return dict(split_override(x) for x in raw)
    except InputError as exc:
        raise _located(exc, f.file, f.path(key)) from None


def _job(f: Fields, spec, base: dict) -> JobSpec:
    """One job of the list (a training job's run options checked by ``resolve_inputs``)."""
    name = f.text("name")
    if not _NAME.match(name):
        raise f.error("name", f"bad job name {name!r}", "1-64 letters, digits, '_', '.', '-'")
    kind = f.choice("kind", KINDS, "train")
    common = {
        "name": name, "kind": kind, "weight": _weight(f),
        "start_s": f.quantity("start", "time", 0.0, strict=False, unit=False),
    }  # fmt: skip
    if kind == "traffic":
        return _traffic(f, spec, common)
    f.check_keys(set(JOB_KEYS) | set(JOB_OPTIONS) | {k for k in f.data if _dotted(k)})
    nodes, count = f.raw("nodes", None), f.raw("count", None)
    if (nodes is None) == (count is None):
        raise f.error("nodes", "give nodes (a list) or count, not both nor neither",
                      "nodes: [0, 2] or count: 2")  # fmt: skip
    if nodes is not None:
        nodes = _node_list(f, "nodes", spec.nodes)
    count = len(nodes) if nodes is not None else f.integer("count")
    if count > spec.nodes:
        raise f.error("count", f"{count} nodes but the cluster has {spec.nodes}",
                      f"1..{spec.nodes}")  # fmt: skip
    options = {k: v for k, v in f.data.items() if k in JOB_OPTIONS or _dotted(k)}
    job_sets = _sets(f, "set")
    bad = next((k for k in (*options, *job_sets) if str(k).startswith("topology.")), None)
    if bad is not None:
        raise f.error(bad, "the topology belongs to the cluster", "cluster.set")
    options = {**base, **options, **job_sets, "nodes": count}
    from zionsim.sim.inputs import resolve_inputs

    try:
        inputs = resolve_inputs(options, f.file)
    except InputError as exc:
        raise _located(exc, f.file, f.prefix) from None
    placement = f.choice("placement", PLACEMENTS, "packed")
    return JobSpec(inputs=inputs, nodes=None if nodes is None else tuple(nodes), count=count,
                   placement=placement, seed=f.integer("seed", 0, minimum=0), **common)  # fmt: skip


def _located(exc: InputError, file: str, prefix: str | None) -> InputError:
    """``exc`` located in ``file`` under ``prefix``, a command-line flag (``--workload``) named
    as the scenario's field (``workload``)."""
    field = exc.field
    if field and field.startswith("--"):
        field = None if field == "--set" else field[2:].replace("-", "_")
    exc = InputError(exc.problem, file=exc.file, field=field, allowed=exc.allowed)
    return exc.located(file, prefix)


def _dotted(key) -> bool:
    return isinstance(key, str) and key.startswith(("workload.", "stack.", "topology."))


def _weight(f: Fields) -> float:
    w = f.raw("weight", 1.0)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 1e-3 <= w <= 1e3:
        raise f.error("weight", f"expected a number in [0.001, 1000], got {w!r}", "e.g. 1, 2, 0.5")
    return float(w)


def _node_list(f: Fields, key: str, n_nodes: int, names: bool = False) -> list:
    """A list of node indices (and, for traffic, training job names) without repeats."""
    raw = f.raw(key)
    what = f"node indices 0..{n_nodes - 1}" + (" or training job names" if names else "")
    if not isinstance(raw, list) or not raw:
        raise f.error(key, f"expected a non-empty list, got {raw!r}", what)
    for x in raw:
        ok = names and isinstance(x, str) and bool(_NAME.match(x))
        ok = ok or (isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n_nodes)
        if not ok:
            raise f.error(key, f"bad entry {x!r}", what)
    if len(set(raw)) != len(raw):
        raise f.error(key, "a node is listed twice", what)
    return raw


def _traffic(f: Fields, spec, common: dict) -> JobSpec:
    """A traffic job: a byte stream between node sets (``sim/jobs.py`` assumption 4)."""
    f.check_keys(TRAFFIC_KEYS)
    src = _node_list(f, "src", spec.nodes, True)
    dst = _node_list(f, "dst", spec.nodes, True)
    nbytes = f.quantity("bytes", "bytes")
    period = f.quantity("period", "time", unit=False)
    rate = f.quantity("rate", "bandwidth", float("inf")) if "rate" in f.data else float("inf")
    duration = f.quantity("duration", "time", unit=False) if f.raw("duration", None) else None
    if {x for x in src if isinstance(x, int)} & {x for x in dst if isinstance(x, int)}:
        raise f.error("dst", "source and destination nodes overlap", "disjoint node sets")
    return JobSpec(src=tuple(src), dst=tuple(dst), bytes=nbytes, period_s=period, rate_Bps=rate,
                   duration_s=duration, **common)  # fmt: skip
