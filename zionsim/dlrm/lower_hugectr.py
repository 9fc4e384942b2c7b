"""Lowering of HugeCTR's embedding-collection ops of one rank (``stack.py`` items 8d, 8f and 8i):
the copies between two iterations, the lookup's row addresses, the network buffer copy after
the forward exchange, the hierarchical exchange's destination reduction and the data
distributor of the next batch.  Each function takes the rank's op constructors
(``lower_rank._RankOps``) and adds nothing where the stack or the layout has no such op;
``lower_rank.lower_rank`` calls them in the iteration's order."""

from __future__ import annotations


def step_copies(o, first=None):
    """HugeCTR's copies on the main stream between two iterations (``stack.py`` item 8d, with
    the data distributor): ``input_copy`` (``copy_next_iter_network_input``: the next batch's
    dense features and labels into the graph's inputs, two copies) and ``ddl_cache``
    (``ebc_cache_train_ddl_output``: the distributed batch into the lookups' inputs), memory
    ops after ``first``, in that order (``lower_exchange._step_copies``); returns the last (the
    op the lookups wait for), or ``first`` without a distributor."""
    if "ddl_cache_bytes" not in o.c:
        return first
    copy = o.b.op(o.r, "input_copy", "memory", "framework", "compute", (first,),
                  nbytes=float(o.c["input_copy_bytes"]), launches=2)  # fmt: skip
    return o.b.op(o.r, "ddl_cache", "memory", "framework", "compute", (copy,),
                  nbytes=float(o.c["ddl_cache_bytes"][o.r]),
                  launches=int(o.c["ddl_cache_copies"]))  # fmt: skip


def network_fwd(o, outs: list) -> list:
    """HugeCTR's ``network_forward`` (``stack.py`` item 8d, the embedding collection): once the
    forward exchange has delivered the rank's samples' pooled vectors, a kernel reads them from
    the network buffer and writes the embedding output the dense network reads
    (``net_copy_bytes``: the partial vectors that arrive and the output, every model-parallel
    table's of the local samples, ``lower_exchange._partials``); a
    memory op on the embedding stream that the interaction waits for in place of the exchange
    ops.  Source: NVIDIA-Merlin/HugeCTR (commit 2f2016f) HugeCTR/embedding/
    model_parallel_embedding.cpp and hier_model_parallel_embedding.cpp ``network_forward``
    (``all2all_comm_.communicate`` / ``hier_communicate``, then
    ``network_forward_.sparse_forward``), embedding/operators/network_forward.cu."""
    nbytes = o.c.get("net_copy_bytes", 0.0)
    got = tuple(x for x in outs[1:-1] if x is not None)
    if not nbytes or not got:
        return outs
    net = o.b.op(o.r, "emb_network_fwd", "memory", "embedding", o.emb_stream, got,
                 nbytes=float(nbytes))  # fmt: skip
    return [outs[0], net, *([None] * (len(outs) - 3)), outs[-1]]


def row_ptrs(o, deps: tuple):
    """HugeCTR's embedding-table lookup ahead of the pooling (the embedding collection,
    ``stack.py`` item 8d): a kernel that reads each of the rank's keys and writes its row's
    address (``row_ptr_bytes_per_key``), a memory op on the embedding stream after ``deps``
    that the pooling waits for; None without it.  Source: NVIDIA-Merlin/HugeCTR (commit
    2f2016f) HugeCTR/embedding_storage/ragged_static_embedding.cu
    ``RaggedStaticEmbeddingTable::lookup`` (``ragged_static_embedding_table_lookup_kernel``,
    one ``float*`` per key into ``emb_vec``), embedding/model_parallel_embedding.cpp
    ``model_forward`` (lookup, then ``model_forward_.sparse_forward``)."""
    per_key = o.c.get("row_ptr_bytes_per_key", 0.0)
    keys = float(o.lay.lookups[o.r])
    if not per_key or keys <= 0:
        return None
    return o.b.op(o.r, "emb_row_ptrs", "memory", "embedding", o.emb_stream, deps,
                  nbytes=keys * per_key)  # fmt: skip


def hier_reduction(o, stage, lookup=None):
    """HugeCTR's ``dst_reduction`` after the intra-node stage ``stage`` (``stack.py`` item 8f)
    and, where that stage runs beside the lookup (item 8i), after the ``lookup`` too: a memory
    op of the rank's ``hier_red_bytes`` on the embedding stream; None where the stack reduces
    inline or the rank has nothing to reduce."""
    red = o.c.get("hier_red_bytes")
    if red is None or stage is None or red[o.r] <= 0:
        return None
    return o.b.op(o.r, "hier_dst_reduction", "memory", "embedding", o.emb_stream, (stage, lookup),
                  nbytes=float(red[o.r]))  # fmt: skip


def distributor(o, first=None) -> None:
    """HugeCTR's data distributor for the next batch (``stack.py`` item 8d): on the ``a2a``
    stream after this iteration's forward exchanges and before its gradient exchanges (one
    NCCL communicator: its operations run in launch order), waiting for this iteration's copy of
    the batch distributed last time (``first``); the distributor's own kernels on the embedding
    stream (``ddl_kernels``: label and count the local keys, sort them by owner, rebuild the
    buckets of the received ones; ``sparse_data_distribution_op_impl.cu``: label_and_count_keys,
    cub::DeviceRadixSort::SortPairs on ``log2(n) + 1`` label bits, count_keys, the scans and
    swizzle_keys of filter_after_all2all), then the counts all-to-all, the host's round trip,
    the keys all-to-all.  Source: HugeCTR/src/pybind/model_pipeline.cpp,
    ``create_train_pipeline_with_ebc``: ``distribute_data`` runs on the ``prefetch`` stream,
    scheduled after ``network_graph`` and before ``ebc_mp_network_backward``, and waits for
    ``ebc_cache_train_ddl_output``."""
    if "ddl_counts" not in o.c:
        return
    nbytes = float(o.c["ddl_kernel_bytes"][o.r])
    work = o.b.op(o.r, "ddl_kernels", "memory", "embedding", o.emb_stream, (first,),
                  nbytes=nbytes, launches=4)  # fmt: skip
    cnt = o.coll("ddl_counts", "ddl_counts", "all_to_all", "a2a", (work,))
    sync = None
    if o.stack.data_distributor_host_sync_s > 0:
        sync = o.b.op(o.r, "ddl_host_sync", "host", "framework", "a2a", (cnt,),
                      seconds=o.stack.data_distributor_host_sync_s)  # fmt: skip
    o.coll("ddl_keys", "ddl_keys", "all_to_all", "a2a", (sync or cnt,))
