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
6. Flows alike by symmetry may travel as one *class row* (``phases.FlowClass``): every pair of
   two device sets on different nodes, with equal bytes, weight and cap.  Its route lists every
   link a member crosses and ``frac`` the fraction of members crossing each; max-min fairness
   counts a link's load as Σ weight × frac, the members' own load, so the rates are exact
   whenever the members' rates are equal.  That is checked after every solve
   (``maxmin.uncovered_classes``: every member must cross a saturated link on which no flow has a
   larger fair share, which is what makes an allocation max-min fair); a class row that fails
   it is refined by the link levels its members see, down to its member flows if need be, and
   the rates solved again.  A DLRM all-to-all among 2,048 nodes is then 24 class rows (plus
   each GPU's NVLink relays) instead of 33.5 M flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import simpy

from zionsim.base.kept import keep_by_identity
from zionsim.network.maxmin import maxmin_rates, refine_class, uncovered_classes


@dataclass
class _Batch:
    event: simpy.Event
    pending: int
    start_s: float
    finish_s: float = 0.0
    tag: object = None
    nbytes: float = 0.0


class Span(NamedTuple):
    """One batch of flows on the network: its ``tag`` (what the traffic belongs to, given by
    the caller: ``sim.records.SpanTag`` for a run), start and end (s), bytes, and flows."""

    tag: object
    start_s: float
    end_s: float
    bytes: float
    flows: int


@dataclass
class NetworkStats:
    """What a network did: bytes carried per link, rate solves, batches."""

    link_bytes: np.ndarray
    solves: int = 0
    batches: int = 0
    flows: int = 0
    splits: int = 0  # class rows split into their flows (assumption 6)
    spans: list[Span] = field(default_factory=list)


class _Network:
    """Bookkeeping every network model shares: batches, spans and per-link bytes."""

    def __init__(self, env: simpy.Environment, capacity_Bps: np.ndarray, record_spans: bool = True):
        self.env = env
        self.capacity = np.asarray(capacity_Bps, dtype=float)
        self.stats = NetworkStats(link_bytes=np.zeros(len(self.capacity)))
        self.record_spans = record_spans
        self._batches: dict[int, _Batch] = {}
        self._next_batch = 0
        self._coalesce = False  # the batch being started shares its instant's rate solve

    def _new_batch(
        self, n: int, nbytes: float, tag: object, members: int | None = None
    ) -> tuple[int, simpy.Event]:
        bid = self._next_batch
        self._next_batch += 1
        event = self.env.event()
        self._batches[bid] = _Batch(event, n, self.env.now, self.env.now, tag, nbytes)
        self.stats.batches += 1
        self.stats.flows += n if members is None else members
        return bid, event

    def _finish_batch(self, bid: int) -> None:
        b = self._batches.pop(bid)
        if self.record_spans:
            self.stats.spans.append(Span(b.tag, b.start_s, b.finish_s, b.nbytes, 0))
        delay = max(0.0, b.finish_s - self.env.now)
        if delay > 0:
            self.env.timeout(delay).callbacks.append(
                lambda _e, ev=b.event, t=b.finish_s: ev.succeed(t)
            )
        else:
            b.event.succeed(b.finish_s)

    def transfer(
        self,
        routes,
        nbytes: np.ndarray,
        latency_s: np.ndarray,
        weight: np.ndarray | None = None,
        tag: object = None,
        cap: np.ndarray | None = None,
        coalesce: bool = False,
    ) -> simpy.Event:
        """Start a batch of flows now; the event fires (value: finish time) when all arrived.

        ``coalesce``: solve the rates once for every batch started at this instant (after the
        others queued for it) instead of at once; the rates are the same.

        ``routes``: (F, H) edge ids, or a ``phases.ClassRoutes`` whose last rows are flow
        classes (assumption 6).  ``cap`` is each flow's own rate limit in bytes/s (default:
        none).
        """
        nbytes = np.asarray(nbytes, dtype=float)
        weight = np.ones(len(nbytes)) if weight is None else np.asarray(weight, dtype=float)
        cap = np.full(len(nbytes), np.inf) if cap is None else np.asarray(cap, dtype=float)
        latency_s = np.asarray(latency_s, dtype=float) * np.ones(len(nbytes))
        classed = not isinstance(routes, np.ndarray)
        members = len(nbytes) + (
            int(routes.members().sum()) - len(routes.classes) if classed else 0
        )
        bid, event = self._new_batch(len(nbytes), float(nbytes.sum()), tag, members)
        if len(nbytes) == 0:  # nothing to move: the batch is complete now
            self._finish_batch(bid)
            return event
        if classed:
            n_plain = len(routes.plain)
            self._account(routes.plain, nbytes[:n_plain])
            self._account(routes.routes, nbytes[n_plain:], routes.frac)
        else:
            self._account(routes, nbytes)
        self._coalesce = coalesce
        self._start(bid, routes, nbytes, latency_s, weight, cap)
        return event

    def _account(self, routes: np.ndarray, nbytes: np.ndarray, frac=None) -> None:
        ids, rows, flat = _valid_links(routes)
        if len(ids):
            per = nbytes[rows]  # np.broadcast_to(nbytes[:, None], routes.shape)[valid]
            self.stats.link_bytes += np.bincount(
                ids,
                weights=per if frac is None else per * frac.ravel()[flat],
                minlength=len(self.capacity),
            )


#: what :meth:`_Network._account` gathers of a routes array (its link ids but the padding, in
#: row-major order, each one's row and flat position), kept by the array's identity (held:
#: routes are never changed once made; a prepared collective's run every iteration) up to
#: this many bytes in all; 0: gathered anew each time
KEEP_VALID_BYTES = 64 * 2**20
_VALID: dict[int, tuple] = {}
_VALID_BYTES = [0]


def _valid_links(routes: np.ndarray) -> tuple:
    """``routes[routes >= 0]``, the row of each and its flat position, in row-major order."""
    hit = _VALID.get(id(routes))
    if hit is not None and hit[0] is routes:
        return hit[1]
    flat = np.flatnonzero(routes >= 0)
    out = (routes.ravel()[flat], flat // max(routes.shape[1], 1), flat)
    keep_by_identity(_VALID, _VALID_BYTES, KEEP_VALID_BYTES, routes, out)
    return out


#: remember rate solves by all they read (``FlowNetwork._solve_key``): a sweep's points on one
#: cluster run the same collectives' flows at other sizes, and the rates do not read the bytes;
#: False: every solve made anew (the tests comparing the two)
REUSE_SOLVES = True
#: solves remembered, at most, and the bytes of their keys, at most (then all forgotten at once)
KEEP_SOLVES = 512
KEEP_SOLVE_BYTES = 64 * 2**20
#: a solve whose capacities and routes take more bytes than this is kept by its network only
#: (for the rest of its run: a large cluster's solves are not met again in a sweep, but every
#: iteration of a run meets its first's again: 4 distinct solves of 138 at 4,096 GPUs)
MAX_SOLVE_BYTES = 2 * 2**20
#: the bytes of the keys one network keeps of its own large solves, at most (then all
#: forgotten at once; about 350 MB at 65,536 GPUs)
KEEP_RUN_SOLVE_BYTES = 4 * 2**30
_SOLVES: dict[tuple, tuple] = {}
_SOLVES_BYTES = [0]  # the bytes of the kept keys


def _array_key(a: np.ndarray) -> tuple:
    """An array as a key: its type, shape and bytes."""
    return (a.dtype.str, a.shape, a.tobytes())


def _sampled_key(a: np.ndarray) -> tuple:
    """A cheap stand-in for :func:`_array_key` to find a kept solve by (hashing every byte of
    a large flow table costs more than the rest of a kept solve): type, shape and about 256
    evenly spaced values; a solve found by it is used only where all its arrays' keys are
    equal (``FlowNetwork._solve``)."""
    flat = a.reshape(-1)
    return (a.dtype.str, a.shape, flat[:: max(1, len(flat) // 256)].tobytes())


class FlowNetwork(_Network):
    """Flow-level max-min fair sharing of every directed link.

    ``router`` (a ``hardware.routing.Router``) lists the member flows of a class row that must
    be split (assumption 6); a network without one takes no class rows."""

    def __init__(
        self,
        env: simpy.Environment,
        capacity_Bps: np.ndarray,
        record_spans: bool = True,
        router=None,
    ):
        super().__init__(env, capacity_Bps, record_spans)
        self.router = router
        self._capacity_key: tuple | None = None  # the capacities as a key (_solve_key)
        # the large solves (MAX_SOLVE_BYTES) kept for this network's run, as _SOLVES, and
        # the bytes of their keys
        self._own_solves: dict[tuple, tuple] = {}
        self._own_bytes = [0]
        self._routes = np.zeros((0, 0), dtype=np.int32)  # edge ids fit 32 bits; half the memory
        self._left = np.zeros(0)
        self._weight = np.zeros(0)
        self._tail = np.zeros(0)
        self._batch = np.zeros(0, dtype=np.int64)
        self._rate = np.zeros(0)
        self._cap = np.zeros(0)
        # class rows (assumption 6): their row numbers, routes, member fractions, path
        # positions and FlowClass; their rows of ``_routes`` are all -1
        self._crow = np.zeros(0, dtype=np.int64)
        self._croutes = np.zeros((0, 0), dtype=np.int32)
        self._cfrac = np.zeros((0, 0))
        self._cgroup = np.zeros((0, 0), dtype=np.int16)
        self._cls: list = []
        self._last = env.now
        self._generation = 0
        self._pending = False  # a coalesced solve is queued at this instant

    def _start(self, bid, routes, nbytes, latency_s, weight, cap) -> None:
        n = len(nbytes)
        self._advance()
        if not isinstance(routes, np.ndarray):  # plain rows, then class rows
            if self.router is None:
                raise ValueError("class rows need a FlowNetwork with a router")
            plain, c = routes.plain, routes
            routes = np.concatenate(
                [plain.astype(np.int32, copy=False),
                 np.full((len(c.classes), plain.shape[1]), -1, dtype=np.int32)]
            )  # fmt: skip
            self._add_classes(
                len(self._left) + len(plain) + np.arange(len(c.classes)),
                c.routes, c.frac, c.group, list(c.classes),
            )  # fmt: skip
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
        if self._coalesce:
            if not self._pending:  # one solve for every batch started at this instant
                self._pending = True
                self.env.timeout(0).callbacks.append(lambda _e: self._pending and self._settle())
            return
        self._settle()

    def _add_classes(self, rows, routes, frac, group, classes) -> None:
        width = max(self._croutes.shape[1], routes.shape[1])
        self._crow = np.concatenate([self._crow, rows])
        self._croutes = np.concatenate(
            [_widen(self._croutes, width), _widen(routes.astype(np.int32, copy=False), width)]
        )
        self._cfrac = np.concatenate([_widen(self._cfrac, width, 0), _widen(frac, width, 0)])
        self._cgroup = np.concatenate([_widen(self._cgroup, width), _widen(group, width)])
        self._cls += classes

    def _class_args(self) -> tuple | None:
        return (self._crow, self._croutes, self._cfrac) if len(self._crow) else None

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0 and len(self._left):
            finite = np.isfinite(self._rate)
            self._left = np.where(finite, self._left - self._rate * dt, 0.0)
        self._last = self.env.now

    def _settle(self) -> None:
        """Retire arrived flows, re-solve rates, and schedule the next completion."""
        self._pending = False
        done = (self._left <= np.maximum(self._rate * 1e-13, 1e-6)) | ~np.isfinite(self._rate)
        done &= (self._left <= 1e-6) | (self._rate > 0)
        if done.any():
            finished_batches = self._retire(self._batch[done], self._tail[done])
            keep = ~done
            self._routes, self._left = self._routes[keep], self._left[keep]
            self._weight, self._tail = self._weight[keep], self._tail[keep]
            self._batch, self._rate = self._batch[keep], self._rate[keep]
            self._cap = self._cap[keep]
            if len(self._crow):
                self._keep_classes(keep)
            for bid in finished_batches:
                self._finish_batch(bid)
        if len(self._left) == 0:
            return
        self._solve()
        zero = self._left <= 1e-6
        if zero.any():  # zero-byte flows: arrive after their latency only
            self._rate = np.where(zero, np.inf, self._rate)
            return self._settle()
        with np.errstate(divide="ignore"):
            dt = float((self._left / self._rate).min())
        self._generation += 1
        gen = self._generation
        self.env.timeout(dt).callbacks.append(lambda _e, gen=gen: self._on_timer(gen))

    def _keep_classes(self, keep: np.ndarray) -> None:
        """Drop the class rows of removed rows and renumber the others (``keep``: rows kept)."""
        stay = keep[self._crow]
        new_index = np.cumsum(keep) - 1
        self._crow = new_index[self._crow[stay]]
        self._croutes, self._cfrac = self._croutes[stay], self._cfrac[stay]
        self._cgroup = self._cgroup[stay]
        self._cls = [c for c, k in zip(self._cls, stay.tolist(), strict=True) if k]

    def _solve(self) -> None:
        """Max-min rates of every row; class rows whose members would not all get one rate are
        split into their flows and the rates solved again (assumption 6)."""
        while True:
            classes = self._class_args()
            self.stats.solves += 1
            key = self._solve_key(classes)
            hit = None
            if key is not None:  # found by a cheap fingerprint, then compared in full
                store, held, limit, count = (
                    (_SOLVES, _SOLVES_BYTES, KEEP_SOLVE_BYTES, KEEP_SOLVES)
                    if key[2] <= MAX_SOLVE_BYTES
                    else (self._own_solves, self._own_bytes, KEEP_RUN_SOLVE_BYTES, KEEP_SOLVES)
                )
                entry = store.get(key[0])
                if entry is not None and entry[0] == key[1]:
                    hit = entry[1]
            if hit is not None:
                self._rate, bad, level = hit[0].copy(), hit[1], hit[2]
            else:
                self._rate = maxmin_rates(
                    self._routes, self.capacity, self._weight, self._cap, classes
                )
                bad = level = None
                if classes is not None:
                    bad, level = uncovered_classes(
                        self._routes, classes, self._cgroup, self.capacity,
                        self._weight, self._cap, self._rate,
                    )  # fmt: skip
                if key is not None:
                    size = sum(len(k[2]) for k in key[1])
                    if len(store) >= count or held[0] + size > limit:
                        store.clear()
                        held[0] = 0
                    kept = [self._rate.copy(), bad, level]
                    for a in kept:
                        if a is not None:  # shared by the solves that find it: never written
                            a.flags.writeable = False
                    old = store.get(key[0])
                    if old is not None:  # the same fingerprint, other arrays: replaced
                        held[0] -= sum(len(k[2]) for k in old[0])
                    if size <= limit:
                        store[key[0]] = (key[1], tuple(kept))
                        held[0] += size
            if classes is None or not len(bad):
                return
            self._split(bad, level)

    def _solve_key(self, classes) -> tuple | None:
        """All that a rate solve (``maxmin_rates``, then ``uncovered_classes``) reads, as a key:
        the links' capacities and every row's route, weight and cap, and the class rows', each
        array's type, shape and bytes (both are pure functions of these arrays), after the
        same arrays' sampled keys (:func:`_sampled_key`) to find it by, and the bytes of the
        capacities and routes (above :data:`MAX_SOLVE_BYTES`, kept by this network only: a
        large cluster's solves are not met again in a sweep); None where solves are not kept
        (:data:`REUSE_SOLVES`)."""
        size = self.capacity.nbytes + self._routes.nbytes
        if classes is not None:
            size += classes[1].nbytes
        if not REUSE_SOLVES:
            return None
        if self._capacity_key is None:
            self._capacity_key = _array_key(self.capacity)
        arrays = (self._routes, self._weight, self._cap)
        if classes is not None:
            arrays += (*classes, self._cgroup)
        full = (self._capacity_key, *map(_array_key, arrays))
        return (self._capacity_key[2], *map(_sampled_key, arrays)), full, size

    def _split(self, bad: np.ndarray, level: np.ndarray) -> None:
        """Replace class rows ``bad`` (positions among the class rows) by finer rows, each with
        its share of the row's bytes left, weight and cap.  A row's sources are told apart by
        the levels (``level``) of the links they cross on their side, its destinations likewise
        (colour refinement by what the solve saw); a row whose sides are all alike, and yet
        fails, becomes its member flows."""
        router = self.router
        rows = self._crow[bad]
        keep = np.ones(len(self._left), dtype=bool)
        keep[rows] = False
        flows, finer = [], []  # (row, routes, share); (row, class, route, frac, group, share)
        for i, k in zip(rows.tolist(), bad.tolist(), strict=True):
            c = self._cls[k]
            subs = refine_class(router, c, level)
            if subs:
                finer += [(i, *sub) for sub in subs]
                self._batches[int(self._batch[i])].pending += len(subs) - 1
                continue
            s, d = router.class_pairs(c.src, c.dst, c.rel)
            flows.append((i, router.routes(s, d), 1.0 / c.members))
            self._batches[int(self._batch[i])].pending += len(s) - 1
        old = {k: getattr(self, k) for k in ("_left", "_weight", "_tail", "_batch", "_cap")}
        self._keep_classes(keep)
        width = max([self._routes.shape[1]] + [r.shape[1] for _, r, _ in flows])
        n_fine = int(keep.sum()) + sum(len(r) for _, r, _ in flows)
        self._routes = np.concatenate(
            [_widen(self._routes[keep], width)]
            + [_widen(r, width) for _, r, _ in flows]
            + [np.full((len(finer), width), -1, dtype=np.int32)]
        )
        scaled = ("_left", "_weight", "_cap")
        for k, v in old.items():
            pieces = [v[keep]]
            pieces += [np.full(len(r), v[i] * x if k in scaled else v[i]) for i, r, x in flows]
            pieces += [np.array([v[f[0]] * f[5] if k in scaled else v[f[0]] for f in finer])]
            setattr(self, k, np.concatenate(pieces).astype(v.dtype))
        if finer:
            width = max(len(f[2]) for f in finer)
            pad = lambda a, fill, dt: np.stack(  # noqa: E731
                [np.pad(x, (0, width - len(x)), constant_values=fill).astype(dt) for x in a]
            )
            self._add_classes(
                n_fine + np.arange(len(finer)),
                pad([f[2] for f in finer], -1, np.int32),
                pad([f[3] for f in finer], 0.0, float),
                pad([f[4] for f in finer], -1, np.int16),
                [f[1] for f in finer],
            )
        self._rate = np.zeros(len(self._left))
        self.stats.splits += len(rows)

    def _retire(self, batch: np.ndarray, tail: np.ndarray) -> list[int]:
        """Count arrived flows (their batch ids and tail latencies) against their batches;
        the batches now complete, in id order."""
        now = self.env.now
        if batch[0] == batch[-1] and (batch == batch[0]).all():  # one batch (most often): its max
            ids, counts, last_tail = [int(batch[0])], [len(batch)], [float((now + tail).max())]
        else:
            order = np.argsort(batch, kind="stable")
            ids, first, counts = np.unique(batch[order], return_index=True, return_counts=True)
            last_tail = np.maximum.reduceat(now + tail[order], first)
            ids, counts, last_tail = ids.tolist(), counts.tolist(), last_tail.tolist()
        finished = []
        for bid, n, t in zip(ids, counts, last_tail, strict=True):
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


def _widen(a: np.ndarray, width: int, fill=-1) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)
