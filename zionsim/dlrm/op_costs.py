"""What each op of a lowered trace costs on a cluster, without running it: compute ops' seconds
from the cost models (``hardware.compute``, with the stack's kernel-launch cost) and host
transfers' flows on the hardware graph (UVM rows, EASGD sync, embedding parameter servers).

The simulation engine (``sim.engine``) runs these; the planner's iteration estimate
(``estimate.py``) reads them too, so both price an op the same way.
"""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError
from zionsim.dlrm.sync import server_devices
from zionsim.dlrm.trace import Trace
from zionsim.hardware import compute


def op_durations(cluster, trace: Trace, model: compute.ComputeModel | None = None) -> np.ndarray:
    """Seconds of every compute op of ``trace`` on ``cluster``'s GPU (0 for collectives)."""
    gpu = cluster.spec.gpu
    cache: dict[tuple, float] = {}
    out = np.zeros(len(trace.ops))
    for op in trace.ops:
        if op.kind in ("collective", "transfer"):
            continue
        key = (op.kind, tuple(sorted(op.args.items())))
        if key not in cache:
            cache[key] = _duration(gpu, op.kind, op.args, model)
        out[op.id] = cache[key]
    return out


def _duration(gpu, kind: str, a: dict, model) -> float:
    if kind == "host":
        return float(a["seconds"])
    extra = (a.get("launches", 1) - 1) * compute.launch_overhead_s(gpu, model)
    if kind == "gemm":
        eltwise = a.get("eltwise_bytes", 0.0)
        if eltwise:
            extra += compute.memory_time_s(gpu, eltwise, model) - compute.launch_overhead_s(
                gpu, model
            )
        return compute.gemm_time_s(gpu, a["m"], a["n"], a["k"], a["dtype"], model) + extra
    if kind == "memory":
        return compute.memory_time_s(gpu, a["nbytes"], model) + extra
    if a["lookups"] == 0:
        return 0.0
    if kind == "embedding_fwd":
        return compute.embedding_forward_time_s(
            gpu, a["lookups"], a["row_bytes"], a["tables"], a["fused"], a["out_bytes"], model
        )
    return compute.embedding_backward_time_s(
        gpu,
        a["lookups"],
        a["row_bytes"],
        a["tables"],
        a["fused"],
        a["optimizer"],
        a.get("state_bytes_per_row", 4.0),
        model,
        a.get("unique_rows"),
    )


def stack_compute_model(
    cluster, stack: dict, model: compute.ComputeModel | None = None
) -> compute.ComputeModel | None:
    """The compute model with the stack's per-kernel launch cost for ``cluster``'s GPU (the
    model unchanged when the stack states none)."""
    launch = stack.get("kernel_launch_s")
    if launch is None:
        return model
    from dataclasses import replace

    base = model or compute.load_compute_model()
    arch = compute.architecture(cluster.spec.gpu)
    return replace(base, arch={**base.arch, arch: replace(base.arch[arch], launch_s=launch)})


def transfer_flows(cluster, rank: int, args: dict, label: str = "") -> tuple:
    """(routes, bytes, latency, tag label) of ``rank``'s host traffic: UVM rows between the GPU
    and its nearest DRAM (h2d, d2h), EASGD parameters between the GPU and the sync servers
    (to_ps, from_ps), one shard each, or embedding parameter-server flows (:func:`_ps_flows`)."""
    r = cluster.router
    gpu = int(cluster.gpus[rank])
    direction = args["direction"]
    if direction in ("ps_lookup", "ps_update"):
        routes, nbytes = _ps_flows(cluster, gpu, args)
        return routes, nbytes, r.latency(routes), "emb_ps"
    if direction in ("to_ps", "from_ps"):
        hosts = server_devices(cluster, int(args.get("servers", 1)))
        nbytes = np.full(len(hosts), args["nbytes"] / len(hosts))
        label = label or "ps"
    else:
        hosts, nbytes = np.array([nearest_dram(cluster, gpu)]), np.array([args["nbytes"]])
        label = label or "host"
    gpus = np.full(len(hosts), gpu)
    src, dst = (hosts, gpus) if direction in ("h2d", "from_ps") else (gpus, hosts)
    routes = r.routes(src, dst)
    return routes, nbytes, r.latency(routes), label


def _ps_flows(cluster, gpu: int, args: dict) -> tuple[np.ndarray, np.ndarray]:
    """Embedding parameter servers (``ps`` tier), as flows on the graph: a lookup sends the
    indices to each server, the server's CPU gathers rows from its DRAM and the pooled values
    come back; an update pushes gradients and the CPU reads and writes rows and state.  The
    server's lookup is bound by its DRAM bandwidth (shared by every trainer it serves); CPU
    cycles are not modelled."""
    r, sockets = cluster.router, cluster.spec.host.sockets
    k = np.asarray(args["servers"], dtype=np.int64)
    if k.size and k.max() >= cluster.spec.nodes * sockets:
        raise InputError(
            f"parameter server {int(k.max())} does not exist",
            field="plan",
            allowed=f"servers 0..{cluster.spec.nodes * sockets - 1} (host sockets)",
        )
    dram = np.array([r.local("dram", s // sockets, s % sockets) for s in k], dtype=np.int64)
    cpu = np.array([r.local("cpu", s // sockets, s % sockets) for s in k], dtype=np.int64)
    g = np.full(len(k), gpu)
    if args["direction"] == "ps_lookup":
        pairs = [(g, dram, "index"), (dram, cpu, "gather"), (dram, g, "pooled")]
    else:
        pairs = [(g, dram, "push"), (dram, cpu, "update"), (cpu, dram, "update")]
    src = np.concatenate([p[0] for p in pairs])
    dst = np.concatenate([p[1] for p in pairs])
    nbytes = np.concatenate([np.asarray(args[p[2]], dtype=float) for p in pairs])
    return r.routes(src, dst), nbytes


def nearest_dram(cluster, gpu: int) -> int:
    """The host DRAM device (of a socket of ``gpu``'s node) fewest hops from device ``gpu``."""
    r, node = cluster.router, gpu // cluster.router.per_node
    drams = [r.local("dram", node, s) for s in range(cluster.spec.host.sockets)]
    return min(drams, key=lambda d: (len(r.path_names(gpu, d)), d))
