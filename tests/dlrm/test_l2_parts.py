"""The tables each rank's lookup kernel reads (``l2_parts`` of ``embedding_fwd``), from the
sharding layout to the trace file (issue 25, round 9, h25l)."""

import json

import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.trace import op_args
from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict
from zionsim.dlrm.workload import load_workload


def _trace(ranks=4):
    w = load_workload("tiny")
    shards = [Shard(t.index, "TW", (t.index % ranks,)) for t in w.tables[1:]]
    shards.append(Shard(0, "RW", tuple(range(ranks))))
    return w, lower(w, Plan("mixed", tuple(shards)), ranks)


def test_parts_are_the_rank_tables_and_add_up_to_its_lookups():
    w, tr = _trace()
    fwd = [op for op in tr.ops if op.kind == "embedding_fwd" and op.args["lookups"] > 0]
    assert fwd
    for op in fwd:
        a = op_args(op)
        assert len(a.l2_parts) == a.tables
        assert sum(p[2] for p in a.l2_parts) == pytest.approx(a.lookups)
        assert all(0 < held <= rows for rows, held, *_ in a.l2_parts)
        assert all(p[4] == w.zipf_alpha for p in a.l2_parts)
    # the row-wise table is on every rank, a quarter of its rows each
    rows0 = w.tables[0].rows
    for op in fwd:
        parts = op.args["l2_parts"]
        assert any(p[0] == rows0 and p[1] == pytest.approx(rows0 / 4, abs=1) for p in parts)
    assert not any("l2_parts" in op.args for op in tr.ops if op.kind == "embedding_bwd")


def test_parts_survive_the_trace_file():
    _, tr = _trace()
    back = trace_from_dict(json.loads(json.dumps(trace_to_dict(tr))))
    for a, b in zip(tr.ops, back.ops, strict=True):
        if a.kind == "embedding_fwd":
            assert b.args.get("l2_parts") == a.args.get("l2_parts")
            assert isinstance(b.args.get("l2_parts", ()), tuple)


@pytest.mark.parametrize(
    "parts",
    [
        [[10, 20, 5, 64, 1.0]],
        [[10, 5, 5, 64]],
        "many",
        [[10, 5, -1, 64, 1.0]],
        [[10, 5, 5, 64, 99]],
    ],
)
def test_bad_parts_are_clear_errors(parts):
    _, tr = _trace()
    data = json.loads(json.dumps(trace_to_dict(tr)))
    i = next(i for i, o in enumerate(data["ops"]) if o["kind"] == "embedding_fwd")
    data["ops"][i]["args"]["l2_parts"] = parts
    with pytest.raises(InputError, match="l2_parts"):
        trace_from_dict(data)


def test_ranks_share_a_number_exactly_when_their_tables_are_equal():
    """l2_parts_by_rank numbers ranks by their table lists (hashed record by record): equal
    lists, equal numbers, and no two different lists share one, whether a record names one rank
    or an array of ranks."""
    import numpy as np

    from zionsim.dlrm import sharding

    w = load_workload("tiny")
    n = 8
    shards = [Shard(t.index, "TW", (t.index % 3,)) for t in w.tables[1:]]
    shards.append(Shard(0, "RW", tuple(range(n))))
    lay = sharding.layout(w, Plan("mixed", tuple(shards)), n, 8, 1.0)
    mixed = sharding.layout(w, Plan("mixed", tuple(shards)), n, 8, 1.0)
    mixed.l2_records = [
        (np.array([sel]) if isinstance(sel, int) and sel % 2 else sel, *rest)
        for sel, *rest in lay.l2_records
    ]
    per_rank = []
    for layout_ in (lay, mixed):
        ids, parts = sharding.l2_parts_by_rank(layout_, n)
        lists = [parts[i] for i in ids]
        for a in range(n):
            for b in range(n):
                assert (ids[a] == ids[b]) == (lists[a] == lists[b])
        per_rank.append(lists)
    assert per_rank[0] == per_rank[1]
    assert len(set(per_rank[0])) > 1  # ranks 0-2 hold table-wise tables, the others not
