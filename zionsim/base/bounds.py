"""Physical bounds of numeric inputs: the one table that every loader checks values against.

A value outside its bound is not hardware or a workload anyone runs; it is a typo, a unit slip
or an overflow, and the simulator refuses it (``InputError`` naming the file, the field, the
value and the bound) rather than hang on it or return a figure built on it.  The bounds are wide
on purpose — one to several orders of magnitude beyond the largest real system — so they never
stand in the way of a what-if study.  ``docs/input_bounds.md`` lists them.

:data:`DIMENSIONS` bounds every quantity of a dimension (SI units); :data:`FIELDS` tightens the
bound of a field by its key (the last part of its dotted name), for quantities and counts alike.
A count without an entry is bounded by :data:`MAX_COUNT`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zionsim.base.errors import InputError, ModelError


@dataclass(frozen=True)
class Bound:
    """``low <= value <= high`` (SI units or a count), and why."""

    low: float
    high: float
    why: str

    def allowed(self) -> str:
        """The bound as an ``allowed:`` text."""
        return f"{self.low:g} to {self.high:g}"


#: per dimension, in SI units (bytes, bytes/s, FLOP/s, s)
DIMENSIONS: dict[str, Bound] = {
    "bandwidth": Bound(
        1e6,
        1e18,
        "1 MB/s is below any link of a GPU cluster (1 GbE is 125 MB/s); 1 EB/s is "
        "10^5x the fastest HBM (HBM3e, 8 TB/s): room for an ideal link in a what-if study",
    ),
    "flops": Bound(
        1e9, 1e18, "1 GFLOP/s is below one CPU core; 1 EFLOP/s is 50x a B200's sparse FP4 peak"
    ),
    "bytes": Bound(0, 1e16, "10 PB: above the memory of any single node or table"),
    "time": Bound(0, 3600, "an hour: no latency, overhead or kernel in a training step is longer"),
    "flop": Bound(0, 1e21, "1e21 FLOP: a day of a 10-EFLOP/s machine"),
}

#: counts without an entry in FIELDS: large enough for any count of things, small enough that
#: float arithmetic on it stays exact (2^53)
MAX_COUNT = 2**53

#: per field key (last part of the dotted name): quantities (SI) and counts
FIELDS: dict[str, Bound] = {
    # cluster shape (topology files, --nodes, --gpus-per-node)
    "nodes": Bound(1, 16384, "16,384 nodes: 131,072 GPUs at 8 per node, above any cluster built"),
    "gpus_per_node": Bound(1, 576, "576: NVIDIA's largest announced NVLink domain (NVL576)"),
    "gpus": Bound(1, 131072, "2^17 GPUs: above the 100k-GPU clusters announced in 2024"),
    "sockets": Bound(1, 32, "32 sockets: the largest shared-memory x86 servers"),
    "nics_per_node": Bound(1, 576, "576 NICs: one per GPU of the largest NVLink domain (NVL576)"),
    "switch_radix": Bound(2, 2048, "2,048 ports: 4x a 512-port 51.2 Tb/s switch ASIC"),
    "links_per_gpu": Bound(1, 64, "64 NVLinks: 3.5x an H100's 18"),
    "nvswitch_generation": Bound(1, 5, "NVSwitch generations 1 (DGX-2) to 5 (NVL72) and one more"),
    "switches": Bound(0, 64, "64 PCIe switches in a node: 16x a ZionEX node's 4"),
    "tiers": Bound(1, 3, "a folded Clos of 1, 2 or 3 switch levels"),
    "sm_count": Bound(1, 1024, "1,024 streaming multiprocessors: 7x a B200's 148"),
    "memory_latency": Bound(
        1e-8, 1e-5, "10 ns to 10 us: a load that misses L2 takes 300-450 ns on V100 to B200"
    ),
    "l2_cache": Bound(2**16, 2**32, "64 KiB to 4 GiB of L2: V100 has 6 MiB, B200 126.5 MiB"),
    "l2_latency_cycles": Bound(10, 10_000, "10 to 10,000 SM cycles: an L2 hit takes 210-300"),
    "hbm": Bound(1, 2**44, "16 TiB of accelerator memory: 80x a B200's 192 GB"),
    "dram": Bound(1, 1e15, "1 PB of host memory per node: 20x the largest x86 servers"),
    # achieved fractions of peak: below 0.1 % a link or kernel is broken, not slow (and the
    # times built on it overflow)
    "efficiency": Bound(1e-3, 1.0, "at least 0.1 % of line rate"),
    "stream_efficiency": Bound(1e-3, 1.0, "at least 0.1 % of HBM bandwidth"),
    "gather_efficiency": Bound(1e-3, 1.0, "at least 0.1 % of HBM bandwidth"),
    "eff_max": Bound(1e-3, 1.0, "at least 0.1 % of peak FLOP/s"),
    # link and software latencies, overheads, scales
    "latency": Bound(0, 1.0, "a link hop of a second is not a link"),
    "overhead": Bound(0, 1.0, "a collective's fixed overhead above a second is not NCCL"),
    "launch_overhead": Bound(0, 1.0, "a kernel launch above a second is not a GPU"),
    "kernel_launch": Bound(0, 1.0, "a kernel launch above a second is not a GPU"),
    "half_time": Bound(1e-12, 1.0, "the GEMM efficiency knee: a picosecond to a second"),
    "per_step": Bound(0, 60.0, "a minute of host work per training step"),
    "gpu_per_step": Bound(0, 60.0, "a minute of GPU work per training step"),
    "per_sample": Bound(0, 1.0, "a second of host work per sample"),
    "dispatch": Bound(0, 1.0, "a second of host work per kernel launched"),
    "latency_scale": Bound(0, 1000.0, "a factor of 1,000 on every software latency"),
    "oversubscription": Bound(1, 1000.0, "a down:up ratio of 1 (non-blocking) to 1,000"),
    "exponent": Bound(1e-3, 10.0, "the GEMM efficiency curve's exponent"),
    "compute_slowdown": Bound(0, 100.0, "compute 100x slower under communication"),
    "comm_slowdown": Bound(0, 100.0, "communication 100x slower under compute"),
    # goodput (variability files): checkpoint cadence and restarts, not step times
    "checkpoint_interval": Bound(1.0, 3.2e7, "a second to a year between checkpoints"),
    "relaunch": Bound(0, 86400.0, "a day to relaunch a job"),
    # workload
    "batch_per_gpu": Bound(1, 2**24, "16M samples per GPU per step: 1,000x typical"),
    "global_batch": Bound(1, 2**31, "2^31 samples per step"),
    "dense_features": Bound(1, 2**20, "an MLP layer of a million units"),
    "output_width": Bound(1, 2**20, "an MLP layer of a million units"),
    "low_rank": Bound(1, 2**20, "an MLP layer of a million units"),
    "width": Bound(1, 2**20, "an MLP layer of a million units"),
    "layers": Bound(1, 1024, "1,024 DCN cross layers"),
    "rows": Bound(1, 1e12, "10^12 rows: over 1,000x Neo's largest tables (732 M)"),
    "dim": Bound(1, 65536, "65,536 columns per embedding row"),
    "count": Bound(1, 2**17, "131,072 copies of a table (Neo's model A has 4,096 tables)"),
    "tables": Bound(1, 2**17, "131,072 embedding tables (Neo's model A has 4,096)"),
    "pooling": Bound(1e-6, 1e5, "100,000 lookups per sample per table"),
    "zipf_alpha": Bound(0, 10.0, "a Zipf exponent of 10 puts all accesses on a few rows"),
    "index_bytes": Bound(1, 8, "indices of 1 to 8 bytes (int32 or int64 in practice)"),
    # trace files (op args)
    "m": Bound(1, 2**31 - 1, "GEMM dimensions are 32-bit in cuBLAS"),
    "n": Bound(1, 2**31 - 1, "GEMM dimensions are 32-bit in cuBLAS"),
    "k": Bound(1, 2**31 - 1, "GEMM dimensions are 32-bit in cuBLAS"),
    "launches": Bound(1, 10**6, "a million kernel launches for one op"),
    "lookups": Bound(0, 1e15, "10^15 embedding rows read by one op"),
    "measured_us": Bound(0, 3.6e9, "an hour, in microseconds"),
    # run options and sync
    "iterations": Bound(1, 10000, "10,000 simulated iterations (steady state needs a few)"),
    "warmup": Bound(0, 9999, "fewer warmup iterations than iterations"),
    "every": Bound(1, 10**6, "a sync round every million iterations"),
    "sync_every": Bound(1, 10**6, "a sync round every million iterations"),
    "servers": Bound(1, 65536, "65,536 sync parameter servers"),
    "sync_servers": Bound(1, 65536, "65,536 sync parameter servers"),
    "period_s": Bound(0, 3600.0, "an hour between a trainer's sync rounds"),
    "sync_period_s": Bound(0, 3600.0, "an hour between a trainer's sync rounds"),
    "seed": Bound(0, 2**32 - 1, "a 32-bit seed"),
    # stack kernel counts
    "forward": Bound(1, 1000, "1,000 kernels per MLP layer"),
    "backward": Bound(1, 1000, "1,000 kernels per MLP layer"),
    "dense_optimizer_kernels_per_tensor": Bound(0, 1000, "1,000 kernels per tensor"),
}


def bound_of(key: str, dimension: str | None = None) -> Bound | None:
    """The bound of field ``key`` (a dotted name's last part), else of its ``dimension``."""
    name = str(key).rsplit(".", 1)[-1].split("[", 1)[0]
    return FIELDS.get(name) or DIMENSIONS.get(dimension or "")


def check(
    value: float,
    key: str,
    dimension: str | None = None,
    *,
    file: str | None = None,
    field: str | None = None,
    shown: object = None,
) -> float:
    """``value`` when finite and inside the bound of ``key``/``dimension``, else an
    :class:`InputError` naming ``file``, ``field`` (default ``key``), the value as written
    (``shown``) and the bound."""
    b = bound_of(key, dimension)
    written = value if shown is None else shown
    if not isinstance(value, int) and not math.isfinite(value):
        raise InputError(
            f"{written!r} is not a finite number",
            file=file,
            field=field or key,
            allowed=b.allowed() if b else "a finite number",
        )
    if b is not None and not b.low <= value <= b.high:
        raise InputError(
            f"{written!r} is outside the physical bound ({b.why})",
            file=file,
            field=field or key,
            allowed=b.allowed() + (" (SI units)" if dimension in DIMENSIONS else ""),
        )
    return value


def count(value: object, key: str, *, minimum: int = 1, file=None, field=None) -> int:
    """A whole number (an int, or a float with no fraction; not a bool) ``>= minimum`` and
    inside the bound of ``key``, as an int; else an :class:`InputError`."""
    where = {"file": file, "field": field or key}
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and (not math.isfinite(value) or value != int(value)))
    ):
        raise InputError(f"expected an integer, got {value!r}", **where)
    if value < minimum:
        raise InputError(f"must be >= {minimum}, got {value!r}", **where)
    b = bound_of(key) or Bound(minimum, MAX_COUNT, "")
    if value > b.high:
        why = f" ({b.why})" if b.why else ""
        raise InputError(
            f"{value!r} is outside the physical bound{why}",
            allowed=f"{max(minimum, b.low):g} to {b.high:g}",
            **where,
        )
    return int(value)


def non_finite_path(obj, where: str = "") -> str | None:
    """The dotted path of the first NaN or infinite number inside ``obj`` (nested dicts, lists,
    tuples; numpy scalars included), or None when every number is finite."""
    if isinstance(obj, float) or (hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0):
        try:
            return None if math.isfinite(float(obj)) else where or "value"
        except (TypeError, ValueError):
            return None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(
        obj, list | tuple) else ()  # fmt: skip
    for k, v in items:
        bad = non_finite_path(v, f"{where}.{k}" if where else str(k))
        if bad:
            return bad
    return None


def require_finite(obj, what: str) -> None:
    """Raise :class:`ModelError` when ``obj`` (a result the model produced) holds a NaN or an
    infinite number: accepted input must never yield one."""
    bad = non_finite_path(obj)
    if bad:
        raise ModelError(f"{what}: non-finite value at {bad}")
