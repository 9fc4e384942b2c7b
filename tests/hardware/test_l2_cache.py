"""L2 hits of embedding lookups (issue 25, round 9, h25l): the hit model of
``hardware/l2_cache.py`` and its pricing in ``compute.embedding_forward_time_s``.  Each test is a
property of the physics (first touches, capacity, monotonicity, an LRU simulation), not a point."""

import random
from collections import OrderedDict

import pytest

from zionsim.dlrm.cache import unique_rows
from zionsim.hardware import compute, l2_cache
from zionsim.hardware.topology import load_topology

MiB = 2**20


@pytest.fixture(scope="module")
def gpus():
    return {
        "v100": load_topology("bigbasin", nodes=1).gpu,
        "a100": load_topology("dgx_a100", nodes=1).gpu,
        "h100": load_topology("dgx_h100", nodes=1).gpu,
        "h200": load_topology("dgx_h100", nodes=1, overrides=["gpu=h200"]).gpu,
        "b200": load_topology("dgx_b200", nodes=1).gpu,
    }


def test_small_table_is_all_hits_after_first_touch():
    """A table that fits in L2: every read but each row's first is a hit."""
    for alpha in (0.0, 1.0):
        share = l2_cache.hit_share(1000, 1000, 1e6, 512, alpha, 50 * MiB)
        first_touches = unique_rows(1000, 1e6, alpha)
        assert share == pytest.approx(1 - first_touches / 1e6, abs=2e-3)
        assert share > 0.99


def test_table_far_larger_than_l2_uniform_access_is_almost_no_hits():
    """Uniform reads over 400 M rows (200 GB) in a 50 MiB cache: about C / table of them hit."""
    share = l2_cache.hit_share(4e8, 4e8, 1e7, 512, 0.0, 50 * MiB)
    assert share < 2e-3
    assert share == pytest.approx(50 * MiB / 512 / 4e8, rel=0.2)


def test_no_more_hits_than_repeated_reads():
    """Every row's first touch comes from HBM: hits <= lookups - distinct rows."""
    for rows, lookups, alpha in ((4e7, 1.6e5, 1.0), (3e6, 5e5, 0.8), (2e4, 1e6, 1.2)):
        share = l2_cache.hit_share(rows, rows, lookups, 512, alpha, 126.5 * MiB)
        assert share <= 1 - unique_rows(rows, lookups, alpha) / lookups + 2e-3


def test_monotone_in_l2_size():
    sizes = [1 * MiB, 6 * MiB, 40 * MiB, 50 * MiB, 126.5 * MiB, 1024 * MiB]
    shares = [l2_cache.hit_share(4e7, 4e7, 5.5e6, 512, 1.0, c) for c in sizes]
    assert all(b >= a for a, b in zip(shares, shares[1:], strict=False))
    assert shares[-1] > shares[0] + 0.05


def test_shard_of_a_table_sees_its_share():
    """A row-wise shard holding half the rows serves half the lookups of the same hot set:
    the same hit share as the whole table in a cache of twice the size."""
    whole = l2_cache.hit_share(4e7, 4e7, 2e6, 512, 1.0, 100 * MiB)
    half = l2_cache.hit_share(4e7, 2e7, 1e6, 512, 1.0, 50 * MiB)
    assert half == pytest.approx(whole, rel=1e-6)


def test_che_approximation_matches_an_lru_simulation():
    """Che's approximation against an LRU cache fed Zipf draws (seeded, small scale)."""
    rows, capacity, draws, alpha = 20_000, 1_500, 60_000, 0.9
    weights = [k**-alpha for k in range(1, rows + 1)]
    rng = random.Random(7)
    hits = _lru_hits(rng.choices(range(rows), weights=weights, k=draws), capacity)
    model = l2_cache.hit_share(rows, rows, draws, 32, alpha, capacity * 32)
    assert model == pytest.approx(hits / draws, abs=0.03)


def test_hit_bytes_share_weights_tables_by_bytes():
    parts = ((1000.0, 1000.0, 1e6, 512.0, 1.0), (4e8, 4e8, 1e6, 512.0, 0.0))
    share = l2_cache.hit_bytes_share(parts, 50 * MiB, 32)
    assert share == pytest.approx(0.5, abs=0.01)


