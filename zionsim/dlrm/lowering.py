"""Lowering: one DLRM training iteration of a workload under a plan, as a :class:`~.trace.Trace`.

:func:`lower` turns workload + plan + rank count (+ the dense sync and the software stack) into
the per-rank DAG of typed ops that ``trace.py`` defines; the dense side (interaction, gradient
buckets, sync rounds) is added by ``lower_dense.py``, the embedding exchange's layout and
collectives come from ``lower_exchange.py``, each rank's ops from ``lower_rank.py``, and the op
list is built by ``trace_builder.py``.

The iteration, per rank (streams: ``compute``, ``a2a`` and ``allreduce``, each in order):

1. ``input_a2a`` — sparse indices and lengths to the table owners (all-to-allv);
   (with key deduplication, ``stack.py`` item 7d, after ``key_unique``, and of the distinct
   keys only; ``emb_expand`` gathers every key's vector back before the interaction and
   ``emb_expand_bwd`` sums the gradients of duplicates before ``grad_a2a``: ``dedup.py``);
2. ``emb_fwd`` — pooled lookups of the local tables for the global batch (TW) or local batch (DP);
3. ``pooled_a2a`` — pooled embeddings back to the samples' ranks; bottom MLP runs meanwhile;
4. interaction (dot / concat / DCN), top MLP, loss;
5. backward: top-MLP dgrad + wgrad per layer, interaction backward, ``grad_a2a`` of embedding
   gradients, bottom-MLP backward, ``emb_bwd`` fused with the row-wise optimizer update
   (native, ``fused=False``: ``emb_bwd`` is the memory op that materialises each table's
   sparse gradient and ``emb_opt``, category ``optimizer``, the separate ``torch.optim`` pass);
With ``ps``-tier tables (``sharding.py``), ``ps_lookup`` (indices out, pooled rows back) runs on
the ``ps`` stream from the iteration's start and feeds the interaction; ``ps_update`` pushes
their gradients after the interaction backward (on CPU trainers, on a stream of its own,
``ps_push``: their Hogwild threads are out of step, so pushes overlap the next lookups).

6. dense gradients all-reduced in buckets of ``BUCKET_BYTES`` (``lower_dense.py``) as backward
   produces them (PyTorch DDP: 25 MiB, a tensor larger than that is a bucket of its own); DP
   tables' gradients join the last bucket; ``dense_opt`` waits for every bucket.  A stack with
   ``grouped_allreduce`` all-reduces every gradient in one call once the last is done (HugeCTR).
"""

from __future__ import annotations

import dataclasses
import operator
from collections import OrderedDict

import numpy as np

from zionsim.dlrm import lower_dense
from zionsim.dlrm.lower_exchange import (
    block_inputs,
    bottom_rank,
    distributor_collectives,
    dp_backward,
    embedding_collectives,
    layout_of,
    rank_rows,
)
from zionsim.dlrm.lower_rank import HALF_FORMATS
from zionsim.dlrm.lower_rank import lower_rank as _lower_rank
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.sharding import l2_parts_by_rank
from zionsim.dlrm.stack import BARE, StackSpec
from zionsim.dlrm.sync import SyncSpec, TraceSync
from zionsim.dlrm.trace import Op, Trace
from zionsim.dlrm.trace_builder import TraceBuilder
from zionsim.dlrm.workload import (
    DTYPE_BYTES,
    WorkloadSpec,
)

#: lowered traces kept for reuse, at most this many ops in all (about 0.4 kB each): the
#: planner lowers each candidate plan to estimate it, and the run then lowers the chosen one
#: again; a sweep's points that differ only in the cluster's rates lower the same plans
CACHE_OPS = 100_000
#: lower a rank whose inputs equal an earlier rank's as a copy of that rank's ops (``lower``);
#: False: every rank on its own (the tests comparing the two)
SHARE_RANKS = True
_CACHE: OrderedDict = OrderedDict()


