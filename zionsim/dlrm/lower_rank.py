"""Lowering of one rank: the ops rank ``r`` runs in one iteration, in order (the per-rank half
of ``lowering.py``, which assembles the trace: layout, collectives, rank sharing).

:func:`lower_rank` lowers the host's batch preparation aside, the forward (the embedding
lookups and exchange, the dense forward: ``lower_dense.py``), the backward (top and interaction
backward, the embedding gradients' exchange and update, the bottom MLP's backward) and the dense
update (the all-reduce buckets and the dense optimizer); ``lowering.py``'s module docstring
gives the iteration step by step.  :class:`_RankOps` holds the op constructors of one rank."""

from __future__ import annotations

import numpy as np

from zionsim.dlrm import lower_dense, lower_hugectr
from zionsim.dlrm.dedup import (
    DEDUP_INDEX_BYTES,
    UNIQUE_BYTES_PER_DISTINCT,
    UNIQUE_BYTES_PER_KEY,
    UNIQUE_KERNELS,
    KeyDedup,
)
from zionsim.dlrm.lower_exchange import bottom_rank
from zionsim.dlrm.stack import BARE
from zionsim.dlrm.trace_builder import TraceBuilder
from zionsim.dlrm.workload import DTYPE_BYTES, WorkloadSpec
from zionsim.hardware import compute

#: dense precisions under which a rank's backward adds the loss scaler's pass
#: (:func:`_sparse_gradient`)
HALF_FORMATS = ("fp16", "bf16")


class _RankOps:
    """Op constructors for one rank ``r``: its collectives (by key in ``c``), GEMMs, UVM host
    transfers and parameter-server transfers; each returns the new op's id, or None when the rank
    has no such work."""

    def __init__(self, b: TraceBuilder, w: WorkloadSpec, r: int, lay, c: dict, stack=BARE):
        self.b, self.w, self.r, self.lay, self.c = b, w, r, lay, c
        self.stack = stack
        self.emb_stream = "embedding" if stack.embedding_stream else "compute"
        #: HugeCTR's hierarchical intra-node stages are kernels, not NCCL calls (``stack.py``
        #: item 8f): off the communicator's stream, so its later calls do not wait for them
        self.intra_stream = "intra" if stack.hierarchical_reduction else "a2a"
        #: samples of the rank's bottom MLP (``stack.py`` item 13) and whether it is
        #: model-parallel (its output and gradient in the embeddings' all-to-alls)
        bottom = bottom_rank(stack, b.ranks)
        self.bottom_mp = bottom >= 0
        self.bottom_batch = w.batch_per_gpu * (
            b.ranks if r == bottom else 0 if self.bottom_mp else 1
        )
        self.dt = w.precision["dense"]
        ps = lay.ps_pooled[r]
        self.servers = [int(k) for k in np.flatnonzero(ps)] if ps.size else []

    def coll(self, name, key, cat, stream, deps=()):
        """The rank's op of collective ``c[key]``; None when the trace has no such collective."""
        if key not in self.c:
            return None
        return self.b.op(self.r, name, "collective", cat, stream, deps, coll=self.c[key])

    def gemm(self, name, m, n, k, deps=(), launches=1, act=0):
        """An (m×k)·(k×n) GEMM in the dense precision on the compute stream, with ``launches``
        kernels in all: the stack's bias / activation kernels beside the GEMM, each of which
        reads and writes the layer's output activation of ``act`` elements once
        (``eltwise_bytes``)."""
        extra = {"launches": launches} if launches != 1 else {}
        if launches > 1 and act:
            extra["eltwise_bytes"] = float((launches - 1) * 2 * act * DTYPE_BYTES[self.dt])
        return self.b.op(
            self.r, name, "gemm", "gemm", "compute", deps, m=m, n=n, k=k, dtype=self.dt, **extra
        )

    def host(self, name, direction, deps):
        """A UVM host transfer of the rank's host-resident rows; None when it has none."""
        nbytes = self.lay.host_bytes[self.r]
        if nbytes <= 0:
            return None
        return self.b.op(
            self.r, name, "transfer", "host_transfer", "compute", deps,
            direction=direction, nbytes=float(nbytes),
        )  # fmt: skip

    def ps(self, name, deps, **parts):
        """A parameter-server transfer, one byte count per server and part; None without servers.
        A CPU trainer's pushes go on ``ps_push`` (``STREAMS``), a GPU rank's on ``ps``."""
        if not self.servers:
            return None
        parts = {k: [float(v[self.r, j]) for j in self.servers] for k, v in parts.items()}
        nbytes = float(sum(parts.get("pooled", parts.get("push", []))))
        hogwild = name == "ps_update" and self.stack.trainer == "cpu"
        return self.b.op(
            self.r, name, "transfer", "parameter_server", "ps_push" if hogwild else "ps", deps,
            direction=name, servers=self.servers, nbytes=nbytes, **parts,
        )  # fmt: skip


