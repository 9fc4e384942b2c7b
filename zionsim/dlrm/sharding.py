"""What a sharding plan implies: per-rank embedding work, memory, and the communication it needs.

For each table shard (``plan.py``) with global batch ``G = n·B`` and pooling ``L``:

=====  ===========================  ====================  ======================================
kind   rows held                    lookups per rank      forward output / backward gradient
=====  ===========================  ====================  ======================================
TW     all, on one rank             G·L                   pooled all-to-allv (B·d per sample rank)
CW     all, a column slice each     G·L (at dim d/k)      pooled all-to-allv of each slice
RW     ⌈rows/n⌉ on every rank       G·L·(rows held/rows)  reduce-scatter / all-gather of G·d
TWRW   ⌈rows/g⌉ on one node's GPUs  G·L·(rows held/rows)  intra-node reduce-scatter of G·d, then
       (rows/(k·g) on k nodes)                            all-to-allv among same-index GPUs across
                                                          nodes (backward: the reverse, all-gather);
                                                          on k nodes each does so, k partial sums
TWCW   all, a column slice each     G·L (at dim d/k)      as CW; the slices on one node's GPUs
DP     all, on every rank           B·L                   none (gradient joins the all-reduce)
=====  ===========================  ====================  ======================================

Rows are split as TorchRec and FBGEMM split them (:func:`row_splits`): blocks of ``⌈rows/k⌉``
rows, the last one short (and any after it empty), because TorchRec's row-wise input
distribution sends id ``i`` to block ``i // ⌈rows/k⌉`` whatever the shard sizes say.  A plan may
state the columns of each slice (CW, TWCW: ``Shard.widths``) and the rows of each block (RW, TWRW:
``Shard.rows``, e.g. HugeCTR's ``id % k`` split, ``hugectr_plan.py``; lookups follow the row
share), put RW on a subset of the ranks (partial sums then travel in the pooled all-to-allv), and
give a table its own communication precision (``Shard.comm_precision``, for its pooled embeddings
and their gradients).

Indices (``index_bytes`` per lookup plus one length per sample and table) travel in one input
all-to-allv to every rank that serves lookups of the table.  A shard in the ``uvm`` tier keeps
its hottest ``cache_fraction`` of rows in HBM and the rest in host DRAM (an exclusive hot/cold
split: the steady state of a software cache under stationary skew, ``cache.py``); misses are read
over PCIe before the lookup and written back after the update.

A shard in the ``ps`` tier lives whole in the host DRAM of one CPU parameter server (a host socket,
``plan.Shard.server``) that does the lookups itself, as on Zion and ShadowSync's CPU clusters.
Every rank trains on its own ``B`` samples (no all-to-all): per iteration and table it sends
``B·(L+1)`` indices to the server, which gathers ``B·L`` rows from its DRAM and returns ``B·d``
pooled values; backward pushes ``B·d`` gradients and the server reads and writes the ``B·L``
rows and their optimizer state (a Hogwild update: no lock, no sync of embeddings).  The GPU holds
nothing of these tables.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from zionsim.dlrm.cache import hit_rate, multi_hot_unique_rows, unique_rows
from zionsim.dlrm.workload import DTYPE_BYTES, EMBEDDING_OPTIMIZERS, WorkloadSpec, row_bytes
from zionsim.network.peer_bytes import OuterSum


@dataclass
class Layout:
    """Per-rank embedding work and memory (arrays of length n) and the communication specs."""

    lookups: np.ndarray
    lookup_bytes: np.ndarray  # Σ lookups × row bytes (HBM or host)
    state_bytes: np.ndarray  # Σ lookups × optimizer-state bytes per row
    tables: np.ndarray
    out_bytes: np.ndarray  # pooled outputs written by the lookup kernel
    host_bytes: np.ndarray  # UVM misses read per iteration (written back after the update)
    hbm_bytes: np.ndarray  # rows (or cache) in HBM
    hbm_state_bytes: np.ndarray
    dram_bytes: np.ndarray  # rows in host DRAM (UVM), per rank
    input_matrix: OuterSum  # n×n index bytes: a column per owner (every sender sends alike)
    pooled_matrix: OuterSum  # n×n pooled bytes from table owner to sample rank (TW, CW): a row
    rw_bytes: float  # reduce-scatter / all-gather size (G·Σd·bytes) over all ranks
    twrw_rs: dict[int, float]  # node → reduce-scatter size among its GPUs
    twrw_matrix: OuterSum  # nodes×nodes bytes per same-index GPU pair (after the RS): rows
    dp_params: int  # parameters of replicated tables (their gradients join the all-reduce)
    #: parameter-server traffic, rank × server bytes: indices sent, rows gathered from DRAM,
    #: pooled values returned (= gradients pushed), rows + state read and written by the update
    ps_index: np.ndarray = None
    ps_gather: np.ndarray = None
    ps_pooled: np.ndarray = None
    ps_update: np.ndarray = None
    ps_dram_bytes: np.ndarray = None  # rows + optimizer state held by each server
    #: expected distinct rows each rank's embedding backward updates (duplicates merged)
    unique_rows: np.ndarray = None
    #: hierarchical HYB shards: bytes each rank sends to each GPU of its node in the intra-node
    #: stage (per direction), and the GPUs per node
    hyb_intra_bytes: float = 0.0
    hyb_gpus_per_node: int = 1
    #: model-parallel TW/RW shards under HugeCTR's hierarchical communication
    #: (``Shard.hierarchical``): bytes each rank sends to each other GPU of its node in the
    #: intra-node stage, per direction (the stage across nodes is ``twrw_matrix``'s)
    hier_intra: np.ndarray = None
    #: node → bytes of the TWRW backward copy inside the node where it skips the GPUs that hold
    #: no key of a sample's lookup (HugeCTR's ``need_copy``, ``stack.py`` item 8h): each
    #: table's reduce-scatter size × :func:`keyed_fraction` of its lookup over its row split
    twrw_ag: dict = None
    #: the plan has HYB shards: their frequent rows' gradients (the DP part of the all-reduce) are
    #: reduced from the output's gradient, before and apart from the infrequent exchange
    hybrid: bool = False
    #: what each rank's lookup kernel reads, for its L2 hits (``hardware/l2_cache.py``): one
    #: record per table part served, ``(ranks, table index, table rows, rows held, lookups, row
    #: bytes)``
    #: (ranks: an index, an index array or every rank; held and lookups: a number or a per-rank
    #: array); per rank by :func:`l2_parts_by_rank`
    l2_records: list = None
    zipf_alpha: float = 1.0
    #: per table index, the multi-hot list length of MLPerf DCNv2's fixed lists (the workload's
    #: ``multi_hot: fixed_uniform``; 0: independent draws), for the L2 hit model
    list_pooling: dict = None


@lru_cache(maxsize=4096)
def _unique(rows: float, draws: float, alpha: float) -> float:
    return unique_rows(rows, draws, alpha) if draws > 0 else 0.0


@lru_cache(maxsize=4096)
def _multi_hot_unique(rows: float, samples: float, pooling: float, alpha: float) -> float:
    return multi_hot_unique_rows(rows, samples, pooling, alpha) if samples > 0 else 0.0


def table_unique_rows(w: WorkloadSpec, t, draws: float, zipf_alpha: float) -> float:
    """Expected distinct rows of table ``t`` among ``draws`` lookups of whole samples (``draws /
    t.pooling`` samples), as the workload's ``multi_hot`` says its lists are made: independent
    Zipf draws (``independent``) or MLPerf DCNv2's fixed random lists (``fixed_uniform``,
    ``cache.multi_hot_unique_rows``)."""
    if w.multi_hot == "fixed_uniform" and t.pooling > 0:
        return _multi_hot_unique(t.rows, draws / t.pooling, t.pooling, zipf_alpha)
    return _unique(t.rows, draws, zipf_alpha)


def column_splits(dim: int, k: int) -> list[int]:
    """``dim`` split into ``k`` nearly equal column slices."""
    return [dim // k + (1 if i < dim % k else 0) for i in range(k)]


def layout(w: WorkloadSpec, plan, n: int, gpus_per_node: int, zipf_alpha: float = 1.0) -> Layout:
    """The per-rank consequences of ``plan`` for workload ``w`` on ``n`` ranks (``gpus_per_node``
    per node; ``zipf_alpha`` is the row-popularity skew behind UVM cache hit rates)."""
    nodes = max(1, n // gpus_per_node)
    n_ps = 1 + max((s.server for s in plan.shards if s.tier == "ps"), default=-1)
    out = _empty_layout(n, nodes, n_ps)
    out.hyb_gpus_per_node = gpus_per_node
    out.l2_records, out.zipf_alpha = [], float(zipf_alpha)
    fixed = w.multi_hot == "fixed_uniform"
    out.list_pooling = {i: float(t.pooling) if fixed else 0.0 for i, t in enumerate(w.tables)}
    for s in plan.shards:
        if s.tier == "ps":
            _add_ps_shard(out, w, s)
        else:
            _add_gpu_shard(out, w, s, n, gpus_per_node, zipf_alpha)
    return out


def _empty_layout(n: int, nodes: int, n_ps: int) -> Layout:
    """A :class:`Layout` of zeros for ``n`` ranks, ``nodes`` nodes and ``n_ps`` servers."""
    z = np.zeros(n)
    out = Layout(
        z.copy(),
        z.copy(),
        z.copy(),
        np.zeros(n, dtype=int),
        z.copy(),
        z.copy(),
        z.copy(),
        z.copy(),
        z.copy(),
        OuterSum(n),
        OuterSum(n),
        0.0,
        {},
        OuterSum(nodes),
        0,
    )
    out.ps_index, out.ps_gather, out.ps_pooled, out.ps_update = (
        np.zeros((n, n_ps)) for _ in range(4)
    )
    out.ps_dram_bytes = np.zeros(n_ps)
    out.unique_rows = np.zeros(n)
    out.hier_intra = np.zeros(n)
    out.twrw_ag = {}
    return out


def keyed_fraction(pooling: float, k: int) -> float:
    """Probability that a lookup of ``pooling`` keys has at least one key on a given one of
    the ``k`` GPUs a table's rows are split over (a key on GPU ``key % k``, the keys' rows
    independent and uniform, as MLPerf DCNv2's multi-hot lists draw them): ``1 − (1 − 1/k)^L``;
    1 for a table on one GPU.  Sources: ``stack.py`` item 8h."""
    if k <= 1:
        return 1.0
    return float(1.0 - (1.0 - 1.0 / k) ** max(pooling, 0.0))


def _row_and_state_bytes(w: WorkloadSpec, dim: int) -> tuple[float, float]:
    """Bytes of one embedding row of width ``dim``, and of its fp32 optimizer state."""
    per_el, per_row = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]]
    return row_bytes(dim, w.precision["embedding"]), 4 * (per_el * dim + per_row)


def _add_ps_shard(out: Layout, w: WorkloadSpec, s) -> None:
    """Traffic and DRAM of a ``ps``-tier table: every rank sends its ``B`` samples' indices to the
    server, which gathers the rows and returns pooled values, then takes the gradients back."""
    t, B, idx = w.tables[s.table], w.batch_per_gpu, w.index_bytes
    cb = DTYPE_BYTES[w.precision["communication"]]
    rb, state = _row_and_state_bytes(w, t.dim)
    out.ps_index[:, s.server] += B * (t.pooling + 1) * idx
    out.ps_gather[:, s.server] += B * t.pooling * rb
    out.ps_pooled[:, s.server] += B * t.dim * cb
    out.ps_update[:, s.server] += B * t.pooling * (rb + state)
    out.ps_dram_bytes[s.server] += t.rows * (rb + state)


def _serve(out: Layout, w: WorkloadSpec, s, r, lookups, rows, dim: int, zipf_alpha) -> None:
    """Rank ``r`` (or every rank of a slice) serves ``lookups`` lookups into ``rows`` rows of
    width ``dim`` of shard ``s``: lookup work, and HBM (or, in the ``uvm`` tier, cached HBM +
    host DRAM and miss traffic)."""
    rb, state = _row_and_state_bytes(w, dim)
    out.lookups[r] += lookups
    if lookups > 0:
        t = w.tables[s.table]
        drawn = lookups * t.rows / rows  # lookups of the whole table; this shard sees its part
        out.unique_rows[r] += table_unique_rows(w, t, drawn, zipf_alpha) * lookups / drawn
    out.lookup_bytes[r] += lookups * rb
    out.state_bytes[r] += lookups * state
    out.tables[r] += 1
    if lookups > 0:
        out.l2_records.append((r, s.table, w.tables[s.table].rows, rows, lookups, rb))
    if s.tier == "uvm":
        cached = rows * s.cache_fraction
        miss = 1.0 - hit_rate(rows, cached, zipf_alpha)
        out.host_bytes[r] += lookups * miss * (rb + state)
        out.hbm_bytes[r] += cached * rb
        out.hbm_state_bytes[r] += cached * state
        out.dram_bytes[r] += (rows - cached) * (rb + state)
    else:
        out.hbm_bytes[r] += rows * rb
        out.hbm_state_bytes[r] += rows * state


def _add_gpu_shard(out: Layout, w: WorkloadSpec, s, n: int, g: int, zipf_alpha: float) -> None:
    """Lookups, memory and communication of a shard held by GPUs (DP, TW, CW, TWCW, RW or TWRW;
    see the module's table)."""
    t, idx = w.tables[s.table], w.index_bytes
    B, G = w.batch_per_gpu, w.batch_per_gpu * n
    cb = DTYPE_BYTES[s.comm_precision or w.precision["communication"]]
    if s.kind == "DP":  # every rank alike: served at once (the same sums, element by element)
        every = slice(None)
        _serve(out, w, s, every, B * t.pooling, t.rows, t.dim, zipf_alpha)
        out.out_bytes[every] += B * t.dim * cb
        out.dp_params += t.rows * t.dim
    elif s.kind == "HYB":
        _add_hybrid_shard(out, w, s, n, zipf_alpha, cb)
    elif s.kind in ("TW", "CW", "TWCW"):
        for r, d in zip(s.ranks, shard_widths(s, t.dim), strict=True):
            _serve(out, w, s, r, G * t.pooling, t.rows, d, zipf_alpha)
            out.out_bytes[r] += G * d * cb
            out.input_matrix.add_to_column(r, B * (t.pooling + 1) * idx)
            if s.hierarchical and n > g:
                _add_hier_output(out, r, n, g, B * d * cb)
                out.twrw_matrix.add_to_row(r // g, B * d * cb)
            else:
                out.pooled_matrix.add_to_row(r, B * d * cb)
    else:
        _add_row_shard(out, w, s, n, g, zipf_alpha, cb)


def _add_hier_output(out: Layout, r, n: int, g: int, per_rank: float) -> None:
    """Rank ``r`` (or ranks) of a model-parallel shard under HugeCTR's hierarchical
    communication sends each other GPU of its node the outputs for that GPU's rail, ``per_rank``
    bytes for each of the ``n // g`` nodes' GPUs of that local index (``intra_forward``); the
    rail's GPU then sends each other node its samples' vectors of every table in the node
    (``hier_communicate``: the caller's ``twrw_matrix`` row).  Source:
    NVIDIA-Merlin/HugeCTR HugeCTR/embedding/hier_model_parallel_embedding.cpp (commit 2f2016f),
    ``HierModelParallelEmbedding::model_forward``/``network_forward`` and ``network_backward``."""
    out.hier_intra[r] += (n // g) * per_rank


def _add_hybrid_shard(out: Layout, w: WorkloadSpec, s, n: int, zipf_alpha, cb) -> None:
    """HYB, HugeCTR's hybrid embedding (``hybrid.py``) of a one-hot table: its ``K`` frequent rows
    on every rank, looked up for the rank's own ``B`` samples (``f``: their share of lookups),
    their gradient joining the all-reduce like a DP table's; its other rows spread over the ranks
    (``s.rows``), each serving its rows' share of the other ``G·L·(1 - f)`` lookups and sending
    each one's vector to the sample's rank: ``B·L·(1 - f)·d`` bytes from every rank to every
    rank in the pooled all-to-all (its own part stays), gradients back the same way.  No index
    all-to-all: every rank reads the whole batch's keys.  Distinct rows updated: those among the
    rank's frequent lookups, and its part of the distinct infrequent rows of the global batch."""
    t = w.tables[s.table]
    if s.tier != "hbm":
        raise ValueError("a HYB shard lives in HBM")
    out.hybrid = True
    B, G, L, K, f = (
        w.batch_per_gpu,
        w.batch_per_gpu * n,
        t.pooling,
        s.frequent_rows,
        s.frequent_share,
    )
    rb, state = _row_and_state_bytes(w, t.dim)
    tail = np.asarray(shard_rows(s, t.rows), dtype=float)
    look = B * L * f + G * L * (1.0 - f) * tail / max(t.rows - K, 1)
    out.lookups += look
    out.l2_records.append((slice(None), s.table, t.rows, K + tail, look, rb))
    out.lookup_bytes += look * rb
    out.state_bytes += look * state
    out.tables += 1
    out.hbm_bytes += (K + tail) * rb
    out.hbm_state_bytes += (K + tail) * state
    out.out_bytes += B * t.dim * cb
    out.dp_params += K * t.dim
    sent = B * L * (1.0 - f) * t.dim * cb  # infrequent vectors for one rank's samples
    if s.hierarchical:  # inside the node to the receiver's local index, then across nodes
        g = out.hyb_gpus_per_node
        out.hyb_intra_bytes += sent * (n // g) / n
        out.twrw_matrix.add_to_row(slice(None), sent / (n // g))
    else:
        out.pooled_matrix.add_to_row(slice(None), sent / n)
    hot = _unique(K, B * L * f, zipf_alpha) if K else 0.0
    cold = _unique(t.rows, G * L, zipf_alpha) - (_unique(K, G * L * f, zipf_alpha) if K else 0.0)
    out.unique_rows += hot + max(cold, 0.0) * tail / max(t.rows - K, 1)


_MASK = (1 << 64) - 1
_DOUBLE, _UNSIGNED = struct.Struct("<d"), struct.Struct("<Q")
_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)
_CODE = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x165667B19E3779F9, 0x27D4EB2F165667C5)


def l2_parts_by_rank(lay: Layout, n: int) -> tuple[np.ndarray, list[tuple]]:
    """Each rank's number in a list of distinct lookup-kernel contents, and that list: per rank,
    the tables its lookup kernel reads in the order the plan serves them, each ``(table rows,
    rows held, lookups, row bytes, zipf_alpha, list length)`` (``hardware/l2_cache.py``; the list
    length is 0 for independent draws; ranks with the same list get the same number, so the
    lowering's alike ranks stay alike).

    Cheap at any scale: each rank's sequence of parts is folded into two 64-bit hashes record
    by record (one array operation per record however many ranks it covers; plain integers for
    a record of one rank), the distinct ranks are those of distinct hash pairs, and only they
    are listed one by one."""
    records = lay.l2_records or []
    sig = np.zeros((2, n), np.uint64)
    every = np.arange(n)
    mix = [np.uint64(m) for m in _MIX]
    pooling = lay.list_pooling or {}
    for sel, table, rows, h, k, rb in records:
        fixed = _bits(rows) * _CODE[2] & _MASK ^ _bits(rb) * _CODE[3] & _MASK
        fixed = (fixed * _MIX[1] + _bits(pooling.get(table, 0.0))) & _MASK
        one = isinstance(sel, int | np.integer)
        if one and not isinstance(h, np.ndarray) and not isinstance(k, np.ndarray):
            if h > 0 and k > 0:
                code = _bits(h) * _CODE[0] & _MASK ^ _bits(k) * _CODE[1] & _MASK ^ fixed
                first = int(sig[0, sel])
                sig[0, sel] = (first * _MIX[0] + code) & _MASK
                sig[1, sel] = (int(sig[1, sel]) * _MIX[1] + code * _MIX[0]) & _MASK
            continue
        idx = every[sel] if isinstance(sel, slice) else np.atleast_1d(np.asarray(sel, np.int64))
        hv = np.asarray(h[idx] if isinstance(h, np.ndarray) else np.full(len(idx), h), np.float64)
        kv = np.asarray(k[idx] if isinstance(k, np.ndarray) else np.full(len(idx), k), np.float64)
        on = (hv > 0) & (kv > 0)
        idx, hv, kv = idx[on], hv[on], kv[on]
        code = hv.view(np.uint64) * np.uint64(_CODE[0]) ^ kv.view(np.uint64) * np.uint64(_CODE[1])
        code ^= np.uint64(fixed)
        sig[0, idx] = sig[0, idx] * mix[0] + code
        sig[1, idx] = sig[1, idx] * mix[1] + code * mix[0]
    _, first, ids = np.unique(sig.T, axis=0, return_index=True, return_inverse=True)
    slot = np.full(n, -1, np.int64)
    slot[first] = np.arange(len(first))
    lists: list[list[tuple]] = [[] for _ in first]
    alpha = float(lay.zipf_alpha)
    for sel, table, rows, h, k, rb in records:
        if isinstance(sel, int | np.integer):
            members = [int(sel)] if slot[sel] >= 0 else []
        else:
            idx = every[sel] if isinstance(sel, slice) else np.asarray(sel, np.int64)
            members = idx[slot[idx] >= 0].tolist()
        for r in members:
            hr = float(h[r]) if isinstance(h, np.ndarray) else float(h)
            kr = float(k[r]) if isinstance(k, np.ndarray) else float(k)
            if hr > 0 and kr > 0:
                lists[slot[r]].append(
                    (float(rows), hr, kr, float(rb), alpha, pooling.get(table, 0.0))
                )
    return ids.reshape(n).astype(np.int64), [tuple(p) for p in lists]


def _bits(x: float) -> int:
    """The 64 bits of ``x`` as a float64, as an integer (what ``view(np.uint64)`` gives)."""
    return _UNSIGNED.unpack(_DOUBLE.pack(x))[0]


def shard_widths(s, dim: int) -> list[int]:
    """Columns of each part of shard ``s`` of a ``dim``-wide table, in ``s.ranks`` order."""
    return list(s.widths) if s.widths is not None else column_splits(dim, len(s.ranks))


def row_splits(rows: int, k: int) -> list[int]:
    """TorchRec's split of ``rows`` rows into ``k`` blocks: ``⌈rows/k⌉`` each in order, the last
    non-empty block short and any after it empty (10 rows in 4: 3, 3, 3, 1; 5 in 4: 2, 2, 1, 0).

    Source: ``torchrec/distributed/sharding_plan.py`` ``_calculate_rw_shard_sizes_and_offsets``
    (the sizes its planner and ``row_wise()``/``table_row_wise()`` write) and
    ``torchrec/distributed/sharding/rw_sharding.py`` (block size ``⌈rows/world_size⌉`` handed to
    FBGEMM's ``block_bucketize_sparse_features``, which routes id ``i`` to block
    ``i // block``)."""
    block = -(-rows // k) if k > 0 else 0
    # max(0, min(block, rows - i * block)) for each block i, at once (k is every GPU for RW)
    return np.clip(rows - np.arange(k, dtype=np.int64) * block, 0, block).tolist()


def first_row_block(rows: int, k: int) -> int:
    """``row_splits(rows, k)[0]``, the largest block, without listing the ``k`` blocks (the
    planner asks for it per table and option: ``k`` is every GPU for a row-wise option)."""
    return max(0, min(-(-rows // k), rows)) if k > 0 else 0


def shard_rows(s, rows: int) -> list[int]:
    """Rows of each part of row-split shard ``s`` of a ``rows``-row table (the plan's own, else
    :func:`row_splits`), in ``s.ranks`` order."""
    if s.rows is not None:
        return list(s.rows)
    return row_splits(rows, len(s.ranks))


def _alike_parts(ranks, rows: list[int]) -> list[tuple]:
    """(ranks, rows) of a row split's parts, the ranks holding equally many rows together (an
    index array) when no rank is listed twice, else (rank, rows) one by one: a row-wise table
    over 65,536 GPUs is two or three groups, laid out at once.  Each rank's figures are the
    same sums either way (a rank's slot gets its tables' terms in table order)."""
    if len(set(ranks)) < len(ranks):
        return list(zip(ranks, rows, strict=True))
    idx, sizes = np.asarray(ranks, dtype=np.int64), np.asarray(rows)
    return [(idx[sizes == v], v) for v in dict.fromkeys(rows)]


def _add_row_shard(out: Layout, w: WorkloadSpec, s, n: int, g: int, zipf_alpha, cb) -> None:
    """RW and TWRW: each listed rank holds a block of rows and serves the lookups that fall in it
    (lookups spread over rows uniformly: a part's share of lookups is its share of rows).

    RW over every rank reduce-scatters the partial pooled sums (and all-gathers the gradients);
    RW over a subset of ranks sends each member's partial sums for every sample rank through the
    pooled all-to-allv instead (the receiver adds them up; gradients come back the same way).
    TWRW reduce-scatters inside its node, then all-to-alls across nodes (module table); a TWRW
    table on several whole nodes does so on each of them, and the receiver adds the nodes'
    partial sums (HugeCTR's hierarchical embedding, ``hugectr_plan.py``).  RW over a subset under
    hierarchical communication (``Shard.hierarchical``) sends the partial sums to the rail GPUs of
    the member's node, which add them up and send each other node its part once; RW over every
    GPU under it is TWRW on every node."""
    t, idx = w.tables[s.table], w.index_bytes
    B, G = w.batch_per_gpu, w.batch_per_gpu * n
    every = s.kind == "RW" and sorted(s.ranks) == list(range(n))
    for r, rows in _alike_parts(s.ranks, shard_rows(s, t.rows)):
        share = rows / t.rows if t.rows else 0.0
        _serve(out, w, s, r, G * t.pooling * share, rows, t.dim, zipf_alpha)
        out.out_bytes[r] += G * t.dim * cb
        out.input_matrix.add_to_column(r, B * (t.pooling * share + 1) * idx)
        if s.kind == "RW" and not every and s.hierarchical and n > g:
            _add_hier_output(out, r, n, g, B * t.dim * cb)
        elif s.kind == "RW" and not every:
            out.pooled_matrix.add_to_row(r, B * t.dim * cb)
    if s.kind == "RW" and not every and s.hierarchical and n > g:
        # the node's partial sums are reduced on the rail GPU (dst_reduction), then cross once
        for node in sorted({int(r) // g for r in s.ranks}):
            out.twrw_matrix.add_to_row(node, B * t.dim * cb)
    if every and not (s.hierarchical and n > g):
        out.rw_bytes += G * t.dim * cb
    elif s.kind == "TWRW" or every:  # RW over every GPU, hierarchical: TWRW on every node
        fill = keyed_fraction(t.pooling, len(s.ranks))
        for node in sorted({r // g for r in s.ranks}):
            out.twrw_rs[node] = out.twrw_rs.get(node, 0.0) + G * t.dim * cb
            out.twrw_ag[node] = out.twrw_ag.get(node, 0.0) + G * t.dim * cb * fill
            out.twrw_matrix.add_to_row(node, B * t.dim * cb)
