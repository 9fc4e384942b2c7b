"""Key deduplication before the model-parallel exchange (``stack.py`` item 7d, SOK's
``--compress``): what ``tf.unique`` costs on the GPU and how the plan's layout shrinks when each
rank sends only its distinct keys.  ``lowering.py`` places the ops (``key_unique``,
``emb_expand``, ``emb_expand_bwd``) with these figures."""

from __future__ import annotations

from dataclasses import dataclass, replace

from zionsim.base.errors import InputError
from zionsim.dlrm.cache import unique_rows
from zionsim.dlrm.plan import Plan
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.workload import DTYPE_BYTES, WorkloadSpec

#: bytes ``tf.unique`` moves per key on the GPU, for int64 keys and int32 indices (TensorFlow's
#: ``UniqueOpGPU``, tensorflow/core/kernels/unique_op_gpu.cu.h, which SOK ships as
#: sparse_operation_kit/kit_cc/framework/compat/kernels/unique.cu): ``RangeInit`` writes the
#: indices (4); ``cub::DeviceRadixSort::SortPairs`` on all 64 key bits, onesweep with 8-bit
#: digits (cub dispatch_radix_sort.cuh ``Policy800``: ``ONESWEEP`` for keys of 4 bytes or more,
#: ``ONESWEEP_RADIX_BITS = 8``): a histogram pass reads the keys (8), then 8 passes each read
#: and write key and index (8 x 24); the inclusive sum of segment starts reads the sorted keys
#: and writes an id (12); ``ExtractFirstOccurrenceIndices`` reads the ids (4);
#: ``LookupAndScatterUniqueIds`` reads index, id and inverse permutation and writes the output
#: index (16)
UNIQUE_BYTES_PER_KEY = 4 + 8 + 8 * 24 + 12 + 4 + 16
#: and per distinct key: its first occurrence read and written (8), the onesweep sort of those
#: 32-bit indices with their permutation (histogram 4, 4 passes x 16) and
#: ``GatherOutputsAndInvertPermutation`` (reads 4 + 8 + 4, writes 8 + 4)
UNIQUE_BYTES_PER_DISTINCT = 8 + (4 + 4 * 16) + 28
#: kernels of one ``tf.unique``: RangeInit, the 64-bit sort (histogram, exclusive sum, 8
#: passes), the scan (cub DeviceScan: init and scan kernels), the extraction, the 32-bit sort
#: (histogram, exclusive sum, 4 passes), the gather and the scatter
UNIQUE_KERNELS = 1 + 10 + 2 + 1 + 6 + 1 + 1
#: index bytes of ``tf.unique``'s ``idx`` output (int32, its default ``out_idx``), read by the
#: ``tf.gather`` that expands the vectors and by the segment sum of their gradient
DEDUP_INDEX_BYTES = 4


@dataclass(frozen=True)
class KeyDedup:
    """One rank's key deduplication (``stack.py`` item 7d): the keys of its local batch that
    enter the model-parallel exchange, the expected distinct ones among them, and the bytes of
    their vectors (every key's, the distinct keys')."""

    keys: float
    distinct: float
    vector_bytes: float
    distinct_vector_bytes: float


def deduplicated(w: WorkloadSpec, plan: Plan, lay, ranks: int, g: int, zipf_alpha: float):
    """The layout when every rank deduplicates its local batch's keys before the model-parallel
    exchange (SOK's ``--compress``, ``stack.py`` item 7d), and the rank's :class:`KeyDedup`.

    A rank's ``B·L`` keys of table ``t`` hold ``u_t = unique_rows(rows, B·L, zipf_alpha)``
    distinct ones (``cache.py``: independent Zipf draws); only those are sent to the owner(s),
    looked up there and their vectors sent back, so the shard's index bytes, lookups, lookup
    output and exchanged vectors (forward and gradient, over every exchange its kind has) scale
    by ``u_t / (B·L)``.  The sums of the other shards stay: each shard's share is taken from the
    layout of that shard alone.  Data-parallel shards exchange nothing and stay as they are.
    The index all-to-all's per-sample length is scaled too (SOK sends only keys).  The distinct
    rows each owner updates do not change (the same rows, now fewer times)."""
    B = w.batch_per_gpu
    out = replace(
        lay,
        input_matrix=lay.input_matrix.copy(),
        pooled_matrix=lay.pooled_matrix.copy(),
        twrw_rs=dict(lay.twrw_rs),
        twrw_ag=dict(lay.twrw_ag or {}),
        twrw_matrix=lay.twrw_matrix.copy(),
        hier_intra=lay.hier_intra.copy(),
    )
    keys = distinct = vec = distinct_vec = 0.0
    kept: dict[int, float] = {}  # per table, the share of its lookups left (the L2 records')
    for s in plan.shards:
        if s.kind == "DP" and s.tier != "ps":
            continue
        t = w.tables[s.table]
        if s.tier == "ps" or s.kind == "HYB":
            raise InputError(
                f"key deduplication is modelled in front of a GPU all-to-all embedding; table "
                f"{t.name!r} is {'on a parameter server' if s.tier == 'ps' else 'a HYB shard'}",
                field="stack.key_dedup",
                allowed="false, or a plan of DP, TW, CW, TWCW, RW and TWRW shards",
            )
        if t.pooling != 1:
            raise InputError(
                f"key deduplication (SOK --compress before its all-to-all dense embedding) "
                f"applies to one-hot tables; table {t.name!r} has pooling {t.pooling}",
                field="stack.key_dedup",
                allowed="false, or a workload whose model-parallel tables have pooling 1",
            )
        draws = B * t.pooling
        u = unique_rows(t.rows, draws, zipf_alpha)
        _scale_shard(out, layout(w, Plan(plan.name, (s,)), ranks, g, zipf_alpha), 1 - u / draws)
        kept[s.table] = u / draws
        row = t.dim * DTYPE_BYTES[s.comm_precision or w.precision["communication"]]
        keys, distinct = keys + draws, distinct + u
        vec, distinct_vec = vec + draws * row, distinct_vec + u * row
    out.l2_records = [
        (sel, ti, rows, held, lookups * kept.get(ti, 1.0), rb)
        for sel, ti, rows, held, lookups, rb in lay.l2_records or ()
    ]
    return out, KeyDedup(keys, distinct, vec, distinct_vec)


def _scale_shard(out, part, cut: float) -> None:
    """Take ``cut`` of one shard's layout ``part`` off ``out``'s work and exchanges (new arrays
    for every array changed: ``out`` shares no array with the layout it was copied from)."""
    for name in ("lookups", "lookup_bytes", "state_bytes", "out_bytes", "hier_intra"):
        setattr(out, name, getattr(out, name) - cut * getattr(part, name))
    for m in ("input_matrix", "pooled_matrix", "twrw_matrix"):
        mine, theirs = getattr(out, m), getattr(part, m)
        mine.row, mine.col = mine.row - cut * theirs.row, mine.col - cut * theirs.col
    out.rw_bytes -= cut * part.rw_bytes
    for node, size in part.twrw_rs.items():
        out.twrw_rs[node] -= cut * size
    for node, size in (part.twrw_ag or {}).items():
        out.twrw_ag[node] -= cut * size
    out.hyb_intra_bytes -= cut * part.hyb_intra_bytes
