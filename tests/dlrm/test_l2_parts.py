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
        assert any(p[0] == rows0 and p[1] == pytest.approx(rows0 / 4, abs=1) for p in op.args["l2_parts"])
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
    [[[10, 20, 5, 64, 1.0]], [[10, 5, 5, 64]], "many", [[10, 5, -1, 64, 1.0]], [[10, 5, 5, 64, 99]]],
)
def test_bad_parts_are_clear_errors(parts):
    _, tr = _trace()
    data = json.loads(json.dumps(trace_to_dict(tr)))
    i = next(i for i, o in enumerate(data["ops"]) if o["kind"] == "embedding_fwd")
    data["ops"][i]["args"]["l2_parts"] = parts
    with pytest.raises(InputError, match="l2_parts"):
        trace_from_dict(data)
