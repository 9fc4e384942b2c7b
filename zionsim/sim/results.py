"""Run analysis: records → iteration time, critical-path breakdown, busy and exposed time, tables.

Definitions (also in ``docs/outputs.md``):

* **Iteration time** — the time between the ends of consecutive iterations (the last op of any
  rank), averaged over the measured iterations (warm-up excluded).
* **Critical path** — walking back from the last op of an iteration: each op's time counts for its
  category; from an op we step to whichever of its dependencies or its stream predecessor ended
  last, and from a collective to the rank that arrived last.  Gaps on that path are ``idle``.
  ``breakdown_s`` is that split, so it sums to the iteration time.
* **Busy time** — per category, the time a rank spends in ops of that category (a collective
  counts from its last member's arrival to its end), averaged over ranks.
* **Exposed communication** — time a rank's compute stream sits ready but waits for a
  collective (the dependency that ended last is a collective), averaged over ranks.
"""

from __future__ import annotations

import itertools
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from zionsim.base.errors import InputError
from zionsim.base.kept import Registry, kept_for, kept_with
from zionsim.base.table import Table, strings
from zionsim.dlrm.trace import CATEGORIES, STREAMS
from zionsim.sim.records import SpanTag

if TYPE_CHECKING:  # pandas is imported where a table is built (a sweep's worker needs none)
    import pandas as pd

BREAKDOWN_KEYS = CATEGORIES + ("idle",)


