"""Distinct rows of MLPerf DLRM-DCNv2's synthetic multi-hot lists (``cache.multi_hot_unique_rows``)
against a replay of the generator, and the workload field that selects them."""

import numpy as np
import pytest
import yaml

from zionsim.base.errors import InputError
from zionsim.dlrm.cache import multi_hot_unique_rows, unique_rows
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.workload import load_workload


def _generator_distinct(rows, samples, pooling, alpha, batches, seed=0):
    """Mean distinct rows per batch, the MLPerf way: every one-hot id gets one fixed list
    ``[x, r_1, ..., r_(L-1)]`` of uniform random ids (made once, as multi_hot.py's
    ``__make_multi_hot_indices_tables``), each sample a Zipf(alpha) one-hot id and its list."""
    rng = np.random.default_rng(seed)
    lists = np.concatenate(
        (np.arange(rows)[:, None], rng.integers(0, rows, size=(rows, pooling - 1))), axis=1
    )
    p = np.arange(1, rows + 1, dtype=float) ** -alpha
    p /= p.sum()
    got = [np.unique(lists[rng.choice(rows, size=samples, p=p)]).size for _ in range(batches)]
    return float(np.mean(got))


@pytest.mark.parametrize(
    "rows, samples, pooling, alpha",
    [
        (200_000, 4_000, 12, 1.0),  # a large table: the lists barely collide
        (20_000, 3_000, 8, 1.0),  # the random entries start to cover the table
        (500, 2_000, 10, 1.0),  # a small table, saturated
        (50_000, 5_000, 3, 1.2),  # more skewed ids
    ],
)
def test_matches_a_replay_of_the_generator(rows, samples, pooling, alpha):
    want = _generator_distinct(rows, samples, pooling, alpha, batches=12)
    # the replay's own spread: about 1/sqrt(distinct ids · batches), under 1 % here
    assert multi_hot_unique_rows(rows, samples, pooling, alpha) == pytest.approx(want, rel=0.015)


def test_differs_from_independent_draws_where_lists_repeat():
    """A repeated one-hot id repeats its whole list: distinct rows are about L times the distinct
    ids, far more than the distinct rows of samples·L independent Zipf draws (which repeat the
    hot rows), and the replay agrees with the former, not the latter."""
    rows, samples, pooling = 2_000_000, 4_000, 12
    lists = multi_hot_unique_rows(rows, samples, pooling, 1.0)
    independent = unique_rows(rows, samples * pooling, 1.0)
    ids = unique_rows(rows, samples, 1.0)
    assert lists > 1.2 * independent
    assert lists == pytest.approx(pooling * ids, rel=0.01)  # no collisions to speak of here
    replay = _generator_distinct(rows, samples, pooling, 1.0, batches=4, seed=1)
    assert abs(replay - lists) < 0.2 * abs(replay - independent)


def test_one_hot_is_the_zipf_count_and_limits_hold():
    assert multi_hot_unique_rows(40e6, 55_296, 1, 1.0) == pytest.approx(
        unique_rows(40e6, 55_296, 1.0)
    )
    assert multi_hot_unique_rows(3, 10_000, 1, 1.0) == pytest.approx(3.0)
    assert multi_hot_unique_rows(1, 5, 4, 1.0) == 1.0
    assert multi_hot_unique_rows(100, 0, 4, 1.0) == 0.0
    assert multi_hot_unique_rows(0, 10, 4, 1.0) == 0.0
    big = multi_hot_unique_rows(40e6, 55_296, 100, 1.0)
    assert big <= 55_296 * 100
    # more samples never touch fewer rows, longer lists never touch fewer rows
    seq = [multi_hot_unique_rows(1e6, s, 7, 1.0) for s in (1, 10, 1e3, 1e5, 1e7)]
    assert seq == sorted(seq) and seq[-1] <= 1e6
    seq = [multi_hot_unique_rows(1e6, 1e4, L, 1.0) for L in (1, 2, 5, 27, 100)]
    assert seq == sorted(seq)


def _one_table_workload(tmp_path, multi_hot, pooling=12):
    data = yaml.safe_load(open(load_workload("mlperf_dlrm_dcnv2").file).read())
    data["tables"] = [{"name": "t", "rows": 40_000_000, "dim": 128, "pooling": pooling}]
    if multi_hot is None:
        data.pop("multi_hot")
    else:
        data["multi_hot"] = multi_hot
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_workload(str(path))


def test_the_dcnv2_workload_runs_the_generators_lists_when_asked():
    """mlperf_dlrm_dcnv2 keeps independent draws by default (its YAML says why: the backward's
    reuse of the lists is not modelled); the generator's lists are one override away."""
    from zionsim.dlrm.workload import load_workload as load

    for name in ("tiny", "mlperf_dlrm", "neo_model_a", "mlperf_dlrm_dcnv2"):
        assert load_workload(name).multi_hot == "independent"
    lists = load("mlperf_dlrm_dcnv2", overrides={"multi_hot": "fixed_uniform"})
    assert lists.multi_hot == "fixed_uniform"


def test_layout_counts_distinct_rows_per_shard_as_the_lists_say(tmp_path):
    """A row-wise table over 8 GPUs: each GPU updates its share of the batch's distinct rows,
    ``multi_hot_unique_rows`` of the global batch under ``fixed_uniform``, the independent-draw
    count without the field; pooling 1 gives the same either way."""
    n = 8
    plan = Plan("rw", (Shard(0, "RW", tuple(range(n)), "hbm", 0.0),))
    lists = _one_table_workload(tmp_path, "fixed_uniform")
    indep = _one_table_workload(tmp_path, None)
    G, L = lists.batch_per_gpu * n, 12
    got = layout(lists, plan, n, 8, 1.0).unique_rows
    assert got == pytest.approx(np.full(n, multi_hot_unique_rows(4e7, G, L, 1.0) / n))
    assert layout(indep, plan, n, 8, 1.0).unique_rows == pytest.approx(
        np.full(n, unique_rows(4e7, G * L, 1.0) / n)
    )
    assert got.sum() > 1.2 * layout(indep, plan, n, 8, 1.0).unique_rows.sum()
    one = [_one_table_workload(tmp_path, m, pooling=1) for m in ("fixed_uniform", None)]
    a, b = (layout(w, plan, n, 8, 1.0).unique_rows for w in one)
    assert a == pytest.approx(b)


def test_data_parallel_table_counts_the_ranks_own_samples(tmp_path):
    w = _one_table_workload(tmp_path, "fixed_uniform", pooling=5)
    plan = Plan("dp", (Shard(0, "DP", tuple(range(4)), "hbm", 0.0),))
    got = layout(w, plan, 4, 4, 1.0).unique_rows
    assert got == pytest.approx(np.full(4, multi_hot_unique_rows(4e7, w.batch_per_gpu, 5, 1.0)))


def test_unknown_multi_hot_value_is_refused(tmp_path):
    with pytest.raises(InputError) as err:
        _one_table_workload(tmp_path, "pareto")
    assert err.value.field == "multi_hot"
    assert "fixed_uniform" in str(err.value)
