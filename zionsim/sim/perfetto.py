"""The Chrome/Perfetto trace of a run's events (``trace.json``): one process per rank, the
network as process -1, one named track per stream, overlapping spans of one stream on numbered
tracks of their own; built as data or as streamed JSON text, written by ``io/files.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a table is built
    import pandas as pd


#: Perfetto track names of the streams, in display order (``trace.STREAMS`` plus the network)
STREAM_TRACKS = {
    "compute": "compute stream",
    "a2a": "all-to-all stream",
    "allreduce": "all-reduce stream",
    "ps": "parameter-server stream",
    "sync": "sync stream",
    "embedding": "embedding stream",
    "host": "host thread",
    "ps_push": "parameter-server push stream",
    "intra": "intra-node kernel stream",
    "network": "network",
}


def perfetto(events: pd.DataFrame) -> dict:
    """Chrome/Perfetto trace: one process per rank (the network as process -1, shown first), one
    named track per stream; spans of one stream that overlap in time (concurrent collectives on
    the network) go on numbered tracks of their own, so no track overlaps itself."""
    return json.loads("".join(perfetto_json(events)))


def perfetto_json(events: pd.DataFrame) -> Iterator[str]:
    """:func:`perfetto` as compact JSON text (``separators=(",", ":")``), in pieces of about
    :data:`CHUNK_EVENTS` events each, so a writer streams it to its file without holding the
    trace as objects (or whole) in memory; the text is the one ``json.dumps`` writes of it."""
    lanes = track_lanes(events).tolist()
    order = {s: i for i, s in enumerate(STREAM_TRACKS)}
    streams = events["stream"].tolist()
    tids = [order.get(s, len(order)) * 100 + n for s, n in zip(streams, lanes, strict=True)]
    ranks = events["rank"].astype(int).tolist()
    head: list[dict] = []
    for p in sorted(set(ranks)):
        name = f"rank {p}" if p >= 0 else "network"
        head.append(_meta("process_name", int(p), 0, {"name": name}))
        head.append(_meta("process_sort_index", int(p), 0, {"sort_index": int(p)}))
    tracks = sorted(set(zip(ranks, tids, streams, lanes, strict=True)))
    for rank, tid, stream, lane in tracks:
        label = STREAM_TRACKS.get(stream, stream) + (f" ({lane + 1})" if lane else "")
        head.append(_meta("thread_name", rank, tid, {"name": label}))
        head.append(_meta("thread_sort_index", rank, tid, {"sort_index": tid}))
    yield '{"traceEvents":['
    yield ",".join(_dumps(m) for m in head)
    sep = "," if head else ""
    cols = [events[c].tolist() for c in ("name", "category")] + [ranks]
    cols += [events["iteration"].tolist(), events["bytes"].tolist(), tids]
    starts = np.asarray(events["start_s"], dtype=np.float64)
    ends = np.asarray(events["end_s"], dtype=np.float64)
    heads: dict = {}  # each track's span text up to "ts" (and each name JSON-quoted), once
    args: dict[tuple, str] = {}  # each (iteration, bytes) pair's "args" object, written once
    for k in range(0, len(tids), CHUNK_EVENTS):
        part = [c[k : k + CHUNK_EVENTS] for c in cols]
        times = span_times(starts[k : k + CHUNK_EVENTS], ends[k : k + CHUNK_EVENTS])
        yield sep + ",".join(_spans(zip(*part, *times, strict=True), heads, args))
        sep = ","
    yield '],"displayTimeUnit":"ms"}'


#: spans per piece of :func:`perfetto_json`
CHUNK_EVENTS = 20_000


def _spans(rows, heads: dict, args: dict) -> list[str]:
    """Each span of ``rows`` (name, category, rank, iteration, bytes, track, and the texts of
    its start and duration, :func:`span_times`) as the JSON object :func:`perfetto` holds
    (keys in its order).  What repeats (a span's name and category, process and thread; an
    iteration's args) is looked up in ``heads`` and ``args`` (filled here) instead of
    formatted again: the Perfetto text was a tenth of the headline run's CPU time."""
    out: list[str] = []
    put = out.append
    for name, cat, rank, iteration, nbytes, tid, ts, dur in rows:
        try:
            head = heads[name, cat, rank, tid]
        except KeyError:
            quoted = heads.get(name) or heads.setdefault(name, _dumps(name))
            kind = heads.get(cat) or heads.setdefault(cat, _dumps(cat))
            head = heads[name, cat, rank, tid] = (
                f'{{"name":{quoted},"cat":{kind},"ph":"X","pid":{int(rank)},"tid":{tid},"ts":'
            )
        try:
            arg = args[iteration, nbytes]
        except KeyError:
            arg = f'{{"iteration":{int(iteration)}'
            arg += f',"bytes":{_num(float(nbytes))}}}}}' if nbytes else "}}"
            args[iteration, nbytes] = arg
        put(f'{head}{ts},"dur":{dur},"args":{arg}')
    return out


def span_times(start_s: np.ndarray, end_s: np.ndarray) -> tuple[list[str], list[str]]:
    """The JSON texts of the spans' ``ts`` and ``dur`` in microseconds: ``ts`` is
    ``round(start_s * 1e6, 3)`` and ``dur`` ``round(round(end_s * 1e6, 3) - ts, 3)`` (from the
    rounded ends, so spans that touch do not overlap after rounding), each as ``json.dumps``
    writes it.  Worked on whole arrays (:func:`_round_ns`, :func:`_ns_text`): the same numbers
    and text as Python's ``round`` and ``repr`` of each, which are checked against them in
    ``tests/sim/test_results.py``; a value out of that range (NaN, infinite, 10¹² µs or
    more) is left to Python."""
    with np.errstate(all="ignore"):
        ts, ts_ns, ok = _round_ns(start_s * 1e6)
        te, _, ok_end = _round_ns(end_s * 1e6)
        dur, dur_ns, ok_dur = _round_ns(te - ts)
    ts_text, dur_text = _ns_text(ts, ts_ns), _ns_text(dur, dur_ns)
    for i in np.flatnonzero(~(ok & ok_end & ok_dur)).tolist():
        t = round(float(start_s[i]) * 1e6, 3)
        ts_text[i] = _num(t)
        dur_text[i] = _num(round(round(float(end_s[i]) * 1e6, 3) - t, 3))
    return ts_text, dur_text


#: |µs| below which :func:`_round_ns` rounds (and :func:`_ns_text` writes) a value: its
#: nanoseconds have at most 15 digits, so the decimal of ``ns / 1000`` is what ``repr`` writes
EXACT_US = 1e12


def _round_ns(us: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``round(x, 3)`` of each microsecond value ``x`` as Python rounds a float (the exact
    binary value to the nearest thousandth, ties to even; the sign of a zero kept), its
    nanoseconds' magnitude, and where that holds (finite, under :data:`EXACT_US`).
    ``x * 1000`` is ``p + e`` exactly (Dekker's product, ``x`` split by Veltkamp's 2²⁷ + 1;
    1000 has 7 significant bits), so ``p``'s nearest integer is off only where ``p`` is a
    half and ``e`` breaks the tie; ``n / 1000`` is the double nearest the decimal ``n``
    thousandths, which is what ``round`` returns."""
    ok = np.abs(us) < EXACT_US  # NaN: False
    x = np.where(ok, us, 0.0)
    p = x * 1000.0
    hi = x * 134217729.0
    hi = hi - (hi - x)
    e = (hi * 1000.0 - p) + (x - hi) * 1000.0
    n = np.rint(p)
    d = p - n
    n += (d == 0.5) & (e > 0)
    n -= (d == -0.5) & (e < 0)
    n = np.abs(n)
    return np.copysign(n / 1000.0, x), n.astype(np.int64), ok


#: ``.`` and the thousandths 0-999 as ``repr`` ends a float (``.0``, ``.5``, ``.125``)
FRACTIONS = [".0"] + [f".{k:03d}".rstrip("0") for k in range(1, 1000)]
#: :data:`FRACTIONS` as numpy text, where numpy has whole-array text (2.0 and later)
_TEXT = np.array(FRACTIONS, dtype=np.dtypes.StringDType()) if hasattr(np, "strings") else None


def _ns_text(value: np.ndarray, ns: np.ndarray) -> list[str]:
    """``repr`` of each ``value`` = ±``ns`` / 1000 (:func:`_round_ns`): the whole microseconds
    and the thousandths without trailing zeros, ``-`` where the sign bit is set."""
    whole, frac = np.divmod(ns, 1000)
    neg = np.signbit(value)
    if _TEXT is None:  # numpy before 2.0: the same text, one value at a time
        return [
            f"{'-' if n else ''}{w}{FRACTIONS[f]}"
            for n, w, f in zip(neg.tolist(), whole.tolist(), frac.tolist(), strict=True)
        ]
    text = np.strings.add(whole.astype(_TEXT.dtype), _TEXT[frac])
    if neg.any():
        text = np.where(neg, np.strings.add("-", text), text)
    return text.tolist()


def _num(x: float) -> str:
    """A float as ``json.dumps`` writes it."""
    return float.__repr__(x) if x - x == 0.0 else _dumps(x)


#: ``json.dumps(obj, separators=(",", ":"))`` without building an encoder per call
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def _dumps(obj) -> str:
    return _COMPACT.encode(obj)


def _tracks(rank: np.ndarray, stream: np.ndarray) -> list[np.ndarray]:
    """The rows of each (rank, stream) pair, each in row order (pandas' ``groupby(...).indices``
    without pandas; the pairs' order does not matter to :func:`track_lanes`)."""
    _, code = np.unique(stream, return_inverse=True)
    _, key = np.unique(rank.astype(np.int64) * (int(code.max()) + 1) + code, return_inverse=True)
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return np.split(order, cuts)


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def track_lanes(events: pd.DataFrame) -> np.ndarray:
    """Per event, the lane of its (rank, stream) track: 0 unless it overlaps an earlier span of
    the same track, then the lowest lane free at its start (interval partitioning)."""
    lanes = np.zeros(len(events), dtype=int)
    if events.empty:
        return lanes
    starts, ends = np.asarray(events["start_s"]), np.asarray(events["end_s"])
    for idx in _tracks(np.asarray(events["rank"]), np.asarray(events["stream"], dtype=object)):
        start = starts[idx]
        end = ends[idx]
        order = np.lexsort((idx, start))
        s, e = start[order], end[order]
        if len(s) < 2 or np.all(s[1:] >= np.maximum.accumulate(e)[:-1]):
            continue  # a sequential stream: one lane
        free: list[float] = []  # end time of the last span on each lane
        for k, i in enumerate(order):
            lane = next((j for j, f in enumerate(free) if f <= s[k]), len(free))
            if lane == len(free):
                free.append(e[k])
            else:
                free[lane] = e[k]
            lanes[idx[i]] = lane
    return lanes
