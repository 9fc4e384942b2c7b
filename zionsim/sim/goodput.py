"""Goodput: useful samples per second once failures, checkpoints and restarts are paid for.

Pure: numbers in, numbers out.  The model (assumptions):

1. Failures arrive as a Poisson process; a job of ``n_c`` components of each kind ``c`` with
   mean time between failures ``M_c`` fails at rate ``λ = Σ n_c / M_c`` (any failure stops
   synchronous training).
2. **Full recovery**: every ``τ`` seconds of training the job writes a checkpoint for ``δ``
   seconds (training waits); a failure costs a restart of ``R`` seconds (relaunch plus
   reading the checkpoint) and the work since the last checkpoint.  The expected wall time of
   one segment of ``τ`` work is Daly's exact form (Daly 2006, "A higher order estimate of the
   optimum checkpoint interval for restart dumps", FGCS 22(3), eq. 11 with exponential
   failures): ``E[T] = (1/λ) e^{λR} (e^{λ(τ+δ)} − 1)``; the useful fraction is ``τ / E[T]``.
   Its optimum is found numerically and compared with Young's ``sqrt(2δ/λ)`` (Young 1974,
   CACM 17(9)) and Daly's higher-order estimate in the tests.
3. **Partial recovery** (CPR, Maeng et al., MLSys'21, arXiv:2011.02999): on a failure only
   the failed node's embedding shards are reloaded from the last checkpoint; the other nodes
   keep their state and no work is redone.  The cost is accuracy: the failed shards lose the
   updates since the checkpoint.  CPR bounds that loss by the *portion of lost samples* (PLS);
   here a failure loses ``τ/2`` (on average) of updates to ``1/nodes`` of the embedding tables,
   so ``PLS = λ τ / (2 nodes)`` and the interval is the longest with ``PLS <=
   max_lost_fraction`` (the user's accuracy budget).  The useful fraction is
   ``τ/(τ+δ) · 1/(1 + λ R_p)``, ``R_p`` the relaunch plus one node's share of the read.
   CPR reports the checkpoint-related overhead falling from 8.2–8.5 % (full) to 0.53–0.68 %
   (partial) on its emulated production failure pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: mean time between failures per component (hours), from public fleet statistics.
#: Llama 3 (Meta, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 5): 419 unexpected
#: interruptions in 54 days of pre-training on 16,384 H100 GPUs (2,048 nodes of 8):
#: GPU-attributed (faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, thermal
#: interface/sensor 6) = 262 → 16,384 × 1,296 h / 262 ≈ 81,000 h per GPU;
#: NIC 7 (one 400G NIC per GPU) → 16,384 × 1,296 h / 7 ≈ 3.0 M h per NIC;
#: host (maintenance 32, SSD 3, power supply 3, chassis 2, IO expansion board 2, CPU 2, system
#: memory 2) = 46 → 2,048 × 1,296 h / 46 ≈ 57,700 h per node;
#: network switch/cable 35 → counted per GPU served (the paper gives no switch count):
#: 16,384 × 1,296 h / 35 ≈ 607,000 GPU-hours per fabric failure.
MTBF_H = {
    "gpu": 16384 * 1296 / 262,
    "nic": 16384 * 1296 / 7,
    "node": 2048 * 1296 / 46,
    "fabric_per_gpu": 16384 * 1296 / 35,
}
#: the components a job counts, and what counts them
COMPONENTS = tuple(MTBF_H)


@dataclass(frozen=True)
class CheckpointCost:
    """Seconds to write a checkpoint (``write_s``), to restart from one (``restart_s``:
    relaunch plus a full read) and to reload one node's share (``partial_restart_s``)."""

    write_s: float
    restart_s: float
    partial_restart_s: float


def failure_rate(counts: dict, mtbf_h: dict) -> float:
    """Failures per second of a job with ``counts[c]`` components of kind ``c``."""
    return sum(counts[c] / (mtbf_h[c] * 3600.0) for c in counts if mtbf_h.get(c))


