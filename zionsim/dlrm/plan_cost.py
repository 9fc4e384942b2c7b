"""What the planner's options cost: one table's sharding option priced on one cluster (the
planner's *estimate* stage, ``planner.py``) and a whole plan's cost table (``zionsim plan``).

An option's cost is its lookup forward + backward time from ``compute.py`` plus the seconds its
pooled bytes take on the links each holding GPU uses (NIC for traffic leaving the node, NVLink
inside it), and the HBM bytes per holding GPU.  UVM misses are priced at the host bandwidth one
GPU gets while every GPU of its node reads its misses at once (:func:`host_Bps_per_gpu`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zionsim.base.kept import Registry, kept_for
from zionsim.dlrm.cache import hit_rate
from zionsim.dlrm.estimate import iteration_estimate, link_seconds
from zionsim.dlrm.op_costs import nearest_dram
from zionsim.dlrm.plan import Plan, Shard, memory_by_rank
from zionsim.dlrm.sharding import column_splits, first_row_block
from zionsim.dlrm.stack import StackSpec, resolve_stack
from zionsim.dlrm.workload import DTYPE_BYTES, EMBEDDING_OPTIMIZERS, WorkloadSpec, row_bytes
from zionsim.hardware import compute


@dataclass(frozen=True)
class Option:
    """One way to shard a table: kind and number of GPUs holding a part."""

    table: int
    kind: str
    parts: int


@dataclass(frozen=True)
class Cost:
    """Estimated seconds per iteration and HBM bytes on each GPU holding a part."""

    part_s: float
    part_bytes: float
    parts: int

    @property
    def total_s(self) -> float:
        """Estimated seconds summed over all parts (``part_s`` × ``parts``)."""
        return self.part_s * self.parts


@dataclass(frozen=True)
class Context:
    """What the stages know about the cluster and the model."""

    w: WorkloadSpec
    n: int
    g: int
    gpu: object
    hbm_budget: float  # HBM bytes per GPU left for embeddings
    dram_budget: float  # host DRAM bytes per node
    nic_Bps: float  # scale-out bandwidth per GPU
    nvlink_Bps: float
    pcie_Bps: float  # host DRAM <-> GPU bandwidth per GPU while all of a node's GPUs use it
    #: share of all embedding bytes that fits in the cluster's HBM (1 when everything fits)
    hbm_share: float = 1.0


def context(cluster, w: WorkloadSpec) -> Context:
    """Budgets and bandwidths of ``cluster`` for workload ``w``."""
    spec, n = cluster.spec, len(cluster.gpus)
    g = spec.gpus_per_node
    probe = memory_by_rank(w, Plan("none", ()), n, g)
    fixed = float(probe["dense"][0] + probe["activations"][0])
    so = spec.scale_out
    nic = so.nics_per_node * so.nic_bw_Bps * spec.links[so.kind].efficiency / g
    su = spec.scale_up
    if su.kind == "nvswitch":
        nvl = su.links_per_gpu * su.link_bw_Bps
    elif su.kind == "mesh":
        nvl = max(sum(c for a, b, c in su.mesh if 0 in (a, b)), 1) * su.link_bw_Bps
    else:
        nvl = spec.pcie.bw_Bps
    eff = spec.links.get("nvlink", spec.links["pcie"]).efficiency
    return Context(
        w,
        n,
        g,
        spec.gpu,
        max(0.0, 0.95 * spec.gpu.hbm_bytes - fixed),
        spec.host.dram_bytes,
        nic,
        nvl * eff,
        host_Bps_per_gpu(cluster),
    )


#: :func:`host_Bps_per_gpu` of each live cluster (a sweep plans many points on one cluster)
_HOST_BPS: Registry = {}


def host_Bps_per_gpu(cluster) -> float:
    """Bytes per second one GPU moves from its nearest host DRAM while every GPU of its node does
    the same (UVM misses are read by all ranks at one point of the iteration): the capacity of
    the most shared link on the way (a PCIe switch's uplink, a socket's DRAM) over the GPUs
    sharing it, as the engine's flows share it (``op_costs.nearest_dram`` routes); kept per
    cluster."""
    memo = kept_for(_HOST_BPS, cluster)
    if "Bps" not in memo:
        memo["Bps"] = _host_Bps_per_gpu(cluster)
    return memo["Bps"]


def _host_Bps_per_gpu(cluster) -> float:
    """:func:`host_Bps_per_gpu`, computed."""
    g, r = cluster.spec.gpus_per_node, cluster.router
    gpus = np.asarray(cluster.gpus[:g])
    routes = r.routes(np.array([nearest_dram(cluster, int(d)) for d in gpus]), gpus)
    worst = max(link_seconds(r.capacity_Bps, [(routes, np.ones(len(gpus)))]))
    return 1.0 / worst if worst > 0 else float(cluster.spec.pcie.bw_Bps)


def estimate(ctx: Context, t, opt: Option) -> Cost:
    """Seconds per iteration on each holding GPU, and its HBM bytes (all-HBM placement)."""
    w, n, g = ctx.w, ctx.n, ctx.g
    B, G = w.batch_per_gpu, w.batch_per_gpu * n
    cb = DTYPE_BYTES[w.precision["communication"]]
    per_el, per_row = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]]
    remote = (n - g) / n  # share of sample ranks on other nodes
    d = t.dim if opt.kind not in ("CW", "TWCW") else column_splits(t.dim, opt.parts)[0]
    rows, share = _largest_part(t, opt)
    lookups = B * t.pooling if opt.kind == "DP" else G * t.pooling * share
    rb = row_bytes(d, w.precision["embedding"])
    state = 4 * (per_el * d + per_row)
    kernel = _kernel_s(ctx.gpu, lookups, rb, G * d * cb, w.optimizer["embedding"], state)
    pooled = G * d * cb  # forward output of the part, the same again as gradient in backward
    if opt.kind in ("TW", "CW", "TWCW"):
        comm = 2 * pooled * remote / ctx.nic_Bps
    elif opt.kind == "RW":
        comm = 2 * pooled * (n - 1) / n * remote / ctx.nic_Bps
    elif opt.kind == "TWRW":
        comm = 2 * (pooled * (g - 1) / g / ctx.nvlink_Bps + pooled / g * remote / ctx.nic_Bps)
    else:  # DP: the table's gradient is all-reduced every iteration
        comm = 2 * (n - 1) / n * t.rows * t.dim * cb / ctx.nic_Bps
    return Cost(kernel + comm, rows * (rb + state), opt.parts)


#: lookup kernels' seconds (:func:`_kernel_s`) kept, at most
KEEP_KERNELS = 4096
_KERNELS: dict = {}
#: the compute model the kept kernels' seconds came from, and the GPUs' ``repr``
_KERNELS_FROM: list = [None, None, ""]


def _kernel_s(gpu, lookups: float, rb: float, out_bytes: float, optimizer: str, state: float):
    """Forward + backward seconds of a part's lookups (fused kernels, one table), kept by the
    arguments, the GPU (by value) and the compute model and functions (by identity): a sweep's
    points that differ in the network's rates price the same parts again."""
    model = compute.load_compute_model()
    if _KERNELS_FROM[0] is not model or _KERNELS_FROM[1] is not gpu:
        _KERNELS_FROM[:] = [model, gpu, repr(gpu)]
    key = (_KERNELS_FROM[2], lookups, rb, out_bytes, optimizer, state,
           compute.embedding_forward_time_s, compute.embedding_backward_time_s)  # fmt: skip
    hit = _KERNELS.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    seconds = compute.embedding_forward_time_s(
        gpu, lookups, rb, 1, True, out_bytes
    ) + compute.embedding_backward_time_s(gpu, lookups, rb, 1, True, optimizer, state)
    if len(_KERNELS) >= KEEP_KERNELS:
        _KERNELS.clear()
    _KERNELS[key] = (model, seconds)
    return seconds