def test_forward_priced_faster_with_hits_and_backward_unchanged(gpus):
    """A resident table's lookups get cheaper on every GPU; a uniform huge table's barely."""
    small = ((1000.0, 1000.0, 1e6, 512.0, 1.0),)
    huge = ((4e8, 4e8, 1e6, 512.0, 0.0),)
    for gpu in gpus.values():
        bare = compute.embedding_forward_time_s(gpu, 1e6, 512, 1, True, 1e6)
        fast = compute.embedding_forward_time_s(gpu, 1e6, 512, 1, True, 1e6, None, small)
        assert fast < 0.8 * bare
        assert compute.embedding_forward_time_s(gpu, 1e6, 512, 1, True, 1e6, None, huge) == (
            pytest.approx(bare, rel=0.01)
        )


def test_v100_small_l2_changes_little(gpus):
    """V100's 6 MiB L2 holds little of a 20 M-row skewed table: a smaller share than on A100,
    H100 or B200, and the shares grow with the L2 size."""
    parts = ((2e7, 2e7, 1e6, 512.0, 0.6),)
    share = {k: compute.l2_hit_share(g, parts) for k, g in gpus.items()}
    assert share["v100"] < share["a100"] <= share["h100"] < share["b200"]
    assert share["h100"] == share["h200"]  # the same die, the same 50 MiB


def test_l2_rate_scales_with_sms_and_clock_and_beats_hbm_gathers(gpus):
    for gpu in gpus.values():
        assert compute.l2_gather_bandwidth_Bps(gpu) > compute.gather_bandwidth_Bps(gpu)
    l2_rate = compute.l2_gather_bandwidth_Bps
    assert l2_rate(gpus["h200"]) == l2_rate(gpus["h100"])
    assert l2_rate(gpus["b200"]) > l2_rate(gpus["h100"])


def test_cpu_trainer_has_no_l2_model():
    cpu = load_topology("cpu_ps_platform", nodes=1).gpu
    assert compute.l2_hit_share(cpu, ((1000.0, 1000.0, 1e6, 512.0, 1.0),)) == 0.0


def test_che_takes_any_distinct_row_model():
    """The hit share needs only the access model's distinct rows U(t) and U'(t): uniform access
    in closed form gives what the Zipf(0) tables give."""
    import math

    rows = 3e6

    def distinct(t):
        return rows * -math.expm1(-t / rows)

    def rate(t):
        return math.exp(-t / rows)

    closed = l2_cache.che_hit_share(distinct, rate, 2e6, 50 * MiB / 512)
    zipf = l2_cache.hit_share(rows, rows, 2e6, 512, 0.0, 50 * MiB)
    assert closed == pytest.approx(zipf, rel=1e-3)
    assert 0.0 < closed < 0.1


def test_fixed_multi_hot_lists_match_an_lru_simulation():
    """MLPerf DCNv2's lists (assumption 6): a Zipf one-hot id and its fixed list of L - 1 random
    rows, read together, against an LRU cache of rows (seeded, small scale)."""
    rows, length, capacity, samples, alpha = 20_000, 8, 3_000, 6_000, 1.0
    rng = random.Random(11)
    lists = [[x] + [rng.randrange(rows) for _ in range(length - 1)] for x in range(rows)]
    weights = [k**-alpha for k in range(1, rows + 1)]
    ids = rng.choices(range(rows), weights=weights, k=samples)
    hits = _lru_hits((row for x in ids for row in lists[x]), capacity)
    draws = samples * length
    model = l2_cache.hit_share(rows, rows, draws, 32, alpha, capacity * 32, float(length))
    assert model == pytest.approx(hits / draws, abs=0.04)
    # fewer hits than the same lookups as independent Zipf draws: the lists spread them
    assert model < l2_cache.hit_share(rows, rows, draws, 32, alpha, capacity * 32) - 0.05


def test_fixed_lists_distinct_rows_are_the_workload_model():
    """The L2 solve's U(t) for fixed lists is dlrm/cache.py's count, and U' its slope."""
    from zionsim.dlrm.cache import multi_hot_unique_rows

    rows, length = 1e6, 20.0
    w, p = l2_cache.popularity(int(rows), 1.0)
    distinct, rate = l2_cache._list_distinct(w, p, rows, length)
    for lookups in (2e3, 4e5, 2e7):
        want = multi_hot_unique_rows(rows, lookups / length, length, 1.0)
        assert distinct(lookups) == pytest.approx(want, rel=0.02)
        h = lookups * 1e-4
        slope = (distinct(lookups + h) - distinct(lookups - h)) / (2 * h)
        assert rate(lookups) == pytest.approx(slope, rel=1e-3)


def _lru_hits(rows, capacity: int) -> int:
    """Hits of an LRU cache of ``capacity`` rows fed ``rows`` in order."""
    cache, hits = OrderedDict(), 0
    for row in rows:
        if row in cache:
            hits += 1
            cache.move_to_end(row)
        else:
            cache[row] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits
