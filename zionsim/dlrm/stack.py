"""Software stacks: what the training framework adds to the model's work (``stacks/*.yaml``).

The same DLRM runs at very different speeds under TorchRec, HugeCTR, NVIDIA's PyTorch DLRM and
TensorFlow + SOK.  A stack profile states, as data with sources, what differs between them
(``docs/stacks.md``):

1. ``precision`` — the precisions the stack trains in (embedding rows, dense math,
   communication), replacing the workload's where given (MLPerf submissions train the FP32
   reference model in mixed precision).  ``communication: dense`` says the stack casts what it
   exchanges to the dense math's 16-bit type when it trains in mixed precision (and leaves it
   at the workload's precision otherwise).
2. ``kernel_launch`` — seconds each kernel adds on the GPU's critical path: the launch gap of an
   eager framework's dispatch, or of a captured CUDA graph; it replaces the architecture's
   ``launch_overhead_us`` of the compute model.
3. ``mlp_kernels`` — kernels per MLP layer, forward and backward (a fused GEMM epilogue does
   bias and activation in the GEMM; eager PyTorch runs them as separate kernels).
4. ``dense_optimizer_kernels_per_tensor`` — kernels the dense optimizer launches per parameter
   tensor (0: one fused multi-tensor kernel for all of them).
4b. ``dense_master_weights`` — the dense layers compute in the 16-bit dense precision from a copy
   of FP32 master weights and write 16-bit weight gradients; the optimizer updates the master
   weights from them.  Each step a kernel writes the 16-bit copy (HugeCTR's ``conv_weight_``,
   except under SGD, whose update writes it) and the gradient buffer is zeroed (its GEMMs
   accumulate into it); ``lower_dense.dense_update_bytes`` has the bytes.  Without it the dense
   update reads and writes FP32 weights, gradients and state, and nothing else runs per step.
5. ``host`` — the host thread that feeds the GPU, as a timeline of its own (the ``host`` stream
   of every rank): each iteration it first prepares the batch (``per_step`` seconds of fixed
   work — data-loader hand-off, pipeline bookkeeping, a CUDA graph's launch — plus
   ``per_sample`` seconds per local sample of input-pipeline work), then launches the
   iteration's kernels in program order, ``dispatch`` seconds per kernel launched eagerly (0
   under a CUDA graph, whose launch is in ``per_step``).  A GPU op starts only once the host has
   launched it (under a graph: once the host has prepared the batch).  With ``overlap: true``
   the host runs ahead of the GPU (asynchronous launches, a pipeline that prepares the next
   batch during this step), so host time is exposed only where the host is the slower of the
   two; with ``overlap: false`` each step's host work starts when the previous step has ended
   on the GPU (a training loop that synchronises every step).
5b. ``gpu_per_step`` — GPU time per step of work the op list leaves out (the loss and metric
   kernels, casts, the reader's scatter of a batch into its device buffers), run on the compute
   stream at the start of each iteration: serial with the GPU's other work, whatever the host
   does.  Fitted where the host cannot explain a stack's fixed cost (a replayed CUDA graph).
6. ``interference`` — while a rank's NCCL kernels are in flight, its compute kernels run
   ``compute_slowdown`` slower (NCCL takes SMs and HBM bandwidth) and its collectives
   ``comm_slowdown`` slower while its compute stream is busy.  A kernel that starts under
   NCCL kernels is slowed only until they have ended, then runs at full speed
   (:func:`slowed_s`): [lee2025]'s factor is the slowdown *while* the two overlap.
7. ``fused_embedding`` — table-batched (fused) embedding kernels, or one kernel per table.
7b. ``embedding_update`` — where the embedding rows are updated: ``optimizer: fused`` (default:
   inside the embedding backward kernel, FBGEMM's TBE, HugeCTR, SOK: each distinct row once) or
   ``framework`` (autograd hands a sparse COO gradient, one value row per lookup, to the
   framework's optimizer, ``torch.optim``, which updates every lookup's row); ``gradient``:
   ``kernel`` (the backward writes the gradient's values and indices) or ``view`` (the pooled
   output's gradient is the values, uncopied), per ``single_gpu`` / ``multi_gpu`` where a stack
   picks its embedding by GPU count; ``amp_unscale``: under mixed precision the loss scaler
   unscales the values in place before the step (a read and a write of every value).
7c. ``local_reduce`` — the embedding backward is HugeCTR's embedding collection's: a local
   reduce reads every lookup's pooled gradient from the exchange buffer in the communication
   precision (FP16 under mixed precision: ``emb_type`` and ``wgrad_type`` are half,
   ``model_compile.cpp``) and sums it per distinct key into a reduced-gradient buffer of that
   precision, which the update kernel reads back (``compute.embedding_backward_time_s``,
   ``grad_bytes``); without it the gradient is read at the row's width and reduced in the
   fused backward kernel (FBGEMM's TBE).
7d. ``key_dedup`` — the framework deduplicates each GPU's keys before the model-parallel
   embedding's exchange and lookup, and expands the vectors back after it (the SOK DLRM
   benchmark's ``--compress``: ``tf.unique`` over the GPU's keys, the SOK lookup and its
   all-to-alls of the distinct keys only, then ``tf.gather`` back; its gradient a segment sum
   over the duplicates).  A run option of that benchmark, so a case states it (``stack.key_dedup:
   true``); the distinct keys per GPU and table are ``cache.unique_rows`` of the workload's
   Zipf skew, and ``lower_rank.py`` prices the dedup kernels (``_lower_unique``).
8. ``embedding_stream`` — the embedding lookups and updates run on a CUDA stream of their own
   (HugeCTR's model-parallel stream): they share the GPU with the dense stream one kernel at a
   time, but wait for no dense work, so the next iteration's lookups and their all-to-all run
   while this iteration's dense backward and all-reduce do (HugeCTR's intra- and
   inter-iteration overlap).
8b. ``iteration_join`` — every stream of a GPU joins at the end of an iteration: the next
   iteration's lookups start only once this one's dense update has ended (HugeCTR's
   ``sync_back`` waits for the dense and embedding updates, and the next iteration's pipeline
   starts behind it on the default stream), and after the step's ``gpu_per_step`` work (its
   lookups wait for the copy of the distributed batch, ``ebc_cache_train_ddl_output``); without
   it the embedding stream runs ahead into the next iteration while the dense backward and
   all-reduce finish.
8c. ``dense_waits_lookup`` — the bottom MLP's forward waits for the rank's embedding lookup
   (HugeCTR: ``bottom_network_fprop`` waits for ``done_mp_model_forward``); the pooled
   all-to-all still runs beside it.
8d. ``data_distributor`` — HugeCTR's embedding collection distributes each batch's keys to the
   GPUs that own their tables itself (``DataDistributor``): a grouped ``ncclSend``/``ncclRecv``
   all-to-all of the per-sample key counts, a host round trip (the counts copied to the host and
   the stream synchronised, ``data_distributor_host_sync`` seconds) and an all-to-all of the
   keys, over every GPU of the job (flat, also under hierarchical embedding communication);
   keys and counts ``key_bytes`` wide each (HugeCTR's uint32 keys unless ``i64_input_key``).
   With inter-iteration overlap it does so for the NEXT batch, on a stream of its own, launched
   after this iteration's forward embedding exchange and before its gradient exchange (same
   communicator, so in that order); this iteration's lookups use the batch distributed during
   the previous one.  Without it the indices travel in one all-to-all at the iteration's start
   (TorchRec's input distribution).  YAML: ``data_distributor: {key_bytes: 4, host_sync: 5 us}``
   (``true``: the workload's index width, no host round trip; ``false``: none).  With it come
   the embedding collection's own memory kernels (``lower_rank.py``): the main stream's copies
   between iterations (``input_copy``: the next batch's dense features and labels into the
   graph's inputs; ``ddl_cache``: the distributed batch into the lookups' inputs, which a joined
   iteration's lookups wait for), the table lookup's row addresses (``emb_row_ptrs``, key read
   and ``float*`` written per key, before the pooling) and the network buffer copies
   (``emb_network_fwd`` after the forward exchange, ``emb_network_bwd`` before the gradient
   one: the local samples' pooled vectors of the model-parallel tables).
8e. ``one_communicator`` — every NCCL operation of a rank goes through one communicator, and
   NCCL runs a communicator's kernels in the order the host issued them (its launches wait on
   the communicator's own stream): the dense all-reduce then runs on the embedding exchanges'
   stream, after this iteration's gradient exchange, instead of beside it.  HugeCTR: the
   embedding's all-to-alls and the grouped all-reduce both use the GPU resource's
   ``get_nccl()``.
8f. ``hierarchical_reduction`` — HugeCTR's hierarchical embedding exchange (a node's GPUs
   reduce their partial outputs on the GPU of the receiver's local index before the rail
   all-to-all) reduces in a kernel of its own: the intra-node stage only writes each GPU's
   partial outputs into the rail GPU's buffer (``intra_forward``), and after a GPU barrier
   ``dst_reduction`` reads every partial from HBM and writes the reduced outputs
   (``lowering.py``, ``hier_dst_reduction``); NCCL's reduce-scatter (TorchRec's TWRW) reduces
   inline as it moves the data.  Source: NVIDIA-Merlin/HugeCTR (commit 2f2016f)
   ``HugeCTR/embedding/hier_model_parallel_embedding.cpp`` (``model_forward``) and
   ``embedding/operators/hier_model_forward.cu`` (``IntraModelForward::dst_reduction``, a
   multi-to-one copy summing the node's holders of each lookup).  The intra-node stages
   (``intra_forward``, and ``intra_model_backward``, the copy after the gradient exchange) are
   such kernels too, not NCCL calls: they run on stream ``intra``, outside the communicator's
   order (item 8e), so the grouped all-reduce, issued after the gradient all-to-all, starts
   when that ends, beside the copy, and the two share NVLink (``network_backward`` in the same
   file: ``hier_communicate``, GPU barrier, ``intra_model_backward``).
8g. ``dp_local_reduce`` — the replicated (data-parallel) tables' backward is a local reduce of
   its own, on the embedding stream once the top and bottom MLPs' backward is done (it needs no
   exchange; HugeCTR issues the graph's bottom backward before it, and the GPU here runs one
   kernel at a time in request order): the grouped all-reduce waits for it and for the dense
   backward, not for the model-parallel tables' backward, which runs beside the all-reduce
   after the gradient exchange and is issued after it (HugeCTR's issue order); each
   replicated table's update, over every one of its rows (the all-reduced gradient is dense),
   runs after the all-reduce, with the dense update (``dense_opt``).  Without it the
   all-reduce waits for the rank's whole embedding backward, which updates its replicated
   rows.  Source: NVIDIA-Merlin/HugeCTR (commit 2f2016f) ``HugeCTR/src/pybind/model_pipeline.cpp``
   ``create_train_pipeline_with_ebc`` under ``train_intra_iteration_overlap``:
   ``ebc_dp_local_reduce`` (stream ``dp``) waits for ``done_top_network_bprop``,
   ``network_exchange_wgrad`` (the default stream, after ``network_graph``) waits for
   ``done_ebc_dp_local_reduce`` only, ``ebc_mp_network_backward``, ``ebc_mp_local_reduce`` and
   ``ebc_mp_update`` run on stream ``mp``, ``ebc_dp_update`` waits for the all-reduce
   (``done_ebc_dp_allreduce``) and ``sync_back`` for both updates;
   ``embedding/data_parallel_embedding.cpp`` (``DPLocalReduce``; ``DPAllreduce`` is a no-op
   under ``AllreduceStrategy::GroupDense``, which ``model_compile.cpp`` sets when
   ``solver.grouped_all_reduce``); ``embedding/common.cpp``
   ``AllreduceWgradInitializer::init_indices``: the gradient covers every row of the table.
8h. ``hier_sparse_copy`` — under ``hierarchical_reduction``, the backward's intra-node copy
   (``intra_model_backward``, ``twrw_all_gather``) moves a sample's lookup gradient to a GPU
   only where that GPU holds keys of the lookup: HugeCTR's ``IntraModelBackwardOneToOneDesc``
   copies bucket ``i`` only if ``need_copy(i)`` (``bucket_range[i + 1] != bucket_range[i]``,
   the GPU's keys of that sample and lookup), while the forward's ``intra_forward``
   (``IntraModelForwardMultiToOneDesc``) writes every bucket, empty ones as zeros.  A table whose
   rows are split over ``k`` GPUs (key ``% k``, the data distributor's
   ``key_filtering_operators.cu``) and a lookup of ``L`` keys whose rows fall uniformly (MLPerf
   DCNv2's multi-hot lists, ``multi_hot.py``) has keys on a given GPU with probability
   ``1 − (1 − 1/k)^L``: the copy's bytes on a node are the forward's times that fraction, per
   table (``sharding._add_row_shard``, ``Layout.twrw_ag``).  Source: NVIDIA-Merlin/HugeCTR (commit
   2f2016f) ``HugeCTR/embedding/operators/hier_model_backward.cu`` (``need_copy``) and
   ``generic_lookup.cuh`` (``one_to_one_warp_per_ev_vec4_kernel``: a warp per vector, skipped
   unless ``need_copy``; ``multi_to_one_warp_per_ev_vec4_kernel``: no skip).
8i. ``hier_fused_forward`` — under ``hierarchical_reduction``, the lookup's pooling kernel
   writes each GPU's partial outputs straight into the rail GPUs' buffers: HugeCTR's
   ``embedding_table->lookup`` only computes the rows' addresses (``embedding_vec_``, a list of
   row pointers), and ``intra_forward`` (``IntraModelForwardMultiToOneDesc``, one
   ``copy_multi_to_one`` kernel) reads the rows, pools them and stores the sums into peer memory
   over NVLink.  So the intra-node stage (``twrw_reduce_scatter``, ``hier_intra_a2a``) starts
   with the lookup (``emb_fwd``) instead of after it, and ``dst_reduction`` waits for both.
   Source: NVIDIA-Merlin/HugeCTR (commit 2f2016f) ``HugeCTR/embedding/
   hier_model_parallel_embedding.cpp`` (``model_forward``), ``embedding_storage/
   ragged_static_embedding.cu`` (``RaggedStaticEmbeddingTable::lookup``: writes ``float*`` per
   key), ``embedding/operators/hier_model_forward.cu`` (``IntraModelForward::intra_forward``).
   The lookup's own output write is still priced (the part for the GPU itself is 1/g of it).
9. ``grouped_allreduce`` — one all-reduce of every dense (and replicated-table) gradient once
   the backward has produced the last of them, instead of DDP's buckets during the backward.
10b. ``trainer`` — what the stack trains on: ``gpu`` (default) or ``cpu``, a CPU trainer host
    whose Hogwild threads run the ops on its cores (``stacks/cpu_hogwild.yaml``); a run pairs a
    ``cpu`` stack only with a topology of CPU trainers (``gpu.architecture: cpu``) and the other
    way round.
10. ``planner`` — the sharding planner ``plan: auto`` means under this stack (``name``, one of
    ``planner.PLANNERS``; default ``greedy``) and its settings: ``hugectr`` is NVIDIA's MLPerf
    planner with the settings of its configurations (``hugectr_plan.py``); ``dle`` is
    DeepLearningExamples' device mapping (``dle_plan.py``, no settings).
12. ``interaction_kernel`` — the kernels of a ``dot`` interaction: ``gemm`` (default: a batched
    GEMM, priced as one GEMM over every sample's feature rows) or ``dot_based_interact``
    (NVIDIA DeepLearningExamples' custom CUDA kernels, which its PyTorch and TensorFlow 2 DLRMs
    and the SOK benchmark run: one forward and one backward kernel; FP16 and TF32 inputs on WMMA
    tensor cores, priced as the GEMM; FP32 on a GPU without TF32, a CUDA-core kernel priced by
    its shared-memory traffic, ``compute.dot_interaction_time_s``).
12b. ``dcn_kernels`` — the element-wise kernels of a ``dcn`` interaction: ``generic`` (default:
    per cross layer one multiply-add kernel, ``lower_dense.py``) or ``multicross`` (HugeCTR's
    ``MultiCrossLayer`` and the ``ConcatLayer`` before it, kernel by kernel as
    ``HugeCTR/src/layers/multi_cross_layer.cu`` and ``concat_layer.cu`` run them: the concat
    copies, the forward's ``x0 .* h + x_i`` kernel, the backward's zeroed accumulator, fused
    multiply/FMA kernel per layer and final sum, the concat's split; ``lower_dense.py``,
    :func:`~zionsim.dlrm.lower_dense.multicross_bytes`).
13. ``bottom_mlp`` — where the bottom MLP runs: ``data_parallel`` (default: every rank for its
    own samples, its gradients all-reduced with the top MLP's) or ``first_rank`` (NVIDIA
    DeepLearningExamples' PyTorch DLRM on more than one GPU: rank 0 runs it for the whole global
    batch, model-parallel like a table, and its output travels in the embeddings' all-to-all to
    each sample's rank, its gradient back in theirs; it is not all-reduced: DDP wraps only the
    top MLP).  Source: NVIDIA/DeepLearningExamples (commit 729963d)
    PyTorch/Recommendation/DLRM ``dlrm/utils/distributed.py`` (``get_device_mapping``: "Bottom
    MLP running on device 0", that device holds no tables above 4 GPUs: ``dle_plan.py``),
    ``dlrm/scripts/main.py`` (``bottom_mlp_sizes`` only on the bottom-MLP rank; ``parallelize``
    wraps ``model.top_model`` alone in DistributedDataParallel), ``dlrm/model/distributed.py``
    (``BottomToTop``: one all_to_all of the bottom output and the embeddings, "bottom MLP is
    considered as 1 vector").

The fitted fields (``host.per_step``, ``host.per_sample``, ``gpu_per_step``) are fitted per
stack on the cases marked calibrated in ``validation/cases.yaml`` (two per-GPU batch sizes per
stack); every other number cites its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zionsim.base.config import Fields, apply_overrides, load_with_overrides, parse_override

#: the stack a run uses unless told otherwise: the one Neo used on ZionEX (TorchRec + FBGEMM)
DEFAULT_STACK = "torchrec"
STACK_KEYS = {
    "name",
    "description",
    "references",
    "precision",
    "kernel_launch",
    "mlp_kernels",
    "dense_optimizer_kernels_per_tensor",
    "dense_master_weights",
    "host",
    "gpu_per_step",
    "interference",
    "fused_embedding",
    "interaction_kernel",
    "dcn_kernels",
    "embedding_update",
    "local_reduce",
    "key_dedup",
    "embedding_stream",
    "iteration_join",
    "dense_waits_lookup",
    "data_distributor",
    "one_communicator",
    "hierarchical_reduction",
    "dp_local_reduce",
    "hier_sparse_copy",
    "hier_fused_forward",
    "planner",
    "grouped_allreduce",
    "trainer",
    "bottom_mlp",
}
#: what a stack trains on (``trainer:``): GPUs, or CPU trainer hosts
TRAINER_KINDS = ("gpu", "cpu")
#: planners a stack may name, with the parser of their settings (``planner:`` mapping)
STACK_PLANNERS = ("greedy", "hugectr", "dle")
PRECISION_KEYS = ("embedding", "dense", "communication")
#: ``embedding_update.optimizer``: in the embedding backward kernel, or the framework's optimizer
EMBEDDING_OPTIMIZERS = ("fused", "framework")
#: ``embedding_update.gradient``: the backward writes the sparse gradient, or views the output's
EMBEDDING_GRADIENTS = ("kernel", "view")
#: fields of a stack's ``data_distributor:`` mapping (item 8d)
DISTRIBUTOR_KEYS = ("key_bytes", "host_sync")
#: ``interaction_kernel`` values (item 12)
INTERACTION_KERNELS = ("gemm", "dot_based_interact")
#: ``dcn_kernels`` values (item 12b)
DCN_KERNELS = ("generic", "multicross")
HOST_KEYS = ("dispatch", "per_step", "per_sample", "overlap")
#: ``precision.communication`` value: exchange in the dense math's 16-bit type under mixed precision
FOLLOW_DENSE = "dense"
#: ``bottom_mlp`` (item 13): on every rank for its own samples, or on the first rank for all
BOTTOM_MLP_PLACEMENTS = ("data_parallel", "first_rank")


#: yes/no fields :meth:`StackSpec.to_dict` writes only where set (in this order)
_SET_ONLY = ("one_communicator", "hierarchical_reduction", "dp_local_reduce", "hier_sparse_copy",
             "hier_fused_forward")  # fmt: skip


@dataclass(frozen=True)
class StackSpec:
    """A software-stack profile (see the module docstring for each field's meaning)."""

    name: str
    description: str = ""
    #: precisions replacing the workload's (keys of ``PRECISION_KEYS``)
    precision: dict[str, str] = field(default_factory=dict)
    #: seconds per kernel launch on the GPU's critical path (None: the compute model's)
    kernel_launch_s: float | None = None
    #: kernels per MLP layer: (forward, backward)
    mlp_kernels: tuple[int, int] = (1, 2)
    #: dense-optimizer kernels per parameter tensor (0: one fused kernel)
    optimizer_kernels_per_tensor: int = 0
    #: item 4b: FP32 master weights, 16-bit copies and weight gradients
    dense_master_weights: bool = False
    #: host thread: seconds per kernel launched, fixed seconds per step, seconds per local sample
    host_dispatch_s: float = 0.0
    host_per_step_s: float = 0.0
    host_per_sample_s: float = 0.0
    host_overlap: bool = True
    #: GPU seconds per step of work the op list leaves out
    gpu_per_step_s: float = 0.0
    #: fractional slowdown of compute under in-flight NCCL kernels, and of NCCL under compute
    compute_slowdown: float = 0.0
    comm_slowdown: float = 0.0
    fused_embedding: bool = True
    #: the dot interaction's kernels (:data:`INTERACTION_KERNELS`): ``gemm``, a batched GEMM
    #: priced as one GEMM over every sample's rows; ``dot_based_interact``, DeepLearningExamples'
    #: custom kernels (item 12)
    interaction_kernel: str = "gemm"
    #: a DCN interaction's element-wise kernels (:data:`DCN_KERNELS`, item 12b)
    dcn_kernels: str = "generic"
    #: ``embedding_update``: optimizer (EMBEDDING_OPTIMIZERS), gradient on one GPU and on several
    #: (EMBEDDING_GRADIENTS), the loss scaler's unscale of the values under mixed precision
    embedding_optimizer: str = "fused"
    embedding_gradient: tuple[str, str] = ("view", "view")
    amp_unscale: bool = False
    #: item 7c: HugeCTR's local reduce into a reduced-gradient buffer of the exchange precision
    local_reduce: bool = False
    #: item 7d: keys deduplicated per GPU before the model-parallel exchange (SOK --compress)
    key_dedup: bool = False
    embedding_stream: bool = False
    iteration_join: bool = False
    dense_waits_lookup: bool = False
    #: HugeCTR's data distributor (item 8d): its key (and count) width in bytes (0: the
    #: workload's ``index_bytes``) and its host round trip between the two all-to-alls
    data_distributor: bool = False
    data_distributor_key_bytes: int = 0
    data_distributor_host_sync_s: float = 0.0
    #: item 8e: the all-reduce in issue order with the embedding exchanges (one communicator)
    one_communicator: bool = False
    #: item 8f: HugeCTR's hierarchical exchange reduces a node's partial outputs in a kernel
    hierarchical_reduction: bool = False
    #: item 8g: the all-reduce waits for the replicated tables' local reduce only
    dp_local_reduce: bool = False
    #: item 8h: the hierarchical backward copy skips GPUs with no keys of a sample's lookup
    hier_sparse_copy: bool = False
    #: item 8i: the hierarchical intra-node stage runs in the lookup's pooling kernel
    hier_fused_forward: bool = False
    grouped_allreduce: bool = False
    #: planner ``plan: auto`` runs, and its settings (a ``hugectr_plan.Settings`` for hugectr)
    planner: str = "greedy"
    planner_settings: object = None
    #: ``gpu`` or ``cpu`` (:data:`TRAINER_KINDS`)
    trainer: str = "gpu"
    #: item 13: where the bottom MLP runs (:data:`BOTTOM_MLP_PLACEMENTS`)
    bottom_mlp: str = "data_parallel"
    file: str = ""

    def to_dict(self) -> dict:
        """The profile as the plain data a trace's ``meta`` and ``summary.json`` carry."""
        return {
            "name": self.name,
            "precision": dict(self.precision),
            "kernel_launch_s": self.kernel_launch_s,
            "mlp_kernels": list(self.mlp_kernels),
            "optimizer_kernels_per_tensor": self.optimizer_kernels_per_tensor,
            "host_dispatch_s": self.host_dispatch_s,
            "host_per_step_s": self.host_per_step_s,
            "host_per_sample_s": self.host_per_sample_s,
            "host_overlap": self.host_overlap,
            "gpu_per_step_s": self.gpu_per_step_s,
            "compute_slowdown": self.compute_slowdown,
            "comm_slowdown": self.comm_slowdown,
            "fused_embedding": self.fused_embedding,
            **_unless_default("interaction_kernel", self.interaction_kernel, "gemm"),
            **_unless_default("dcn_kernels", self.dcn_kernels, "generic"),
            **(
                {
                    "embedding_update": {
                        "optimizer": self.embedding_optimizer,
                        "gradient": dict(
                            zip(("single_gpu", "multi_gpu"), self.embedding_gradient, strict=True)
                        ),
                        "amp_unscale": self.amp_unscale,
                    }
                }
                if self.embedding_optimizer != "fused"
                else {}
            ),
            **({"local_reduce": True} if self.local_reduce else {}),
            **({"dense_master_weights": True} if self.dense_master_weights else {}),
            **({"key_dedup": True} if self.key_dedup else {}),
            "embedding_stream": self.embedding_stream,
            **({"iteration_join": True} if self.iteration_join else {}),
            **({"dense_waits_lookup": True} if self.dense_waits_lookup else {}),
            **(
                {
                    "data_distributor": True,
                    "data_distributor_key_bytes": self.data_distributor_key_bytes,
                    "data_distributor_host_sync_s": self.data_distributor_host_sync_s,
                }
                if self.data_distributor
                else {}
            ),
            **{k: True for k in _SET_ONLY if getattr(self, k)},
            "grouped_allreduce": self.grouped_allreduce,
            "planner": self.planner,
            **(
                {"planner_settings": self.planner_settings.to_dict()}
                if self.planner_settings is not None
                else {}
            ),
            **({"trainer": self.trainer} if self.trainer != "gpu" else {}),
            **({"bottom_mlp": self.bottom_mlp} if self.bottom_mlp != "data_parallel" else {}),
        }


def _unless_default(key: str, value, default) -> dict:
    """``{key: value}``, or nothing where ``value`` is the field's default."""
    return {} if value == default else {key: value}


def apply_stack(workload, stack: StackSpec):
    """The workload as ``stack`` trains it: the stack's precisions over the workload's."""
    from zionsim.dlrm.workload import with_precision

    if not stack.precision:
        return workload
    precision = dict(stack.precision)
    if precision.get("communication") == FOLLOW_DENSE:
        dense = precision.get("dense", workload.precision["dense"])
        precision["communication"] = (
            dense if dense in ("fp16", "bf16") else workload.precision["communication"]
        )
    return with_precision(workload, precision)


def resolve_stack(stack: StackSpec | str | None) -> StackSpec:
    """A stack profile from a spec, a name or path, or None (the default stack)."""
    if isinstance(stack, StackSpec):
        return stack
    return load_stack(stack or DEFAULT_STACK)


#: no stack: the model's own work only (what zionsim simulated before stacks existed)
BARE = StackSpec("bare")


def load_stack(
    name_or_path: str | Path, overrides: dict[str, Any] | list[str] | None = None
) -> StackSpec:
    """Load a stack profile by built-in name (``stacks/``) or YAML path, with ``--set``-style
    overrides; ``"bare"`` is the stack that adds nothing (an empty profile, which overrides may
    fill).  An override may set a field the file leaves out: every mapping of a stack is
    key-checked by :func:`stack_from_dict`, so a misspelt one is still refused."""
    if str(name_or_path) == "bare":
        if not overrides:
            return BARE
        if isinstance(overrides, list):
            overrides = dict(map(parse_override, overrides))
        file = "the built-in stack 'bare'"
        return stack_from_dict(apply_overrides({"name": "bare"}, overrides, file, True), file)
    data, file = load_with_overrides(name_or_path, "stacks", overrides, create=True)
    return stack_from_dict(data, file)


#: the stack's yes/no fields (each a ``StackSpec`` field of the same name) and their defaults
FLAGS = (
    ("fused_embedding", True),
    ("dense_master_weights", False),
    ("local_reduce", False),
    ("key_dedup", False),
    ("embedding_stream", False),
    ("iteration_join", False),
    ("dense_waits_lookup", False),
    ("one_communicator", False),
    ("hierarchical_reduction", False),
    ("dp_local_reduce", False),
    ("hier_sparse_copy", False),
    ("hier_fused_forward", False),
    ("grouped_allreduce", False),
)


def stack_from_dict(data: dict, file: str = "<stack>") -> StackSpec:
    """Validate a stack mapping; every error names the file and the field."""
    from zionsim.dlrm.workload import COMM_DTYPES, DENSE_DTYPES, EMBEDDING_DTYPES

    f = Fields(data, file)
    if "step_overhead" in data:
        raise f.error(
            "step_overhead",
            "replaced by host.per_step (host work on a timeline of its own, docs/stacks.md)",
            allowed="host: {dispatch, per_step, per_sample, overlap}",
        )
    f.check_keys(STACK_KEYS)
    h = f.sub("host") if data.get("host") is not None else Fields({}, file, "host")
    h.check_keys(set(HOST_KEYS))
    p = f.sub("precision") if data.get("precision") is not None else Fields({}, file, "precision")
    p.check_keys(set(PRECISION_KEYS))
    comm = (*COMM_DTYPES, FOLLOW_DENSE)
    allowed = dict(zip(PRECISION_KEYS, (EMBEDDING_DTYPES, DENSE_DTYPES, comm), strict=True))
    precision = {k: p.choice(k, allowed[k]) for k in PRECISION_KEYS if k in p.data}
    m = f.sub("mlp_kernels") if "mlp_kernels" in data else Fields({}, file, "mlp_kernels")
    m.check_keys({"forward", "backward"})
    i = f.sub("interference") if "interference" in data else Fields({}, file, "interference")
    i.check_keys({"compute_slowdown", "comm_slowdown"})
    launch = data.get("kernel_launch")
    planner, settings = _planner(f)
    e_opt, e_grad, unscale = _embedding_update(f)
    ddl, key_bytes, sync_s = _distributor(f)
    return StackSpec(
        name=str(f.raw("name", Path(file).stem)),
        description=str(f.raw("description", "")),
        precision=precision,
        kernel_launch_s=None if launch is None else f.quantity("kernel_launch", "time"),
        mlp_kernels=(m.integer("forward", 1), m.integer("backward", 2)),
        optimizer_kernels_per_tensor=f.integer("dense_optimizer_kernels_per_tensor", 0, minimum=0),
        host_dispatch_s=h.quantity("dispatch", "time", 0.0, strict=False),
        host_per_step_s=h.quantity("per_step", "time", 0.0, strict=False),
        host_per_sample_s=h.quantity("per_sample", "time", 0.0, strict=False),
        host_overlap=h.flag("overlap", True),
        gpu_per_step_s=f.quantity("gpu_per_step", "time", 0.0, strict=False),
        compute_slowdown=i.quantity("compute_slowdown", "fraction", 0.0, strict=False),
        comm_slowdown=i.quantity("comm_slowdown", "fraction", 0.0, strict=False),
        interaction_kernel=f.choice("interaction_kernel", INTERACTION_KERNELS, "gemm"),
        dcn_kernels=f.choice("dcn_kernels", DCN_KERNELS, "generic"),
        embedding_optimizer=e_opt,
        embedding_gradient=e_grad,
        amp_unscale=unscale,
        data_distributor=ddl,
        data_distributor_key_bytes=key_bytes,
        data_distributor_host_sync_s=sync_s,
        planner=planner,
        planner_settings=settings,
        trainer=f.choice("trainer", TRAINER_KINDS, "gpu"),
        bottom_mlp=f.choice("bottom_mlp", BOTTOM_MLP_PLACEMENTS, "data_parallel"),
        file=file,
        **{key: f.flag(key, default) for key, default in FLAGS},
    )


def check_trainer(stack: StackSpec, architecture: str) -> None:
    """InputError unless ``stack`` trains on the kind of trainer the topology has: a ``cpu``
    stack on CPU trainers (``gpu.architecture: cpu``), a GPU stack on GPUs."""
    from zionsim.base.errors import InputError

    cpu = architecture == "cpu"
    if cpu != (stack.trainer == "cpu"):
        raise InputError(
            f"stack {stack.name!r} trains on {stack.trainer.upper()}s but the topology's "
            f"trainers are {'CPU hosts' if cpu else 'GPUs'}",
            field="--stack",
            allowed="cpu_hogwild (or a stack with trainer: cpu)"
            if cpu
            else "a GPU stack: torchrec, hugectr, nvidia_pytorch_dlrm, tensorflow_sok, bare",
        )


def _embedding_update(f: Fields) -> tuple[str, tuple[str, str], bool]:
    """The stack's ``embedding_update:`` mapping: (optimizer, (gradient on one GPU, on several),
    amp_unscale)."""
    if f.data.get("embedding_update") is None:
        return "fused", ("view", "view"), False
    u = f.sub("embedding_update")
    u.check_keys({"optimizer", "gradient", "amp_unscale"})
    optimizer = u.choice("optimizer", EMBEDDING_OPTIMIZERS, "fused")
    if isinstance(u.data.get("gradient"), dict):
        g = u.sub("gradient")
        g.check_keys({"single_gpu", "multi_gpu"})
        gradient = (
            g.choice("single_gpu", EMBEDDING_GRADIENTS, "view"),
            g.choice("multi_gpu", EMBEDDING_GRADIENTS, "view"),
        )
    else:
        one = u.choice("gradient", EMBEDDING_GRADIENTS, "view")
        gradient = (one, one)
    return optimizer, gradient, u.flag("amp_unscale", False)


def _distributor(f: Fields) -> tuple[bool, int, float]:
    """The stack's ``data_distributor:`` (item 8d): absent, null or ``false`` (none), ``true``
    (the workload's index width, no host round trip) or a mapping of ``DISTRIBUTOR_KEYS``;
    returns (on, key bytes or 0, host round trip in seconds)."""
    raw = f.data.get("data_distributor")
    if raw is None or raw is False:
        return False, 0, 0.0
    if raw is True:
        return True, 0, 0.0
    if not isinstance(raw, dict):
        raise f.error(
            "data_distributor",
            f"expected true, false or a mapping, got {raw!r}",
            allowed="false | true | {key_bytes: 4, host_sync: 5 us}",
        )
    d = f.sub("data_distributor")
    d.check_keys(set(DISTRIBUTOR_KEYS))
    key_bytes = d.integer("key_bytes", 0, minimum=0)
    if key_bytes not in (0, 4, 8):
        raise d.error("key_bytes", f"must be 4 or 8 (uint32 or int64 keys), got {key_bytes}")
    return True, key_bytes, d.quantity("host_sync", "time", 0.0, strict=False)


def _planner(f: Fields) -> tuple[str, object]:
    """The stack's ``planner:`` mapping: its name and validated settings (None for greedy)."""
    if f.data.get("planner") is None:
        return "greedy", None
    p = f.sub("planner")
    name = p.choice("name", STACK_PLANNERS, "greedy")
    if name in ("greedy", "dle"):
        p.check_keys({"name"})
        return name, None
    from zionsim.dlrm.hugectr_plan import settings_from_fields

    return name, settings_from_fields(p)


def slowed_s(seconds: float, overlap_s: float, slowdown: float) -> float:
    """Wall seconds of a kernel of ``seconds`` alone that starts with NCCL kernels in flight
    for ``overlap_s`` more seconds: ``1 + slowdown`` times slower until they end, at full speed
    after (item 6)."""
    f = 1.0 + slowdown
    if overlap_s <= 0.0:
        return seconds
    if overlap_s >= seconds * f:
        return seconds * f
    return overlap_s + seconds - overlap_s / f
