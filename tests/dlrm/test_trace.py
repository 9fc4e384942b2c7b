"""Trace lowering: op counts, FLOPs and bytes of the tiny model against a hand calculation."""

import json

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict
from zionsim.dlrm.workload import load_workload


def _tiny_trace(ranks=4):
    w = load_workload("tiny")
    plan = Plan("tw", tuple(Shard(t.index, "TW", (t.index % ranks,)) for t in w.tables))
    return w, lower(w, plan, ranks)


def _gemm_flops(ops):
    return sum(2 * o.args["m"] * o.args["n"] * o.args["k"] for o in ops if o.kind == "gemm")


def test_op_counts():
    """22 ops per rank: 3 all-to-alls, 1 all-reduce bucket, 14 GEMMs, 2 embedding, 2 memory ops."""
    _, tr = _tiny_trace()
    assert len(tr.ops) == 4 * 22 and len(tr.collectives) == 4
    kinds = [o.kind for o in tr.by_rank()[0]]
    assert kinds.count("collective") == 4 and kinds.count("gemm") == 14
    assert kinds.count("memory") == 2


def test_gemm_flops_by_hand():
    """B=32: bottom 2·32·(8·32 + 32·16), dot 2·160·5·16, top 2·32·(26·32 + 32·1); backward ×2
    except the first bottom layer's dgrad."""
    _, tr = _tiny_trace()
    fwd = 2 * 32 * (8 * 32 + 32 * 16) + 2 * 160 * 5 * 16 + 2 * 32 * (26 * 32 + 32)
    bwd = 2 * fwd - 2 * 32 * 8 * 32
    assert _gemm_flops(tr.by_rank()[0]) == fwd + bwd == 373760


def test_embedding_bytes_by_hand():
    """Rank 0 owns t0 (pooling 2) and looks it up for the global batch: 128·2 rows of 64 B."""
    _, tr = _tiny_trace()
    e = next(o for o in tr.by_rank()[0] if o.name == "emb_fwd")
    assert (e.args["lookups"], e.args["row_bytes"]) == (256.0, 64.0)


def test_all_to_all_matrices_by_hand():
    """Indices: 32·(L+1)·8 B to each owner; pooled: 32·16·4 B from each owner to each rank."""
    _, tr = _tiny_trace()
    idx, pooled, grad, ar = tr.collectives
    assert idx.matrix[0].tolist() == [768.0, 512.0, 1024.0, 512.0]
    assert (pooled.matrix == 2048.0).all() and np.array_equal(grad.matrix, pooled.matrix.T)
    assert ar.op == "all_reduce" and ar.size_bytes == 1713 * 4


def test_round_trip_equals_in_memory():
    """A trace written to JSON and read back is the same trace."""
    _, tr = _tiny_trace()
    back = trace_from_dict(json.loads(json.dumps(trace_to_dict(tr))))
    assert trace_to_dict(back) == trace_to_dict(tr)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["ops"][3].update(kind="teleport"), "ops[3].kind"),
        (lambda d: d["ops"][5].update(deps=[77]), "ops[5].deps"),
        (lambda d: d["ops"][0]["args"].update(coll=99), "ops[0].args.coll"),
        (lambda d: d.update(schema="other/9"), "schema"),
    ],
)
def test_broken_traces_are_clear_errors(edit, field):
    """Unknown op kinds, broken dependencies and dangling collectives name the field."""
    _, tr = _tiny_trace()
    d = json.loads(json.dumps(trace_to_dict(tr)))
    edit(d)
    with pytest.raises(InputError) as err:
        trace_from_dict(d, "t.json")
    assert err.value.field == field and err.value.file == "t.json"


def _first(data, kind):
    return next(o for o in data["ops"] if o["kind"] == kind)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: _first(d, "gemm")["args"].update(m=float("nan")), r"args\.m: expected an integ"),
        (lambda d: _first(d, "gemm")["args"].update(k=2**40), r"args\.k: .*physical bound"),
        (lambda d: _first(d, "gemm")["args"].update(dtype="fp64"), r"args\.dtype: unknown value"),
        (lambda d: _first(d, "gemm")["args"].pop("n"), r"args\.n: missing"),
        (lambda d: _first(d, "gemm")["args"].update(flops=1.0), r"args\.flops: unknown argument"),
        (lambda d: _first(d, "memory")["args"].update(nbytes=-5.0), r"args\.nbytes: must be >= 0"),
        (lambda d: _first(d, "embedding_fwd")["args"].update(fused="yes"), r"args\.fused"),
        (lambda d: d["collectives"][0].update(size_bytes=-1), r"size_bytes: must be >= 0"),
        (lambda d: d["collectives"][0].update(ranks=[0, 0]), r"ranks: expected distinct"),
        (lambda d: d["ops"].__setitem__(0, "op"), r"ops\[0\]: expected a mapping"),
        (lambda d: d["meta"].update(global_batch=-128), r"meta.global_batch: must be >= 0"),
        (lambda d: d["meta"]["stack"].update(comm_slowdown=1e9), r"comm_slowdown: .*bound"),
        (lambda d: d.update(extra=1), r"extra: unknown field"),
    ],
)
def test_trace_file_fields_are_typed_and_bounded(edit, match):
    """Every op argument, collective and meta field of a trace file is checked for its type and
    bound: a NaN GEMM dimension or a negative size is refused, naming the field."""
    from zionsim.dlrm.stack import resolve_stack

    w = load_workload("tiny")
    trace = lower(w, Plan("rr", tuple(Shard(t.index, "TW", (t.index % 4,)) for t in w.tables)),
                  4, stack=resolve_stack("torchrec"))  # fmt: skip
    data = json.loads(json.dumps(trace_to_dict(trace)))
    edit(data)
    with pytest.raises(InputError, match=match):
        trace_from_dict(data, "t.json")


