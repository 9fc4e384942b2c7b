"""Network models: flows on routed paths, driven by simpy.

A *transfer* is a batch of flows (``routes`` × ``nbytes``) submitted at once; it returns one simpy
event that fires when the last flow of the batch has arrived.  :class:`FlowNetwork` is the model:
flow-level, max-min fair sharing of every directed link, rates recomputed whenever a flow starts
or ends (the fluid model validated by SimGrid).  The tests cross-check it against an independent
per-link reservation model (tests/network/reservation_oracle.py, tests/network/test_fidelity.py).

Modelling assumptions:

1. A link's usable rate is its line rate × the achieved efficiency of its kind (``capacity_Bps``).
2. A flow of ``S`` bytes on a path with latency ``α`` (sum of hop latencies plus any per-message
   overhead) that drains at rate ``r`` arrives ``α`` after its last byte left: ``T = S/r + α``.
   It holds bandwidth from the moment it is submitted.
3. Flows that share a path and start together may be merged into one flow of ``weight`` w: it
   carries the bytes of all of them and gets w fair shares (exact under max-min fairness).
4. A flow may carry a rate cap of its own (bytes/s; ``inf`` = none): NCCL's per-channel and
   per-protocol limits, which no link of the graph represents.
5. The state lives in numpy arrays; there is no Python object per flow, so a collective of a
   million flows costs a few array passes per rate change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy


@dataclass
class _Batch:
    event: simpy.Event
    pending: int
    start_s: float
    finish_s: float = 0.0
    tag: object = None
    nbytes: float = 0.0


@dataclass
class NetworkStats:
    """What a network did: bytes carried per link, rate solves, batches."""

    link_bytes: np.ndarray
    solves: int = 0
    batches: int = 0
    flows: int = 0
    spans: list = field(default_factory=list)  # (tag, start_s, end_s, bytes, n_flows)


def maxmin_rates(
    routes: np.ndarray, capacity: np.ndarray, weight: np.ndarray, cap: np.ndarray | None = None
) -> np.ndarray:
    """Max-min fair rate of each flow (bytes/s) by progressive filling.

    ``routes`` is (F, H) edge ids padded with -1; a flow with no edge gets ``inf``.  Each round
    finds the links with the smallest fair share per unit weight, fixes every flow crossing one of
    them at that share × its weight, and removes their load from the other links.  A flow's own
    ``cap`` (bytes/s) acts as a private link of that capacity.

    The (flow, link) incidences are kept as flat arrays in flow-major order and each round works
    on those of the flows still unfixed only, so a round costs what is left, not F × H; every sum
    is taken over the same terms in the same order as a full pass would, so the rates do not
    depend on how many flows were fixed before.
    """
    n_flows, hops = routes.shape
    n_links = len(capacity)
    rate = np.zeros(n_flows)
    if n_flows == 0:
        return rate
    cap = np.full(n_flows, np.inf) if cap is None else cap
    flat = routes.ravel()
    valid = flat >= 0
    inc_link = flat[valid].astype(np.intp)  # bincount's own index type: no cast per round
    # flow of each incidence, in flow-major order (what np.nonzero(routes >= 0) gives), int32
    # while the flow count allows: a million-flow batch's incidences take half the memory
    idx_type = np.int32 if n_flows < 2**31 else np.int64
    inc_flow = np.repeat(np.arange(n_flows, dtype=idx_type), hops)[valid]
    del flat, valid
    inc_w = weight[inc_flow]
    has_link = np.zeros(n_flows, dtype=bool)
    has_link[inc_flow] = True
    rate[~has_link] = np.minimum(np.inf, cap[~has_link])
    active = has_link.copy()
    remaining = np.append(capacity.astype(float), np.inf)
    own_all = np.where(active, cap / weight, np.inf)
    while active.any():
        load = np.bincount(inc_link, weights=inc_w, minlength=n_links + 1)
        load[n_links] = 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(load > 0, remaining / load, np.inf)
        own = np.where(active, own_all, np.inf)
        level = min(share.min(), own.min())
        bottleneck = share <= level * (1 + 1e-9)
        hit = active & (own <= level * (1 + 1e-9))
        hit[inc_flow[bottleneck[inc_link]]] = True
        rate[hit] = level * weight[hit]
        active &= ~hit
        if not active.any():  # every flow has its rate: the loads left do not matter
            break
        fixed = hit[inc_flow]
        used = np.bincount(inc_link[fixed], weights=rate[inc_flow[fixed]], minlength=n_links + 1)
        remaining = np.maximum(remaining - used, 0.0)
        remaining[n_links] = np.inf
        keep = ~fixed
        inc_flow, inc_link, inc_w = inc_flow[keep], inc_link[keep], inc_w[keep]
    return rate


class _Network:
    """Bookkeeping every network model shares: batches, spans and per-link bytes."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray, record_spans: bool = True):
        self.env = env
        self.capacity = np.asarray(capacity_Bps, dtype=float)
        self.stats = NetworkStats(link_bytes=np.zeros(len(self.capacity)))
        self.record_spans = record_spans
        self._batches: dict[int, _Batch] = {}
        self._next_batch = 0

    def _new_batch(self, n: int, nbytes: float, tag: object) -> tuple[int, simpy.Event]:
        bid = self._next_batch
        self._next_batch += 1
        event = self.env.event()
        self._batches[bid] = _Batch(event, n, self.env.now, self.env.now, tag, nbytes)
        self.stats.batches += 1
        self.stats.flows += n
        return bid, event

    def _finish_batch(self, bid: int) -> None:
        b = self._batches.pop(bid)
        if self.record_spans:
            self.stats.spans.append((b.tag, b.start_s, b.finish_s, b.nbytes, 0))
        delay = max(0.0, b.finish_s - self.env.now)
        if delay > 0:
            self.env.timeout(delay).callbacks.append(
                lambda _e, ev=b.event, t=b.finish_s: ev.succeed(t)
            )
        else:
            b.event.succeed(b.finish_s)

    def transfer(
        self,
        routes: np.ndarray,
        nbytes: np.ndarray,
        latency_s: np.ndarray,
        weight: np.ndarray | None = None,
        tag: object = None,
        cap: np.ndarray | None = None,
    ) -> simpy.Event:
        """Start a batch of flows now; the event fires (value: finish time) when all arrived.

        ``cap`` is each flow's own rate limit in bytes/s (default: none).
        """
        nbytes = np.asarray(nbytes, dtype=float)
        weight = np.ones(len(nbytes)) if weight is None else np.asarray(weight, dtype=float)
        cap = np.full(len(nbytes), np.inf) if cap is None else np.asarray(cap, dtype=float)
        latency_s = np.asarray(latency_s, dtype=float) * np.ones(len(nbytes))
        bid, event = self._new_batch(len(nbytes), float(nbytes.sum()), tag)
        if len(nbytes) == 0:  # nothing to move: the batch is complete now
            self._finish_batch(bid)
            return event
        self._account(routes, nbytes)
        self._start(bid, routes, nbytes, latency_s, weight, cap)
        return event

    def _account(self, routes: np.ndarray, nbytes: np.ndarray) -> None:
        valid = routes >= 0
        if valid.any():
            self.stats.link_bytes += np.bincount(
                routes[valid],
                weights=np.broadcast_to(nbytes[:, None], routes.shape)[valid],
                minlength=len(self.capacity),
            )


