"""SOK's ``--compress``: keys deduplicated per GPU before the model-parallel exchange
(``stack.key_dedup``, zionsim/dlrm/stack.py item 7d; zionsim/dlrm/dedup.py ``deduplicated``)."""

from __future__ import annotations

import dataclasses

import pytest

from zionsim.base.errors import InputError
from zionsim.dlrm import lowering, sharding
from zionsim.dlrm.cache import unique_rows
from zionsim.dlrm.dedup import (
    DEDUP_INDEX_BYTES,
    UNIQUE_BYTES_PER_DISTINCT,
    UNIQUE_BYTES_PER_KEY,
    UNIQUE_KERNELS,
    deduplicated,
)
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.stack import load_stack, stack_from_dict
from zionsim.dlrm.workload import workload_from_dict

B = 64  # samples per GPU
#: (rows, dim) of the one-hot tables: a hot small table (most keys repeat) and a large one
TABLES = [(50, 16), (100_000, 8)]


def _workload(pooling: int = 1):
    return workload_from_dict(
        {
            "name": "onehot",
            "batch_per_gpu": B,
            "dense_features": 4,
            "precision": {"embedding": "fp32", "dense": "fp32", "communication": "fp32"},
            "optimizer": {"embedding": "sgd", "dense": "sgd"},
            "tables": [
                {"name": f"t{i}", "rows": rows, "dim": dim, "pooling": pooling if i else 1}
                for i, (rows, dim) in enumerate(TABLES)
            ],
            "bottom_mlp": [4, 16],
            "top_mlp": [8, 1],
            "interaction": {"kind": "concat"},
        }
    )


TW = Plan("tw", (Shard(0, "TW", (0,)), Shard(1, "TW", (1,))))


def _stack(dedup: bool):
    return stack_from_dict({"name": "s", "key_dedup": dedup})


def _trace(dedup: bool, plan: Plan = TW, w=None):
    lowering._CACHE.clear()
    return lower(w or _workload(), plan, 2, stack=_stack(dedup))


def _distinct(rows: int) -> float:
    return unique_rows(rows, B, 1.0)


def _ops(trace, rank=0):
    return {op.name: op for op in trace.ops if op.rank == rank}


def test_stack_field_loads_defaults_off_and_refuses_a_non_boolean():
    """The built-in SOK stack leaves it off (the AMP rows run without --compress); a case turns
    it on; a string is refused naming the field."""
    assert load_stack("tensorflow_sok").key_dedup is False
    assert load_stack("tensorflow_sok", {"key_dedup": True}).key_dedup is True
    assert "key_dedup" not in load_stack("tensorflow_sok").to_dict()
    with pytest.raises(InputError, match="key_dedup"):
        stack_from_dict({"name": "s", "key_dedup": "yes"})


def _matrix(trace, name):
    """The byte matrix of the collective that rank 0's op ``name`` runs."""
    return trace.collectives[_ops(trace)[name].args["coll"]].matrix


def test_exchange_and_lookups_shrink_to_the_distinct_keys_of_each_table():
    """Each table's vectors (forward and gradient), its keys and its owner's lookups scale by
    the expected distinct keys among a GPU's B keys (Zipf draws, cache.unique_rows)."""
    base, dedup = _trace(False), _trace(True)
    for r, (rows, _) in enumerate(TABLES):  # table r lives on rank r
        share = _distinct(rows) / B
        assert 0 < share < 1
        assert _matrix(dedup, "pooled_a2a").row[r] == pytest.approx(
            _matrix(base, "pooled_a2a").row[r] * share
        )
        assert _matrix(dedup, "grad_a2a").col[r] == pytest.approx(
            _matrix(base, "grad_a2a").col[r] * share
        )
        assert _matrix(dedup, "input_a2a").col[r] == pytest.approx(
            _matrix(base, "input_a2a").col[r] * share
        )
        assert _ops(base, r)["emb_fwd"].args["lookups"] == 2 * B
        assert _ops(dedup, r)["emb_fwd"].args["lookups"] == pytest.approx(2 * B * share)
        assert _ops(dedup, r)["emb_bwd"].args["lookups"] == pytest.approx(2 * B * share)