class Analysis:
    """Indexes over the records of one run, and the figures computed from them."""

    def __init__(self, rec, warmup: int):
        self.rec, self.trace = rec, rec.trace
        if not 0 <= warmup < rec.iterations:
            raise ValueError("warmup must leave at least one measured iteration")
        self.warmup = warmup
        self.it, self.op, self.free, self.start, self.end = rec.ops.columns()
        #: the record of (iteration, op): ``row[it, op]`` (every op runs every iteration)
        self.row = np.full((rec.iterations, len(self.trace.ops)), -1, dtype=np.int64)
        self.row[self.it, self.op] = np.arange(len(self.it))
        self.ends = np.array([self.end[self.it == i].max() for i in range(rec.iterations)])
        self._kept = kept_with(self.trace.ops)
        self._paths: dict[int, list] = {}  # critical paths walked, by iteration
        #: per-op arrays, built on first use (_codes); kept with the trace's ops (kept_with)
        self._op_codes: dict | None = self._kept.get("codes")
        if "prev" in self._kept:
            self.prev = self._kept["prev"]
            self.last_of_stream = self._kept["last_of_stream"]
            self.coll_op = self._kept["coll_op"]
        else:
            self._stream_links()
            self._kept.update(
                prev=self.prev, last_of_stream=self.last_of_stream, coll_op=self.coll_op
            )

    def _stream_links(self) -> None:
        """Previous op on the same (rank, stream) (-1: none), the last op of each (rank,
        stream), and each rank's op of each collective (the last one where a rank has two)."""
        codes = self._codes()  # positions are ids (``ops[i].id == i``)
        n = len(self.trace.ops)
        key = codes["rank"] * len(STREAM_CODES) + codes["stream"]
        order = np.argsort(key, kind="stable")  # each (rank, stream)'s ops in id order
        sorted_key = key[order]
        same = sorted_key[1:] == sorted_key[:-1]
        self.prev = np.full(n, -1, dtype=np.int64)
        self.prev[order[1:][same]] = order[:-1][same]
        ends = order[np.flatnonzero(np.append(~same, True))] if n else order
        streams = list(STREAM_CODES)
        self.last_of_stream: dict[tuple[int, str], int] = {
            (r, streams[c]): i
            for r, c, i in zip(
                codes["rank"][ends].tolist(),
                codes["stream"][ends].tolist(),
                ends.tolist(),
                strict=True,
            )
        }
        coll = np.flatnonzero(codes["coll"] >= 0)
        keys = zip(codes["rank"][coll].tolist(), codes["coll"][coll].tolist(), strict=True)
        self.coll_op: dict[tuple[int, int], int] = dict(zip(keys, coll.tolist(), strict=True))

    # ----------------------------------------------------------------------------- figures
    def iteration_times(self) -> np.ndarray:
        """Seconds of each measured iteration (end to end of consecutive iterations, module
        docstring), warm-up excluded."""
        starts = np.concatenate([[0.0], self.ends[:-1]])
        return (self.ends - starts)[self.warmup :]

    def critical_path(self, it: int) -> list[tuple[str, str, int, float, float]]:
        """Segments (name, category, rank, start, end) of iteration ``it``'s critical path,
        latest first; idle gaps have name and category ``idle`` (walked once per iteration:
        a list to read)."""
        if it not in self._paths:
            self._paths[it] = self._critical_path(it)
        return self._paths[it]

    def _critical_path(self, it: int) -> list[tuple[str, str, int, float, float]]:
        begin = self.ends[it - 1] if it > 0 else 0.0
        mask = self.it == it
        k = int(np.flatnonzero(mask)[np.argmax(self.end[mask])])
        segs = []
        while True:
            op = self.trace.ops[self.op[k]]
            seg_start = self.start[k]
            cr = self.rec.collectives.get((it, op.args.get("coll")))
            if op.kind == "collective" and cr is not None:
                seg_start = cr.start_s
                k = self.row[it, self.coll_op[cr.last_rank, op.args["coll"]]]
                op = self.trace.ops[self.op[k]]
            clipped = max(seg_start, begin)
            segs.append((op.name, op.category, op.rank, clipped, self.end_of(k, op, it)))
            if seg_start <= begin:
                break
            pred = self._binding(it, op)
            pred_end = self.end[pred] if pred is not None else begin
            if pred is None or pred_end <= begin:
                segs.append(("idle", "idle", op.rank, begin, seg_start))
                break
            if seg_start > pred_end:
                segs.append(("idle", "idle", op.rank, pred_end, seg_start))
            k = pred
        return segs

    def end_of(self, k: int, op, it: int) -> float:
        """End (s) of record ``k``, op ``op`` in iteration ``it``: the collective's end for a
        collective op, else the op's own."""
        cr = self.rec.collectives.get((it, op.args.get("coll")))
        return cr.end_s if op.kind == "collective" and cr is not None else self.end[k]

    def _binding(self, it: int, op) -> int | None:
        cands = [self.row[it, d] for d in op.deps]
        p = self.prev[op.id]
        if p >= 0:
            cands.append(self.row[it, p])
        elif it > 0:
            cands.append(self.row[it - 1, self.last_of_stream[op.rank, op.stream]])
        return max(cands, key=lambda c: self.end[c]) if cands else None

    def breakdown(self) -> dict[str, float]:
        """Critical-path seconds per category, averaged over measured iterations."""
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        n = self.rec.iterations - self.warmup
        for it in range(self.warmup, self.rec.iterations):
            for _, cat, _, s, e in self.critical_path(it):
                out[cat] += (e - s) / n
        return out

    def busy(self) -> dict[str, float]:
        """Busy seconds per category per iteration, averaged over ranks."""
        k = np.flatnonzero(self.it >= self.warmup)
        codes = self._codes()
        ops, its = self.op[k], self.it[k]
        seconds = self.end[k] - self.start[k]
        coll = codes["coll"][ops]
        joined = np.flatnonzero(coll >= 0)  # a collective counts from its last arrival
        if len(joined):
            span = self._collective_spans()[its[joined], coll[joined]]
            have = ~np.isnan(span)
            seconds[joined[have]] = span[have]
        # bincount adds in record order, as a loop over the records would
        sums = np.bincount(codes["category"][ops], seconds, minlength=len(CATEGORIES))
        scale = self.trace.ranks * (self.rec.iterations - self.warmup)
        return {c: float(v) / scale for c, v in zip(CATEGORIES, sums.tolist(), strict=True)}

    def exposed(self) -> dict[str, float]:
        """Exposed communication seconds per collective category per iteration, rank-averaged."""
        codes = self._codes()
        wait = self.start - self.free
        compute = STREAM_CODES["compute"]
        waiting = (self.it >= self.warmup) & (wait > 0)
        waiting &= (codes["stream"][self.op] == compute) & codes["has_deps"][self.op]
        k = np.flatnonzero(waiting)
        scale = self.trace.ranks * (self.rec.iterations - self.warmup)
        if not len(k) or "collective" not in codes["kinds"]:
            return {}
        # each waiting op's dependency that ended last (the first such in its deps' order)
        deps = self._deps()[self.op[k]]
        its = self.it[k][:, None]
        ends = np.where(deps >= 0, self.end[self.row[its, np.maximum(deps, 0)]], -np.inf)
        pick = np.argmax(ends, axis=1)
        dep = deps[np.arange(len(k)), pick]
        dep_end = ends[np.arange(len(k)), pick]
        late = dep_end - self.free[k]
        seconds = np.where(late < wait[k], late, wait[k])  # min(wait, late), ties to wait
        on_coll = codes["kind"][dep] == codes["kinds"].index("collective")
        cat = codes["category"][dep]
        out = {}
        for c in np.unique(cat[on_coll]).tolist():
            # summed in record order from 0.0 (cumsum adds one after another)
            total = np.cumsum(np.concatenate(([0.0], seconds[on_coll & (cat == c)])))[-1]
            out[CATEGORIES[c]] = total / scale
        return dict(sorted(out.items()))

    def _deps(self) -> np.ndarray:
        """Each op's dependencies (by id), a row per op padded with -1 (kept with the ops)."""
        deps = self._kept.get("deps")
        if deps is None:
            lists = list(map(attrgetter("deps"), self.trace.ops))
            counts = np.fromiter(map(len, lists), np.int64, len(lists))
            flat = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(counts.sum()))
            deps = np.full((len(lists), max(int(counts.max(initial=0)), 1)), -1, dtype=np.int64)
            first = np.repeat(np.cumsum(counts) - counts, counts)  # each dep's row start in flat
            deps[np.repeat(np.arange(len(lists)), counts), np.arange(len(flat)) - first] = flat
            self._kept["deps"] = deps
        return deps

    def _codes(self) -> dict[str, np.ndarray]:
        """Per op of the trace (by id): rank, category and stream (indices into
        ``CATEGORIES`` and ``STREAMS``), collective id (-1: not a collective op), whether it
        has dependencies, and its name and kind (indices into ``names`` and ``kinds``)."""
        if self._op_codes is None:
            ops, n = self.trace.ops, len(self.trace.ops)
            cat = {c: i for i, c in enumerate(CATEGORIES)}
            kind = list(map(attrgetter("kind"), ops))
            name = list(map(attrgetter("name"), ops))
            names = {v: i for i, v in enumerate(dict.fromkeys(name))}  # in order of appearance
            kinds = {v: i for i, v in enumerate(dict.fromkeys(kind))}
            self._op_codes = {
                "rank": np.fromiter(map(attrgetter("rank"), ops), np.int64, n),
                "category": np.fromiter(
                    map(cat.__getitem__, map(attrgetter("category"), ops)), np.int64, n
                ),
                "stream": np.fromiter(
                    map(STREAM_CODES.__getitem__, map(attrgetter("stream"), ops)), np.int64, n
                ),
                "coll": np.array(
                    [
                        o.args["coll"] if k == "collective" else -1
                        for o, k in zip(ops, kind, strict=True)
                    ],
                    dtype=np.int64,
                ),
                "has_deps": np.fromiter(map(bool, map(attrgetter("deps"), ops)), bool, n),
                "name": np.fromiter(map(names.__getitem__, name), np.int64, n),
                "kind": np.fromiter(map(kinds.__getitem__, kind), np.int64, n),
                "names": list(names),
                "kinds": list(kinds),
            }
            self._kept["codes"] = self._op_codes
        return self._op_codes

    def event_count(self) -> int:
        """Rows :meth:`events` would have (without building it): one per executed op, network
        batch and background sync round."""
        spans = self.rec.network.spans if self.rec.network else []
        return len(self.it) + len(spans) + len(self.rec.sync_rounds or ())

    def _collective_spans(self) -> np.ndarray:
        """Seconds of each (iteration, collective) from its last arrival to its end; NaN for
        one not recorded."""
        out = np.full((self.rec.iterations, len(self.trace.collectives)), np.nan)
        for (it, cid), cr in self.rec.collectives.items():
            out[it, cid] = cr.end_s - cr.start_s
        return out

    # ----------------------------------------------------------------------------- tables
    def events(self) -> pd.DataFrame:
        """One row per executed op, then one per network batch (collective phase) and one per
        background (shadow) sync round; sorted by start time, then rank, stream and name."""
        return self.event_table().to_frame()

    def event_table(self) -> Table:
        """:meth:`events` as columns (``base/table.py``: written without pandas)."""
        parts = [self._op_events(), self._network_events(), self._sync_round_events()]
        parts = [p for p in parts if p is not None]
        cols: dict = {}
        for key in ("iteration", "rank", "start_s", "end_s", "wait_s", "bytes"):
            cols[key] = np.concatenate(
                [np.broadcast_to(p.get(key, 0.0), len(p["start_s"])) for p in parts]
            )
        text = {}  # each string column as (values in sorted order, each row's index there)
        for key in ("stream", "name", "kind", "category"):
            vocab = sorted({v for p in parts for v in p[key][1]})
            code = {v: i for i, v in enumerate(vocab)}
            rows = [np.array([code[v] for v in p[key][1]])[p[key][0]] for p in parts]
            text[key] = (vocab, np.concatenate(rows))
        # the order of a stable sort by start time, rank, stream and name
        order = np.lexsort((text["name"][1], text["stream"][1], cols["rank"], cols["start_s"]))
        start, end = cols["start_s"][order], cols["end_s"][order]
        return Table(
            {
                "iteration": cols["iteration"][order].astype(np.int64),
                "rank": cols["rank"][order].astype(np.int64),
                **{k: strings(v)[c[order]] for k, (v, c) in text.items()},
                "start_s": start,
                "end_s": end,
                "wait_s": cols["wait_s"][order],
                "bytes": cols["bytes"][order],
                "duration_s": end - start,
            }
        )

    def _op_events(self) -> dict:
        """One row per executed op, as columns (strings as (codes, values)); ``wait_s`` is the
        time it sat ready behind its stream."""
        codes, idx = self._codes(), self.op
        return {
            "iteration": self.it,
            "rank": codes["rank"][idx],
            "stream": (codes["stream"][idx], list(STREAM_CODES)),
            "name": (codes["name"][idx], codes["names"]),
            "kind": (codes["kind"][idx], codes["kinds"]),
            "category": (codes["category"][idx], list(CATEGORIES)),
            "start_s": self.start,
            "end_s": self.end,
            "wait_s": self.start - self.free,
        }

    def _network_events(self) -> dict | None:
        """One row per network batch (rank -1, stream ``network``) with its bytes; None if none."""
        spans = self.rec.network.spans if self.rec.network else []
        if not spans:
            return None
        labels = [_span_label(s.tag, self.trace.collectives) for s in spans]
        return {
            "iteration": np.array([x[0] for x in labels], dtype=np.int64),
            "rank": -1,
            "stream": _constant("network", len(spans)),
            "name": _strings([x[1] for x in labels]),
            "kind": _constant("flows", len(spans)),
            "category": _strings([x[2] for x in labels]),
            "start_s": np.array([s.start_s for s in spans], dtype=float),
            "end_s": np.array([s.end_s for s in spans], dtype=float),
            "wait_s": 0.0,
            "bytes": np.array([s.bytes for s in spans], dtype=float),
        }

    def _sync_round_events(self) -> dict | None:
        """One row per background (ShadowSync) round on stream ``sync``; None if none."""
        sr = self.rec.sync_rounds
        if not sr:
            return None
        return {
            "iteration": np.array([x[3] for x in sr], dtype=np.int64),
            "rank": np.array([x[0] for x in sr], dtype=np.int64),
            "stream": _constant("sync", len(sr)),
            "name": _constant("shadow_round", len(sr)),
            "kind": _constant("sync", len(sr)),
            "category": _constant("sync", len(sr)),
            "start_s": np.array([x[1] for x in sr], dtype=float),
            "end_s": np.array([x[2] for x in sr], dtype=float),
            "wait_s": 0.0,
        }


