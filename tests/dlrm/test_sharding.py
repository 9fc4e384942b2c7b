"""Sharding: bytes in every exchange match the plan, and traffic moves as physics says."""

from dataclasses import replace

import numpy as np
import pytest

from zionsim.dlrm.cache import harmonic, hit_rate
from zionsim.dlrm.plan import Plan, Shard, memory_by_rank
from zionsim.dlrm.sharding import first_row_block, layout, row_splits
from zionsim.dlrm.workload import load_workload

N, G_PER_NODE = 4, 2  # the tiny world: 2 nodes × 2 GPUs


def _plan(kind, ranks=None, tier="hbm", frac=0.0, w=None):
    w = w or load_workload("tiny")
    shards = []
    for t in w.tables:
        r = (
            ranks
            if ranks is not None
            else {"TW": (t.index % N,), "CW": (0, 1), "TWRW": (2, 3)}.get(kind, tuple(range(N)))
        )
        shards.append(Shard(t.index, kind, tuple(r), tier, frac))
    return Plan(kind, tuple(shards))


def test_all_to_allv_bytes_match_the_plan():
    """TW: pooled bytes = B·dim·4 per (table, sample rank); indices = B·(L+1)·8 per table."""
    w = load_workload("tiny")
    lay = layout(w, _plan("TW"), N, G_PER_NODE)
    B = w.batch_per_gpu
    assert lay.pooled_matrix.sum() == pytest.approx(len(w.tables) * N * B * 16 * 4)
    assert lay.input_matrix.sum() == pytest.approx(
        N * sum(B * (t.pooling + 1) * 8 for t in w.tables)
    )


def test_column_wise_keeps_pooled_bytes_and_adds_index_copies():
    """CW splits columns: the same pooled bytes, but each slice receives the indices again."""
    w = load_workload("tiny")
    tw, cw = layout(w, _plan("TW"), N, G_PER_NODE), layout(w, _plan("CW"), N, G_PER_NODE)
    assert cw.pooled_matrix.sum() == pytest.approx(tw.pooled_matrix.sum())
    assert cw.input_matrix.sum() == pytest.approx(2 * tw.input_matrix.sum())


def test_row_wise_spreads_lookups_and_uses_reduce_scatter():
    """RW: every rank serves 1/n of the lookups; output goes by reduce-scatter, not all-to-all."""
    w = load_workload("tiny")
    tw, rw = layout(w, _plan("TW"), N, G_PER_NODE), layout(w, _plan("RW"), N, G_PER_NODE)
    assert rw.lookups.sum() == pytest.approx(tw.lookups.sum())
    assert np.ptp(rw.lookups) == 0 and rw.pooled_matrix.sum() == 0
    assert rw.rw_bytes == pytest.approx(w.batch_per_gpu * N * 64 * 4)


def test_table_row_wise_moves_the_reduction_into_the_node():
    """TWRW: intra-node reduce-scatter, then node-to-node bytes of B·dim per sample rank."""
    w = load_workload("tiny")
    lay = layout(w, _plan("TWRW"), N, G_PER_NODE)
    assert set(lay.twrw_rs) == {1} and lay.pooled_matrix.sum() == 0
    assert lay.twrw_matrix[1].sum() == pytest.approx(2 * w.batch_per_gpu * 64 * 4)
    assert lay.lookups[:2].sum() == 0 and lay.lookups[2] == lay.lookups[3]


def test_data_parallel_has_no_embedding_exchange():
    """DP: local lookups only; the table's parameters join the all-reduce."""
    w = load_workload("tiny")
    lay = layout(w, _plan("DP"), N, G_PER_NODE)
    assert lay.input_matrix.sum() == 0 and lay.pooled_matrix.sum() == 0
    assert lay.dp_params == w.embedding_params


def test_quantised_communication_halves_collective_bytes():
    """FP16 communication halves pooled all-to-all bytes against FP32."""
    w32 = load_workload("tiny")
    w16 = load_workload("tiny", overrides=["precision.communication=fp16"])
    a = layout(w32, _plan("TW", w=w32), N, G_PER_NODE).pooled_matrix.sum()
    b = layout(w16, _plan("TW", w=w16), N, G_PER_NODE).pooled_matrix.sum()
    assert b == pytest.approx(a / 2)


def test_int8_rows_carry_scale_and_bias():
    """INT8 rows are dim bytes plus a 4-byte scale/bias; memory shrinks accordingly."""
    w = load_workload("tiny", overrides=["precision.embedding=int8"])
    mem = memory_by_rank(w, _plan("TW", w=w), N, G_PER_NODE)
    assert mem["embedding"].sum() == pytest.approx(sum(t.rows * (16 + 4) for t in w.tables))


