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
    lanes = track_lanes(events)
    order = {s: i for i, s in enumerate(STREAM_TRACKS)}
    streams = events["stream"].tolist()
    tids = [order.get(s, len(order)) * 100 + int(n) for s, n in zip(streams, lanes, strict=True)]
    head: list[dict] = []
    for p in sorted(events["rank"].unique()):
        name = f"rank {p}" if p >= 0 else "network"
        head.append(_meta("process_name", int(p), 0, {"name": name}))
        head.append(_meta("process_sort_index", int(p), 0, {"sort_index": int(p)}))
    tracks = sorted(set(zip(events["rank"].astype(int), tids, streams, lanes, strict=True)))
    for rank, tid, stream, lane in tracks:
        label = STREAM_TRACKS.get(stream, stream) + (f" ({lane + 1})" if lane else "")
        head.append(_meta("thread_name", rank, tid, {"name": label}))
        head.append(_meta("thread_sort_index", rank, tid, {"sort_index": tid}))
    yield '{"traceEvents":['
    yield ",".join(_dumps(m) for m in head)
    sep = "," if head else ""
    cols = [events[c].tolist() for c in ("name", "category", "rank", "start_s", "end_s")]
    cols += [events["iteration"].tolist(), events["bytes"].tolist(), tids]
    text: dict[str, str] = {}  # names and categories, JSON-quoted once each
    for k in range(0, len(tids), CHUNK_EVENTS):
        part = [c[k : k + CHUNK_EVENTS] for c in cols]
        yield sep + ",".join(_span(*row, text) for row in zip(*part, strict=True))
        sep = ","
    yield '],"displayTimeUnit":"ms"}'


#: spans per piece of :func:`perfetto_json`
CHUNK_EVENTS = 20_000


def _span(name, cat, rank, start_s, end_s, iteration, nbytes, tid, text: dict) -> str:
    """One span as the JSON object :func:`perfetto` holds (keys in its order)."""
    ts = round(start_s * 1e6, 3)
    # from the rounded ends, so spans that touch do not overlap after rounding
    dur = round(round(end_s * 1e6, 3) - ts, 3)
    args = f'{{"iteration":{int(iteration)}'
    args += f',"bytes":{_num(float(nbytes))}}}' if nbytes else "}"
    if name not in text:
        text[name] = _dumps(name)
    if cat not in text:
        text[cat] = _dumps(cat)
    return (
        f'{{"name":{text[name]},"cat":{text[cat]},"ph":"X","pid":{int(rank)},"tid":{tid},'
        f'"ts":{_num(ts)},"dur":{_num(dur)},"args":{args}}}'
    )


def _num(x: float) -> str:
    """A float as ``json.dumps`` writes it."""
    return float.__repr__(x) if x - x == 0.0 else _dumps(x)


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def track_lanes(events: pd.DataFrame) -> np.ndarray:
    """Per event, the lane of its (rank, stream) track: 0 unless it overlaps an earlier span of
    the same track, then the lowest lane free at its start (interval partitioning)."""
    lanes = np.zeros(len(events), dtype=int)
    if events.empty:
        return lanes
    for _, idx in events.groupby(["rank", "stream"], sort=False).indices.items():
        start = events["start_s"].to_numpy()[idx]
        end = events["end_s"].to_numpy()[idx]
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