class FlowNetwork(_Network):
    """Flow-level max-min fair sharing of every directed link."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray, record_spans: bool = True):
        super().__init__(env, capacity_Bps, record_spans)
        self._routes = np.zeros((0, 0), dtype=np.int32)  # edge ids fit 32 bits; half the memory
        self._left = np.zeros(0)
        self._weight = np.zeros(0)
        self._tail = np.zeros(0)
        self._batch = np.zeros(0, dtype=np.int64)
        self._rate = np.zeros(0)
        self._cap = np.zeros(0)
        self._last = env.now
        self._generation = 0

    def _start(self, bid, routes, nbytes, latency_s, weight, cap) -> None:
        n = len(nbytes)
        self._advance()
        width = max(self._routes.shape[1], routes.shape[1])
        self._routes = np.concatenate(
            [_widen(self._routes, width), _widen(routes.astype(np.int32, copy=False), width)]
        )
        self._left = np.concatenate([self._left, nbytes])
        self._weight = np.concatenate([self._weight, weight])
        self._tail = np.concatenate([self._tail, latency_s])
        self._batch = np.concatenate([self._batch, np.full(n, bid)])
        self._rate = np.concatenate([self._rate, np.zeros(n)])
        self._cap = np.concatenate([self._cap, cap])
        self._settle()

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0 and len(self._left):
            finite = np.isfinite(self._rate)
            self._left = np.where(finite, self._left - self._rate * dt, 0.0)
        self._last = self.env.now

    def _settle(self) -> None:
        """Retire arrived flows, re-solve rates, and schedule the next completion."""
        done = (self._left <= np.maximum(self._rate * 1e-13, 1e-6)) | ~np.isfinite(self._rate)
        done &= (self._left <= 1e-6) | (self._rate > 0)
        if done.any():
            finished_batches = self._retire(self._batch[done], self._tail[done])
            keep = ~done
            self._routes, self._left = self._routes[keep], self._left[keep]
            self._weight, self._tail = self._weight[keep], self._tail[keep]
            self._batch, self._rate = self._batch[keep], self._rate[keep]
            self._cap = self._cap[keep]
            for bid in finished_batches:
                self._finish_batch(bid)
        if len(self._left) == 0:
            return
        self._rate = maxmin_rates(self._routes, self.capacity, self._weight, self._cap)
        self.stats.solves += 1
        zero = self._left <= 1e-6
        if zero.any():  # zero-byte flows: arrive after their latency only
            self._rate = np.where(zero, np.inf, self._rate)
            return self._settle()
        with np.errstate(divide="ignore"):
            dt = float((self._left / self._rate).min())
        self._generation += 1
        gen = self._generation
        self.env.timeout(dt).callbacks.append(lambda _e, gen=gen: self._on_timer(gen))

    def _retire(self, batch: np.ndarray, tail: np.ndarray) -> list[int]:
        """Count arrived flows (their batch ids and tail latencies) against their batches;
        the batches now complete, in id order."""
        now = self.env.now
        order = np.argsort(batch, kind="stable")
        ids, first, counts = np.unique(batch[order], return_index=True, return_counts=True)
        last_tail = np.maximum.reduceat(now + tail[order], first)
        finished = []
        for bid, n, t in zip(ids.tolist(), counts.tolist(), last_tail.tolist(), strict=True):
            b = self._batches[bid]
            b.finish_s = max(b.finish_s, t)
            b.pending -= n
            if b.pending == 0:
                finished.append(bid)
        return finished

    def _on_timer(self, gen: int) -> None:
        if gen != self._generation:
            return
        self._advance()
        # the flows that set the timer finish now, whatever rounding says
        with np.errstate(divide="ignore"):
            eta = self._left / self._rate
        self._left = np.where(eta <= eta.min() * (1 + 1e-9) + 1e-15, 0.0, self._left)
        self._settle()


def _widen(a: np.ndarray, width: int) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1)