def lower_rank(b, w, r, node, local, lay, fused, c, c_ar, buckets, stack=BARE, first=None):
    """All ops of rank ``r`` (on ``node``, GPU ``local`` there) for one iteration, in order;
    the embedding lookup waits for op ``first`` (a joined iteration's per-step GPU work: HugeCTR's
    lookup waits for the copy of the distributed batch, ``ebc_cache_train_ddl_output``)."""
    o = _RankOps(b, w, r, lay, c, stack)
    copied = lower_hugectr.step_copies(o, first)  # the lookups wait for it in a joined iteration
    first = copied if stack.iteration_join else first
    n_look = float(lay.lookups[r])
    e_args = {
        "lookups": n_look,
        "tables": int(lay.tables[r]),
        "fused": fused,
        "row_bytes": float(lay.lookup_bytes[r] / n_look) if n_look else 0.0,
    }
    bottom = _lower_bottom_fwd(o, (first,)) if o.bottom_mp else None
    outs = lower_hugectr.network_fwd(o, _lower_embedding_fwd(o, node, local, e_args, first, bottom))
    x = _lower_dense_fwd(o, outs[1:], outs[0] if stack.dense_waits_lookup else None, outs[0])
    grads_done: dict[str, int] = {}
    x = _lower_top_bwd(o, x, grads_done)

    # stack.py item 8g: HugeCTR issues the all-reduce before the model-parallel local reduce
    # (where no bucket waits for the embedding backward)
    def early():
        done = all(m in grads_done for _, members in buckets[: len(c_ar)] for m in members)
        return _lower_allreduces(o, None, grads_done, c_ar, buckets) if done else None

    e_bwd, d2h, ars = _lower_sparse_bwd(
        o, node, local, e_args, x, grads_done, early if stack.dp_local_reduce else None
    )
    _lower_dense_update(o, e_bwd, d2h, grads_done, c_ar, buckets, ars)


def _lower_embedding_fwd(
    o: _RankOps, node: int, local: int, e_args: dict, first=None, bottom=None
) -> list:
    """Parameter-server lookup, input all-to-all, UVM reads, embedding forward and the pooled
    outputs' collectives (the pooled all-to-all also after a model-parallel ``bottom`` MLP,
    ``stack.py`` item 13); returns the embedding forward, then the ops the interaction waits for
    (None where absent)."""
    ps_in = o.ps(
        "ps_lookup", (), index=o.lay.ps_index, gather=o.lay.ps_gather, pooled=o.lay.ps_pooled
    )
    dedup = o.c.get("dedup")
    uniq = _lower_unique(o, dedup, first) if dedup is not None else None
    a_in = o.coll("input_a2a", "in", "all_to_all", "a2a", (uniq,))
    h2d = o.host("uvm_read", "h2d", (a_in,))
    parts = o.lay.l2_parts[o.lay.l2_id[o.r]]  # the tables the kernel reads, for its L2 hits
    ptrs = lower_hugectr.row_ptrs(o, (a_in, h2d, first))
    before = (ptrs,) if ptrs is not None else (a_in, h2d, first)
    e_fwd = o.b.op(
        o.r, "emb_fwd", "embedding_fwd", "embedding", o.emb_stream, before,
        out_bytes=float(o.lay.out_bytes[o.r]), **e_args, **({"l2_parts": parts} if parts else {}),
    )  # fmt: skip
    outs = [
        e_fwd,
        o.coll("pooled_a2a", "pool", "all_to_all", "a2a", (e_fwd, bottom)),
        o.coll("rw_reduce_scatter", "rs", "reduce_scatter", "a2a", (e_fwd,)),
    ]
    intra = o.intra_stream
    # stack.py item 8i: the pooling kernel writes the node's partial outputs to the rail GPUs
    # itself, so the intra-node stage starts with the lookup instead of after it
    fused = o.stack.hierarchical_reduction and o.stack.hier_fused_forward
    pre = before if fused else (e_fwd,)
    rs = o.coll("twrw_reduce_scatter", ("twrw_rs", node), "reduce_scatter", intra, pre)
    rs = rs or o.coll("hyb_intra_a2a", ("hyb_intra", node), "all_to_all", "a2a", (e_fwd,))
    # HugeCTR's hierarchical TW/RW shards: their intra-node stage, after any TWRW one
    after = (rs,) if rs is not None else pre
    rs = o.coll("hier_intra_a2a", ("hier_intra", node), "all_to_all", intra, after) or rs
    rs = lower_hugectr.hier_reduction(o, rs, e_fwd if fused else None) or rs
    outs.append(o.coll("twrw_a2a", ("twrw_a2a", local), "all_to_all", "a2a", (rs or e_fwd,)))
    outs.append(ps_in)
    lower_hugectr.distributor(o, first)
    return outs