def lower(
    w: WorkloadSpec,
    plan: Plan,
    ranks: int,
    fused: bool = True,
    gpus_per_node: int | None = None,
    zipf_alpha: float = 1.0,
    sync: SyncSpec | None = None,
    stack: StackSpec = BARE,
) -> Trace:
    """One training iteration of ``w`` under ``plan`` on ``ranks`` GPUs, as software ``stack``
    runs it (its kernel counts and per-step host work; its precisions are already in ``w``).

    The same inputs (by value: the workload's and the stack's fields, the plan, the counts)
    give the same trace, so recent traces are kept (:data:`CACHE_OPS`) and a repeat gets a
    copy of one: its own op list, collective list and ``meta`` (the ops themselves, frozen,
    are shared; their ``args`` must not be changed in place)."""
    g = gpus_per_node or ranks
    sync = sync or SyncSpec()
    key = (_workload_key(w), _plan_key(plan), ranks, fused, g, zipf_alpha, repr(sync),
           _stack_key(stack))  # fmt: skip
    trace = _CACHE.get(key)
    if trace is None:
        twin = _twin_key(w, key) if RETYPE else None
        trace = _retyped(w, plan, ranks, fused, twin) if twin is not None else None
        if trace is None:
            trace = _lower(w, plan, ranks, fused, g, zipf_alpha, sync, stack)
        _remember(key, trace)
        if twin is not None:
            _TWINS.setdefault(twin, {})[w.precision["dense"]] = key
            if len(_TWINS) > KEEP_TWINS:  # forget the keys of traces no longer kept
                kept = {t: {d: k for d, k in ks.items() if k in _CACHE} for t, ks in _TWINS.items()}
                _TWINS.clear()
                _TWINS.update((t, ks) for t, ks in kept.items() if ks)
    else:
        _CACHE.move_to_end(key)
    meta = {k: dict(v) if isinstance(v, dict) else v for k, v in trace.meta.items()}
    return Trace(
        trace.ranks,
        list(trace.ops),
        list(trace.collectives),
        meta,
        trace.stack,
        trace.sync,
        trace.alike,
    )


def _plan_key(plan: Plan):
    """``plan`` as :func:`lower`'s cache tells plans apart: its type, its name and each shard's
    fields as a plain tuple (with the types of its fractions, so that a ``0`` and a ``0.0`` stay
    apart as they do in ``repr``), hashed and compared in C: a 128-GPU plan's ``repr`` takes a
    third of a millisecond, and the planner's candidates are looked up eight times a point;
    its ``repr`` where a shard holds an unhashable value."""
    try:
        key = (type(plan), plan.name, tuple(map(_SHARD_FIELDS, plan.shards)))
        hash(key)
    except (TypeError, AttributeError):  # a list in a shard; not a plan's shards
        return repr(plan)
    return key


#: a shard's fields (and its fractions' types), for :func:`_plan_key`
_SHARD_FIELDS = operator.attrgetter(
    *(f.name for f in dataclasses.fields(Shard)),
    *(f"{f.name}.__class__" for f in dataclasses.fields(Shard) if f.type in (float, "float")),
)
#: the last workload :func:`lower` was given and its ``repr`` (a workload is frozen; the
#: planner lowers every candidate of one workload in turn)
_LAST_W: list = [None, ""]


def _workload_key(w: WorkloadSpec) -> str:
    """``repr(w)``, kept for the last workload given (by identity, held)."""
    if _LAST_W[0] is not w:
        _LAST_W[:] = [w, repr(w)]
    return _LAST_W[1]


#: the last stack :func:`lower` was given and its ``repr`` (a stack is frozen)
_LAST_STACK: list = [None, ""]


def _stack_key(stack: StackSpec) -> str:
    """``repr(stack)``, kept for the last stack given (by identity, held)."""
    if _LAST_STACK[0] is not stack:
        _LAST_STACK[:] = [stack, repr(stack)]
    return _LAST_STACK[1]


#: the cache :func:`_remember` last counted, its length then and its ops in all
_COUNTED: list = [None, 0, 0]


def _remember(key: tuple, trace: Trace) -> None:
    """Keep ``trace`` under ``key``, dropping the least recently used beyond :data:`CACHE_OPS`
    ops (a trace larger than that is not kept).  The ops in all are counted anew only where
    the cache is not the one last counted as it was left (another object, or another length:
    cleared), or ``key`` is in it already."""
    if len(trace.ops) > CACHE_OPS:
        return
    counted = _COUNTED
    fresh = counted[0] is _CACHE and counted[1] == len(_CACHE) and key not in _CACHE
    _CACHE[key] = trace
    if fresh:
        total = counted[2] + len(trace.ops)
    else:
        total = sum(len(t.ops) for t in _CACHE.values())
    while total > CACHE_OPS:
        total -= len(_CACHE.popitem(last=False)[1].ops)
    counted[:] = [_CACHE, len(_CACHE), total]


