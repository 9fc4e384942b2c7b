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