def _lower_unique(o: _RankOps, dedup: KeyDedup, first=None) -> int:
    """``tf.unique`` over the rank's keys before the model-parallel exchange (``stack.py`` item
    7d): a memory op of :data:`UNIQUE_BYTES_PER_KEY` per key and
    :data:`UNIQUE_BYTES_PER_DISTINCT` per distinct key, :data:`UNIQUE_KERNELS` kernels.  Its
    copy of the distinct count to the host (the op finishes in a host callback) is not
    priced."""
    nbytes = dedup.keys * UNIQUE_BYTES_PER_KEY + dedup.distinct * UNIQUE_BYTES_PER_DISTINCT
    return o.b.op(o.r, "key_unique", "memory", "embedding", o.emb_stream, (first,),
                  nbytes=float(nbytes), launches=UNIQUE_KERNELS)  # fmt: skip


def _lower_dense_fwd(o: _RankOps, outs: list, lookup: int | None = None, emb=None) -> int:
    """Bottom MLP (after the embedding ``lookup`` where the stack says so), interaction (after
    the embedding outputs ``outs``: the exchanges, then the parameter-server lookup; under key
    deduplication after ``emb_expand``, which waits for the exchanges, or for the lookup ``emb``
    where nothing is exchanged), top MLP and the loss; returns the loss op."""
    w, B = o.w, o.w.batch_per_gpu
    start, cast = _dense_update_bytes(o)[0], None
    if start:  # the 16-bit weight copy and the zeroed gradients (stack.py item 4b)
        cast = o.b.op(o.r, "dense_weight_cast", "memory", "optimizer", "compute", (lookup,),
                      nbytes=start, launches=2)  # fmt: skip
    last = None if o.bottom_mp else _lower_bottom_fwd(o, (lookup, cast))
    dedup = o.c.get("dedup")
    if dedup is not None:  # every key's vector gathered back from the distinct keys' ones
        nbytes = dedup.keys * DEDUP_INDEX_BYTES + 2 * dedup.vector_bytes
        got = tuple(x for x in outs[:-1] if x is not None) or (emb,)
        expand = o.b.op(o.r, "emb_expand", "memory", "embedding", "compute", got,
                        nbytes=float(nbytes))  # fmt: skip
        outs = [expand, outs[-1]]
    x = lower_dense.interaction(
        o.b, w, o.r, B, o.dt, (last, *outs), "fwd", o.stack.interaction_kernel,
        o.stack.dcn_kernels,
    )  # fmt: skip
    for i, (k, n) in enumerate(w.top_layers()):
        x = o.gemm(f"top_fwd{i}", B, n, k, (x,), o.stack.mlp_kernels[0], B * n)
    return o.b.op(o.r, "loss", "memory", "interaction", "compute", (x,), nbytes=float(16 * B))


