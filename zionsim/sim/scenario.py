"""A scenario of ``zionsim jobs``: its jobs (:class:`JobSpec`) on a cluster, and where each
runs: the nodes of each training job (:func:`place`: explicit lists, then counts by policy) and
the endpoints of each traffic job (:func:`endpoint_nodes`).  ``io/scenario.py`` reads one from
YAML; ``sim/jobs.py`` runs it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.base.errors import InputError
from zionsim.hardware.graph import fabric_shape, nic_leaf

#: placement policies of a job given as a node count
PLACEMENTS = ("packed", "spread", "random")
#: kinds of job
KINDS = ("train", "traffic")


@dataclass(frozen=True)
class JobSpec:
    """One job of a scenario.  ``inputs``: its ``sim.inputs.RunInputs`` (training jobs);
    ``nodes`` (explicit, rank order) or ``count`` placed by ``placement`` (``seed`` for
    ``random``); ``start_s`` its start offset; ``weight`` its traffic class.  Traffic jobs:
    ``src``/``dst`` node lists or job names, ``bytes`` per burst every ``period_s`` at up to
    ``rate_Bps`` (inf: as fast as the fabric allows), for ``duration_s`` (None: until training
    ends)."""

    name: str
    kind: str = "train"
    inputs: object = None
    nodes: tuple[int, ...] | None = None
    count: int | None = None
    placement: str = "packed"
    seed: int = 0
    start_s: float = 0.0
    weight: float = 1.0
    src: tuple = ()
    dst: tuple = ()
    bytes: float = 0.0
    period_s: float = 0.0
    rate_Bps: float = float("inf")
    duration_s: float | None = None


@dataclass(frozen=True)
class Scenario:
    """A cluster spec and its jobs (``io.scenario.load_scenario`` reads one from YAML)."""

    cluster: object
    jobs: tuple[JobSpec, ...]
    file: str = "scenario"


def node_leaves(spec) -> list[tuple[int, ...]]:
    """Each node's leaf switches (the leaves its NICs attach to; one tuple per node)."""
    so = spec.scale_out
    if spec.nodes == 1 or so.tiers == 1:
        return [(0,)] * spec.nodes
    shape = fabric_shape(spec)
    return [
        tuple(sorted({nic_leaf(spec, k, j, shape) for j in range(so.nics_per_node)}))
        for k in range(spec.nodes)
    ]


def place(scenario: Scenario) -> dict[str, tuple[int, ...]]:
    """Each training job's nodes: explicit lists first, then counts in file order by their
    policy among the nodes left: ``packed`` on the fewest leaf groups (the smallest group that
    holds the job, else the fullest groups first), ``spread`` round-robin over leaf groups
    (those with the most free nodes first, so successive jobs spread over the whole fabric),
    ``random`` a seeded sample.  InputError when the nodes run out or two jobs share one."""
    spec, file = scenario.cluster, scenario.file
    owner: dict[int, str] = {}
    out: dict[str, tuple[int, ...]] = {}
    trains = [(i, j) for i, j in enumerate(scenario.jobs) if j.kind == "train"]
    for i, j in trains:
        if j.nodes is None:
            continue
        for k in j.nodes:
            if k in owner:
                raise InputError(
                    f"node {k} is already used by job {owner[k]!r}", file=file,
                    field=f"jobs[{i}].nodes", allowed="each node in at most one training job",
                )  # fmt: skip
            owner[k] = j.name
        out[j.name] = tuple(j.nodes)
    groups: dict[tuple, list[int]] = {}
    for k, leaves in enumerate(node_leaves(spec)):
        groups.setdefault(leaves, []).append(k)
    for i, j in trains:
        if j.nodes is not None:
            continue
        free = {g: [k for k in ks if k not in owner] for g, ks in groups.items()}
        left = sum(len(v) for v in free.values())
        if j.count > left:
            raise InputError(
                f"job {j.name!r} needs {j.count} nodes but {left} are free", file=file,
                field=f"jobs[{i}].count",
                allowed=f"1..{left}" if left else "fewer jobs, or more cluster nodes",
            )  # fmt: skip
        nodes = _pick(j, [v for v in free.values() if v])
        owner.update({k: j.name for k in nodes})
        out[j.name] = nodes
    return out


def _pick(job: JobSpec, free: list[list[int]]) -> tuple[int, ...]:
    """``job.count`` nodes from the free nodes of each leaf group (groups in leaf order)."""
    n = job.count
    if job.placement == "random":
        pool = np.array(sorted(k for g in free for k in g))
        picked = np.random.default_rng(job.seed).choice(pool, n, replace=False)
        return tuple(sorted(picked.tolist()))
    if job.placement == "spread":  # the leaves with the most free nodes first, in turn
        out, queues = [], [list(g) for g in sorted(free, key=len, reverse=True)]
        while len(out) < n:
            for q in queues:
                if q and len(out) < n:
                    out.append(q.pop(0))
        return tuple(sorted(out))
    fits = [g for g in free if len(g) >= n]
    if fits:  # best fit: the smallest group that holds the whole job
        return tuple(min(fits, key=len)[:n])
    out = []
    for g in sorted(free, key=len, reverse=True):  # stable: leaf order among equals
        out += g[: n - len(out)]
        if len(out) == n:
            break
    return tuple(sorted(out))


def endpoint_nodes(scenario: Scenario, i: int, side: str, nodes: dict) -> tuple[int, ...]:
    """The nodes of traffic job ``i``'s ``side`` (``src`` or ``dst``): node indices, and the
    nodes of the training jobs named there."""
    out: list[int] = []
    for x in getattr(scenario.jobs[i], side):
        if isinstance(x, str):
            if x not in nodes:
                raise InputError(
                    f"no training job named {x!r}", file=scenario.file,
                    field=f"jobs[{i}].{side}", allowed=", ".join(sorted(nodes)) or "node indices",
                )  # fmt: skip
            out += nodes[x]
        else:
            out.append(int(x))
    return tuple(dict.fromkeys(out))
