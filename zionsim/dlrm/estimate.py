"""The planner's estimate of a training iteration: the lowered trace played out without the flow
simulation.

:func:`iteration_estimate` lowers the workload under a plan exactly as a run does (``lowering.py``)
and walks every rank's streams in time order, as the engine does, but prices each op in closed
form instead of sharing links flow by flow:

* compute ops (GEMMs, embedding kernels, the stack's host work) take the seconds the engine gives
  them (``op_costs.op_durations``), slowed by the stack's ``compute_slowdown`` when one of the
  rank's collectives is in flight as they start (the engine's interference rule);
* a collective starts when its last member arrives and takes NCCL's own estimate of the algorithm
  and protocol NCCL picks (``network.nccl.choose``: latency, then each phase's bytes over its most
  loaded link); the copies of one step that run at once (a TWRW all-to-all on every rail, a
  reduce-scatter in every node: the collectives of the ops of one name) are priced together, so
  rails that share a NIC or a PCIe switch share its bandwidth (``nccl.estimate_together_s``);
* a host transfer (UVM rows, parameter-server traffic) takes its route's latency plus the time
  its most loaded link needs for the bytes of every rank's transfer of the same op that crosses
  it: all ranks move their UVM misses at the same point of the iteration, so GPUs behind one
  PCIe switch share its uplink, and ranks on one socket its DRAM.

What it leaves out, against the simulation: contention between *different* concurrent
collectives or transfers (an all-reduce bucket beside a gradient all-to-all, the pooled
all-to-all beside a host read), and ShadowSync's background rounds.  Foreground sync rounds run
every K-th iteration as in a run, so the walked iterations hold one only when K divides 2.
docs/plans.md tabulates the estimate's error on every shipped workload.

The walks themselves are ``walks.py`` (the reference) and ``flat_walk.py``; this module holds
what they price with (op seconds, host transfers' seconds, NCCL's choices), the settings both
walks read and the per-trace memos.

Two iterations run back to back, as in a run (the input all-to-all of the next iteration may
start during this one's compute); the estimate is the second's end-to-end time, the measure of
``iteration_time_s`` (a run averages two iterations after its warm-up; walking a third moves
the estimates of the shipped workloads by at most 1.5 % of the iteration, for half as much
work again).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

import numpy as np

from zionsim.base.kept import Registry, kept_for
from zionsim.dlrm import flat_walk, walks
from zionsim.dlrm.lowering import lower
from zionsim.dlrm.op_costs import op_durations, stack_compute_model, transfer_flows
from zionsim.dlrm.stack import BARE, StackSpec
from zionsim.dlrm.sync import sync_spec
from zionsim.dlrm.trace import Trace
from zionsim.network import nccl

#: iterations played (the first is the warm-up)
ITERATIONS = 2
#: walk one rank per class of alike ranks (module docstring); False: every rank (the tests
#: comparing the two)
CLASSES = True


@dataclass(frozen=True)
class Estimate:
    """Estimated seconds of one iteration, and the host seconds per step included in it."""

    iteration_s: float
    host_s: float


def host_time_s(stack: StackSpec, batch_per_gpu: int = 0) -> float:
    """Per-step seconds of the stack's host thread (batch preparation, without its kernel
    launches) and of HugeCTR's ``gpu_per_step``: the one place the estimate reads the stack's
    host-time model.  The lowered trace carries that work as ``host`` ops (the host stream's
    ``input_pipeline`` and ``launch_*`` ops, the compute stream's ``step_gpu_work``), which the
    walk plays like any other stream; an overlapped host runs ahead of the GPU there too."""
    prepare = stack.host_per_step_s + stack.host_per_sample_s * batch_per_gpu
    return prepare + stack.gpu_per_step_s


def iteration_estimate(
    cluster, w, plan, stack: StackSpec = BARE, sync=None, cutoff: float | None = None
) -> Estimate:
    """Estimated iteration seconds of workload ``w`` (the stack's precisions already applied, as
    ``apply_stack`` does) under ``plan`` on ``cluster``, as ``stack`` runs it, with dense sync
    ``sync`` (a :class:`~zionsim.dlrm.sync.SyncSpec`; default: the workload's ``sync:``).
    ``cutoff``: as :func:`evaluate`'s (an ``iteration_s`` of infinity: above it)."""
    g = cluster.spec.gpus_per_node
    sync = sync or sync_spec(base=w.sync)
    trace = lower(
        w, plan, len(cluster.gpus), stack.fused_embedding, g, w.zipf_alpha, sync, stack
    )  # fmt: skip
    return Estimate(evaluate(cluster, trace, cutoff=cutoff), host_time_s(stack, w.batch_per_gpu))


def evaluate(
    cluster, trace: Trace, iterations: int = ITERATIONS, cutoff: float | None = None
) -> float:
    """Mean seconds of the iterations after the first, ``trace`` played as the module says.

    ``cutoff`` (the best estimate a caller has so far): infinity instead of the estimate where
    a lower bound shows the estimate to be above ``cutoff`` (:data:`PRUNE`), so that the trace
    need not be walked; any estimate not above it is the estimate."""
    stack = trace.stack or BARE
    durations = op_seconds(cluster, trace)
    transfer_s = transfer_seconds(cluster, trace)
    choose, together = partial(choice_of, cluster), partial(together_of, cluster)
    slow = stack.compute_slowdown
    if FLAT:
        walk = None
        if COPIES and CLASSES:  # one rank for alike ranks of every copy, where that holds
            shape = _shape(trace, durations, transfer_s, copies=True)
            if shape.valid:
                walk = flat_walk.FlatWalk(cluster, trace, shape, slow, transfer_s, choose, together)
                if not walk.copies_alike():
                    walk = None
        if walk is None:
            shape = _shape(trace, durations, transfer_s)
            walk = flat_walk.FlatWalk(cluster, trace, shape, slow, transfer_s, choose, together)
    else:
        walk = walks.Walk(
            cluster, trace, durations, slow, transfer_s, choose, CLASSES, together
        )  # fmt: skip
    if not FLAT:
        ends = walk.run(iterations)
    else:
        ends = _walk_ends(walk, iterations, cutoff)
        if ends is None:
            return float("inf")
    return float(np.diff(ends).mean()) if len(ends) > 1 else float(ends[0])


def _walk_ends(walk: flat_walk.FlatWalk, iterations: int, cutoff: float | None):
    """``walk.run(iterations)``, kept on the walk's shape by what else it reads
    (:meth:`flat_walk.FlatWalk.inputs`) while :data:`REUSE`; None where :data:`PRUNE`, two
    iterations and ``cutoff`` allow skipping the walk (its lower bound, less a margin for
    rounding, is above ``cutoff``)."""
    shape = walk.shape
    if PRUNE and cutoff is not None and iterations == 2 and cutoff < np.inf:
        # first, as it prices only the collectives it meets before its chains pass the cutoff
        bound = walk.lower_bound(cutoff, PRUNE_MARGIN)
        if bound - cutoff > PRUNE_MARGIN * bound:
            return None
    key = walk.inputs(iterations) if REUSE else None
    ends = shape.ends.get(key) if key is not None else None
    if ends is not None:
        return ends
    ends = walk.run(iterations)
    ends.flags.writeable = False
    if key is not None:
        if len(shape.ends) >= KEEP_WALKS:
            shape.ends.clear()
        shape.ends[key] = ends
    return ends


#: skip walking a candidate whose lower bound (``flat_walk.FlatWalk.lower_bound``) is above the best
#: estimate so far (``evaluate``'s ``cutoff``); False: walk every candidate (the tests)
PRUNE = True
#: the bound must exceed the cutoff by this share of itself: the walk adds op seconds one at a
#: time from the first iteration's end, the bound from zero, so the two roundings differ by
#: about the number of ops times 1e-16 of the times involved
PRUNE_MARGIN = 1e-7
#: walks kept per shape (``flat_walk.Shape.ends``), at most
KEEP_WALKS = 64


#: keep what a walk needs of a trace (its op seconds, its streams and rank classes) for the
#: next walk of the same lowered trace (the lowering hands a cached trace out again with the
#: same op objects): a sweep's points that differ only in the network's rates walk the same
#: candidate plans with the same op seconds; False: everything made anew (the tests)
REUSE = True
#: ops of the traces whose walk shapes (or op seconds) are kept, at most, in all (a larger
#: trace is not kept: a walk's shape costs about ten references per op, and a kept entry holds
#: its trace's ops alive); the lowering keeps 100,000 (``lowering.CACHE_OPS``)
KEEP_OPS = 200_000
#: compute models kept (:func:`_compute_model`), at most
KEEP_MODELS = 32
#: the flat walk's rank classes also span the copies of a step's collective (a TWRW table's
#: reduce-scatter in each node, its all-to-all on each rail) where every copy is priced alike
#: (``flat_walk.Shape``'s ``copies``: one rank of a class for alike ranks of every node or rail);
#: False: classes within one collective (the tests comparing the two)
COPIES = True
#: play the walk on flat per-op lists (:class:`flat_walk.FlatWalk`); False: the op-object walk
#: (:class:`walks.Walk`, the tests comparing the two)
FLAT = True


class _ByTrace:
    """Values computed from a trace's ops and collectives, kept for the traces that hold the very
    same op and collective objects (the lowering's cache shares them among the traces it hands
    out): found by the first op's identity, the op count and ``extra``, then checked op by op
    (:func:`_same_ops`) and collective by collective.  An entry holds its ops, so no other op
    can take the first one's identity while it is kept."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        #: the entries' length when last counted and their ops in all then (:meth:`put`)
        self.counted = (-1, 0)

    def get(self, trace: Trace, extra):
        """The value kept for ``trace`` (these very ops and collectives) and ``extra``, or
        None."""
        if not REUSE or not trace.ops:
            return None
        key = (id(trace.ops[0]), len(trace.ops), extra)
        hit = self.entries.get(key)
        if hit is None:
            return None
        ops, colls, value = hit
        same = len(colls) == len(trace.collectives) and all(
            map(operator.is_, colls, trace.collectives)
        )
        if not same or not _same_ops(ops, trace.ops):
            return None
        self.entries.move_to_end(key)
        return value

    def put(self, trace: Trace, extra, value) -> None:
        """Keep ``value`` for ``trace`` and ``extra``, dropping the least recently used entries
        beyond :data:`KEEP_OPS` ops (a trace larger than that is not kept)."""
        if not REUSE or not trace.ops or len(trace.ops) > KEEP_OPS:
            return
        key = (id(trace.ops[0]), len(trace.ops), extra)
        entries = self.entries
        fresh = self.counted[0] == len(entries) and key not in entries
        entries[key] = (_held(trace.ops), list(trace.collectives), value)
        if fresh:  # counted as left: add the new entry's ops
            total = self.counted[1] + len(trace.ops)
        else:  # another length (cleared) or an entry replaced: count anew
            total = sum(len(ops) for ops, _, _ in entries.values())
        while total > KEEP_OPS:
            total -= len(entries.popitem(last=False)[1][0])
        self.counted = (len(entries), total)


#: the last op list :func:`_held` copied, and its copy
_HELD: list = [None, None]


def _held(ops: list) -> list:
    """A copy of ``ops`` for a kept entry to hold (the caller's list may change later), the
    same copy for the same list object in a row while it is unchanged (the op seconds, shape
    and transfers of one trace are kept one after another, three copies of thousands of
    references otherwise)."""
    last, copy = _HELD
    if last is ops and copy == ops:  # unchanged: identities compared in C
        return copy
    _HELD[:] = [ops, list(ops)]
    return _HELD[1]


def _same_ops(kept: list, ops: list) -> bool:
    """Whether ``ops`` are the ops ``kept``: list equality, which takes an op for equal to
    itself without comparing it (thousands of ops in microseconds, a tenth of the time of
    checking identities one by one) and otherwise compares ops by value (equal ops have equal
    seconds, shapes and transfers: what is kept by them)."""
    try:
        return kept == ops
    except (TypeError, ValueError):  # an argument that does not compare (an array)
        return False


_DURATIONS = _ByTrace()
_SHAPES = _ByTrace()
_TRANSFERS = _ByTrace()  # each trace's transfer ops


_MODELS: dict = {}


def _compute_model(cluster, stack: StackSpec):
    """``op_costs.stack_compute_model`` of ``cluster`` and ``stack``, kept by the GPU and the
    stack (by value) and the base model (by identity, held) while :data:`REUSE`."""
    if not REUSE:
        return stack_compute_model(cluster, stack)
    from zionsim.hardware.compute import load_compute_model

    base = load_compute_model()
    key = (_repr_of(cluster.spec.gpu), _repr_of(stack))
    hit = _MODELS.get(key)
    if hit is None or hit[0] is not base:
        if len(_MODELS) >= KEEP_MODELS:
            _MODELS.clear()
        hit = _MODELS[key] = (base, stack_compute_model(cluster, stack))
    return hit[1]


#: the ``repr`` of the last objects :func:`_repr_of` was given, by type (held)
_LAST_REPR: dict = {}


def _repr_of(obj) -> str:
    """``repr(obj)`` of a frozen spec (a GPU, a stack), kept for the last one of its type
    given (by identity, held: specs are not changed once made)."""
    last = _LAST_REPR.get(type(obj))
    if last is None or last[0] is not obj:
        last = _LAST_REPR[type(obj)] = (obj, repr(obj))
    return last[1]


#: the last compute model :func:`durations_of` was given and its ``repr`` (a tenth of a
#: millisecond; the kept models, :func:`_compute_model`, come again and again)
_LAST_MODEL: list = [None, ""]


def _model_repr(model) -> str:
    """``repr(model)``, kept for the last model given (by identity, held; models are not
    changed once made)."""
    if _LAST_MODEL[0] is not model:
        _LAST_MODEL[:] = [model, repr(model)]
    return _LAST_MODEL[1]


def op_seconds(cluster, trace: Trace, base=None) -> np.ndarray:
    """Seconds of every op of ``trace`` on ``cluster`` (``op_costs.op_durations``) under its
    stack's compute model (``op_costs.stack_compute_model`` of ``base``, default the built-in
    compute model), kept per trace, GPU and model while :data:`REUSE`: the planner prices a
    candidate with them and the engine runs the chosen trace with the same vector.  Read
    only (shared)."""
    stack = trace.stack or BARE
    if base is None:
        model = _compute_model(cluster, stack)
    else:
        model = stack_compute_model(cluster, stack, base)
    return durations_of(cluster, trace, model)


def durations_of(cluster, trace: Trace, model) -> np.ndarray:
    """``op_costs.op_durations`` of ``trace`` on ``cluster``'s GPU under compute ``model``,
    kept per trace, GPU and model (by value) while :data:`REUSE`; read only (shared)."""
    from zionsim.hardware.compute import load_compute_model

    extra = (
        repr(cluster.spec.gpu),
        _model_repr(model if model is not None else load_compute_model()),
    )
    out = _DURATIONS.get(trace, extra)
    if out is None:
        out = op_durations(cluster, trace, model, _seconds_of(extra))
        out.flags.writeable = False
        _DURATIONS.put(trace, extra, out)
    return out


#: op seconds by (kind, arguments) per GPU and compute model (``durations_of``'s key, by
#: value), shared by every trace priced on them while :data:`REUSE`: a sweep's candidate plans
#: and points hold the same GEMMs and kernels again and again; entries kept per GPU and model,
#: at most
KEEP_SECONDS = 50_000
_SECONDS: OrderedDict = OrderedDict()


def _seconds_of(extra: tuple) -> dict | None:
    """The op seconds kept for GPU and model ``extra`` (None: not kept, :data:`REUSE` off)."""
    if not REUSE:
        return None
    hit = _SECONDS.get(extra)
    if hit is None or len(hit) > KEEP_SECONDS:
        hit = _SECONDS[extra] = {}
        while len(_SECONDS) > KEEP_MODELS:
            _SECONDS.popitem(last=False)
    _SECONDS.move_to_end(extra)
    return hit


def _shape(
    trace: Trace, durations: np.ndarray, transfer_s: dict, copies: bool = False
) -> flat_walk.Shape:
    """The flat walk's :class:`flat_walk.Shape` of ``trace`` (with ``copies``: its classes spanning
    collective copies), kept while :data:`REUSE` (by the ops' and transfers' seconds, by
    value)."""
    extra = (durations.tobytes(), tuple(sorted(transfer_s.items())), CLASSES, copies)
    shape = _SHAPES.get(trace, extra)
    if shape is None:
        shape = flat_walk.Shape(trace, durations, transfer_s, CLASSES, copies)
        _SHAPES.put(trace, extra, shape)
    return shape


def choice_of(cluster, c) -> nccl.Choice:
    """NCCL's choice (the built-in collective model) for collective ``c`` on ``cluster``,
    remembered per cluster (the candidate plans of one run share most of their collectives,
    and the run's own, which the engine then prepares from the same choice)."""
    memo = _choices_of(cluster)
    key = (c.op, c.size_bytes, c.ranks.tobytes(), nccl.matrix_key(c.matrix))
    if key not in memo:
        if len(memo) >= MEMO_CHOICES:
            memo.clear()
        devices = cluster.gpus[c.ranks]
        memo[key] = nccl.choose(cluster, c.op, devices, c.size_bytes, matrix=c.matrix)
    return memo[key]


def together_of(cluster, choices: list) -> list[float]:
    """``nccl.estimate_together_s`` of ``choices`` (copies of one step that run at once) on
    ``cluster``, remembered per cluster for the very same choice objects (:func:`choice_of`
    hands them out again) while :data:`REUSE`: every walk of a plan on the cluster prices the
    same copies, and the candidate plans of a run share most of them."""
    if not REUSE:
        return nccl.estimate_together_s(cluster, choices)
    memo = _choices_of(cluster, _TOGETHER)
    key = tuple(map(id, choices))
    hit = memo.get(key)
    if hit is None or not all(map(operator.is_, hit[0], choices)):
        if len(memo) >= MEMO_CHOICES:
            memo.clear()
        # the entry holds its choices, so no other object takes their identities meanwhile
        hit = memo[key] = (list(choices), nccl.estimate_together_s(cluster, choices))
    return list(hit[1])


#: NCCL choices (and estimates of copies together) remembered per cluster
#: (:meth:`walks.Walk._choice`), at most
MEMO_CHOICES = 4096
_CHOICES: Registry = {}
_TOGETHER: Registry = {}


def _choices_of(cluster, registry: dict | None = None) -> dict:
    """The remembered NCCL choices of ``cluster`` (forgotten with it), or what ``registry``
    (:data:`_TOGETHER`) remembers of it."""
    return kept_for(_CHOICES if registry is None else registry, cluster)


def transfer_seconds(cluster, trace: Trace) -> dict[int, float]:
    """Seconds of every transfer op: its route's latency plus, over the links it crosses, the
    most any link needs for the bytes of all ranks' transfers of the same name (module
    docstring)."""
    by_name: dict[str, list] = {}
    moves = _TRANSFERS.get(trace, None)
    if moves is None:
        moves = [op for op in trace.ops if op.kind == "transfer"]
        _TRANSFERS.put(trace, None, moves)
    for op in moves:
        routes, nbytes, latency, _ = transfer_flows(cluster, op.rank, op.args)
        by_name.setdefault(op.name, []).append((op.id, routes, np.asarray(nbytes), latency))
    out = {}
    for flows in by_name.values():
        busy = link_seconds(cluster.router.capacity_Bps, [(f[1], f[2]) for f in flows])
        for (op_id, _, _, latency), s in zip(flows, busy, strict=True):
            out[op_id] = float((latency.max() if len(latency) else 0.0) + s)
    return out


def link_seconds(capacity_Bps: np.ndarray, transfers: list[tuple[np.ndarray, np.ndarray]]):
    """For transfers running together, each a (routes, bytes per route) pair on links of
    ``capacity_Bps`` (routes padded with -1): the seconds the busiest link each one crosses needs
    for the bytes of all of them that cross it."""
    cap = np.append(capacity_Bps, np.inf)  # -1 padding lands on a link that costs nothing
    load = np.zeros(len(cap))
    for routes, nbytes in transfers:
        if routes.size:
            np.add.at(load, routes, np.broadcast_to(np.asarray(nbytes)[:, None], routes.shape))
    load[-1] = 0.0
    busy = load / cap
    out = []
    for routes, nbytes in transfers:
        used = routes[np.asarray(nbytes) > 0] if routes.size else routes
        out.append(float(busy[used].max()) if used.size else 0.0)
    return out
