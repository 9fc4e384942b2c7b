"""Resource guards: an up-front estimate of a run's memory and work, and the refusal of what
this machine cannot finish (``docs/reliability.md``).

The estimate is a linear function of a few sizes (:class:`Sizes`) with coefficients kept as
data (``zionsim/data/resource_model.yaml``, refitted by ``bench/resources.py`` whenever the
simulator's memory use changes).  It is taken twice, each time before the expensive step:

1. :func:`check_inputs`, from the topology and workload specs only, before the cluster graph is
   built or a plan is searched: capacity facts that no plan can change (dense parameters and
   activations per GPU against HBM; all embedding rows against all of the cluster's memory) and
   an estimate of the memory (graph and per-rank arrays, the two n×n byte matrices every layout
   holds, one op per MLP layer and iteration, and, when a table is too large to replicate, the
   input, pooled-embedding and gradient all-to-alls over all ranks that table-wise and
   column-wise placements need; a plan without them, e.g. all row-wise, needs less).
   ``nodes: 1e9`` or a million wide tables stop here, before any graph or plan.
2. :func:`check_trace`, from the lowered trace (exact op, collective and matrix counts), before
   the simulation.

Either raises :class:`~zionsim.base.errors.ResourceError` (exit 2, one line) with the estimate
and the limit.  The limit is the caller's (``io.limits``: ``--max-memory``,
``ZIONSIM_MAX_MEMORY``, or the available RAM); this module does no I/O.

Modelling assumptions:

1. Peak memory (bytes) = base + Σ coefficient × size over the sizes of :class:`Sizes`; every term
   is a structure the simulator holds at once (graph and per-rank arrays, tables and their plan,
   trace ops, per-iteration op records and their tables, n×n matrices, all-to-all flows).
2. Work (CPU seconds) is the same kind of sum with its own coefficients; it is reported, not
   limited (memory decides what cannot finish; a long run can be waited for).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np

from zionsim.base.errors import ResourceError
from zionsim.network.peer_bytes import OuterSum

MODEL_FILE = Path(__file__).resolve().parent.parent / "data" / "resource_model.yaml"


@dataclass(frozen=True)
class Sizes:
    """What a run's memory and work grow with (counts, not bytes)."""

    #: GPUs (ranks): graph devices and links, per-rank arrays and tables
    gpus: int = 0
    #: embedding tables: workload, plan and planner entries
    tables: int = 0
    #: ops of one iteration over all ranks (the trace)
    ops: int = 0
    #: op executions: ops × iterations × simulation passes (records, events table)
    op_runs: int = 0
    #: cells of n×n byte matrices (layout and all-to-all(v) collectives)
    matrix_cells: int = 0
    #: Σ over all-to-all collectives of the flows the network holds: (sender, receiver) pairs
    #: with bytes, or, where the node pairs travel as flow classes (network.flows assumption 6),
    #: the senders' NVLink relay flows (:func:`all_to_all_flows`)
    pair_flows: int = 0


@dataclass(frozen=True)
class Estimate:
    """Estimated peak memory (bytes) and work (CPU seconds) of a run, with the bytes per term."""

    memory_bytes: float
    cpu_s: float
    parts: dict
    sizes: Sizes

    def brief(self) -> str:
        """One line: the total, the two largest terms and the work, e.g. ``41.2 GB of memory
        (pair_flows 38.0 GB, op_runs 2.1 GB; about 900 CPU-s)``."""
        top = sorted(self.parts.items(), key=lambda kv: -kv[1])[:2]
        terms = ", ".join(f"{k} {_gb(v)}" for k, v in top if v > 0)
        return f"{_gb(self.memory_bytes)} of memory ({terms}; about {self.cpu_s:.3g} CPU-s)"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


@lru_cache(maxsize=4)
def load_model(path: str | None = None) -> dict:
    """The coefficients: ``{"memory": {"base": B, term: bytes per unit}, "cpu": {...}}``."""
    import yaml

    data = yaml.safe_load(Path(path or MODEL_FILE).read_text())
    return {k: dict(data[k]) for k in ("memory_bytes", "cpu_s")}


def estimate(sizes: Sizes, model: dict | None = None) -> Estimate:
    """Peak memory and CPU time of a run of ``sizes`` (assumptions 1–2)."""
    model = model or load_model()
    mem, cpu = model["memory_bytes"], model["cpu_s"]
    parts = {f.name: mem[f.name] * getattr(sizes, f.name) for f in fields(Sizes)}
    work = cpu["base"] + sum(cpu[f.name] * getattr(sizes, f.name) for f in fields(Sizes))
    return Estimate(mem["base"] + sum(parts.values()), work, parts, sizes)


def sizes_of_inputs(spec, w=None, iterations: int = 1, plan: str | None = "auto") -> Sizes:
    """A run's sizes from the cluster ``spec`` and workload ``w`` alone (step 1 of the module
    docstring); without ``w``, the cluster's own."""
    n = int(spec.nodes) * int(spec.gpus_per_node)
    if w is None:
        return Sizes(gpus=n)
    from zionsim.dlrm.plan import table_bytes
    from zionsim.dlrm.planner import DP_MAX_BYTES

    layers = len(w.bottom_layers()) + len(w.top_layers())
    sharded = plan != "ps" and any(table_bytes(w, t) > DP_MAX_BYTES for t in w.tables)
    return Sizes(
        gpus=n,
        tables=len(w.tables),
        ops=n * layers,
        op_runs=n * layers * int(iterations),
        matrix_cells=4 * n,  # two per-peer matrices of two vectors each (peer_bytes.OuterSum)
        # three all-to-alls whose senders each talk to every rank that owns a table part:
        # at most a node's GPUs per table (column / table-row splits), at most every rank
        pair_flows=3 * all_to_all_flows(spec, n, min(n, int(spec.gpus_per_node) * len(w.tables)))
        if sharded
        else 0,
    )


