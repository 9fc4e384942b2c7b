"""What each op of a lowered trace costs on a cluster, without running it: compute ops' seconds
from the cost models (``hardware.compute``, with the stack's kernel-launch cost) and host
transfers' flows on the hardware graph (UVM rows, EASGD sync, embedding parameter servers).

The simulation engine (``sim.engine``) runs these; the planner's iteration estimate
(``estimate.py``) reads them too, so both price an op the same way.
"""

from __future__ import annotations

import operator

import numpy as np

from zionsim.dlrm.stack import StackSpec
from zionsim.dlrm.sync import server_devices, service_hosts
from zionsim.dlrm.trace import Trace, op_args
from zionsim.hardware import compute
from zionsim.hardware.services import service_routes


def op_durations(
    cluster, trace: Trace, model: compute.ComputeModel | None = None, cache: dict | None = None
) -> np.ndarray:
    """Seconds of every compute op of ``trace`` on ``cluster``'s GPU (0 for collectives).

    Every node has the same GPU, so a rank the lowering made as a copy of another
    (``Trace.alike``) gets that rank's seconds, op for op, without pricing its ops again.
    ``cache``: seconds by (kind, arguments) already priced on this GPU under this model (a
    caller's, kept across traces; filled here)."""
    gpu = cluster.spec.gpu
    cache = {} if cache is None else cache
    same: dict[int, float] = {}  # by the identity of an op's arguments (shared by copied ranks)
    out = np.zeros(len(trace.ops))
    blocks = _rank_blocks(trace)
    for op in trace.ops if blocks is None else _own_ops(trace, blocks):
        if op.kind in ("collective", "transfer"):
            continue
        seconds = same.get(id(op.args))
        if seconds is None:
            key = (op.kind, tuple(sorted(op.args.items())))
            if key not in cache:
                cache[key] = _duration(gpu, op.kind, op_args(op), model)
            seconds = same[id(op.args)] = cache[key]
        out[op.id] = seconds
    if blocks is not None:
        for r, src in enumerate(trace.alike):
            if src != r:
                out[blocks[r] : blocks[r + 1]] = out[blocks[src] : blocks[src + 1]]
    return out


def _rank_blocks(trace: Trace) -> np.ndarray | None:
    """Where each rank's ops start (and, last, where they end) when each rank's ops are one run
    of ids and every rank the lowering copied has as many ops as its original; else None."""
    if trace.alike is None or not trace.ops:
        return None
    ranks = np.fromiter(map(_RANK, trace.ops), dtype=np.int64, count=len(trace.ops))
    if np.any(np.diff(ranks) < 0):
        return None
    blocks = np.searchsorted(ranks, np.arange(trace.ranks + 1))
    sizes = np.diff(blocks)
    src = np.asarray(trace.alike, dtype=np.int64)
    return blocks if np.array_equal(sizes, sizes[src]) else None


_RANK = operator.attrgetter("rank")


def _own_ops(trace: Trace, blocks: np.ndarray):
    """The ops of the ranks that are not copies of another (``Trace.alike``)."""
    for r, src in enumerate(trace.alike):
        if src == r:
            yield from trace.ops[blocks[r] : blocks[r + 1]]


def _duration(gpu, kind: str, a, model) -> float:
    """Seconds of one compute op from its typed arguments (``trace.OP_ARGS``)."""
    if kind == "host":
        return float(a.seconds)
    extra = (a.launches - 1) * compute.launch_overhead_s(gpu, model)
    if kind == "gemm":
        if a.eltwise_bytes:
            extra += compute.memory_time_s(gpu, a.eltwise_bytes, model) - compute.launch_overhead_s(
                gpu, model
            )
        if a.kernel != "gemm":
            return compute.dot_interaction_time_s(gpu, a.m, a.n, a.k, a.dtype, a.kernel, model)
        return compute.gemm_time_s(gpu, a.m, a.n, a.k, a.dtype, model) + extra
    if kind == "memory":
        return compute.memory_time_s(gpu, a.nbytes, model) + extra
    if a.lookups == 0:
        return 0.0
    if kind == "embedding_fwd":
        return compute.embedding_forward_time_s(
            gpu, a.lookups, a.row_bytes, a.tables, a.fused, a.out_bytes, model, a.l2_parts
        )
    return compute.embedding_backward_time_s(
        gpu, a.lookups, a.row_bytes, a.tables, a.fused, a.optimizer, a.state_bytes_per_row,
        model, a.unique_rows, a.grad_bytes,
    )  # fmt: skip