#: lower a workload whose dense precision is another of the same width and kind (fp32 and tf32;
#: fp16 and bf16) than a kept trace's, all else equal, as that trace with its GEMMs' ``dtype``
#: changed (:func:`_retyped`); False: lower it anew (the tests comparing the two)
RETYPE = True
#: per cache key with the dense precision left out (:func:`_twin_key`), the kept traces' cache
#: keys by their dense precision
_TWINS: dict[tuple, dict[str, tuple]] = {}
#: entries of :data:`_TWINS` beyond which those of traces no longer kept are dropped
KEEP_TWINS = 256


def dense_twin(w: WorkloadSpec) -> tuple | None:
    """``w`` with its dense precision left out but for its width and whether it is a half
    format, as a key (``repr`` of the rest): workloads with equal keys differ at most in a
    dense format of one width and kind (fp32 and tf32; fp16 and bf16).  None where the dense
    precision has no width on record.  Kept for the last workload given (by identity, held:
    a workload is frozen; the planner and the lowering ask for one point's workload often)."""
    if _LAST_TWIN[0] is w:
        return _LAST_TWIN[1]
    dense = w.precision.get("dense")
    twin = None
    if dense in DTYPE_BYTES:
        other = dataclasses.replace(w, precision={**w.precision, "dense": ""})
        twin = (DTYPE_BYTES[dense], dense in HALF_FORMATS, repr(other))
    _LAST_TWIN[:] = [w, twin]
    return twin


#: the last workload :func:`dense_twin` was given and its key
_LAST_TWIN: list = [None, None]


def _twin_key(w: WorkloadSpec, key: tuple) -> tuple | None:
    """``key`` (:func:`lower`'s) with ``w`` as :func:`dense_twin` gives it: the lowering reads
    the dense precision only for the ``dtype`` it writes into every GEMM's arguments (the GEMMs
    of the MLPs and of the interaction, ``lower_rank._RankOps.gemm`` and ``lower_dense``), its
    bytes per element (``eltwise_bytes``, the interaction's memory ops) and whether it is a half
    format (``amp_unscale``).  None where :func:`dense_twin` is."""
    twin = dense_twin(w)
    return None if twin is None else (*twin, *key[1:])


def _retyped(w: WorkloadSpec, plan: Plan, ranks: int, fused: bool, twin: tuple) -> Trace | None:
    """The trace :func:`_lower` would give, from a kept trace of ``twin`` (:func:`_twin_key`)
    under another dense precision: the same ops and collectives, each GEMM's arguments with
    ``w``'s dense precision as ``dtype`` (equal arguments stay one dict), the other ops the
    very same objects; None where no such trace is kept."""
    dense = w.precision["dense"]
    for old, key in (_TWINS.get(twin) or {}).items():
        base = _CACHE.get(key)
        if base is None or old == dense:
            continue
        retyped: dict[int, dict] = {}  # by the identity of the kept op's arguments
        ops = list(base.ops)  # the other ops are the very same objects
        new = object.__new__
        for i in [i for i, op in enumerate(ops) if op.kind == "gemm"]:
            op = ops[i]
            a = op.args
            if a.get("dtype") == old:
                b = retyped.get(id(a))
                if b is None:
                    b = retyped[id(a)] = {**a, "dtype": dense}
                # Op(...) with its fields set here, as its __init__ sets them (copy_rank's way)
                c = new(Op)
                c.id, c.rank, c.name, c.kind = op.id, op.rank, op.name, op.kind
                c.category, c.stream, c.deps, c.args = op.category, op.stream, op.deps, b
                ops[i] = c
        meta = _meta(w, plan, ranks, fused)
        return Trace(ranks, ops, list(base.collectives), meta, base.stack, base.sync, base.alike)
    return None