def _lower_bottom_fwd(o: _RankOps, deps: tuple):
    """The rank's bottom-MLP forward over its ``bottom_batch`` samples, the first layer after
    ``deps``; returns the last op (None without a bottom MLP on this rank)."""
    B, last = o.bottom_batch, None
    for i, (k, n) in enumerate(o.w.bottom_layers() if B else ()):
        last = o.gemm(
            f"bottom_fwd{i}", B, n, k, deps if i == 0 else (), o.stack.mlp_kernels[0], B * n
        )
    return last


def _lower_top_bwd(o: _RankOps, x: int, grads_done: dict) -> int:
    """Top-MLP wgrad and dgrad per layer, then the interaction backward; records each layer's
    wgrad op in ``grads_done`` (the interaction's weights, a DCN's or a projection's, are done
    with its backward) and returns the interaction backward's last op."""
    w, B = o.w, o.w.batch_per_gpu
    for i, (k, n) in reversed(list(enumerate(w.top_layers()))):
        grads_done[f"top{i}"] = o.gemm(f"top_wgrad{i}", k, n, B, (x,))
        x = o.gemm(f"top_dgrad{i}", B, k, n, (x,), o.stack.mlp_kernels[1] - 1, B * n)
    x = lower_dense.interaction(
        o.b, w, o.r, B, o.dt, (x,), "bwd", o.stack.interaction_kernel, o.stack.dcn_kernels
    )
    if w.interaction_params:
        grads_done["interaction"] = x
    return x


def _lower_sparse_bwd(o: _RankOps, node, local, e_args, x, grads_done, early=None) -> tuple:
    """Parameter-server update, embedding-gradient collectives, bottom-MLP backward (wgrads into
    ``grads_done``), embedding backward with its optimizer and UVM writes; returns
    (emb_bwd op, UVM write op or None, the all-reduce ops or None).  Where the replicated tables'
    backward is an op of its own (``stack.py`` item 8g), ``early()`` lowers the all-reduces
    after it and before the model-parallel backward, in HugeCTR's issue order."""
    w, lay = o.w, o.lay
    o.ps("ps_update", (x,), push=lay.ps_pooled, update=lay.ps_update)
    dedup, ready = o.c.get("dedup"), x
    if dedup is not None:  # tf.gather's gradient: SOK's unsorted_segment_sum (zero, then add)
        nbytes = dedup.distinct_vector_bytes + dedup.keys * DEDUP_INDEX_BYTES
        nbytes += 2 * dedup.vector_bytes
        ready = o.b.op(o.r, "emb_expand_bwd", "memory", "embedding", "compute", (x,),
                       nbytes=float(nbytes), launches=2)  # fmt: skip
    net = ready
    if o.c.get("net_copy_bytes"):  # network_backward: the output's gradient into the buffer
        net = o.b.op(o.r, "emb_network_bwd", "memory", "embedding", o.emb_stream, (ready,),
                     nbytes=float(o.c["net_copy_bytes"]))  # fmt: skip
    backs = [
        o.coll("grad_a2a", "grad", "all_to_all", "a2a", (net,)),
        o.coll("rw_all_gather", "ag", "all_gather", "a2a", (net,)),
    ]
    hb = o.coll("hyb_intra_a2a_bwd", ("hyb_intra_bwd", node), "all_to_all", "a2a", (net,))
    tb = o.coll("twrw_a2a_bwd", ("twrw_a2a_bwd", local), "all_to_all", "a2a", (hb or net,))
    intra = o.intra_stream  # after the rail exchange, beside the communicator's next calls
    backs += [tb, o.coll("twrw_all_gather", ("twrw_ag", node), "all_gather", intra, (tb,))]
    backs.append(o.coll("hier_intra_bwd", ("hier_bwd", node), "all_to_all", intra, (tb,)))
    if lay.hybrid:  # frequent rows' gradients: a local reduction of the output's gradient
        grads_done["dp_tables"] = x  # (hybrid_sparse_embedding.cu freq_backward), not the a2a's
    B = o.bottom_batch  # a model-parallel bottom MLP's gradient comes in the gradient exchange
    y = backs[0] if o.bottom_mp else x
    for i, (k, n) in reversed(list(enumerate(w.bottom_layers() if B else ()))):
        grads_done[f"bottom{i}"] = o.gemm(f"bottom_wgrad{i}", k, n, B, (y,))
        if i > 0:
            y = o.gemm(f"bottom_dgrad{i}", B, k, n, (y,), o.stack.mlp_kernels[1] - 1, B * n)
    framework = o.stack.embedding_optimizer == "framework"
    state, unique = float(lay.state_bytes[o.r]), float(lay.unique_rows[o.r])
    ars = None
    if "dp_bwd" in o.c and e_args["fused"] and not framework:
        e_args, state, unique = _lower_dp_bwd(o, e_args, ready, grads_done)
        ars = early() if early is not None else None
        if not e_args["lookups"]:  # every table of the rank replicated: its backward is done
            dp = grads_done["dp_tables"]
            return dp, o.host("uvm_write", "d2h", (dp,)), ars
    n_look = e_args["lookups"]
    name, category, deps, args = "emb_bwd", "embedding", tuple(backs), e_args
    if (framework or not e_args["fused"]) and n_look:
        deps, args = _sparse_gradient(o, e_args, deps)
        name, category = "emb_opt", "optimizer"
    elif o.stack.local_reduce and n_look:  # stack.py item 7c
        args = {**args, "grad_bytes": _exchange_row_bytes(w, e_args["row_bytes"])}
    e_bwd = o.b.op(
        o.r, name, "embedding_bwd", category, o.emb_stream, deps,
        optimizer=w.optimizer["embedding"],
        state_bytes_per_row=state / n_look if n_look else 0.0,
        unique_rows=unique, **args,
    )  # fmt: skip
    return e_bwd, o.host("uvm_write", "d2h", (e_bwd,)), ars