def stack_compute_model(
    cluster, stack: StackSpec, model: compute.ComputeModel | None = None
) -> compute.ComputeModel | None:
    """The compute model with the stack's per-kernel launch cost for ``cluster``'s GPU (the
    model unchanged when the stack states none)."""
    launch = stack.kernel_launch_s
    if launch is None:
        return model
    from dataclasses import replace

    base = model or compute.load_compute_model()
    arch = compute.architecture(cluster.spec.gpu)
    return replace(base, arch={**base.arch, arch: replace(base.arch[arch], launch_s=launch)})


def transfer_flows(cluster, rank: int, args: dict, label: str = "") -> tuple:
    """(routes, bytes, latency, tag label) of ``rank``'s host traffic: UVM rows between the GPU
    and its nearest DRAM (h2d, d2h), EASGD parameters between the GPU and the sync servers
    (to_ps, from_ps), one shard each, or embedding parameter-server flows (:func:`_ps_flows`).
    Sync servers are service hosts on the front-end network (``services.py``) unless the sync
    places them on the training hosts (``placement: trainers``)."""
    r = cluster.router
    gpu = int(cluster.gpus[rank])
    direction = args["direction"]
    if direction in ("ps_lookup", "ps_update"):
        routes, nbytes = _ps_flows(cluster, gpu, args)
        return routes, nbytes, r.latency(routes), "emb_ps"
    if direction in ("to_ps", "from_ps"):
        n = int(args.get("servers", 1))
        nbytes = np.full(n, args["nbytes"] / n)
        label = label or "ps"
        if args.get("placement", "service") == "service":
            part = "to_host" if direction == "to_ps" else "from_host"
            routes = service_routes(cluster, np.full(n, gpu), service_hosts(cluster, n), part)
            return routes, nbytes, r.latency(routes), label
        hosts = server_devices(cluster, n)
    else:
        hosts, nbytes = np.array([nearest_dram(cluster, gpu)]), np.array([args["nbytes"]])
        label = label or "host"
    gpus = np.full(len(hosts), gpu)
    src, dst = (hosts, gpus) if direction in ("h2d", "from_ps") else (gpus, hosts)
    routes = r.routes(src, dst)
    return routes, nbytes, r.latency(routes), label


#: parameter-server flows by transfer: (service-host path part, byte list of the transfer)
_PS_PARTS = {
    "ps_lookup": (("to_host", "index"), ("read", "gather"), ("from_host", "pooled")),
    "ps_update": (("to_host", "push"), ("read", "update"), ("write", "update")),
}


def _ps_flows(cluster, gpu: int, args: dict) -> tuple[np.ndarray, np.ndarray]:
    """Embedding parameter servers (``ps`` tier) as flows: a lookup sends the indices to each
    server host over the front-end network, the server's CPU gathers the rows from its DRAM and
    the pooled values come back; an update pushes the gradients, and the CPU reads and writes
    the rows and their optimizer state.  The server's work is bound by its DRAM bandwidth
    (shared by every trainer it serves) and its NIC; CPU cycles are not modelled."""
    k = np.asarray(args["servers"], dtype=np.int64)
    g = np.full(len(k), gpu)
    parts = [service_routes(cluster, g, k, part) for part, _ in _PS_PARTS[args["direction"]]]
    width = max(p.shape[1] for p in parts)
    routes = np.concatenate(
        [np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in parts]
    )
    nbytes = np.concatenate(
        [np.asarray(args[key], dtype=float) for _, key in _PS_PARTS[args["direction"]]]
    )
    return routes, nbytes


def nearest_dram(cluster, gpu: int) -> int:
    """Device id of the DRAM of the socket closest to ``gpu`` (fewest hops, then lowest id)."""
    r, node = cluster.router, gpu // cluster.router.per_node
    drams = [r.local("dram", node, s) for s in range(cluster.spec.host.sockets)]
    return min(drams, key=lambda d: (len(r.path_names(gpu, d)), d))
