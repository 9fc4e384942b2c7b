"""The dense side of a lowered iteration (``lowering.py``): the interaction ops (dot, concat, DCN
cross layers, reduce, projection), the DDP buckets the dense gradients are all-reduced in, and
the dense sync of a sync mode (the groups that all-reduce every iteration, and the MA/BMUF/EASGD
rounds a foreground trainer runs).  Each function adds ops through the lowering's builder."""

from __future__ import annotations

import numpy as np

from zionsim.dlrm.sync import SyncSpec
from zionsim.dlrm.workload import DENSE_OPTIMIZERS, DTYPE_BYTES, WorkloadSpec

#: PyTorch DDP's default bucket_cap_mb (torch.nn.parallel.DistributedDataParallel docs)
BUCKET_BYTES = 25 * 2**20


def dense_groups(sync: SyncSpec, ranks: int, g: int) -> dict:
    """Groups that all-reduce dense gradients every iteration: all ranks (``allreduce``), each
    node (node trainers), or none (rank trainers of a sync mode)."""
    if sync.kind == "allreduce":
        return {"all": np.arange(ranks)}
    if sync.trainer == "node":
        return {f"node{k}": np.arange(k * g, (k + 1) * g) for k in range(ranks // g)}
    return {}


def sync_collectives(b, sync: SyncSpec, nbytes: float, ranks: int, g: int) -> dict:
    """Collective ids of MA/BMUF sync rounds, by rank (a round all-reduces the parameters among
    trainers; node trainers sync 1/g shards among same-index GPUs)."""
    if sync.kind == "allreduce" or sync.method == "easgd":
        return {}
    if sync.trainer == "node":
        ids = {
            j: b.collective("all_reduce", nbytes / g, ranks=np.arange(ranks // g) * g + j)
            for j in range(g)
        }
        return {r: ids[r % g] for r in range(ranks)}
    cid = b.collective("all_reduce", nbytes)
    return dict.fromkeys(range(ranks), cid)


def lower_sync(b, sync: SyncSpec, r: int, g: int, colls: dict, nbytes: float) -> None:
    """Foreground sync round ops at the end of rank ``r``'s iteration (run every K-th)."""
    if sync.kind != "foreground":
        return
    last = len(b.ops) - 1  # dense_opt of this rank
    if sync.method == "easgd":
        share = nbytes / g if sync.trainer == "node" else nbytes
        for name, direction in (("sync_push", "to_ps"), ("sync_pull", "from_ps")):
            last = b.op(
                r, name, "transfer", "sync", "compute", (last,), direction=direction,
                nbytes=float(share), servers=sync.servers, every=sync.every,
                placement=sync.placement,
            )  # fmt: skip
    else:
        b.op(
            r,
            "sync_round",
            "collective",
            "sync",
            "compute",
            (last,),
            coll=colls[r],
            every=sync.every,
        )


def interaction(b, w, r, B, dt, deps, phase, kernel="gemm", dcn="generic"):
    """Interaction ops (forward, or backward at twice the forward work); returns the last op.
    A ``dot`` interaction's ops state the kernels that run it (the stack's
    ``interaction_kernel``): ``gemm`` ops, or DLE's ``dot_based_interact`` forward / backward
    kernel (``compute.DOT_KERNELS``), priced by ``compute.dot_interaction_time_s``.  A ``dcn``
    interaction's element-wise kernels follow the stack's ``dcn_kernels`` (``generic``, or
    HugeCTR's ``multicross``: :func:`multicross_bytes`)."""
    d, n_feat = w.bottom_mlp[-1], len(w.tables) + 1
    name = f"interaction_{phase}"
    reps = 1 if phase == "fwd" else 2
    if w.interaction == "dot":
        form = {} if kernel == "gemm" else {"kernel": f"{kernel}_{phase}"}
        x = None
        for i in range(reps):  # batched F×d · d×F products: B·F rows against F columns
            x = b.op(
                r, f"{name}{i}", "gemm", "interaction", "compute", deps if i == 0 else (x,),
                m=B * n_feat, n=n_feat, k=d, dtype=dt, **form,
            )  # fmt: skip
        return x
    width = w.interaction_input_width
    if w.interaction in ("reduce", "projection"):
        return _stated_width_interaction(b, w, r, B, dt, deps, phase)
    if w.interaction == "concat":  # read and write the concatenated features
        nbytes = float(2 * DTYPE_BYTES[dt] * B * width * reps)
        return b.op(r, name, "memory", "interaction", "compute", deps, nbytes=nbytes)
    if dcn == "multicross":
        return _multicross_interaction(b, w, r, B, dt, deps, phase, width)
    return _dcn_interaction(b, w, r, B, dt, deps, name, reps, width)


def _dcn_interaction(b, w, r, B, dt, deps, name, reps, width):
    """DCN cross layers: per layer, the low-rank V and W GEMMs (``reps`` times) and an
    element-wise multiply-add over the ``width`` features; returns the last op."""
    x = None
    for layer in range(w.dcn_layers):
        for i in range(reps):
            x = b.op(
                r, f"{name}_l{layer}_v{i}", "gemm", "interaction", "compute",
                deps if x is None else (x,), m=B, n=w.dcn_low_rank, k=width, dtype=dt,
            )  # fmt: skip
            x = b.op(
                r, f"{name}_l{layer}_w{i}", "gemm", "interaction", "compute", (x,),
                m=B, n=width, k=w.dcn_low_rank, dtype=dt,
            )  # fmt: skip
        x = b.op(
            r, f"{name}_l{layer}_mul", "memory", "interaction", "compute", (x,),
            nbytes=float(3 * DTYPE_BYTES[dt] * B * width * reps),
        )  # fmt: skip
    return x


def multicross_bytes(batch: int, width: int, layers: int, dtype_bytes: int) -> dict:
    """HBM bytes of each element-wise kernel HugeCTR runs around a low-rank DCN (the
    ``ConcatLayer`` that builds its input and the ``MultiCrossLayer``), in units of one
    ``batch x width`` activation in the dense precision (``act``), by op of
    :func:`_multicross_interaction`.  Source: NVIDIA-Merlin/HugeCTR, commit 2f2016f (tag
    v25.03.00 + 2), ``HugeCTR/src/layers/``:

    - ``concat_layer.cu`` 88-108 / 111-131: ``ConcatLayer::fprop`` runs one
      ``concat_fwd_kernel`` per input (the embedding collection's output, the bottom MLP's),
      each reading its input and writing its columns of the output; ``bprop`` one
      ``concat_bwd_kernel`` per input, reading the output gradient's columns and writing the
      input's gradient: 2 ``act`` each way, 2 kernels.  ``pybind/add_dense_layer_helpers.cpp``
      222-235: ``ConcatLayer<__half>`` under mixed precision.
    - ``multi_cross_layer.cu`` 627-673, ``MultiCrossForwardFunctorv2``: per layer ``i`` the
      GEMM ``XU = X_i U``, the GEMM ``H = XU V + b`` (bias in the cuBLASLt epilogue, 1202-1207),
      then ``fused_matrix_elementwise_dot_add`` (426-463): ``X_{i+1} = H .* X_0 + X_i`` in one
      kernel, reading ``H``, ``X_0``, ``X_i`` and writing ``X_{i+1}``: 4 ``act``; 3 for
      ``i = 0``, where ``X_i`` is ``X_0`` and each thread reads the same elements twice.
    - 734-812, ``MultiCrossBackwardFunctorv2``: ``cudaMemsetAsync`` of the accumulated input
      gradient (1 ``act`` written); per layer, ``fused_mul_fma3`` (391-424, kernel 87-124:
      ``S0 = dY .* X_0`` and ``dX += dY .* H``, reading ``dY``, ``X_0``, ``H``, ``dX`` and
      writing ``S0``, ``dX``: 6 ``act``) before the layer's four GEMMs (the bias gradient in the
      ``dV`` GEMM's epilogue, 1214-1219; the residual ``+ dY`` as the last GEMM's C operand,
      beta = 1); after the layers ``matrix_add`` of the accumulator into the input gradient
      (3 ``act``).
    - ``pybind/add_dense_layer_helpers.cpp`` 505-523: ``MultiCrossLayer<__half>`` under
      ``use_mixed_precision`` (NVIDIA's MLPerf DLRM-DCNv2 script, ``samples/dlrm/train.py``: 315
      ``use_mixed_precision``, set by ``config_DGXH100_1x8x6912.sh`` 6 through
      ``run_and_time.sh`` 34; 425-441 ``Concat`` of the embeddings and the bottom MLP, then
      ``MultiCross`` with ``projection_dim=512, num_layers=3``)."""
    act = float(batch) * width * dtype_bytes
    out = {"fwd_concat": 2 * act}
    for layer in range(layers):
        out[f"fwd_l{layer}_mul"] = (3 if layer == 0 else 4) * act
    out["bwd_zero"] = act
    for layer in reversed(range(layers)):
        out[f"bwd_l{layer}_mul"] = 6 * act
    out["bwd_sum"] = 3 * act
    out["bwd_split"] = 2 * act
    return out


def _multicross_interaction(b, w, r, B, dt, deps, phase, width):
    """HugeCTR's concat and ``MultiCrossLayer`` (:func:`multicross_bytes`): forward, the concat
    copies, then per layer the ``XU`` and ``XUV + b`` GEMMs and the ``x0 .* h + x_i`` kernel;
    backward, the zeroed accumulator, then per layer (last first) the fused multiply / FMA
    kernel and the ``dH``, ``dV``, ``dU`` and ``dY`` GEMMs, then the final sum and the concat's
    split.  Returns the last op."""
    nbytes = multicross_bytes(B, width, w.dcn_layers, DTYPE_BYTES[dt])
    name, P = f"interaction_{phase}", w.dcn_low_rank

    def mem(key, deps, launches=1):
        extra = {"launches": launches} if launches != 1 else {}
        return b.op(
            r, f"interaction_{key}", "memory", "interaction", "compute", deps,
            nbytes=nbytes[key], **extra,
        )  # fmt: skip

    def gemm(key, deps, m, n, k):
        return b.op(r, f"{name}_{key}", "gemm", "interaction", "compute", deps,
                    m=m, n=n, k=k, dtype=dt)  # fmt: skip

    if phase == "fwd":
        x = mem("fwd_concat", deps, launches=2)
        for layer in range(w.dcn_layers):
            x = gemm(f"l{layer}_v0", (x,), B, P, width)
            x = gemm(f"l{layer}_w0", (x,), B, width, P)
            x = mem(f"fwd_l{layer}_mul", (x,))
        return x
    x = mem("bwd_zero", deps)
    for layer in reversed(range(w.dcn_layers)):
        x = mem(f"bwd_l{layer}_mul", (x,))
        x = gemm(f"l{layer}_w1", (x,), B, P, width)  # dH = S0 V^T
        x = gemm(f"l{layer}_w0", (x,), P, width, B)  # dV = XU^T S0 (+ db)
        x = gemm(f"l{layer}_v0", (x,), width, P, B)  # dU = X_i^T dH
        x = gemm(f"l{layer}_v1", (x,), B, width, P)  # dY = dH U^T + dY
    x = mem("bwd_sum", (x,))
    return mem("bwd_split", (x,), launches=2)


def dense_update_bytes(params: int, optimizer: str, dt: str, master: bool) -> tuple[float, float]:
    """HBM bytes per step of the dense parameters' upkeep: (weight copy and gradient zeroing at
    the start of the dense step, the optimizer's update).  Without ``master`` weights (the
    stack's ``dense_master_weights``): the update reads FP32 weights and gradients and writes
    the weights, and reads and writes each FP32 state tensor of ``optimizer``
    (``DENSE_OPTIMIZERS``); nothing at the start.  With them (HugeCTR), in dense precision
    ``dt`` of ``e`` bytes: the update reads the FP32 weight, the ``e``-byte gradient and the
    state and writes the weight and the state; at the start, the gradient buffer is zeroed
    (``e`` written) and, in a 16-bit ``dt``, the FP32 weights are read and their 16-bit copy
    written (4 + ``e``), which SGD's update writes instead.  Source: NVIDIA-Merlin/HugeCTR,
    commit 2f2016f: ``HugeCTR/src/core23_network.cpp`` 340-347 (mixed precision: FP32 master
    weights, ``__half`` wgrads), 360-373 (``conv_weight_``: FP32 to ``__half``),
    ``src/pybind/model_pipeline.cpp`` 237-244 (``network_init``: ``conv_weight_`` every step
    but under SGD) and 255-258 (``init_wgrad``), ``src/regularizers/no_regularizer.cu`` 34-38
    (``cudaMemsetAsync`` of the wgrads), ``src/optimizers/adagrad_optimizer.cu`` 25-75
    (``ada_grad_update4_kernel``: reads the FP32 weight, the ``T`` wgrad and the FP32
    accumulator, writes the weight and the accumulator), ``sgd_optimizer.cu`` 59-114 (SGD
    writes the ``__half`` weight as it updates)."""
    state = DENSE_OPTIMIZERS[optimizer]
    if not master:
        return 0.0, float(params * 4 * (3 + 2 * state))
    e = DTYPE_BYTES[dt]
    half = e == 2
    copy_in_update = half and optimizer == "sgd"
    update = 4 + e + 4 + 8 * state + (e if copy_in_update else 0)
    start = e + (4 + e if half and not copy_in_update else 0)
    return float(params * start), float(params * update)


def _stated_width_interaction(b, w, r, B, dt, deps, phase):
    """``reduce``: the interaction inputs summed element-wise down to ``output_width`` features
    (memory-bound: read every input element, write the output; backward the reverse).
    ``projection``: a learned linear layer from the inputs to ``output_width`` (forward GEMM;
    backward wgrad and dgrad GEMMs)."""
    n_in, n_out, name = w.interaction_input_width, w.interaction_width, f"interaction_{phase}"
    if w.interaction == "reduce":
        nbytes = float(DTYPE_BYTES[dt] * B * (n_in + n_out))
        return b.op(r, name, "memory", "interaction", "compute", deps, nbytes=nbytes)
    if phase == "fwd":
        return b.op(r, name, "gemm", "interaction", "compute", deps, m=B, n=n_out, k=n_in, dtype=dt)
    x = b.op(
        r, f"{name}_wgrad", "gemm", "interaction", "compute", deps,
        m=n_in, n=n_out, k=B, dtype=dt,
    )  # fmt: skip
    return b.op(
        r, f"{name}_dgrad", "gemm", "interaction", "compute", (x,),
        m=B, n=n_in, k=n_out, dtype=dt,
    )  # fmt: skip


def buckets(
    w: WorkloadSpec, dp_params: int, grouped: bool = False, bottom: bool = True
) -> list[tuple[int, list[str]]]:
    """DDP buckets in backward order: (parameters, [layer keys whose gradients fill it]); one
    bucket of every gradient when ``grouped`` (a stack's ``grouped_allreduce``); without the
    bottom MLP's layers unless ``bottom`` (a model-parallel bottom MLP, ``stack.py`` item 13,
    is outside DDP)."""
    layers = [(f"top{i}", k * n + n) for i, (k, n) in reversed(list(enumerate(w.top_layers())))]
    if w.interaction_params:
        layers.append(("interaction", w.interaction_params))
    layers += [
        (f"bottom{i}", k * n + n)
        for i, (k, n) in reversed(list(enumerate(w.bottom_layers() if bottom else ())))
    ]
    if dp_params:
        layers.append(("dp_tables", dp_params))
    cap = float("inf") if grouped else BUCKET_BYTES // 4
    out, cur, members = [], 0, []
    for key, params in layers:
        cur += params
        members.append(key)
        if cur >= cap:
            out.append((cur, members))
            cur, members = 0, []
    if members:
        out.append((cur, members))
    return out