def _meta(w: WorkloadSpec, plan: Plan, ranks: int, fused: bool) -> dict:
    """A lowered trace's ``meta``: names and figures."""
    return {
        "workload": w.name,
        "plan": plan.name,
        "global_batch": w.batch_per_gpu * ranks,
        "fused": fused,
        "model": model_figures(w),
    }


def _lower(w, plan, ranks, fused, g, zipf_alpha, sync, stack) -> Trace:
    """:func:`lower` without the cache."""
    lay, dedup = layout_of(w, plan, ranks, g, zipf_alpha, stack)
    b = TraceBuilder(ranks, stack.host_dispatch_s)
    c = {**embedding_collectives(b, lay, ranks, g, stack.data_distributor, stack), **dedup}
    if stack.data_distributor:
        distributor_collectives(b, c, lay, w, plan, stack.data_distributor_key_bytes)
    if stack.dp_local_reduce:  # stack.py item 8g
        c.update(dp_backward(w, plan, ranks, g, zipf_alpha))
    buckets = _dense_buckets(w, lay, stack, ranks)
    cb = DTYPE_BYTES[w.precision["communication"]]
    dense_groups = lower_dense.dense_groups(sync, ranks, g)
    c_ar = {
        key: [b.collective("all_reduce", n * cb, ranks=grp) for n, _ in buckets]
        for key, grp in dense_groups.items()
    }
    sync_bytes = float((w.dense_params + lay.dp_params) * cb)
    sync_colls = lower_dense.sync_collectives(b, sync, sync_bytes, ranks, g)
    lay.l2_id, lay.l2_parts = l2_parts_by_rank(lay, ranks)  # before rank_rows: tells ranks apart
    rows = [*rank_rows(lay, ranks), np.arange(ranks) == bottom_rank(stack, ranks)]
    blocks: dict[tuple, tuple] = {}  # a rank's inputs -> (rank, its ops' ids [start, end))
    alike: list[int] = []
    # a rank's dense group: the first that holds it
    group_of = {r: k for k, grp in reversed(dense_groups.items()) for r in grp.tolist()}
    of_node, of_rail, row_bytes = block_inputs(c, rows, ranks, g)
    remap = _Remap(c, c_ar, of_node, of_rail, sync_colls, ranks) if SHARE_RANKS and REMAP else None
    for r in range(ranks):
        group = group_of.get(r)
        ar = c_ar.get(group, [])
        node, local = r // g, r % g
        colls = (*ar, *of_node[node], *of_rail[local], sync_colls.get(r))
        key = (tuple(ar), *of_node[node], *of_rail[local], sync_colls.get(r),
               *(by_rank[r] for by_rank in row_bytes))  # fmt: skip
        if SHARE_RANKS and key in blocks:
            alike.append(alike[blocks[key][0]])
            b.copy_rank(r, *blocks[key][1:])
            continue
        alike.append(r)
        start = len(b.ops)
        shape = remap.shape(r, key, colls, len(ar)) if remap is not None else None
        if shape is not None and remap.copied(b, r, shape, colls):
            blocks[key] = (r, start, len(b.ops))
            continue
        host_s = stack.host_per_step_s + stack.host_per_sample_s * w.batch_per_gpu
        if host_s > 0 or stack.host_dispatch_s > 0:
            b.prepare_batch(r, host_s)
        step_op = None
        if stack.gpu_per_step_s > 0:  # GPU work the op list leaves out, serial on the GPU
            step_op = b.op(r, "step_gpu_work", "host", "framework", "compute", (),
                           seconds=stack.gpu_per_step_s)  # fmt: skip
        first = step_op if stack.iteration_join else None
        _lower_rank(b, w, r, node, local, lay, fused, c, ar, buckets, stack, first)
        lower_dense.lower_sync(b, sync, r, g, sync_colls, sync_bytes)
        blocks[key] = (r, start, len(b.ops))
        if shape is not None:
            remap.blocks.setdefault(shape, (start, len(b.ops), colls))
    meta = _meta(w, plan, ranks, fused)
    background = sync_colls if sync.is_shadow else {}
    sync_of = TraceSync(sync, background, sync_bytes)
    return Trace(ranks, b.ops, b.colls, meta, stack, sync_of, tuple(alike))