def _lower_dp_bwd(o: _RankOps, e_args: dict, ready, grads_done: dict) -> tuple:
    """The replicated tables' backward (``stack.py`` item 8g, HugeCTR's ``ebc_dp_local_reduce``)
    as an op of its own on the embedding stream once the top MLP's backward (``ready``) and the
    bottom MLP's are done, priced as the embedding backward of their lookups, distinct rows and
    state; the all-reduce of their gradients waits for it (``grads_done["dp_tables"]``).  Returns
    the rest of the rank's embedding backward, its model-parallel tables': the arguments, the
    optimizer-state bytes and the distinct rows."""
    dp, r, lay = o.c["dp_bwd"], o.r, o.lay
    look = float(dp.lookups[r])
    if look <= 0:
        return e_args, float(lay.state_bytes[r]), float(lay.unique_rows[r])
    args = {"lookups": look, "tables": int(dp.tables[r]), "fused": True,
            "row_bytes": float(dp.lookup_bytes[r] / look)}  # fmt: skip
    if o.stack.local_reduce:  # stack.py item 7c
        args["grad_bytes"] = _exchange_row_bytes(o.w, args["row_bytes"])
    # after the bottom MLP's backward too: HugeCTR issues it (in network_graph) before the local
    # reduce, and the engine's GPU runs one kernel at a time in request order, so a reduce
    # requested beside that chain would split it and let the model-parallel backward, requested
    # after the gradient exchange, run ahead of the chain's end and of the all-reduce
    bottom = grads_done.get("bottom0")
    grads_done["dp_tables"] = o.b.op(
        r, "emb_dp_bwd", "embedding_bwd", "embedding", o.emb_stream, (ready, bottom),
        optimizer=o.w.optimizer["embedding"],
        state_bytes_per_row=float(dp.state_bytes[r] / look),
        unique_rows=float(dp.unique_rows[r]), **args,
    )  # fmt: skip
    rest = max(e_args["lookups"] - look, 0.0)
    mp_bytes = float(lay.lookup_bytes[r] - dp.lookup_bytes[r])
    args = {**e_args, "lookups": rest, "tables": int(lay.tables[r] - dp.tables[r]),
            "row_bytes": mp_bytes / rest if rest else 0.0}  # fmt: skip
    state = max(float(lay.state_bytes[r] - dp.state_bytes[r]), 0.0)
    return args, state, max(float(lay.unique_rows[r] - dp.unique_rows[r]), 0.0)


def _exchange_row_bytes(w: WorkloadSpec, row: float) -> float:
    """Bytes of a ``row``-byte embedding row's values in the communication precision (an INT8
    row's 4 bytes of scale and bias dropped)."""
    emb = w.precision["embedding"]
    values = (row - (4 if emb == "int8" else 0)) / DTYPE_BYTES[emb]
    return float(values * DTYPE_BYTES[w.precision["communication"]])


