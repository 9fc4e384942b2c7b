"""A per-link reservation model of the network: an independent cross-check of ``FlowNetwork``.

Every link drains a batch's bytes at its capacity after the bytes it already has queued (a
reservation per link), and a flow arrives once every link of its path has drained; no rate is
solved.  Links serve batches one after another, so no link is ever loaded above its capacity
whatever overlaps.  Where a collective runs alone and the batch's busiest links stay busy until
they drain (every schedule of ``collectives.py``), max-min flows must finish when this bound
says: tests/network/test_fidelity.py checks the flow model against it.

It was the package's ``analytic`` fidelity; that was removed because it was at most 2–3× faster
than the flow model for a DLRM run (lowering and analysis cost the same in both), so it lives on
here as a test oracle only.
"""

from __future__ import annotations

import numpy as np
import simpy

from zionsim.network import nccl
from zionsim.network.flows import FlowNetwork, _Network


class ReservationNetwork(_Network):
    """Per-link load: each link carries a batch's bytes after what is queued on it already.

    Link ``l`` with backlog ``b_l`` (s) and batch bytes ``L_l`` has drained at ``b_l + L_l/C_l``;
    a flow arrives when the last link of its path has drained, or, if its own rate cap is
    slower, ``n/cap`` after the longest backlog on its path (then its latency).  Flow weights do
    not matter here.
    """

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray, record_spans: bool = True):
        super().__init__(env, capacity_Bps, record_spans)
        self._free_at = np.zeros(len(self.capacity) + 1)

    def _start(self, bid, routes, nbytes, latency_s, weight, cap) -> None:
        n_links = len(self.capacity)
        frac = None
        if not isinstance(routes, np.ndarray):  # flow classes: a row's links are its members'
            width = max(routes.plain.shape[1], routes.routes.shape[1])
            pad = lambda a, fill: np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)  # noqa: E731
            frac = np.concatenate([pad(np.ones(routes.plain.shape), 0.0), pad(routes.frac, 0.0)])
            routes = np.concatenate([pad(routes.plain, -1), pad(routes.routes, -1)])
        flat = np.where(routes >= 0, routes, n_links)  # padding goes to a dummy link
        hops = routes.shape[1]
        cap_all = np.append(self.capacity, np.inf)
        now = self.env.now
        backlog = np.maximum(self._free_at - now, 0.0)
        backlog[n_links] = 0.0
        per = np.repeat(nbytes, hops) if frac is None else (nbytes[:, None] * frac).ravel()
        load = np.bincount(flat.ravel(), per, minlength=n_links + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            drained = backlog + np.where(load > 0, load / cap_all, 0.0)
            own = np.where(nbytes > 0, nbytes / cap, 0.0)
        drained[n_links] = 0.0
        if hops:
            wait = backlog[flat].max(axis=1)
            times = np.maximum(drained[flat].max(axis=1), wait + own) + latency_s
        else:
            times = own + latency_s
        used = load > 0
        used[n_links] = False
        self._free_at[used] = now + drained[used]
        self._batches[bid].finish_s = now + (float(times.max()) if len(times) else 0.0)
        self._batches[bid].pending = 0
        self._finish_batch(bid)


#: the two models the tests compare, by name
MODELS = {"flow": FlowNetwork, "reservation": ReservationNetwork}


def run_collective(cluster, choice, model: str, record_spans: bool = False):
    """(time s, network) of the collective ``choice`` (``nccl.choose``) alone on an idle
    network of kind ``model`` (a key of :data:`MODELS`)."""
    env = simpy.Environment()
    extra = {"router": cluster.router} if model == "flow" else {}
    net = MODELS[model](env, cluster.router.capacity_Bps, record_spans=record_spans, **extra)
    proc = env.process(nccl.run(env, net, cluster, choice))
    env.run()
    return proc.value, net