def checkpoint_cost(
    bytes_per_node: list[float], node_bw_Bps: float, storage_bw_Bps: float, relaunch_s: float
) -> CheckpointCost:
    """Checkpoint write and read times as fluid flows: each node moves its bytes at most at its
    own path's bandwidth, all nodes together at most at the storage bandwidth, so the write
    takes the longer of the fullest node's bytes over its path and all bytes over the storage.
    A partial restart reloads one node's share with the storage to itself."""
    worst = max(bytes_per_node, default=0.0)
    total = float(sum(bytes_per_node))
    shared = max(worst / node_bw_Bps, total / storage_bw_Bps)
    alone = worst / min(node_bw_Bps, storage_bw_Bps)
    return CheckpointCost(shared, relaunch_s + shared, relaunch_s + alone)


def useful_fraction(tau_s: float, delta_s: float, restart_s: float, rate: float) -> float:
    """Share of wall time spent on useful training under full recovery (assumption 2)."""
    if rate <= 0:
        return tau_s / (tau_s + delta_s)
    expected = math.exp(rate * restart_s) * math.expm1(rate * (tau_s + delta_s)) / rate
    return tau_s / expected


def optimal_interval(delta_s: float, restart_s: float, rate: float) -> float:
    """The ``τ`` of most useful fraction (assumption 2), by golden-section search on log τ."""
    if rate <= 0:
        return math.inf
    lo, hi = math.log(max(delta_s, 1e-6) * 1e-3), math.log(100.0 / rate)
    g = (math.sqrt(5) - 1) / 2
    f = lambda x: -useful_fraction(math.exp(x), delta_s, restart_s, rate)  # noqa: E731
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(200):
        if f(c) < f(d):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return math.exp((a + b) / 2)


def young_interval(delta_s: float, rate: float) -> float:
    """Young's first-order optimum ``sqrt(2 δ M)``."""
    return math.sqrt(2.0 * delta_s / rate)


