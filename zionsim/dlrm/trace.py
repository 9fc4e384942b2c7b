"""Traces: one DLRM training iteration as a per-rank DAG of typed ops (the data types).

A :class:`Trace` holds every rank's :class:`Op` and the :class:`Collective` instances they
reference.  Ops carry work (FLOPs, bytes, GEMM shapes), not durations, so a trace can be replayed
on another cluster; collectives are listed once, with their group and per-peer byte matrix, and
referenced by one op on each rank.  The arguments of each op kind are typed (:data:`OP_ARGS`),
the one schema the lowering writes, the trace file checks and the engine reads.

``lowering.py`` turns a workload and a plan into a trace (:func:`~zionsim.dlrm.lowering.lower`;
its docstring walks through the iteration); ``trace_file.py`` holds the file form
(``docs/traces.md``); ``measure/kineto.py`` builds traces from profiles.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from zionsim.dlrm.stack import StackSpec
from zionsim.dlrm.sync import SyncSpec, TraceSync

SCHEMA = "zionsim.trace/1"
#: in-order streams of a rank: the GPU's compute stream, two NCCL streams, the host threads
#: that talk to embedding parameter servers (``ps`` tier), the embedding stream of a stack
#: that runs its lookups on a stream of their own (``embedding_stream``), and the host thread
#: that prepares each batch and launches the kernels (a stack's ``host``); ``ps_push``: the
#: parameter-server gradient pushes of a Hogwild CPU trainer (a ``trainer: cpu`` stack), whose
#: threads run their iterations out of step, so one batch's push overlaps the next's lookup;
#: ``intra``: HugeCTR's hierarchical exchange's intra-node stages, kernels of its embedding
#: stream that move data over NVLink themselves, outside NCCL's order (``stack.py`` item 8f)
STREAMS = ("compute", "a2a", "allreduce", "ps", "embedding", "host", "ps_push", "intra")
#: ``host``: a span of host-thread work (a stack's batch preparation and kernel launches)
COMPUTE_KINDS = ("gemm", "embedding_fwd", "embedding_bwd", "memory", "host")
KINDS = COMPUTE_KINDS + ("collective", "transfer")
CATEGORIES = (
    "embedding",
    "gemm",
    "interaction",
    "optimizer",
    "all_to_all",
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "host_transfer",
    "parameter_server",
    "sync",
    "framework",
)
#: host transfers: UVM rows (h2d, d2h), EASGD sync (to_ps, from_ps), embedding parameter servers
TRANSFER_DIRECTIONS = ("h2d", "d2h", "to_ps", "from_ps", "ps_lookup", "ps_update")
#: byte lists of a parameter-server transfer, one entry per server (``sharding.py``)
PS_PARTS = {"ps_lookup": ("index", "gather", "pooled"), "ps_update": ("push", "update")}


class GemmArgs(NamedTuple):
    """A GEMM: ``m x k @ k x n`` in ``dtype``; ``launches`` kernels (bias/activation kernels
    when unfused) moving ``eltwise_bytes`` of activations beside it; ``kernel``: ``gemm`` (a
    library GEMM) or the form of a custom kernel doing this work (``compute.DOT_KERNELS``)."""

    m: int
    n: int
    k: int
    dtype: str
    launches: int = 1
    eltwise_bytes: float = 0.0
    kernel: str = "gemm"
    measured_us: float | None = None


class MemoryArgs(NamedTuple):
    """A memory-bound kernel moving ``nbytes`` (the optimizer, the interaction)."""

    nbytes: float
    launches: int = 1
    measured_us: float | None = None


class HostArgs(NamedTuple):
    """``seconds`` of host-thread work (a stack's batch preparation or kernel launches, on the
    ``host`` stream) or of GPU work the op list leaves out (``gpu_per_step``)."""

    seconds: float
    measured_us: float | None = None


class EmbeddingFwdArgs(NamedTuple):
    """Embedding lookups: ``lookups`` rows of ``row_bytes`` over ``tables`` tables, pooled into
    ``out_bytes``; ``unique_rows`` distinct rows (None: every lookup); ``l2_parts``: the tables
    the kernel reads, in its order, each ``(table_rows, rows_held, lookups, row_bytes,
    zipf_alpha, list_length)`` (list length 0: independent draws), for the share of row
    reads the GPU's L2 serves (``hardware/l2_cache.py``;
    None: every read from HBM)."""

    lookups: float
    row_bytes: float
    tables: int
    fused: bool
    out_bytes: float
    launches: int = 1
    unique_rows: float | None = None
    l2_parts: tuple | None = None
    measured_us: float | None = None


class EmbeddingBwdArgs(NamedTuple):
    """Embedding backward and update under ``optimizer``; ``state_bytes_per_row`` of optimizer
    state per row; ``grad_bytes``: each lookup's gradient as a local reduce reads it and the
    reduced gradient it writes per distinct row (None: read at ``row_bytes``, no buffer)."""

    lookups: float
    row_bytes: float
    tables: int
    fused: bool
    optimizer: str
    launches: int = 1
    unique_rows: float | None = None
    state_bytes_per_row: float = 4.0
    grad_bytes: float | None = None
    measured_us: float | None = None


class TransferArgs(NamedTuple):
    """Host traffic: ``direction`` (UVM ``h2d``/``d2h``, EASGD ``to_ps``/``from_ps``,
    parameter-server ``ps_lookup``/``ps_update``) and ``nbytes``; EASGD ``servers`` (a count) or
    a parameter server's ``servers`` (indices) with per-server parts; EASGD's ``placement``
    (sync servers on service hosts or on the training hosts, ``sync.PLACEMENTS``)."""

    direction: str
    nbytes: float
    servers: int | list[int] | None = None
    every: int = 1
    placement: str | None = None
    index: list[float] | None = None
    gather: list[float] | None = None
    pooled: list[float] | None = None
    push: list[float] | None = None
    update: list[float] | None = None
    measured_us: float | None = None


class CollectiveArgs(NamedTuple):
    """A rank's part in collective ``coll``; foreground sync rounds run ``every`` iterations."""

    coll: int
    every: int = 1
    measured_us: float | None = None


