"""Software-managed HBM cache over host memory: hit rate under Zipf-skewed row accesses.

Model (documented assumptions):

1. Row accesses of a table are independent draws from a Zipf(α) popularity law over its ``N``
   rows: the ``k``-th most popular row is read with probability ``k^-α / H(N, α)``.
2. The cache holds the ``C`` most popular rows (an ideal LFU cache, the steady state FBGEMM's
   LFU/LRU UVM caches approach for stationary skew), so the hit rate is ``H(C, α) / H(N, α)``.
3. ``H(n, α) = Σ_{k≤n} k^-α`` is summed exactly for small ``n`` and by Euler–Maclaurin beyond.
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


def hit_rate(rows: float, cached_rows: float, alpha: float) -> float:
    """Fraction of lookups served by a cache of the ``cached_rows`` hottest of ``rows`` rows."""
    if cached_rows >= rows:
        return 1.0
    if cached_rows <= 0:
        return 0.0
    return harmonic(cached_rows, alpha) / harmonic(rows, alpha)
