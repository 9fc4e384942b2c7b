"""A collective as it runs: :class:`Schedule` of :class:`Phase` s of point-to-point flows.

Algorithms (``collectives.py``, ``point_to_point.py``) build schedules; the network model
(``flows.py``) moves their flows.  Phases run one after another, the flows inside a phase run
together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Phase:
    """Flows that run together: device ids, payload bytes, merge weights and ring steps."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    steps: int
    weight: np.ndarray | None = None
    #: each flow's edge ids (padded with -1) where the algorithm routes it itself (legs that
    #: end in a fabric switch, as in-network reduction); None: the router's path src → dst
    routes: np.ndarray | None = None


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