#: the arguments of each op kind: the one schema the lowering writes, the trace file checks
#: (``trace_file.REQUIRED_ARGS``/``OPTIONAL_ARGS`` derive from it) and the engine reads
OP_ARGS: dict[str, type] = {
    "gemm": GemmArgs,
    "memory": MemoryArgs,
    "host": HostArgs,
    "embedding_fwd": EmbeddingFwdArgs,
    "embedding_bwd": EmbeddingBwdArgs,
    "transfer": TransferArgs,
    "collective": CollectiveArgs,
}


def op_args(op: Op):
    """``op.args`` as its kind's typed arguments (:data:`OP_ARGS`), defaults filled in."""
    return OP_ARGS[op.kind](**op.args)


@dataclass(slots=True)
class Op:
    """One op of a rank's iteration.  ``deps`` are ids of earlier ops on the same rank (the
    stream order adds the rest); ``args`` hold its work, not its duration: GEMM ``m, n, k,
    dtype``, ``nbytes`` of memory ops and transfers, lookups of embedding ops, ``coll`` (a
    collective id) of collective ops.

    An op is never changed once made (the lowering's cache and the planner's memos share op
    objects among traces), but it is not a frozen dataclass: a frozen one's ``__init__`` sets
    each field through ``object.__setattr__``, five times the cost of this one's plain slot
    writes, and the lowering makes hundreds of thousands of ops per sweep (issue 29).  Like the
    frozen form (whose hash failed on ``args``, a dict), it is unhashable."""

    id: int
    rank: int
    name: str
    kind: str
    category: str
    stream: str
    deps: tuple[int, ...]
    args: dict


@dataclass(frozen=True)
class Collective:
    """One collective instance: op, ranks (trace rank indices), size, optional byte matrix."""

    id: int
    op: str
    ranks: np.ndarray
    size_bytes: float
    matrix: np.ndarray | None = None


_RANK = attrgetter("rank")


@dataclass
class Trace:
    """One training iteration: every rank's ops (``ops[i].id == i``), the collectives they
    reference, ``meta`` (names and figures: workload, plan, global batch, fused, model), and,
    typed, the software ``stack`` it runs under and its dense-parameter ``sync`` (None: a trace
    that states neither runs as the bare stack under all-reduce)."""

    ranks: int
    ops: list[Op]
    collectives: list[Collective]
    meta: dict = field(default_factory=dict)
    stack: StackSpec | None = None
    sync: TraceSync | None = None
    #: each rank's first rank whose ops equal its own but for ids and rank (the lowering's
    #: shared ranks, ``lowering.py``); None where not known (a trace file, a profile)
    alike: tuple[int, ...] | None = None

    @property
    def sync_spec(self) -> SyncSpec:
        """The trace's sync spec (all-reduce when it states none)."""
        return self.sync.spec if self.sync is not None else SyncSpec()

    def by_rank(self) -> list[list[Op]]:
        """Each rank's ops in id order (list index = rank): slices of the op list where each
        rank's ops are one run of ids in rank order (as the lowering makes them)."""
        ops = self.ops
        ranks = list(map(_RANK, ops))
        if ranks and 0 <= ranks[0] and ranks[-1] < self.ranks and ranks == sorted(ranks):
            at = [bisect_left(ranks, r) for r in range(self.ranks)] + [len(ops)]
            return [ops[at[r] : at[r + 1]] for r in range(self.ranks)]
        out: list[list[Op]] = [[] for _ in range(self.ranks)]
        for op in ops:
            out[op.rank].append(op)
        return out
