"""Run tables: the Perfetto trace (named tracks, no track overlapping itself) and link roles."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.hardware.topology import LINK_ROLES, SCALE_OUT_KINDS
from zionsim.sim.perfetto import perfetto, perfetto_json, track_lanes
from zionsim.sim.run import run_point


def _events(rows):
    cols = ["iteration", "rank", "stream", "name", "kind", "category", "start_s", "end_s", "bytes"]
    df = pd.DataFrame(rows, columns=cols)
    return df.assign(wait_s=0.0, duration_s=df["end_s"] - df["start_s"])


EVENTS = _events(
    [
        (0, 0, "compute", "emb_fwd", "embedding_fwd", "embedding", 0.0, 1e-3, 0.0),
        (0, 0, "a2a", "pooled_a2a", "collective", "all_to_all", 1e-3, 3e-3, 0.0),
        (0, -1, "network", "coll0", "flows", "all_to_all", 1e-3, 3e-3, 1e6),
        (0, -1, "network", "coll1", "flows", "all_reduce", 2e-3, 5e-3, 2e6),  # overlaps coll0
        (0, -1, "network", "coll2", "flows", "all_reduce", 2.5e-3, 4e-3, 1e6),  # overlaps both
        (0, -1, "network", "coll3", "flows", "all_to_all", 3e-3, 6e-3, 1e6),  # coll0's lane again
    ]
)


def test_overlapping_spans_get_lanes():
    assert list(track_lanes(EVENTS)) == [0, 0, 0, 1, 2, 0]


def _tracks(trace):
    names, spans = {}, defaultdict(list)
    for e in trace["traceEvents"]:
        if e["name"] == "thread_name":
            names[e["pid"], e["tid"]] = e["args"]["name"]
        elif e["ph"] == "X":
            spans[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    return names, spans


def test_perfetto_tracks_are_named_and_never_overlap():
    names, spans = _tracks(perfetto(EVENTS))
    assert set(names.values()) == {
        "compute stream", "all-to-all stream", "network", "network (2)", "network (3)"}  # fmt: skip
    assert set(spans) <= set(names)
    for track in spans.values():
        ordered = sorted(track)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(ordered, ordered[1:], strict=False))


def test_perfetto_of_a_run():
    """A real run: every stream's track is named; no track overlaps itself after rounding."""
    r = run_point({"topology": TINY, "workload": "tiny", "iterations": 2})
    names, spans = _tracks(r.perfetto())
    assert set(spans) <= set(names)
    assert {"compute stream", "all-to-all stream", "all-reduce stream"} <= set(names.values())
    for track in spans.values():
        ordered = sorted(track)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(ordered, ordered[1:], strict=False))


def test_streamed_perfetto_is_the_json_of_its_own_objects(monkeypatch):
    """The streamed text, in pieces, is exactly what ``json.dumps`` writes of the objects it
    holds (floats as Python writes them, NaN as JSON's NaN, names escaped), and the same for
    any piece size."""
    import json

    import zionsim.sim.perfetto as trace_json

    r = run_point({"topology": TINY, "workload": "tiny", "iterations": 2})
    nan, inf = float("nan"), float("inf")
    odd = _events([(0, 0, "compute", 'say "hi"\\é', "gemm", "gemm", 1 / 3, 0.7, nan)])
    odder = _events(
        [
            (1, 0, "a2a", "x", "a2a", "a2a", nan, inf, 3.0),
            (1, 0, "a2a", "x", "a2a", "a2a", 0.1, inf, 3.0),
        ]
    )
    for events in (r.events, EVENTS, odd, odder, EVENTS.iloc[:0]):
        pieces = list(perfetto_json(events))
        text = "".join(pieces)
        assert text == json.dumps(json.loads(text), separators=(",", ":"))
        monkeypatch.setattr(trace_json, "CHUNK_EVENTS", 2)
        assert "".join(perfetto_json(events)) == text
        monkeypatch.undo()
    assert len(list(perfetto_json(r.events))) >= 4


@pytest.mark.parametrize("kind", SCALE_OUT_KINDS)
def test_link_roles(kind, tmp_path):
    """Whatever the scale-out kind, its links are the scale_out role in links.csv and summary."""
    topology = tmp_path / f"tiny_{kind}.yaml"
    topology.write_text(Path(TINY).read_text().replace("roce", kind))
    r = run_point({"topology": str(topology), "workload": "tiny", "iterations": 2})
    roles = dict(zip(r.links["kind"], r.links["role"], strict=True))
    assert roles[kind] == "scale_out" and roles["nvlink"] == "scale_up"
    assert roles["pcie"] == "pcie" and roles["dram"] == "memory"
    assert set(r.links["role"]) <= set(LINK_ROLES.values())
    by_role = r.summary["link_utilisation_by_role"]
    assert by_role["scale_out"] == pytest.approx(r.summary["link_utilisation_by_kind"][kind])
    assert by_role["scale_out"] > 0


def test_op_records_hold_members_compactly():
    """A stepped op's row, then its class members' records with its times: iterating and
    ``columns`` give every record in that order."""
    import numpy as np

    from zionsim.sim.records import OpRecord, OpRecords

    rec = OpRecords()
    rec.rows += [(0, 0, 0.0, 0.5, 1.0), (0, 1, 1.0, 1.0, 2.0), (1, 0, 2.0, 2.5, 3.0)]
    rec.copies += [(0, np.array([4, 8])), (2, np.array([4, 8]))]
    want = [
        OpRecord(0, 0, 0.0, 0.5, 1.0),
        OpRecord(0, 4, 0.0, 0.5, 1.0),
        OpRecord(0, 8, 0.0, 0.5, 1.0),
        OpRecord(0, 1, 1.0, 1.0, 2.0),
        OpRecord(1, 0, 2.0, 2.5, 3.0),
        OpRecord(1, 4, 2.0, 2.5, 3.0),
        OpRecord(1, 8, 2.0, 2.5, 3.0),
    ]
    assert list(rec) == want and len(rec) == len(want)
    assert [c.tolist() for c in rec.columns()] == [list(x) for x in zip(*want, strict=True)]