def hybrid_estimate(ctx: Context, t, s) -> Cost:
    """:func:`estimate` of a HYB shard (``hybrid.py``) on each GPU: the rank's frequent lookups
    and its share of the infrequent ones; the infrequent vectors out and their gradients back
    (the remote share over the NIC) and the frequent rows' gradient all-reduced."""
    w, n = ctx.w, ctx.n
    B, G, f, K = w.batch_per_gpu, w.batch_per_gpu * n, s.frequent_share, s.frequent_rows
    cb = DTYPE_BYTES[w.precision["communication"]]
    per_el, per_row = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]]
    rb, state = row_bytes(t.dim, w.precision["embedding"]), 4 * (per_el * t.dim + per_row)
    lookups = B * t.pooling * f + G * t.pooling * (1.0 - f) / n
    kernel = compute.embedding_forward_time_s(
        ctx.gpu, lookups, rb, 1, True, B * t.dim * cb
    ) + compute.embedding_backward_time_s(
        ctx.gpu, lookups, rb, 1, True, w.optimizer["embedding"], state
    )
    remote = (n - ctx.g) / n
    sent = B * t.pooling * (1.0 - f) * t.dim * cb
    comm = 2 * sent * remote / ctx.nic_Bps + 2 * (n - 1) / n * K * t.dim * cb / ctx.nic_Bps
    rows = K + max(s.rows) if s.rows else K
    return Cost(kernel + comm, rows * (rb + state), n)