def _sparse_gradient(o: _RankOps, e_args: dict, deps: tuple) -> tuple[tuple, dict]:
    """The sparse COO gradient the framework's optimizer applies (``emb_opt``): its ops, and the
    arguments of the optimizer's step.  Unfused (per-table ``nn.EmbeddingBag``): one
    ``index_select`` per table writes it.  Fused lookups with ``embedding_update.optimizer:
    framework`` (one joint table): the backward kernel writes it (``gradient: kernel``) or wraps
    the output's gradient uncopied (``view``); under mixed precision with ``amp_unscale`` the
    loss scaler then reads and writes every value once."""
    stack, args = o.stack, dict(e_args)
    if not e_args["fused"]:
        return (_native_gradient(o, e_args, deps),), args
    args.update(fused=False, tables=1)
    single = len(o.lay.lookups) == 1
    if stack.embedding_gradient[0 if single else 1] == "kernel":
        deps = (_native_gradient(o, args, deps),)
    if stack.amp_unscale and o.dt in HALF_FORMATS:
        nbytes = 2.0 * e_args["lookups"] * e_args["row_bytes"]
        deps = (
            o.b.op(o.r, "emb_unscale", "memory", "optimizer", o.emb_stream, deps, nbytes=nbytes),
        )
    return deps, args


def _native_gradient(o: _RankOps, e_args: dict, deps: tuple) -> int:
    """Native (per-table ``nn.EmbeddingBag``, ``sparse=True``) autograd backward: one
    ``index_select`` kernel per table materialises its sparse gradient, a memory op of
    ``compute.embedding_gradient_bytes``; the optimizer reads it back in ``emb_opt``."""
    nbytes = compute.embedding_gradient_bytes(
        e_args["lookups"], e_args["row_bytes"], float(o.lay.out_bytes[o.r]), o.w.index_bytes
    )
    extra = {"launches": e_args["tables"]} if e_args["tables"] > 1 else {}
    return o.b.op(
        o.r, "emb_bwd", "memory", "embedding", o.emb_stream, deps, nbytes=float(nbytes), **extra
    )


def _lower_allreduces(o: _RankOps, e_bwd, grads_done, c_ar, buckets) -> list:
    """One all-reduce per DDP bucket once its layers' gradients are done (DP tables' wait for
    the embedding backward ``e_bwd``, which computes them, unless their own backward is in
    ``grads_done``); returns their ops."""
    ars = []
    stream = "a2a" if o.stack.one_communicator else "allreduce"  # stack.py item 8e
    for j, ((_, members), cid) in enumerate(zip(buckets[: len(c_ar)], c_ar, strict=True)):
        ready = tuple(grads_done.get(m, e_bwd) for m in members)
        ars.append(
            o.b.op(o.r, f"allreduce{j}", "collective", "all_reduce", stream, ready, coll=cid)
        )
    return ars


def _lower_dense_update(o: _RankOps, e_bwd, d2h, grads_done, c_ar, buckets, ars=None) -> None:
    """The all-reduces (:func:`_lower_allreduces`, unless lowered already: ``ars``), then the
    dense optimizer step."""
    if ars is None:
        ars = _lower_allreduces(o, e_bwd, grads_done, c_ar, buckets)
    tensors = 2 * (len(o.w.top_layers()) + len(o.w.bottom_layers()))  # weight, bias per layer
    per_tensor = o.stack.optimizer_kernels_per_tensor
    extra = {"launches": tensors * per_tensor} if per_tensor else {}
    o.b.op(
        o.r, "dense_opt", "memory", "optimizer", "compute", (*ars, e_bwd, d2h),
        nbytes=_dense_update_bytes(o)[1], **extra,
    )  # fmt: skip


def _dense_update_bytes(o: _RankOps) -> tuple[float, float]:
    """The rank's dense-parameter bytes per step (``lower_dense.dense_update_bytes``)."""
    return lower_dense.dense_update_bytes(
        o.w.dense_params, o.w.optimizer["dense"], o.dt, o.stack.dense_master_weights
    )