def all_to_all_flows(spec, n: int, peers: int | None = None, matrix=None, ranks=None) -> int:
    """Flows the network holds for an all-to-all among ``n`` ranks (``ranks``: which; default
    whole nodes) of cluster ``spec`` in which each rank sends to ``peers`` ranks (default:
    every rank; ``matrix``: those with bytes).  A DLRM's all-to-all (a row + column matrix, or
    a uniform one) among the same GPUs of enough nodes (``point_to_point.CLASSES_FROM``) with a
    scale-up fabric travels as PXN flow classes: its node pairs are a few rows, and what it
    holds is each rank's relay flows to the group's other GPUs of its node
    (``network.point_to_point``); other all-to-alls hold a flow per pair."""
    from zionsim.network import point_to_point

    g = int(spec.gpus_per_node)
    if ranks is None:
        k, per = n // g, g if n % g == 0 else 0
    else:
        node = np.asarray(ranks) // g
        k = len(np.unique(node))
        per = n // k if n % k == 0 and (np.bincount(node)[np.unique(node)] == n // k).all() else 0
    classes = (
        point_to_point.CLASSES
        and spec.scale_up.kind != "none"
        and (matrix is None or isinstance(matrix, OuterSum))
        and per > 0
        and k >= 3
        and k * (k - 1) * per >= point_to_point.CLASSES_FROM
    )
    if classes:
        return n * per
    if matrix is not None:
        return _pairs_with_bytes(matrix, n)
    return n * (n if peers is None else peers) if n > 1 else 0


def sizes_of_trace(trace, iterations: int, passes: int = 1, tables: int = 0, spec=None) -> Sizes:
    """Sizes of a lowered ``trace`` run for ``iterations`` iterations ``passes`` times (a sync
    mode other than ``allreduce`` simulates twice: with and without its traffic) on cluster
    ``spec`` (None: every all-to-all counted as its pairs with bytes)."""
    cells, pairs = 4 * trace.ranks, 0
    for c in trace.collectives:
        if c.matrix is not None:
            m = c.matrix
            cells += m.stored_cells if isinstance(m, OuterSum) else int(m.size)
        if c.op == "all_to_all":
            if spec is None:
                pairs += _pairs_with_bytes(c.matrix, len(c.ranks))
            else:
                pairs += all_to_all_flows(spec, len(c.ranks), matrix=c.matrix, ranks=c.ranks)
    ops = len(trace.ops)
    return Sizes(
        gpus=trace.ranks,
        tables=tables,
        ops=ops,
        op_runs=ops * int(iterations) * int(passes),
        matrix_cells=cells,
        pair_flows=pairs,
    )


def check_memory(est: Estimate, limit_bytes: float | None, stage: str = "run") -> Estimate:
    """``est`` if it fits in ``limit_bytes`` (None: no limit), else :class:`ResourceError`."""
    if limit_bytes is not None and est.memory_bytes > limit_bytes:
        raise ResourceError(
            f"this {stage} needs about {est.brief()} but the limit is "
            f"{_gb(limit_bytes)}; refused before simulating",
            field="--max-memory",
            allowed="fewer nodes, iterations or tables, a larger --max-memory or "
            "ZIONSIM_MAX_MEMORY (default: the available RAM), or none to disable",
        )
    return est


def check_inputs(
    spec, w=None, iterations: int = 1, limit_bytes: float | None = None, plan: str | None = "auto"
) -> Estimate:
    """Step 1 of the module: refuse what the specs alone decide, before any graph or plan."""
    if w is not None:
        from zionsim.dlrm.plan import check_cluster_holds, check_fixed_fits

        check_fixed_fits(w, spec.gpu.hbm_bytes)
        fe = spec.front_end
        ps = fe is not None and plan not in ("auto", "greedy", "round_robin", "hugectr")
        dram = spec.nodes * spec.host.dram_bytes
        check_cluster_holds(  # ps, or a plan file: the service hosts' DRAM too
            w, spec.gpus, spec.gpu.hbm_bytes, dram, fe.servers * fe.server_dram_bytes if ps else 0
        )
    return check_memory(estimate(sizes_of_inputs(spec, w, iterations, plan)), limit_bytes)


def check_trace(
    trace,
    iterations: int,
    limit_bytes: float | None,
    passes: int = 1,
    tables: int = 0,
    spec=None,
) -> Estimate:
    """Step 2 of the module: refuse a lowered trace whose simulation would not fit."""
    sizes = sizes_of_trace(trace, iterations, passes, tables, spec)
    return check_memory(estimate(sizes), limit_bytes, "simulation")


def _pairs_with_bytes(matrix, n: int) -> int:
    """(sender, receiver) pairs of an all-to-all that carry bytes: every pair of a uniform one,
    the non-zero cells of a matrix (``row[i] + col[j] > 0`` unless both are 0 for an OuterSum)."""
    if matrix is None or n < 2:
        return n * n if n > 1 else 0
    if isinstance(matrix, OuterSum):
        return n * n - int((matrix.row <= 0).sum()) * int((matrix.col <= 0).sum())
    return int((matrix > 0).sum())