def test_whole_float_args_are_read_as_ints():
    """``"coll": 1.0`` and ``"m": 64.0`` (JSON writers may emit them) load as ints: a float
    collective id used to index a list and raise TypeError."""
    _, trace = _tiny_trace()
    data = json.loads(json.dumps(trace_to_dict(trace)))
    op = next(o for o in data["ops"] if o["kind"] == "collective")
    gemm = next(o for o in data["ops"] if o["kind"] == "gemm")
    op["args"]["coll"], gemm["args"]["m"] = float(op["args"]["coll"]), float(gemm["args"]["m"])
    again = trace_from_dict(data)
    assert type(again.ops[op["id"]].args["coll"]) is int
    assert type(again.ops[gemm["id"]].args["m"]) is int


def _native_ops(plan_ranks, ranks=4):
    """The tiny model lowered native (``fused=False``), table ``i`` on rank ``plan_ranks[i]``,
    and each rank's {op name: op}."""
    w = load_workload("tiny")
    plan = Plan("tw", tuple(Shard(t.index, "TW", (plan_ranks[t.index],)) for t in w.tables))
    tr = lower(w, plan, ranks, fused=False)
    return tr, [{o.name: o for o in ops} for ops in tr.by_rank()]


def test_native_backward_materialises_the_gradient_then_a_separate_optimizer_pass():
    """Native: ``emb_bwd`` is a memory op, one index_select kernel per table, of offset2bag
    (8 B) + a written gradient row per lookup + the bags' output gradients read; ``emb_opt``
    (category optimizer) follows it and reads the gradient back.  Fused: one ``emb_bwd``."""
    tr, by_rank = _native_ops([0, 0, 0, 1])
    r0 = by_rank[0]
    grad, opt = r0["emb_bwd"], r0["emb_opt"]
    lookups = 128 * (2 + 1 + 3)  # global batch 4·32, t0..t2 on rank 0
    assert (grad.kind, grad.category, grad.args["launches"]) == ("memory", "embedding", 3)
    assert grad.args["nbytes"] == lookups * (8 + 64) + 3 * 128 * 16 * 4
    assert (opt.kind, opt.category, opt.args["fused"]) == ("embedding_bwd", "optimizer", False)
    assert opt.deps == (grad.id,) and opt.args["lookups"] == lookups
    assert "launches" not in by_rank[1]["emb_bwd"].args  # one table: one kernel
    assert "emb_opt" not in by_rank[2] and by_rank[2]["emb_bwd"].kind == "embedding_bwd"
    back = trace_from_dict(json.loads(json.dumps(trace_to_dict(tr))))
    assert trace_to_dict(back) == trace_to_dict(tr)


def test_fused_lowering_has_no_separate_optimizer_pass():
    """The TBE backward carries the optimizer: no ``emb_opt``, ``emb_bwd`` is the embedding op."""
    _, tr = _tiny_trace()
    ops = {o.name: o for o in tr.by_rank()[0]}
    assert "emb_opt" not in ops and ops["emb_bwd"].kind == "embedding_bwd"


def test_lowered_ops_follow_the_typed_schema():
    """Every op a lowering writes fits its kind's typed arguments (``trace.OP_ARGS``), the
    schema the trace file checks and the engine reads; required fields are present."""
    from tests.conftest import TINY
    from zionsim.dlrm.trace import OP_ARGS, op_args
    from zionsim.sim.inputs import resolve_inputs
    from zionsim.sim.run import trace_of

    for extra in ({"stack": "hugectr"}, {"sync": "foreground-easgd"}, {"plan": "ps"},
                  {"sync": "shadow-ma", "fused": False}):  # fmt: skip
        trace, _, _ = trace_of(resolve_inputs({"topology": TINY, "workload": "tiny", **extra}))
        for op in trace.ops:
            args = op_args(op)
            assert isinstance(args, OP_ARGS[op.kind]) and set(op.args) <= set(args._fields)


def test_alike_ops_share_their_arguments_and_launches_do_not(monkeypatch):
    """Equal op arguments are one dict (at 65,536 ranks the trace's largest part): the trace is
    the one lowered with a dict per op, and a stack's launch ops, whose seconds grow as ops
    join their run, keep their own."""
    from collections import OrderedDict

    from zionsim.dlrm import lowering, trace_builder
    from zionsim.dlrm.stack import resolve_stack

    w = load_workload("tiny")
    plan = Plan("tw", tuple(Shard(t.index, "TW", (t.index % 4,)) for t in w.tables))
    stack = resolve_stack("torchrec")
    shared = lower(w, plan, 4, stack=stack)
    monkeypatch.setattr(trace_builder.TraceBuilder, "_shared", lambda self, kind, args: args)
    monkeypatch.setattr(lowering, "_CACHE", OrderedDict())  # lowered again, not the kept trace
    alone = lower(w, plan, 4, stack=stack)
    assert all(a is not b for a, b in zip(alone.ops, shared.ops, strict=True))
    assert trace_to_dict(shared) == trace_to_dict(alone)
    top = [o for o in shared.ops if o.name == "top_fwd0"]
    assert len(top) == 4 and len({id(o.args) for o in top}) == 1
    launches = [o for o in shared.ops if o.kind == "host"]
    assert launches and len({id(o.args) for o in launches}) == len(launches)
