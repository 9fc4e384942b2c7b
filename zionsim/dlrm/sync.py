"""Synchronisation of dense parameters: synchronous all-reduce, foreground rounds, ShadowSync.

Modes (DESIGN §6):

* ``allreduce`` — dense gradients all-reduced every iteration in buckets that overlap backward;
  the optimizer waits for them (Neo's default).
* ``foreground-ma|bmuf|easgd`` with ``every: K`` — trainers train on their own replica of the
  dense parameters and stop every K iterations for one sync round.
* ``shadow-ma|bmuf|easgd`` (ShadowSync) — a background sync thread per trainer runs rounds
  without blocking training, paced by its own period: a round starts once the trainer has run
  ``every`` iterations since the last one began (default 1: back to back) and no sooner than
  ``period`` after it; its traffic shares the links with the foreground.

Rounds: model averaging (MA) and BMUF all-reduce the parameters among trainers (BMUF adds block
momentum: same traffic, different update); EASGD exchanges them point-to-point with ``servers``
central sync parameter servers, each holding a shard: every trainer pushes its parameters and
pulls the centre's, ``P / servers`` bytes to and from each server.  The sync servers are CPU
service hosts of their own on the front-end network (``placement: service``, the default, as
ShadowSync ran them: arXiv:2003.03477 trains with separate trainer, sparse-PS and sync-PS
hosts); ``placement: trainers`` puts them in the host DRAM of the training nodes instead.
A trainer is one GPU rank, or one node (``trainer: node``: its GPUs all-reduce every iteration
inside the node, and each GPU syncs its 1/g shard with the same-index GPUs of the other nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.base import bounds
from zionsim.base.errors import InputError

MODES = (
    "allreduce",
    "foreground-ma",
    "foreground-bmuf",
    "foreground-easgd",
    "shadow-ma",
    "shadow-bmuf",
    "shadow-easgd",
)
TRAINERS = ("rank", "node")
#: where EASGD's sync servers live: dedicated CPU service hosts, or the training hosts' DRAM
PLACEMENTS = ("service", "trainers")


@dataclass(frozen=True)
class SyncSpec:
    """How dense parameters are kept in step."""

    mode: str = "allreduce"
    every: int = 1
    servers: int = 1
    period_s: float = 0.0
    trainer: str = "rank"
    placement: str = "service"

    @property
    def kind(self) -> str:
        """``allreduce``, ``foreground`` or ``shadow``."""
        return self.mode.split("-")[0]

    @property
    def method(self) -> str:
        """``ma``, ``bmuf``, ``easgd`` (or ``allreduce``)."""
        return self.mode.split("-")[-1]

    @property
    def is_allreduce(self) -> bool:
        """Synchronous all-reduce every iteration (no sync rounds)."""
        return self.kind == "allreduce"

    @property
    def is_shadow(self) -> bool:
        """ShadowSync: rounds run in the background, beside training."""
        return self.kind == "shadow"

    @property
    def is_foreground(self) -> bool:
        """Trainers stop every ``every`` iterations for a round."""
        return self.kind == "foreground"

    @property
    def uses_servers(self) -> bool:
        """EASGD: rounds exchange parameters with central sync servers (not an all-reduce)."""
        return self.method == "easgd"

    def to_dict(self) -> dict:
        """The spec as a plain mapping (a trace's ``meta["sync"]``, ``summary.json``'s ``sync``)."""
        return {
            "mode": self.mode,
            "every": self.every,
            "servers": self.servers,
            "period_s": self.period_s,
            "trainer": self.trainer,
            "placement": self.placement,
        }


@dataclass(frozen=True)
class TraceSync:
    """The sync of a lowered trace: its :class:`SyncSpec`, the collective each rank's background
    round runs (ShadowSync MA/BMUF; empty otherwise) and the parameter bytes a round moves."""

    spec: SyncSpec
    background: dict[int, int]
    bytes: float = 0.0


def sync_spec(
    mode: str | None = None,
    every: int | None = None,
    servers: int | None = None,
    period_s: float | None = None,
    trainer: str | None = None,
    base: dict | None = None,
    file: str = "--sync",
) -> SyncSpec:
    """A validated :class:`SyncSpec` from run options over an optional workload ``sync:`` map."""
    base = dict(base or {})
    values = {
        "mode": mode or base.get("mode", "allreduce"),
        "every": every if every is not None else base.get("every", 1),
        "servers": servers if servers is not None else base.get("servers", 1),
        "period_s": period_s if period_s is not None else base.get("period_s", 0.0),
        "trainer": trainer or base.get("trainer", "rank"),
        "placement": base.get("placement", "service"),
    }
    unknown = sorted(set(base) - set(values))
    if unknown:
        raise InputError(
            "unknown field", file=file, field=f"sync.{unknown[0]}", allowed=", ".join(values)
        )
    for key, options, noun in (
        ("mode", MODES, "sync mode"),
        ("trainer", TRAINERS, "trainer"),
        ("placement", PLACEMENTS, "sync server placement"),
    ):
        if values[key] not in options:
            raise InputError(
                f"unknown {noun} {values[key]!r}",
                file=file,
                field=f"sync.{key}",
                allowed=", ".join(options),
            )
    for key in ("every", "servers"):
        values[key] = bounds.count(values[key], key, file=file, field=f"sync.{key}")
    period = values["period_s"]
    if isinstance(period, bool) or not isinstance(period, int | float) or period < 0:
        raise InputError(
            f"must be a number of seconds >= 0, got {period!r}", file=file, field="sync.period_s"
        )
    bounds.check(period, "period_s", "time", file=file, field="sync.period_s")
    return SyncSpec(
        values["mode"],
        values["every"],
        values["servers"],
        float(values["period_s"]),
        values["trainer"],
        values["placement"],
    )


def service_hosts(cluster, servers: int) -> np.ndarray:
    """Service-host indices of ``servers`` dedicated EASGD sync servers: the last of the
    front-end pool (parameter-server tables fill it from the first)."""
    fe = cluster.spec.front_end
    pool = 0 if fe is None else fe.servers
    if servers > pool:
        raise InputError(
            f"{servers} sync servers but the front-end network has {pool} service hosts",
            field="sync.servers",
            allowed=f"1..{pool}, or more hosts with --set front_end.servers=N",
        )
    return np.arange(pool - servers, pool)


def server_devices(cluster, servers: int) -> np.ndarray:
    """Device ids of EASGD sync servers placed on the training hosts (``placement: trainers``):
    host DRAM of sockets spread over nodes."""
    spec = cluster.spec
    out = []
    for i in range(servers):
        node = i * spec.nodes // servers
        out.append(cluster.router.local("dram", node, i % spec.host.sockets))
    return np.array(out)


def gap_stats(gaps: list[int]) -> dict:
    """Mean, p50 and p95 of sync gaps (iterations a trainer ran between two of its syncs)."""
    if not gaps:
        return {"mean": None, "p50": None, "p95": None}
    a = np.asarray(gaps, dtype=float)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
    }