#: lower a rank whose inputs equal an earlier lowered rank's but for which copies of its
#: collectives it joins (a TWRW table's reduce-scatter on its own node, all-to-all on its own
#: rail; its dense group's buckets; its sync round) as a copy of that rank's ops with those
#: collectives swapped (:class:`_Remap`); False: such a rank is lowered anew (the tests)
REMAP = True


class _Remap:
    """The lowered ranks' blocks by their inputs less which copies of collectives they join
    (``shape``: how many buckets, which copies exist, the layout rows and the rank's entries
    of the per-rank arrays among the trace's collective inputs ``c``), and the swap of one
    rank's collectives for another's (:meth:`mapping`).  The ops of a rank read ``node`` and
    ``local`` only through the collectives they look up (``_lower_rank``), and ``r`` through
    the layout rows and those per-rank arrays."""

    def __init__(self, c, c_ar, of_node, of_rail, sync_colls, ranks):
        #: every collective that some rank joins as its own copy (its node's, rail's, group's)
        self.varying = {x for ids in c_ar.values() for x in ids}
        self.varying |= {x for t in (*of_node, *of_rail) for x in t if x is not None}
        self.varying |= set(sync_colls.values())
        self.per_rank = [
            _bytes_of(v, ranks)
            for v in c.values()
            if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == ranks
        ]
        self.blocks: dict[tuple, tuple] = {}  # shape -> (start, end, its collectives)
        self._refs: dict[int, set] = {}  # a block's start -> the collectives its ops join

    def shape(self, r: int, key: tuple, colls: tuple, buckets: int) -> tuple:
        """Rank ``r``'s inputs (``key``: ``_lower``'s, of which ``colls`` are its collectives,
        ``buckets`` of them its group's) less which copies of collectives it joins."""
        rows = key[len(colls) - buckets + 1 :]  # the key holds the buckets as one tuple
        return (buckets, *(x is None for x in colls), *rows, *(v[r] for v in self.per_rank))

    def copied(self, b: TraceBuilder, r: int, shape: tuple, colls: tuple) -> bool:
        """Append rank ``r``'s block as a copy of the block lowered for ``shape`` with its
        collectives swapped for ``colls`` (:meth:`mapping`); False where that cannot be."""
        mapping = self.mapping(b, shape, colls)
        if mapping is None:
            return False
        b.copy_rank(r, *self.blocks[shape][:2], colls=mapping)
        return True

    def mapping(self, b: TraceBuilder, shape: tuple, colls: tuple) -> dict | None:
        """Each collective of the block lowered for ``shape`` as the one a rank joining
        ``colls`` joins in its place; None where no block has that shape, or where the swap is
        not one collective for one, or the block joins a copy that the swap leaves out."""
        hit = self.blocks.get(shape)
        if hit is None:
            return None
        start, end, theirs = hit
        out: dict[int, int] = {}
        for a, x in zip(theirs, colls, strict=True):
            if a is not None and out.setdefault(a, x) != x:
                return None
        refs = self._refs.get(start)
        if refs is None:
            ops = b.ops[start:end]
            refs = self._refs[start] = {o.args["coll"] for o in ops if o.kind == "collective"}
        if not (refs & self.varying) <= out.keys():
            return None
        return out


def _bytes_of(v: np.ndarray, ranks: int) -> list[bytes]:
    """Each rank's entry of a per-rank array, as bytes."""
    flat = np.ascontiguousarray(v).tobytes()
    step = len(flat) // ranks
    return [flat[r * step : (r + 1) * step] for r in range(ranks)]


def _dense_buckets(w: WorkloadSpec, lay, stack: StackSpec, ranks: int) -> list:
    """DDP buckets (``lower_dense.buckets``), without a model-parallel bottom MLP's layers."""
    bottom = bottom_rank(stack, ranks) < 0
    return lower_dense.buckets(w, lay.dp_params, stack.grouped_allreduce, bottom)


def model_figures(w: WorkloadSpec) -> dict:
    """Size and work of the model: parameters and forward MFLOPs per sample (as papers quote)."""
    return {
        "embedding_params": int(w.embedding_params),
        "dense_params": int(w.dense_params),
        "params": int(w.embedding_params + w.dense_params),
        "mflops_per_sample": w.flops_per_sample / 1e6,
    }
