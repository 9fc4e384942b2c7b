"""The embedding exchange of a trace (``lowering.py`` places the ops that use it): the plan's
layout as the stack exchanges it (keys deduplicated, a model-parallel bottom MLP's output in the
pooled all-to-all, HugeCTR's hierarchical reduction bytes), the collectives it implies, and the
inputs that tell one rank's exchange from another's (which ranks ``lowering`` may copy)."""

from __future__ import annotations

import dataclasses

import numpy as np

from zionsim.dlrm.dedup import deduplicated
from zionsim.dlrm.plan import Plan
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.stack import StackSpec
from zionsim.dlrm.trace_builder import TraceBuilder
from zionsim.dlrm.workload import DTYPE_BYTES, WorkloadSpec
from zionsim.network.peer_bytes import OuterSum


def bottom_rank(stack: StackSpec, ranks: int) -> int:
    """The rank that runs the bottom MLP for every sample (``stack.py`` item 13: rank 0 under
    ``bottom_mlp: first_rank`` on more than one rank), else -1 (each rank for its own)."""
    return 0 if stack.bottom_mlp == "first_rank" and ranks > 1 else -1


def _with_bottom_output(lay, w: WorkloadSpec, rank: int):
    """The layout with the bottom MLP's output sent from ``rank`` to every sample's rank in the
    pooled all-to-all, as a table of the output's width would be (``stack.py`` item 13); the
    cached layout is left as it was."""
    pooled = lay.pooled_matrix.copy()
    cb = DTYPE_BYTES[w.precision["communication"]]
    pooled.add_to_row(rank, float(w.batch_per_gpu * w.bottom_mlp[-1] * cb))
    return dataclasses.replace(lay, pooled_matrix=pooled)


def layout_of(w, plan, ranks, g, zipf_alpha, stack) -> tuple:
    """The plan's layout (with a model-parallel bottom MLP's output in the pooled exchange,
    :func:`_with_bottom_output`), and what joins the trace's collectives ``c``:
    ``{"dedup": KeyDedup}`` where the stack deduplicates keys and the ranks have keys to
    deduplicate, and HugeCTR's hierarchical reduction bytes where the stack reduces so
    (:func:`_hier_reduction_bytes`)."""
    lay, extra = layout(w, plan, ranks, g, zipf_alpha), {}
    if stack.key_dedup:
        lay, dedup = deduplicated(w, plan, lay, ranks, g, zipf_alpha)
        extra = {"dedup": dedup} if dedup.keys > 0 else {}
    if bottom_rank(stack, ranks) >= 0:  # after deduplication: dense vectors, not keys
        lay = _with_bottom_output(lay, w, bottom_rank(stack, ranks))
    if stack.hierarchical_reduction:
        extra.update(_hier_reduction_bytes(lay, ranks, g))
    return lay, extra


def rank_rows(lay, ranks: int) -> list[np.ndarray]:
    """Every per-rank array of the layout (first axis: the ranks; the n×n byte matrices are
    not arrays and reach a rank's ops only through its collectives): with its dense group's,
    node's and rail's collectives, what tells one rank's ops from another's."""
    return [
        v
        for v in vars(lay).values()
        if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == ranks
    ]