def test_dedup_kernels_carry_their_bytes_and_sit_around_the_exchange():
    """tf.unique before the index all-to-all, tf.gather after the vectors' exchange (before the
    interaction), its gradient's segment sum before the gradient all-to-all."""
    ops = _ops(_trace(True))
    keys = B * len(TABLES)
    distinct = sum(_distinct(rows) for rows, _ in TABLES)
    vectors = sum(B * dim * 4 for _, dim in TABLES)
    distinct_vectors = sum(_distinct(rows) * dim * 4 for rows, dim in TABLES)
    uq = ops["key_unique"]
    assert uq.args["nbytes"] == pytest.approx(
        keys * UNIQUE_BYTES_PER_KEY + distinct * UNIQUE_BYTES_PER_DISTINCT
    )
    assert uq.args["launches"] == UNIQUE_KERNELS == 22
    assert UNIQUE_BYTES_PER_KEY == 236 and UNIQUE_BYTES_PER_DISTINCT == 104
    assert uq.id in ops["input_a2a"].deps
    ex = ops["emb_expand"]
    assert ex.args["nbytes"] == pytest.approx(keys * DEDUP_INDEX_BYTES + 2 * vectors)
    assert ops["pooled_a2a"].id in ex.deps
    assert any(ex.id in op.deps for op in ops.values() if op.category == "interaction")
    back = ops["emb_expand_bwd"]
    assert back.args["nbytes"] == pytest.approx(
        distinct_vectors + keys * DEDUP_INDEX_BYTES + 2 * vectors
    )
    assert back.id in ops["grad_a2a"].deps


def test_without_dedup_the_trace_is_unchanged():
    """key_dedup off lowers exactly the trace of a stack without the field."""
    off = _trace(False)
    plain = lower(_workload(), TW, 2, stack=stack_from_dict({"name": "s"}))
    assert [(o.name, o.args) for o in off.ops] == [(o.name, o.args) for o in plain.ops]
    assert not any(o.name.startswith(("key_unique", "emb_expand")) for o in off.ops)


def test_replicated_tables_stay_and_only_exchanged_keys_are_deduplicated():
    """A DP table is looked up locally and exchanges nothing: its lookups stay, and its keys are
    not counted in the dedup kernels."""
    plan = Plan("mix", (Shard(0, "DP", (0, 1)), Shard(1, "TW", (1,))))
    base, dedup = _trace(False, plan), _trace(True, plan)
    share = _distinct(TABLES[1][0]) / B
    assert _ops(dedup, 0)["emb_fwd"].args["lookups"] == _ops(base, 0)["emb_fwd"].args["lookups"]
    assert _ops(dedup, 1)["emb_fwd"].args["lookups"] == pytest.approx(B + 2 * B * share)
    uq = _ops(dedup)["key_unique"]
    expected = B * UNIQUE_BYTES_PER_KEY + _distinct(TABLES[1][0]) * UNIQUE_BYTES_PER_DISTINCT
    assert uq.args["nbytes"] == pytest.approx(expected)


def test_row_wise_shards_shrink_their_reduce_scatter_too():
    """RW over every rank: the reduce-scatter / all-gather of the table shrink by its share."""
    plan = Plan("rw", (Shard(0, "TW", (0,)), Shard(1, "RW", (0, 1))))
    w = _workload()
    base = sharding.layout(w, plan, 2, 2)
    lay, d = deduplicated(w, plan, base, 2, 2, 1.0)
    share = _distinct(TABLES[1][0]) / B
    assert lay.rw_bytes == pytest.approx(base.rw_bytes * share)
    assert d.keys == 2 * B and d.distinct == pytest.approx(
        _distinct(TABLES[0][0]) + _distinct(TABLES[1][0])
    )
    assert base.rw_bytes == sharding.layout(w, plan, 2, 2).rw_bytes  # the input is not changed


def test_multi_hot_and_unsupported_shards_are_refused():
    """--compress sits in front of SOK's all-to-all dense embedding of one-hot tables: a pooled
    table, a HYB shard or a parameter-server table is refused, naming the field."""
    with pytest.raises(InputError, match=r"stack\.key_dedup.*pooling 3"):
        _trace(True, TW, _workload(pooling=3))
    ps = Plan("ps", (Shard(0, "TW", (0,)), Shard(1, "TW", (1,), tier="ps", server=0)))
    with pytest.raises(InputError, match="parameter server"):
        deduplicated(_workload(), ps, sharding.layout(_workload(), TW, 2, 2), 2, 2, 1.0)
    hyb = dataclasses.replace(TW, shards=(TW.shards[0], Shard(1, "HYB", (0, 1))))
    with pytest.raises(InputError, match="HYB"):
        deduplicated(_workload(), hyb, sharding.layout(_workload(), TW, 2, 2), 2, 2, 1.0)


def test_sok_fp32_cases_state_compress_and_amp_cases_do_not():
    """The README runs its FP32 rows with --compress and its AMP rows without."""
    from zionsim.measure.validate import load_cases

    cases = {c.id: c for c in load_cases() if c.source == "sok_dlrm"}
    assert len(cases) == 6
    for cid, c in cases.items():
        options = c.params.get("options", c.params)
        assert options.get("stack.key_dedup", False) is ("fp32" in cid), (cid, c.params)