def daly_interval(delta_s: float, rate: float) -> float:
    """Daly's higher-order optimum (FGCS 2006, eq. 37), for ``δ < 2M``; ``M`` otherwise."""
    m = 1.0 / rate
    if delta_s >= 2 * m:
        return m
    x = delta_s / (2 * m)
    return math.sqrt(2 * delta_s * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


def partial_interval(rate: float, nodes: int, max_lost_fraction: float) -> float:
    """CPR's interval: the longest ``τ`` with ``PLS = λ τ / (2 nodes) <= max_lost_fraction``."""
    return math.inf if rate <= 0 else 2.0 * nodes * max_lost_fraction / rate


def partial_fraction(tau_s: float, delta_s: float, partial_restart_s: float, rate: float):
    """Useful share of wall time under partial recovery (assumption 3)."""
    return tau_s / (tau_s + delta_s) / (1.0 + rate * partial_restart_s)


def goodput(
    samples_per_s: float,
    counts: dict,
    cost: CheckpointCost,
    interval_s: float | None = None,
    mtbf_h: dict | None = None,
    nodes: int = 1,
    max_lost_fraction: float | None = None,
) -> dict:
    """The goodput block of ``summary.json``: failure rate, checkpoint costs, the useful
    fraction and goodput at ``interval_s`` (default: the optimum) and at the optimum, Young's
    and Daly's intervals, and, with ``max_lost_fraction``, CPR-style partial recovery."""
    mtbf = {**MTBF_H, **(mtbf_h or {})}
    rate = failure_rate(counts, mtbf)
    best = optimal_interval(cost.write_s, cost.restart_s, rate)
    tau = best if interval_s is None else interval_s
    frac = useful_fraction(tau, cost.write_s, cost.restart_s, rate)
    out = {
        "failures_per_day": rate * 86400.0,
        "job_mtbf_h": 1.0 / rate / 3600.0 if rate else None,
        "components": dict(counts),
        "mtbf_h": {c: mtbf[c] for c in counts},
        "checkpoint_write_s": cost.write_s,
        "restart_s": cost.restart_s,
        "checkpoint_interval_s": tau,
        "useful_fraction": frac,
        "overhead_fraction": 1.0 - frac,
        "goodput_samples_per_s": samples_per_s * frac,
        "optimal_interval_s": best,
        "optimal_useful_fraction": useful_fraction(best, cost.write_s, cost.restart_s, rate),
        "young_interval_s": young_interval(cost.write_s, rate) if rate else None,
        "daly_interval_s": daly_interval(cost.write_s, rate) if rate else None,
    }
    if max_lost_fraction is not None:
        t_p = partial_interval(rate, nodes, max_lost_fraction)
        f_p = partial_fraction(t_p, cost.write_s, cost.partial_restart_s, rate)
        out["partial_recovery"] = {
            "max_lost_fraction": max_lost_fraction,
            "checkpoint_interval_s": t_p,
            "restart_s": cost.partial_restart_s,
            "useful_fraction": f_p,
            "overhead_fraction": 1.0 - f_p,
            "goodput_samples_per_s": samples_per_s * f_p,
        }
    return out


#: the fields of a variability file's ``goodput:`` mapping
GOODPUT_FIELDS = ("storage_bw", "relaunch", "checkpoint_interval", "mtbf_h", "partial_recovery")


def goodput_block(data: dict, cluster, memory, samples_per_s: float, file: str) -> dict:
    """:func:`goodput` of a run from a ``goodput:`` mapping (``docs/variability.md``): the
    job's components counted on ``cluster`` (GPUs, scale-out NICs, nodes, GPUs served by the
    fabric), the checkpoint's bytes per node from the per-GPU ``memory`` table (embedding rows
    and their optimizer state, host-memory tables, one dense replica), written over each node's
    front-end NICs (the scale-out NICs without a front end) to storage of ``storage_bw``."""
    from zionsim.base.config import Fields

    f = Fields(data, file, "goodput")
    f.check_keys(GOODPUT_FIELDS)
    m = f.sub("mtbf_h", {})
    m.check_keys(COMPONENTS)
    mtbf = {c: float(m.quantity(c, "fraction")) for c in m.data}
    spec = cluster.spec
    counts = {
        "gpu": len(cluster.gpus),
        "nic": spec.nodes * spec.scale_out.nics_per_node,
        "node": spec.nodes,
        "fabric_per_gpu": len(cluster.gpus) if spec.nodes > 1 else 0,
    }
    fe = spec.front_end
    node_bw = fe.nic_bw_Bps * fe.nics_per_node if fe else (
        spec.scale_out.nic_bw_Bps * spec.scale_out.nics_per_node
    )  # fmt: skip
    cost = checkpoint_cost(
        node_bytes(memory, spec.gpus_per_node),
        node_bw,
        f.quantity("storage_bw", "bandwidth"),
        f.quantity("relaunch", "time", strict=False),
    )
    interval = f.quantity("checkpoint_interval", "time", None) if "checkpoint_interval" in (
        f.data) else None  # fmt: skip
    partial = f.sub("partial_recovery", {})
    partial.check_keys(("max_lost_fraction",))
    lost = partial.fraction("max_lost_fraction") if partial.data else None
    return goodput(samples_per_s, counts, cost, interval, mtbf, spec.nodes, lost)


def node_bytes(memory, gpus_per_node: int) -> list[float]:
    """Checkpoint bytes each node writes: its GPUs' embedding rows and optimizer state and
    host-memory tables, plus, on node 0, one replica of the dense parameters."""
    if memory is None or memory.empty:
        return [0.0]
    own = memory["embedding_bytes"] + memory["embedding_optimizer_bytes"]
    own = own + memory["host_dram_bytes"]  # the GPU's UVM shards in host memory
    per_node = own.groupby(memory["rank"] // gpus_per_node).sum().astype(float).tolist()
    per_node[0] += float(memory["dense_bytes"].max())
    return per_node