def block_inputs(c: dict, rows: list, ranks: int, g: int) -> tuple:
    """What tells a rank's block of ops apart beside its dense group and sync collectives: per
    node and per rail its collectives (TWRW, hierarchical and hybrid stages), and per layout row
    each rank's bytes (each row's bytes made once, cut per rank)."""
    node_keys = ("twrw_rs", "twrw_ag", "hyb_intra", "hyb_intra_bwd", "hier_intra", "hier_bwd")
    of_node = [tuple(c.get((k, n)) for k in node_keys) for n in range((ranks - 1) // g + 1)]
    of_rail = [(c.get(("twrw_a2a", j)), c.get(("twrw_a2a_bwd", j))) for j in range(g)]
    return of_node, of_rail, [_bytes_by_rank(row, ranks) for row in rows]


def _bytes_by_rank(row: np.ndarray, ranks: int) -> list[bytes]:
    """``[row[r].tobytes() for r in range(ranks)]``, cut from the whole row's bytes (one copy
    instead of one per rank)."""
    flat = np.ascontiguousarray(row).tobytes()
    step = len(flat) // ranks
    return [flat[r * step : (r + 1) * step] for r in range(ranks)]


def embedding_collectives(
    b: TraceBuilder, lay, ranks: int, g: int, distributor=False, stack: StackSpec | None = None
) -> dict:
    """The embedding collectives the layout implies, by key: input (unless a ``distributor``
    stands in, :func:`distributor_collectives`), pooled and gradient all-to-alls, RW
    reduce-scatter/all-gather, TWRW per-node and per-rail collectives; under a ``stack`` with
    HugeCTR's sparse backward copy (``stack.py`` item 8h) a TWRW node's backward copy moves
    ``lay.twrw_ag``'s bytes, the lookups' gradients only to the GPUs that hold their keys."""
    sparse_copy = stack is not None and stack.hierarchical_reduction and stack.hier_sparse_copy
    c: dict = {}
    if lay.input_matrix.any() and not distributor:
        c["in"] = b.collective("all_to_all", lay.input_matrix.sum(1).max(), lay.input_matrix)
    if lay.pooled_matrix.any():
        pm = lay.pooled_matrix
        c["pool"] = b.collective("all_to_all", pm.sum(1).max(), pm)
        c["grad"] = b.collective("all_to_all", pm.T.sum(1).max(), pm.T.copy())
    if lay.rw_bytes:
        c["rs"] = b.collective("reduce_scatter", lay.rw_bytes)
        c["ag"] = b.collective("all_gather", lay.rw_bytes)
    for node, size in sorted(lay.twrw_rs.items()):
        members = np.arange(node * g, (node + 1) * g)
        c["twrw_rs", node] = b.collective("reduce_scatter", size, ranks=members)
        ag = lay.twrw_ag.get(node, size) if sparse_copy and lay.twrw_ag else size
        c["twrw_ag", node] = b.collective("all_gather", ag, ranks=members)
    if lay.hyb_intra_bytes:  # hierarchical hybrid embedding: the stage inside each node
        per_pair = np.full(g, lay.hyb_intra_bytes)
        for node in range(ranks // g):
            members = np.arange(node * g, (node + 1) * g)
            hm = OuterSum(row=per_pair, col=np.zeros(g))
            size = g * lay.hyb_intra_bytes
            for key in ("hyb_intra", "hyb_intra_bwd"):
                c[key, node] = b.collective("all_to_all", size, hm.copy(), members)
    if lay.hier_intra is not None and lay.hier_intra.any():  # HugeCTR hierarchical TW/RW shards
        for node in range(ranks // g):
            members = np.arange(node * g, (node + 1) * g)
            hm = OuterSum(row=lay.hier_intra[members].copy(), col=np.zeros(g))
            size = float(lay.hier_intra[members].max()) * (g - 1)
            c["hier_intra", node] = b.collective("all_to_all", size, hm, members)
            c["hier_bwd", node] = b.collective("all_to_all", size, hm.T.copy(), members)
    if lay.twrw_matrix.any():
        tm = lay.twrw_matrix
        for j in range(g):
            rail = np.arange(ranks // g) * g + j
            c["twrw_a2a", j] = b.collective("all_to_all", tm.sum(1).max(), tm, ranks=rail)
            c["twrw_a2a_bwd", j] = b.collective(
                "all_to_all", tm.T.sum(1).max(), tm.T.copy(), ranks=rail
            )
    return c


def _hier_reduction_bytes(lay, ranks: int, g: int) -> dict:
    """Bytes HugeCTR's ``dst_reduction`` moves per rank (``stack.py`` item 8f), as
    ``{"hier_red_bytes": array}`` where some rank has any (else ``{}``): after the intra-node
    stage a rank reads every partial output its node's GPUs wrote for its rail and writes the
    reduced outputs once.
    A TWRW node (every table row-split over the node's ``g`` GPUs) of reduce-scatter size ``S``
    (the global batch's outputs of the node's tables): ``S`` read (``g`` partials of ``S / g``),
    ``S / g`` written.  Hierarchical TW/RW shards: the rank reads what its node's holders wrote
    to it (each node GPU ``p`` writes ``hier_intra[p]`` to every GPU of its node, itself
    included) and writes as much (exact for TW, where one GPU holds the lookup; an upper bound
    for a table row-split inside the node).  Source: NVIDIA-Merlin/HugeCTR (commit 2f2016f)
    ``embedding/operators/hier_model_forward.cu``, ``IntraModelForward::dst_reduction``
    (``IntraModelDstReductionMultiToOneDesc`` over ``network_gpu_ids``/``network_offsets``,
    the holders of each lookup in the node)."""
    nbytes = np.zeros(ranks)
    for node, size in lay.twrw_rs.items():
        nbytes[node * g : (node + 1) * g] += size * (1.0 + 1.0 / g)
    if lay.hier_intra is not None and lay.hier_intra.any():
        per_node = lay.hier_intra.reshape(ranks // g, g).sum(axis=1)
        nbytes += 2.0 * np.repeat(per_node, g)
    return {"hier_red_bytes": nbytes} if nbytes.any() else {}


def dp_backward(w: WorkloadSpec, plan: Plan, ranks: int, g: int, zipf_alpha: float) -> dict:
    """The replicated (DP) tables' share of each rank's embedding backward, for a stack whose
    all-reduce waits for their local reduce only (``stack.py`` item 8g): ``{"dp_bwd": Layout}``,
    the layout of the plan's DP shards alone (their lookups, bytes, distinct rows and tables per
    rank), or ``{}`` where the plan replicates no table."""
    shards = tuple(s for s in plan.shards if s.kind == "DP")
    if not shards:
        return {}
    part = layout(w, Plan(plan.name, shards), ranks, g, zipf_alpha)
    return {"dp_bwd": part} if part.lookups.any() else {}


def distributor_collectives(
    b: TraceBuilder, c: dict, lay, w: WorkloadSpec, plan: Plan, key_bytes: int = 0
) -> None:
    """HugeCTR's data distributor (``stack.py`` item 8d) in place of the input all-to-all ``in``:
    an all-to-all of the key counts, one per local sample and model-parallel table part the
    receiver serves (``keys_per_bucket``; the offset type has the key's width), then one of the
    keys themselves, the rest of the index bytes, both ``key_bytes`` wide (0: the workload's
    ``index_bytes``).  Data-parallel tables exchange nothing (``SparseDPDataDistributionOp``).

    Source: NVIDIA-Merlin/HugeCTR HugeCTR/embedding/data_distributor/
    sparse_data_distribution_op_impl.cu (``SparseMPDataDistributionOp::distribute``:
    ``all2all_keys_per_bucket`` then ``all2all_keys``, each an ``ncclGroupStart``/``ncclSend``/
    ``ncclRecv`` loop over every global GPU, a ``cudaStreamSynchronize`` between them), and
    HugeCTR/src/pybind/model_compile.cpp (offset type = key type)."""
    if not lay.input_matrix.any():
        return
    n_dp = sum(1 for s in plan.shards if s.kind == "DP" and s.tier != "ps")
    index_col = lay.input_matrix.col  # B·(pooling·share + 1)·index_bytes per owner
    owners = index_col > 0
    counts_col = np.where(owners, w.batch_per_gpu * w.index_bytes * (lay.tables - n_dp), 0.0)
    counts_col = np.clip(counts_col, 0.0, index_col)
    scale = (key_bytes or w.index_bytes) / w.index_bytes
    zero = np.zeros_like(index_col)
    counts = OuterSum(row=zero, col=counts_col * scale)
    keys = OuterSum(row=zero.copy(), col=(index_col - counts_col) * scale)
    c["ddl_counts"] = b.collective("all_to_all", counts.sum(1).max(), counts)
    c["ddl_keys"] = b.collective("all_to_all", keys.sum(1).max(), keys)
    kb = float(key_bytes or w.index_bytes)
    dp_keys = w.batch_per_gpu * sum(
        w.tables[s.table].pooling for s in plan.shards if s.kind == "DP" and s.tier != "ps"
    )
    # bytes the distributor's kernels move per rank (lower_hugectr.distributor): each local
    # model-parallel key is labelled (read k, write k + a 4-byte label), sorted by owner (a
    # label histogram pass, then one radix pass reading and writing key + label) and, received,
    # swizzled into bucket order (read k, write k): 6k + 16 bytes; a data-parallel key is copied
    # into the lookup's input (read k, write k)
    mp_keys = keys.sum(1) / kb
    c["ddl_kernel_bytes"] = mp_keys * (6 * kb + 16) + dp_keys * 2 * kb
    _step_copies(c, w, index_col.size, keys.col, counts.col, dp_keys * kb, n_dp, kb)
    # the embedding collection's network_forward / network_backward (lower_hugectr.network_fwd): per
    # local sample and model-parallel table, the partial pooled vectors that arrive (one per
    # holder of a row-wise table; one per node under a node-level reduction) read and the output
    # written (backward: the output's gradient read, one copy per holder written), in the
    # exchange's precision (embedding/operators/network_forward.cu, network_backward.cu)
    g, n = lay.hyb_gpus_per_node, index_col.size
    vectors = sum(
        w.tables[s.table].dim * (_partials(s, g, n) + 1)
        for s in plan.shards
        if s.kind != "DP" and s.tier != "ps"
    )
    c["net_copy_bytes"] = float(
        w.batch_per_gpu * vectors * DTYPE_BYTES[w.precision["communication"]]
    )
    # the embedding table's lookup kernel (lower_hugectr.row_ptrs): per key the key read and the
    # row's address written (a float*, 8 bytes), which the pooling kernel then reads in place of
    # an index
    c["row_ptr_bytes_per_key"] = kb + ROW_POINTER_BYTES


def _partials(s, g: int, n: int) -> int:
    """Partial pooled vectors of one sample of shard ``s`` that reach its sample's GPU: one per
    holder of a row-wise shard, one per node where a node reduces first (TWRW, or HugeCTR's
    hierarchical exchange across nodes), one for a table-wise shard."""
    if s.kind == "TWRW" or (getattr(s, "hierarchical", False) and n > g):
        return len({r // g for r in s.ranks})
    return len(s.ranks)


#: a row's address in HugeCTR's lookup output (``float*`` on a 64-bit GPU)
ROW_POINTER_BYTES = 8


#: labels are float in HugeCTR's label tensor (split_batch.cu ``split_feat_major_kernel``)
LABEL_BYTES = 4
#: copies each group of the embedding collection makes of the distributed batch:
#: keys, num_keys (a synchronous cudaMemcpy), num_keys_per_bucket, bucket_range
#: (HugeCTR/src/embeddings/embedding_collection.cpp, ``EmbeddingCollection::cache_ddl_output``)
CACHE_COPIES_PER_GROUP = 4


def _step_copies(c, w: WorkloadSpec, ranks, key_col, count_col, dp_key_bytes, n_dp, kb) -> None:
    """The device-to-device copies HugeCTR's embedding-collection pipeline makes on the main
    stream at every iteration's start (``stack.py`` item 8d; ``lower_hugectr.step_copies``):
    ``ddl_cache_bytes`` (``ebc_cache_train_ddl_output``: the batch the distributor delivered
    during the previous iteration copied to the lookups' input, per group the keys, and the
    ``num_keys_per_bucket`` and ``bucket_range`` arrays of one entry per bucket, each read and
    written: the model-parallel group's keys and buckets as received, one per global sample and
    served table part, the data-parallel group's of the local samples), ``ddl_cache_copies`` its
    copies; ``input_copy_bytes`` (``copy_next_iter_network_input``: the CopyOps of the dense
    features, in the dense precision, and of the float labels into the graph's input tensors,
    read and written).  Sources: HugeCTR/src/pybind/model_pipeline.cpp
    ``create_train_pipeline_with_ebc`` (both scheduleables on the default stream, around
    ``sync_back``), src/embeddings/embedding_collection.cpp ``cache_ddl_output``,
    src/pybind/model_compile.cpp ``create_copy_ops_for_network_input``."""
    keys_in = ranks * np.asarray(key_col, dtype=float)  # bytes every rank sends it
    buckets_in = ranks * np.asarray(count_col, dtype=float)
    dp_buckets = w.batch_per_gpu * n_dp * kb
    c["ddl_cache_bytes"] = 2.0 * (keys_in + 2 * buckets_in + dp_key_bytes + 2 * dp_buckets)
    c["ddl_cache_copies"] = CACHE_COPIES_PER_GROUP * (1 + (n_dp > 0))
    sample = w.dense_features * DTYPE_BYTES[w.precision["dense"]] + LABEL_BYTES
    c["input_copy_bytes"] = 2.0 * w.batch_per_gpu * sample
