"""L2 hits of embedding lookups: which share of a lookup kernel's row reads the GPU's L2 serves.

A pooled lookup reads one row per lookup at a random place; when the rows it reads again are
still in the L2 cache, the read does not reach HBM.  Model (documented assumptions):

1. Row popularity follows the workload's access model (``dlrm/cache.py``): the accesses of a
   table of ``R`` rows are independent draws, row ``k`` drawn with probability
   ``p_k = k^-α / H(R, α)`` (Zipf; ``α = 0`` is uniform).  A shard holding ``h`` of the ``R``
   rows (a row or column split) holds a random ``h / R`` of every popularity class (the
   sharding layout's own assumption for its distinct rows, ``dlrm/sharding.py``): over ``D``
   draws of the whole table it sees ``n = D h / R`` of them.
2. The kernel walks the lookups table by table: FBGEMM's TBE forward numbers its bags
   ``b_t = t * B + b`` and each warp takes consecutive ones (``fd_B.DivMod(b_t, &t, &b)`` in
   ``fbgemm_gpu/codegen/training/forward/embedding_forward_split_kernel_template.cu``), so the
   warps in flight at any time read one table (two at its edges), and a table's rows meet in L2
   only rows of that table; rows of earlier tables are never read again in the kernel.  Each
   table (shard) is therefore its own stream of accesses to a cache of the GPU's whole L2
   capacity ``C``.  Other stacks' lookup kernels are assumed to walk their tables the same way
   (not checked in their sources); one cache shared by all of a kernel's tables at once gives
   shares within a few points of these (docs/validation.md, "L2-resident lookups (h25l)").
3. The L2 is an LRU cache of row-sized blocks (rows rounded up to 32-byte sectors), and
   Che's approximation (Che, Tung, Wang, "Hierarchical Web caching systems: modeling, design
   and experimental results", IEEE JSAC 20(7), 2002; Fricker, Robert, Roberts, "A versatile and
   accurate approximation for LRU cache performance", ITC 24, 2012) holds: a block stays in the
   cache for a characteristic time ``T`` after its last access, ``T`` the time in which the
   stream touches ``C`` distinct blocks.  Accesses arrive as Poisson processes (the
   independence of assumption 1).  Over a kernel of ``D`` table draws, row ``k``'s accesses
   miss on its first access and on any access more than ``T`` after the previous one:
   ``E[misses_k] = 1 - e^{-p_k min(T, D)} + max(D - T, 0) p_k e^{-p_k T}``.  Summed over the
   rows, with ``U(t) = Σ_k 1 - e^{-p_k t}`` the expected distinct rows of ``t`` draws:
   ``misses = U(min(T, D)) + max(D - T, 0) U'(T)``, ``T = ∞`` when the ``U(D)`` rows the kernel
   touches fit (every row's first touch still comes from HBM: a compulsory miss), else
   ``U(T) = C / block``.  Hits are the lookups less the misses.
4. The L2 holds nothing of the table when the kernel starts: the iteration's other kernels
   (MLPs, the exchange buffers, the backward) move far more than ``C`` between one step's
   lookups and the next.  Index reads and output writes stream past the cache and are not
   counted against ``C`` (they are read or written once).
5. ``U`` and ``U'`` are sums over the table's rows, taken exactly over the hottest
   :data:`EXACT_ROWS` and over geometric bins of rank beyond (each bin's rows at the
   popularity of its geometric-mean rank): a few hundred terms for any table size.

6. MLPerf DLRM-DCNv2's multi-hot data (a workload's ``multi_hot: fixed_uniform``): a sample's
   ``L`` lookups of a table are the fixed list of its one-hot id, the id itself and ``L - 1``
   uniform random rows (mlcommons ``multi_hot.py``, ``dlrm/cache.py``
   ``multi_hot_unique_rows``); the ids are the Zipf draws of assumption 1, so ``t`` lookups
   touch ``U(t) = R - (R - D)(1 - 1/R)^(D (L - 1))`` distinct rows, ``D`` the distinct ids of
   ``t / L`` draws, and that ``U`` drives the same solve (the rows of a hot id's list are as
   hot as the id: they come back whenever it does).

Not modelled: L2 set conflicts and the L2's split into two partitions (A100, H100: an SM's
reads of the far partition's lines; the capacity is taken whole), the persisting-access window
(``cudaAccessPolicyWindow``, which no DLRM stack sets), hot rows shared by tables, and reuse in
the backward pass (``hardware/compute.py`` assumption 7: it updates each distinct row once).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

#: rows summed one by one before the geometric bins of assumption 5
EXACT_ROWS = 256
#: geometric bins per decade of rank beyond :data:`EXACT_ROWS`
BINS_PER_DECADE = 48
#: bisection steps of the characteristic time (on log T: 2^-60 of the bracket's log-width)
_STEPS = 60


@lru_cache(maxsize=512)
def popularity(rows: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows per class, draw probability of each of its rows) of a ``rows``-row table under
    Zipf(``alpha``) popularity (assumptions 1 and 5); the weights sum to ``rows`` and
    ``weights @ probs`` to 1."""
    rows = int(rows)
    head = min(rows, EXACT_ROWS)
    k = np.arange(1, head + 1, dtype=float)
    weights, ranks = [np.ones(head)], [k]
    if rows > head:
        decades = math.log10(rows / head)
        edges = np.unique(
            np.round(np.geomspace(head, rows, max(2, int(decades * BINS_PER_DECADE) + 1)))
        )
        lo, hi = edges[:-1], edges[1:]  # ranks lo+1 .. hi
        weights.append(hi - lo)
        ranks.append(np.sqrt((lo + 1) * hi))
    w, r = np.concatenate(weights), np.concatenate(ranks)
    p = r**-alpha
    p /= w @ p
    w.setflags(write=False)
    p.setflags(write=False)
    return w, p