def test_uvm_full_cache_equals_hbm():
    """Cache fraction 1 (hit rate 1): no host traffic, same lookups as all-HBM."""
    w = load_workload("tiny")
    hbm = layout(w, _plan("TW"), N, G_PER_NODE)
    uvm = layout(w, _plan("TW", tier="uvm", frac=1.0), N, G_PER_NODE)
    assert uvm.host_bytes.sum() == 0 and np.array_equal(uvm.lookups, hbm.lookups)
    assert uvm.dram_bytes.sum() == 0


def test_uvm_misses_fall_with_skew_and_cache():
    """More cache or more skew never raises host traffic."""
    w = load_workload("tiny")
    small = layout(w, _plan("TW", tier="uvm", frac=0.1), N, G_PER_NODE, 1.0).host_bytes.sum()
    big = layout(w, _plan("TW", tier="uvm", frac=0.5), N, G_PER_NODE, 1.0).host_bytes.sum()
    skew = layout(w, _plan("TW", tier="uvm", frac=0.1), N, G_PER_NODE, 1.3).host_bytes.sum()
    assert 0 < big < small and skew < small


def test_zipf_hit_rate():
    """Uniform access: hit rate = cached share; H(n, α) matches the exact sum past the switch."""
    assert hit_rate(1000, 250, 0.0) == pytest.approx(0.25)
    assert hit_rate(10, 20, 1.0) == 1.0 and hit_rate(10, 0, 1.0) == 0.0
    exact = float(np.sum(np.arange(1, 30001, dtype=float) ** -1.1))
    assert harmonic(30000, 1.1) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize(
    "rows, k, parts",
    [
        (10, 4, [3, 3, 3, 1]),  # TorchRec's own examples (_calculate_rw_shard_sizes_and_offsets)
        (5, 4, [2, 2, 1, 0]),
        (9, 4, [3, 3, 3, 0]),
        (2000, 16, [125] * 16),
        (39_884_406, 16, [2_492_776] * 15 + [2_492_766]),  # mlperf_dlrm t00 on 2 ZionEX nodes
    ],
)
def test_rows_split_in_torchrec_ceiling_blocks(rows, k, parts):
    """ceil(rows/k) rows per block, the last one short: the split TorchRec routes ids by."""
    assert row_splits(rows, k) == parts
    assert first_row_block(rows, k) == parts[0]  # the planner's, without listing the blocks


def test_row_wise_bytes_and_lookups_follow_the_ceiling_split():
    """RW of 1,000 rows over 16 ranks: 15 ranks hold 63 rows, the last 55; each rank's HBM
    bytes and lookups are its rows' share of the table's."""
    w = load_workload("tiny")
    t = w.tables[0]
    plan = Plan("rw", (Shard(0, "RW", tuple(range(16))),))
    wt = replace(w, tables=(t,))
    lay = layout(wt, plan, 16, 8)
    rb = lay.hbm_bytes[0] / 63
    np.testing.assert_allclose(lay.hbm_bytes, [63 * rb] * 15 + [55 * rb])
    G = w.batch_per_gpu * 16
    np.testing.assert_allclose(lay.lookups, G * t.pooling * np.array([63] * 15 + [55]) / 1000)


def test_ranks_with_equal_row_parts_are_laid_out_at_once(monkeypatch):
    """A row split's ranks holding equally many rows are laid out together: every figure of the
    layout is the one laid out rank by rank, exactly (RW over all ranks and over some, TWRW,
    UVM, uneven last blocks, and a rank listed twice)."""
    from zionsim.dlrm import sharding

    w = load_workload("tiny")
    shards = (
        Shard(0, "RW", tuple(range(16))),
        Shard(1, "RW", (1, 3, 5)),
        Shard(2, "TWRW", tuple(range(8, 16))),
        Shard(3, "RW", tuple(range(16)), "uvm", 0.25),
    )
    plans = [Plan("mixed", shards), Plan("twice", (*shards[:3], Shard(3, "RW", (2, 2, 4))))]
    for plan in plans:
        fast = layout(w, plan, 16, 8, w.zipf_alpha)
        with monkeypatch.context() as m:
            m.setattr(sharding, "_alike_parts", lambda r, rows: list(zip(r, rows, strict=True)))
            slow = layout(w, plan, 16, 8, w.zipf_alpha)
        for key, value in vars(slow).items():
            other = getattr(fast, key)
            if key == "l2_records":  # per rank, the same tables in the same order
                ids, parts = sharding.l2_parts_by_rank(slow, 16)
                fast_ids, fast_parts = sharding.l2_parts_by_rank(fast, 16)
                assert [parts[i] for i in ids] == [fast_parts[i] for i in fast_ids]
            elif isinstance(value, np.ndarray):
                assert np.array_equal(value, other), key
            elif hasattr(value, "row"):
                assert np.array_equal(value.row, other.row) and np.array_equal(value.col, other.col)
            else:
                assert value == other, key
