"""Software-managed HBM cache over host memory: hit rate under Zipf-skewed row accesses.

Model (documented assumptions):

1. Row accesses of a table are independent draws from a Zipf(α) popularity law over its ``N``
   rows: the ``k``-th most popular row is read with probability ``k^-α / H(N, α)``.
2. The cache holds the ``C`` most popular rows (an ideal LFU cache, the steady state FBGEMM's
   LFU/LRU UVM caches approach for stationary skew), so the hit rate is ``H(C, α) / H(N, α)``.
3. ``H(n, α) = Σ_{k≤n} k^-α`` is summed exactly for small ``n`` and by Euler–Maclaurin beyond.
4. The distinct rows among ``L`` such draws (what an embedding backward that merges duplicate
   indices updates) are ``Σ_k 1 - exp(-L p_k)`` (each row's count is Poisson), summed exactly for
   the hottest rows and by the trapezoidal rule on a logarithmic grid beyond.
5. A pooled table's lookups are such independent draws (workload ``multi_hot: independent``)
   unless the workload says its multi-hot lists are MLPerf DLRM-DCNv2's synthetic ones
   (``multi_hot: fixed_uniform``, :func:`multi_hot_unique_rows`): each sample's one-hot id is a
   Zipf draw and brings a fixed list of ``L`` rows, itself and ``L - 1`` uniform random rows.
"""

from __future__ import annotations

import math

import numpy as np

_EXACT = 10_000


def harmonic(n: float, alpha: float) -> float:
    """Generalised harmonic number H(n, α) for n ≥ 0."""
    if n <= 0:
        return 0.0
    if n <= _EXACT:
        return float(np.sum(np.arange(1, int(n) + 1, dtype=float) ** -alpha))
    m = _EXACT
    head = float(np.sum(np.arange(1, m + 1, dtype=float) ** -alpha))
    # Euler–Maclaurin for the tail Σ_{k=m+1}^{n} k^-α
    if abs(alpha - 1.0) < 1e-12:
        integral = math.log(n / m)
    else:
        integral = (n ** (1 - alpha) - m ** (1 - alpha)) / (1 - alpha)
    correction = 0.5 * (n**-alpha - m**-alpha) - alpha / 12 * (
        n ** (-alpha - 1) - m ** (-alpha - 1)
    )
    return head + integral + correction


def unique_rows(rows: float, draws: float, alpha: float) -> float:
    """Expected distinct rows among ``draws`` Zipf(α) accesses to a table of ``rows`` rows."""
    if rows <= 0 or draws <= 0:
        return 0.0
    h = harmonic(rows, alpha)
    head_n = int(min(rows, _EXACT))
    k = np.arange(1, head_n + 1, dtype=float)
    total = float(np.sum(-np.expm1(-draws * k**-alpha / h)))
    if rows > head_n:
        x = np.geomspace(head_n + 1, rows, 2048)
        y = -np.expm1(-draws * x**-alpha / h)
        total += float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2) + float(y[0])
    return min(total, float(rows), float(draws))


def multi_hot_unique_rows(rows: float, samples: float, pooling: float, alpha: float) -> float:
    """Expected distinct rows ``samples`` samples touch in a table of ``rows`` rows whose
    multi-hot lists of ``pooling`` ids come from MLPerf DLRM-DCNv2's generator.

    The generator (mlcommons/training recommendation_v2/torchrec_dlrm/multi_hot.py, commit
    aa344c7f, ``Multihot.__make_multi_hot_indices_tables``, lines 87-109, ``dist_type`` "uniform"
    as the benchmark's dataset is made: scripts/materialize_synthetic_multihot_dataset.py lines
    93 and 114-137, and NVIDIA's HugeCTR submissions use that dataset) seeds numpy once and builds
    for every table a fixed list per one-hot id ``x``: ``[x, r_1, ..., r_(L-1)]``, the ``r`` drawn
    with ``np.random.randint(0, rows)`` (independent, uniform, not contiguous).  A sample's
    ``L`` lookups are the list of its one-hot id (``nn.functional.embedding`` of the id into that
    table, lines 137-143), so a one-hot id repeated in a batch repeats its whole list.

    Hence, with ``D`` the distinct one-hot ids among the ``samples`` Zipf(α) draws
    (:func:`unique_rows`, assumption 1 for Criteo's ids), a row is untouched when it is not in
    ``D`` and none of the ``D·(L - 1)`` random entries of their lists is it: expected distinct
    rows ``rows - (rows - D)·(1 - 1/rows)^(D·(L - 1))`` (``D`` taken at its mean: its relative
    spread is below ``1/sqrt(D)``).  ``L = 1`` gives :func:`unique_rows` of the samples."""
    if rows <= 0 or samples <= 0 or pooling <= 0:
        return 0.0
    ids = unique_rows(rows, samples, alpha)
    entries = ids * max(float(pooling) - 1.0, 0.0)
    if rows <= 1:
        return 1.0
    untouched = (rows - ids) * math.exp(entries * math.log1p(-1.0 / rows))
    return min(float(rows) - untouched, float(rows), float(samples) * float(pooling))


def hit_rate(rows: float, cached_rows: float, alpha: float) -> float:
    """Fraction of lookups served by a cache of the ``cached_rows`` hottest of ``rows`` rows."""
    if cached_rows >= rows:
        return 1.0
    if cached_rows <= 0:
        return 0.0
    whole = harmonic(rows, alpha)
    if whole <= 0:  # a shard of less than one row (a small table split over many GPUs)
        return cached_rows / rows
    return harmonic(cached_rows, alpha) / whole