#: each stream's index (``trace.STREAMS``) in the per-op codes of :class:`Analysis`
STREAM_CODES = {s: i for i, s in enumerate(STREAMS)}


def _constant(value: str, n: int) -> tuple[np.ndarray, list[str]]:
    """A string column of ``n`` rows all ``value``, as (codes, values)."""
    return np.zeros(n, dtype=np.int64), [value]


def _strings(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """A string column as (codes, values)."""
    index: dict[str, int] = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
    return codes, list(index)


def _span_label(tag: SpanTag, colls) -> tuple:
    """(iteration, name, category) of a network span from its tag: a UVM transfer, an embedding
    parameter-server transfer, a sync transfer or round, or a collective phase."""
    kind, it, index = tag
    if kind == "host":
        return it, f"uvm_rank{index}", "host_transfer"
    if kind == "emb_ps":
        return it, f"ps_rank{index}", "parameter_server"
    if kind in ("ps", "sync"):
        return it, f"sync_rank{index}" if kind == "ps" else "sync_round", "sync"
    return it, f"coll{index}", colls[index].op


def links_table(cluster, network, sim_time_s: float) -> pd.DataFrame:
    """Bytes and utilisation (of achieved capacity, over the whole run) per directed link, with
    its kind (``nvlink``, ``roce`` …) and role (``scale_up``, ``scale_out``, ``pcie``,
    ``socket``, ``memory``: ``topology.LINK_ROLES``)."""
    return link_table(cluster, network, sim_time_s).to_frame()


def link_table(cluster, network, sim_time_s: float) -> Table:
    """:func:`links_table` as columns (``base/table.py``: written without pandas)."""
    from zionsim.hardware.topology import LINK_ROLES

    r = cluster.router
    util = network.link_bytes / (r.capacity_Bps * sim_time_s) if sim_time_s > 0 else 0.0
    kinds = r.edge_kind.tolist()
    return Table(
        {
            "src": strings([u for u, _ in r.edge_names]),
            "dst": strings([v for _, v in r.edge_names]),
            "kind": strings(kinds),
            "role": strings([LINK_ROLES.get(k, k) for k in kinds]),
            "bw_Bps": r.bw_Bps,
            "capacity_Bps": r.capacity_Bps,
            "bytes": network.link_bytes,
            "utilisation": util,
        }
    )


def link_utilisation(cluster, network, sim_time_s: float) -> tuple[dict, dict]:
    """Mean utilisation of the links of each kind and of each role (``summary.json``) without
    building :func:`links_table`: the group means pandas takes of its columns
    (:func:`group_means`)."""
    from zionsim.hardware.topology import LINK_ROLES

    r = cluster.router
    util = network.link_bytes / (r.capacity_Bps * sim_time_s) if sim_time_s > 0 else 0.0
    util = np.broadcast_to(util, len(r.edge_kind)).tolist()
    groups = kept_for(_LINK_GROUPS, cluster)
    if "kind" not in groups:  # the links of each kind and of each role, in link order
        kinds = r.edge_kind.tolist()
        groups["kind"] = _positions(kinds)
        groups["role"] = _positions([LINK_ROLES.get(k, k) for k in kinds])
    return _means(groups["kind"], util), _means(groups["role"], util)


#: per live cluster, the links of each kind and role (``link_utilisation``)
_LINK_GROUPS: Registry = {}


def _positions(keys: list) -> dict:
    """Each key's positions in ``keys``, keys sorted."""
    out: dict = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return {k: out[k] for k in sorted(out)}


def _means(groups: dict, values: list[float]) -> dict:
    """:func:`group_means` of ``values`` grouped as ``groups`` (:func:`_positions`) says."""
    return {k: _kahan_mean([values[i] for i in where]) for k, where in groups.items()}


def _kahan_mean(values: list[float]) -> float:
    """The mean of ``values`` as :func:`group_means` takes a group's."""
    s, n = _kahan(values)
    return s / n if n else float("nan")


def group_means(keys: list, values: list[float]) -> dict:
    """``pandas``' ``groupby(keys).mean()`` of ``values`` as a dict, to the bit: keys sorted,
    NaN skipped (a group of only NaN is NaN), each group summed in row order with Kahan's
    compensation as pandas' ``group_mean`` does (an infinite value resets the compensation)."""
    return _means(_positions(keys), values)


_TRACE_RANKS_ALLOWED = "auto, all or comma-separated ranks of the run"
#: from this many ranks on, per-op spans are written for a sample of ranks only by default
TRACE_SAMPLE_FROM = 256


def trace_ranks(ranks: int, gpus_per_node: int, choice: str | list[int] | None = "auto") -> list:
    """Ranks whose per-op spans go into the events file and the Perfetto trace.

    ``all`` (or None): every rank.  ``auto``: every rank below :data:`TRACE_SAMPLE_FROM` ranks,
    else the ranks of the first node, 8 ranks evenly spaced over the others and the last rank.
    A list: those ranks (each must exist).

    >>> trace_ranks(1024, 8)[:9], len(trace_ranks(1024, 8))
    ([0, 1, 2, 3, 4, 5, 6, 7, 128], 16)
    """
    if choice is None or choice == "all" or (choice == "auto" and ranks < TRACE_SAMPLE_FROM):
        return list(range(ranks))
    if choice == "auto":
        first = range(min(gpus_per_node, ranks))
        spaced = range(ranks // 8, ranks, max(1, ranks // 8))
        return sorted({*first, *spaced, ranks - 1})
    bad = [r for r in choice if not 0 <= r < ranks]
    if bad or isinstance(choice, str):
        raise InputError(
            f"bad trace ranks {choice!r}", field="--trace-ranks", allowed=_TRACE_RANKS_ALLOWED
        )
    return sorted(set(choice))


def sample_events(events: pd.DataFrame | Table, ranks: list[int]) -> pd.DataFrame | Table:
    """The events of ``ranks``, with every network (rank -1) and sync-round row kept."""
    if isinstance(events, Table):
        rank = events["rank"]
        keep = np.isin(rank, ranks) | (rank < 0)
        return events if keep.all() else events.take(keep)
    keep = events["rank"].isin(ranks) | (events["rank"] < 0)
    return events if keep.all() else events[keep].reset_index(drop=True)


def rank_totals(events: pd.DataFrame | Table) -> pd.DataFrame:
    """Per rank (network -1 included) and category: seconds of op spans (summed over iterations),
    span count and bytes; kept for every rank whatever the events file samples."""
    if isinstance(events, Table):
        return rank_total_table(events).to_frame()
    g = events.groupby(["rank", "category"], sort=True)
    out = g.agg(busy_s=("duration_s", "sum"), spans=("duration_s", "size"), bytes=("bytes", "sum"))
    return out.reset_index()


def rank_total_table(events: Table) -> Table:
    """:func:`rank_totals` without pandas, to the bit: groups sorted by rank, then category;
    each sum taken in row order with Kahan's compensation as pandas' ``group_sum`` takes it
    (NaN skipped, an infinite value resets the compensation)."""
    rank, cat = events["rank"], events["category"]
    vocab, code = _sorted_codes(cat)
    key = rank.astype(np.int64) * max(len(vocab), 1) + code
    # groups by key from counts (the keys are small: ranks × categories), as np.unique
    # numbers them, without its sort of every row
    if len(key):
        counts = np.bincount(key - int(key.min()))
        present = counts > 0
        group = (np.cumsum(present) - 1)[key - int(key.min())]
        spans = counts[present]
    else:
        group, spans = key, np.zeros(0, dtype=np.int64)
    order = np.argsort(group.reshape(-1), kind="stable")  # each group's rows in row order
    bounds = np.concatenate(([0], np.cumsum(spans))).tolist()
    sums = {}
    for col in ("duration_s", "bytes"):
        values = events[col][order].tolist()
        sums[col] = [_kahan_sum(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    first = order[bounds[:-1]] if len(order) else order
    return Table(
        {
            "rank": rank[first].astype(np.int64),
            "category": strings(cat[first].tolist()),
            "busy_s": np.array(sums["duration_s"], dtype=np.float64),
            "spans": spans.astype(np.int64),
            "bytes": np.array(sums["bytes"], dtype=np.float64),
        }
    )


def _sorted_codes(values: np.ndarray) -> tuple[list, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a column of strings: its sorted distinct
    values and each row's index among them, by a dict in one pass (np.unique sorts every row,
    comparing Python strings: the superlinear part of the results at 65,536 GPUs)."""
    index: dict = {}
    seen = np.fromiter(
        (index.setdefault(v, len(index)) for v in values.tolist()), np.int64, len(values)
    )
    vocab = sorted(index)
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[[index[v] for v in vocab]] = np.arange(len(vocab))
    return vocab, rank[seen]


def _kahan_sum(values: list[float]) -> float:
    """The sum of ``values`` as pandas' ``group_sum`` takes a group's (NaN skipped)."""
    return _kahan(values)[0]


def _kahan(values: list[float]) -> tuple[float, int]:
    """The compensated sum of ``values`` as pandas' grouped sums and means take it (NaN
    skipped, a compensation that turns NaN dropped), and how many values it took."""
    s = c = 0.0
    n = 0
    for v in values:
        if v != v:
            continue
        y = v - c
        t = s + y
        c = t - s - y
        if c != c:
            c = 0.0
        s = t
        n += 1
    return s, n


def summary_row(summary: dict) -> dict:
    """A run summary flattened to one row: nested dicts as dotted keys, list fields dropped.

    >>> summary_row({"a": 1.0, "b": {"c": 2}, "d": [1]})
    {'a': 1.0, 'b.c': 2}
    """
    row: dict = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            row.update({f"{key}.{k}": v for k, v in summary_row(value).items()})
        elif not isinstance(value, list | tuple):
            row[key] = value
    return row
