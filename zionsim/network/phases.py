"""A collective as it runs: :class:`Schedule` of :class:`Phase` s of point-to-point flows.

Algorithms (``collectives.py``, ``point_to_point.py``) build schedules; the network model
(``flows.py``) moves their flows.  Phases run one after another, the flows inside a phase run
together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FlowClass:
    """Flows that travel as one row (network.flows, assumption 6): every pair ``(s, d)`` of
    ``src`` × ``dst`` on different nodes at fabric relation ``rel`` (``Router.relation``: 0
    under one leaf switch, 1 under one tier-2 group, 2 through the core), ``members`` of them,
    alike in bytes, weight and rate cap and alike by symmetry of the fabric."""

    src: np.ndarray
    dst: np.ndarray
    rel: int
    members: int


@dataclass(frozen=True)
class ClassRoutes:
    """Routes of a phase whose last ``len(classes)`` rows are :class:`FlowClass` es.

    ``plain``: the other rows' edge ids (padded with -1).  Per class row: ``routes``, every
    link its members cross (padded with -1); ``frac``, the fraction of its members crossing
    each; ``group``, the position of that link in a member's own path: each member crosses
    exactly one link of each group, so ``frac`` sums to 1 over a group."""

    plain: np.ndarray
    routes: np.ndarray
    frac: np.ndarray
    group: np.ndarray
    classes: tuple

    def members(self) -> np.ndarray:
        """Flows each class row stands for."""
        return np.array([c.members for c in self.classes], dtype=float)


@dataclass(frozen=True)
class Phase:
    """Flows that run together: device ids, payload bytes, merge weights and ring steps.

    With ``classes``, the last ``len(classes.classes)`` rows are flow classes: their
    ``nbytes`` and ``weight`` are the sums over their members, ``src``/``dst`` one member's."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    steps: int
    weight: np.ndarray | None = None
    #: each flow's edge ids (padded with -1) where the algorithm routes it itself (legs that
    #: end in a fabric switch, as in-network reduction); None: the router's path src → dst
    routes: np.ndarray | None = None
    #: class rows and every row's routes (None: each row is one flow)
    classes: ClassRoutes | None = None

    def members(self) -> np.ndarray:
        """Flows each row stands for."""
        out = np.ones(len(self.nbytes))
        if self.classes is not None and len(self.classes.classes):
            out[len(out) - len(self.classes.classes) :] = self.classes.members()
        return out


@dataclass(frozen=True)
class Schedule:
    """A collective as it runs: ``op`` with ``algorithm`` on ``ranks`` (GPU device ids),
    ``size_bytes`` as nccl-tests counts it, and its phases in order."""

    op: str
    algorithm: str
    ranks: np.ndarray
    size_bytes: float
    phases: tuple[Phase, ...]


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw × factor."""
    if n <= 1:
        return 0.0 if op != "send_recv" else 1.0
    return {"all_reduce": 2 * (n - 1) / n, "send_recv": 1.0}.get(op, (n - 1) / n)


def merge(phases: list[Phase]) -> Phase:
    """Phases that run together as one (their flows share the network); explicit routes are
    kept if every phase has them (see ``collectives._routed``)."""
    weights = [p.weight if p.weight is not None else np.ones(len(p.src)) for p in phases]
    routes = None
    if all(p.routes is not None for p in phases):
        width = max(p.routes.shape[1] for p in phases)
        routes = np.concatenate(
            [np.pad(p.routes, ((0, 0), (0, width - p.routes.shape[1])), constant_values=-1)
             for p in phases]
        )  # fmt: skip
    return Phase(
        np.concatenate([p.src for p in phases]),
        np.concatenate([p.dst for p in phases]),
        np.concatenate([p.nbytes for p in phases]),
        max(p.steps for p in phases),
        np.concatenate(weights),
        routes,
    )