def miss_s(ctx: Context, opt: Option, cost: Cost, frac: float, alpha: float) -> float:
    """Seconds per iteration of the UVM misses of ``opt``'s largest part when ``frac`` of its rows
    (the hottest, under a Zipf law of exponent ``alpha``) sit in HBM: the misses' rows read over
    the host bandwidth one GPU gets (:func:`host_Bps_per_gpu`), forward and backward."""
    t = ctx.w.tables[opt.table]
    rows, share = _largest_part(t, opt)
    miss = 1.0 - hit_rate(rows, rows * frac, alpha)
    lookups = ctx.w.batch_per_gpu * ctx.n * t.pooling * share
    return 2 * lookups * miss * cost.part_bytes / max(rows, 1) / ctx.pcie_Bps


def _largest_part(t, opt: Option) -> tuple[int, float]:
    """Rows of the largest part of ``opt`` and its share of the table's lookups: a row split's
    first block (TorchRec's ``⌈rows/k⌉``, ``sharding.row_splits``), else the whole table."""
    if opt.kind not in ("RW", "TWRW"):
        return t.rows, 1.0
    rows = first_row_block(t.rows, opt.parts)
    return rows, rows / t.rows if t.rows else 0.0


def plan_costs(
    cluster, w: WorkloadSpec, plan: Plan, stack: StackSpec | None = None
) -> tuple[list[dict], dict]:
    """Per-table rows and per-GPU totals of the planner's cost model, with the estimated
    iteration under ``stack`` (default: the default stack; ``estimate.py``), the figure the
    planner compares its candidates by.

    A row's ``table_estimated_s`` is the table's estimated time summed over the ranks that hold
    it (GPU-seconds per iteration); the totals' ``gpu_estimated_s_max``/``_mean`` are the
    estimated seconds of one GPU (the sum of its tables' parts), the most loaded and the mean:
    different quantities, hence different names."""
    ctx = context(cluster, w)
    mem = memory_by_rank(w, plan, ctx.n, ctx.g, w.zipf_alpha)
    load = np.zeros(ctx.n)
    rows = []
    for s in plan.shards:
        t = w.tables[s.table]
        if s.tier == "ps":
            rows.append(_ps_row(w, t, s))
            continue
        if s.kind == "HYB":
            cost = hybrid_estimate(ctx, t, s)
        else:
            cost = estimate(ctx, t, Option(t.index, s.kind, len(s.ranks)))
        extra = (
            miss_s(ctx, Option(t.index, s.kind, len(s.ranks)), cost, s.cache_fraction, w.zipf_alpha)
            if s.tier == "uvm"
            else 0.0
        )
        load[list(s.ranks)] += cost.part_s + extra
        rows.append(
            {
                "table": t.name,
                "sharding": s.kind,
                "ranks": _ranks_text(s.ranks),
                "tier": s.tier,
                "bytes": float(t.rows * row_bytes(t.dim, w.precision["embedding"])),
                "table_estimated_s": cost.total_s + extra * len(s.ranks),
            }
        )
    hbm = sum(mem[k] for k in ("embedding", "embedding_optimizer", "dense", "activations"))
    lay_bytes = np.zeros(ctx.n)
    from zionsim.dlrm.sharding import layout

    lay_bytes = layout(w, plan, ctx.n, ctx.g, w.zipf_alpha).lookup_bytes
    totals = {
        "estimated_iteration_s": iteration_estimate(
            cluster, w, plan, resolve_stack(stack)
        ).iteration_s,
        "hbm_bytes_max": float(hbm.max()),
        "hbm_bytes_mean": float(hbm.mean()),
        "dram_bytes_max": float(mem["host_dram"].max()),
        "lookup_bytes_max": float(lay_bytes.max()),
        "lookup_bytes_mean": float(lay_bytes.mean()),
        "gpu_estimated_s_max": float(load.max()),
        "gpu_estimated_s_mean": float(load.mean()),
        "imbalance": float(load.max() / load.mean()) if load.mean() > 0 else 1.0,
    }
    return rows, totals


def _ps_row(w: WorkloadSpec, t, s: Shard) -> dict:
    """A parameter-server table in the plan table: no GPU holds it, no GPU time is estimated."""
    return {
        "table": t.name,
        "sharding": s.kind,
        "ranks": f"ps{s.server}",
        "tier": s.tier,
        "bytes": float(t.rows * row_bytes(t.dim, w.precision["embedding"])),
        "table_estimated_s": 0.0,
    }


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 2 and ranks == tuple(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return " ".join(map(str, ranks))
