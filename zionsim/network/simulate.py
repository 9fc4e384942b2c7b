"""Pure simulation entry points that need no workload: one collective on a cluster."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import simpy

from zionsim.network import nccl
from zionsim.network.collectives import busbw_factor
from zionsim.network.flows import FlowNetwork


class CountingEnvironment(simpy.Environment):
    """A simpy environment that can say how many events it has scheduled (for benchmarks)."""

    @property
    def events_scheduled(self) -> int:
        """Events scheduled so far."""
        # simpy numbers every scheduled event from one counter; peek without consuming a number
        probe = next(self._eid)
        self._eid = itertools.count(probe)
        return probe


@dataclass(frozen=True)
class CollectiveResult:
    """One simulated collective, in nccl-tests' terms."""

    op: str
    size_bytes: int
    ranks: int
    algorithm: str
    protocol: str
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    events: int
    flows: int

    def row(self) -> dict:
        """The result as a table row (sizes in bytes, time in s, bandwidths in GB/s = 1e9 B/s)."""
        return {
            "size_bytes": self.size_bytes,
            "ranks": self.ranks,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "time_s": self.time_s,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
        }


def simulate_collective(
    cluster,
    op: str,
    size_bytes: int,
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    ranks: np.ndarray | None = None,
    matrix: np.ndarray | None = None,
    model: nccl.CollectiveModel | None = None,
    launch_gpus: int = 1,
) -> CollectiveResult:
    """Simulate one collective on ``cluster`` (all GPUs unless ``ranks``) and time it.

    ``launch_gpus``: GPUs one host thread launches for (nccl-tests ``-g``; see ``nccl``).
    """
    ranks = cluster.gpus if ranks is None else np.asarray(ranks)
    if op == "send_recv" and ranks is cluster.gpus:
        ranks = ranks[[0, -1]]
    choice = nccl.choose(cluster, op, ranks, size_bytes, model, algorithm, protocol, matrix)
    env = CountingEnvironment()
    net = FlowNetwork(env, cluster.router.capacity_Bps, record_spans=False, router=cluster.router)
    proc = env.process(nccl.run(env, net, cluster, choice, model, launch_gpus=launch_gpus))
    env.run()
    t = proc.value
    n = len(ranks)
    algbw = size_bytes / t / 1e9
    return CollectiveResult(
        op,
        int(size_bytes),
        n,
        choice.schedule.algorithm,
        choice.protocol,
        t,
        algbw,
        algbw * busbw_factor(op, n),
        env.events_scheduled,
        net.stats.flows,
    )