def _distinct(w: np.ndarray, p: np.ndarray, t: float) -> float:
    """``U(t)``: expected distinct rows among ``t`` draws."""
    return float(w @ -np.expm1(-p * t))


def _distinct_rate(w: np.ndarray, p: np.ndarray, t: float) -> float:
    """``U'(t)``: new rows per draw after ``t`` draws."""
    return float(w @ (p * np.exp(-p * t)))


@lru_cache(maxsize=65536)
def hit_share(
    table_rows: float, rows_held: float, lookups: float, block_bytes: float, alpha: float,
    capacity_bytes: float, list_length: float = 0.0,
) -> float:  # fmt: skip
    """Share of ``lookups`` reads of one table shard (``rows_held`` of the table's
    ``table_rows`` rows, rows occupying ``block_bytes`` of cache each) that hit an L2 of
    ``capacity_bytes`` (module assumptions 1-6); 0 for an empty shard or cache.
    ``list_length`` > 1: the lookups are MLPerf DCNv2's fixed multi-hot lists of that length
    (assumption 6); else independent draws."""
    if lookups <= 0 or rows_held <= 0 or table_rows <= 0 or capacity_bytes <= 0:
        return 0.0
    w, p = popularity(int(round(table_rows)), float(alpha))
    held = min(rows_held / table_rows, 1.0)
    draws = lookups / held  # draws of the whole table; this shard sees ``lookups`` of them
    blocks = capacity_bytes / block_bytes / held  # the capacity in the table's rows
    if list_length > 1.0:
        distinct, rate = _list_distinct(w, p, float(table_rows), float(list_length))
        return che_hit_share(distinct, rate, draws, blocks)
    return che_hit_share(
        lambda t: _distinct(w, p, t), lambda t: _distinct_rate(w, p, t), draws, blocks
    )


def _list_distinct(w: np.ndarray, p: np.ndarray, rows: float, length: float):
    """``U(t)`` and ``U'(t)`` of ``t`` lookups made of fixed lists of ``length`` rows (assumption
    6): ``D = U_ids(t / L)`` distinct one-hot ids, and ``rows - (rows - D) q^(D (L - 1))``
    distinct rows, ``q = 1 - 1/rows`` (``dlrm/cache.py`` ``multi_hot_unique_rows``)."""
    log_q = math.log1p(-1.0 / rows) if rows > 1 else -math.inf

    def distinct(t: float) -> float:
        d = _distinct(w, p, t / length)
        return rows - (rows - d) * math.exp(d * (length - 1.0) * log_q)

    def rate(t: float) -> float:
        d = _distinct(w, p, t / length)
        dd = _distinct_rate(w, p, t / length) / length
        untouched = math.exp(d * (length - 1.0) * log_q)
        return dd * untouched * (1.0 - (rows - d) * (length - 1.0) * log_q)

    return distinct, rate


def che_hit_share(distinct, distinct_rate, draws: float, blocks: float) -> float:
    """Share of ``draws`` accesses that hit an LRU cache of ``blocks`` rows under Che's
    approximation (assumption 3), from any access model's expected distinct rows ``distinct(t)``
    among ``t`` draws and its derivative ``distinct_rate(t)``: the misses are
    ``U(min(T, D)) + max(D - T, 0) U'(T)`` with ``U(T) = blocks`` (``T = ∞`` when the rows
    the ``D`` draws touch fit).  Only ``U`` enters, so an access model other than Zipf draws
    (e.g. MLPerf DCNv2's fixed multi-hot lists) plugs in through its distinct-row count."""
    touched = distinct(draws)
    if touched <= blocks:  # every row the kernel touches stays: misses are first touches
        misses = touched
    elif distinct(1.0) >= blocks:  # a cache of less than one row's worth
        return 0.0
    else:  # U(T) = blocks for T in (1, draws): bisection on log T (U rises with T)
        lo, hi = 0.0, math.log(draws)
        for _ in range(_STEPS):
            mid = 0.5 * (lo + hi)
            if distinct(math.exp(mid)) < blocks:
                lo = mid
            else:
                hi = mid
        t = math.exp(0.5 * (lo + hi))
        misses = distinct(t) + (draws - t) * distinct_rate(t)
    return min(max(1.0 - misses / draws, 0.0), 1.0)


def hit_bytes_share(parts, capacity_bytes: float, sector_bytes: float) -> float:
    """Share of the row bytes a lookup kernel reads that L2 serves: ``parts`` is the kernel's
    tables, each ``(table_rows, rows_held, lookups, row_bytes, zipf_alpha[, list_length])``; a
    row occupies its bytes rounded up to ``sector_bytes``-byte sectors in the cache and in the
    reads."""
    total = hits = 0.0
    for table_rows, held, lookups, row_bytes, alpha, *rest in parts:
        block = math.ceil(row_bytes / sector_bytes) * sector_bytes
        read = lookups * block
        total += read
        length = float(rest[0]) if rest else 0.0
        hits += read * hit_share(table_rows, held, lookups, block, alpha, capacity_bytes, length)
    return hits / total if total > 0 else 0.0
