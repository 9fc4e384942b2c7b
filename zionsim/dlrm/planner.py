"""Cost-based sharding planner in the spirit of Neo: enumerate → estimate → choose → place.

Each stage is a plain function, and a :class:`Planner` is just the four of them, so a caller
replaces one stage and keeps the others (``PLANNERS`` holds the built-in combinations):

1. **enumerate** the options of a table: TW, CW in 2…8 column slices, TWRW on one node, RW over all
   GPUs, DP for small tables;
2. **estimate** each option with the simulator's own cost models: lookup forward + backward time
   from ``compute.py``, plus the seconds its bytes take on the links each holding GPU uses (NIC for
   traffic leaving the node, NVLink inside it), and the HBM bytes per holding GPU;
3. **choose** per table: table-wise unless one GPU's share of the table would exceed the ideal
   per-GPU load (total estimated work / GPUs), then the cheapest option whose per-GPU part fits
   under it; replicate (DP) when that is cheaper than serving the table remotely;
4. **place** shards that span every GPU (DP, RW) first, then parts heaviest first on the
   least-loaded GPU with HBM room; a part that fits on no GPU goes to the UVM tier (hot rows in
   the GPU's remaining HBM, the rest in its node's DRAM);
5. **rebalance**: while splitting the most loaded GPU's heaviest part finer lowers the placed
   plan's peak load, split it (as HugeCTR's and TorchRec's planners shard a hot table over
   more GPUs rather than leave one GPU the straggler);
6. **compare**: the rebalanced plan, one plan per way of sharding the tables it split (every
   split table as CW in 2, 4 or 8 slices, TWRW, RW, or whole) and one with its replicated
   tables table-wise, each placed, are estimated as whole iterations (``estimate.py``: the
   lowered trace priced by the simulator's own cost models) and the one estimated fastest is
   returned, so the planner never returns a plan its own estimate ranks below another it made
   (a candidate whose lower bound is above the best estimate so far is not walked:
   ``estimate.PRUNE``, the same choice).

Stage 2's cost model lives in ``plan_cost.py``: it prices UVM misses at the host bandwidth one
GPU gets while every GPU of its node reads its misses at once (``host_Bps_per_gpu``: on ZionEX
two GPUs share a PCIe switch's uplink to the CPU); ``plan_cost.plan_costs`` is the cost table
``zionsim plan`` prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from zionsim.base.errors import CapacityError
from zionsim.base.kept import Registry, kept_for
from zionsim.dlrm.estimate import iteration_estimate
from zionsim.dlrm.lowering import dense_twin
from zionsim.dlrm.plan import (
    Plan,
    Shard,
    check_fits,
    check_host_fits,
    default_plan,
    memory_by_rank,
)
from zionsim.dlrm.plan_cost import (
    Context,
    Cost,
    Option,
    context,
    estimate,
    miss_s,
)
from zionsim.dlrm.stack import StackSpec, resolve_stack
from zionsim.dlrm.workload import EMBEDDING_OPTIMIZERS, WorkloadSpec, row_bytes

#: at most this many parts are split finer after placement (``Planner.rebalance``)
REBALANCE_STEPS = 16
#: a placed plan whose peak load is within this fraction of the mean is left as it is
BALANCED = 0.02
#: replicate a table only below this size (its gradient joins every iteration's all-reduce)
DP_MAX_BYTES = 64 * 2**20


# ------------------------------------------------------------------------------ stages
def enumerate_options(ctx: Context, t) -> list[Option]:
    """TW, CW (2, 4, 8 slices, at least 4 columns each), TWRW, RW, and DP for small tables."""
    opts = [Option(t.index, "TW", 1)]
    opts += [Option(t.index, "CW", k) for k in (2, 4, 8) if k <= ctx.n and t.dim // k >= 4]
    if ctx.n > ctx.g > 1:
        opts.append(Option(t.index, "TWRW", ctx.g))
    if ctx.n > 1:
        opts.append(Option(t.index, "RW", ctx.n))
        if t.rows * row_bytes(t.dim, ctx.w.precision["embedding"]) <= DP_MAX_BYTES:
            opts.append(Option(t.index, "DP", ctx.n))
    return opts


def choose(ctx: Context, t, costed: list[tuple[Option, Cost]], target_s: float) -> Option:
    """Table-wise unless its part exceeds the per-GPU target; DP if cheaper than remote.

    Costs are compared as they will run: an option whose part cannot be held in HBM pays the
    UVM misses of the share that can (``hbm_share``, set by :meth:`Planner.plan`).
    """
    eff = [(o, _with_uvm(ctx, o, c)) for o, c in costed]
    tw = next(((o, c) for o, c in eff if o.kind == "TW"), None)
    dp = next(((o, c) for o, c in eff if o.kind == "DP"), None)
    if dp and tw and dp[1].part_s < tw[1].part_s:
        return dp[0]
    if tw and tw[1].part_s <= target_s:
        return tw[0]
    split = [(o, c) for o, c in eff if o.kind != "DP"]
    under = [(o, c) for o, c in split if c.part_s <= target_s]
    if under:
        return min(under, key=lambda oc: (oc[1].total_s, oc[0].parts))[0]
    return min(split, key=lambda oc: (oc[1].part_s, oc[0].parts))[0]


def _with_uvm(ctx: Context, o: Option, c: Cost) -> Cost:
    """``c`` plus the miss traffic of the part when only ``hbm_share`` of it can sit in HBM."""
    frac = min(1.0, ctx.hbm_share, ctx.hbm_budget / c.part_bytes if c.part_bytes else 1.0)
    if frac >= 1.0:
        return c
    return Cost(c.part_s + miss_s(ctx, o, c, frac, ctx.w.zipf_alpha), c.part_bytes, c.parts)


def place(ctx: Context, chosen: list[tuple[Option, Cost]], zipf_alpha: float) -> Plan:
    """Heaviest part first on the least-loaded GPU with room; UVM where nothing has room."""
    n, g = ctx.n, ctx.g
    load, room = np.zeros(n), np.full(n, ctx.hbm_budget)
    dram = np.full(max(1, n // g), ctx.dram_budget)
    shards: dict[int, Shard] = {}
    # shards on every GPU first (they need room everywhere), then heaviest first
    order = sorted(
        chosen,
        key=lambda oc: (
            oc[0].kind not in ("RW", "DP"),
            -oc[1].part_s,
            -oc[1].part_bytes,
            oc[0].table,
        ),
    )
    ones = sum(1 for o, _ in chosen if o.parts == 1 and o.kind not in ("RW", "DP", "TWRW"))
    least = _LeastLoaded(load, room, usable=ones >= _LeastLoaded.MIN_PARTS)
    for opt, cost in order:
        if opt.kind in ("RW", "DP"):
            ranks = tuple(range(n))
        elif opt.kind == "TWRW":
            node_load = load.reshape(-1, g).max(axis=1)
            node_room = room.reshape(-1, g).min(axis=1)
            ok = np.flatnonzero(node_room >= cost.part_bytes)
            node = int(ok[np.argmin(node_load[ok])] if len(ok) else np.argmin(node_load))
            ranks = tuple(range(node * g, (node + 1) * g))
        else:
            one = least.pick(cost.part_bytes) if opt.parts == 1 else None
            ranks = (
                (one,) if one is not None else _least_loaded(load, room, cost.part_bytes, opt.parts)
            )
        # every GPU, one GPU (a scalar) or some: the same element-wise sums, fewer arrays made
        idx = slice(None) if len(ranks) == n else ranks[0] if len(ranks) == 1 else np.array(ranks)
        if (room[idx] >= cost.part_bytes).all():
            room[idx] -= cost.part_bytes
            shards[opt.table] = Shard(opt.table, opt.kind, ranks)
            load[idx] += cost.part_s
        else:  # UVM: the hottest rows in what HBM is left, the rest in host DRAM
            frac = float(max(0.0, min(1.0, room[idx].min() / cost.part_bytes)))
            room[idx] -= frac * cost.part_bytes
            for r in ranks:
                dram[r // g] -= (1 - frac) * cost.part_bytes
            shards[opt.table] = Shard(opt.table, opt.kind, ranks, "uvm", round(frac, 6))
            load[idx] += cost.part_s + miss_s(ctx, opt, cost, frac, zipf_alpha)
        least.changed(ranks)
    return Plan("greedy", tuple(shards[t.index] for t in ctx.w.tables))


class _LeastLoaded:
    """What :func:`_least_loaded` picks for one GPU (the least loaded GPU with room for
    ``need``, the lowest rank among equals, the least loaded of all where none has room), from
    a heap of (load, rank) kept beside ``place``'s arrays instead of a scan of every GPU per
    part: a workload of thousands of tables (Neo's model A) placed a fifth as fast.  Entries go
    stale as loads change (:meth:`changed` pushes the new one) and are dropped when they
    surface; the heap is made at the first pick (after the parts on every GPU) and not used
    once a load is not a number, nor for fewer than :attr:`MIN_PARTS` parts on one GPU
    (``pick`` returns None: the scan decides)."""

    #: GPUs without room passed over in one pick, at most, before the scan decides instead
    MAX_SKIPPED = 64
    #: parts on one GPU, at least, for the heap to be used (below, keeping it costs more than
    #: the scans it saves: a few dozen tables)
    MIN_PARTS = 256

    def __init__(self, load: np.ndarray, room: np.ndarray, usable: bool = True):
        self.load, self.room = load, room
        self.heap: list[tuple[float, int]] | None = None
        self.now: list[float] = []  # each rank's load as the heap knows it
        self.usable = usable

    def pick(self, need: float) -> int | None:
        """The rank for a part of ``need`` bytes on one GPU, or None (the scan decides)."""
        if not self.usable:
            return None
        if self.heap is None:
            self.now = self.load.tolist()
            if any(v != v for v in self.now):
                self.usable = False
                return None
            self.heap = [(v, r) for r, v in enumerate(self.now)]
            heapq.heapify(self.heap)
        heap, now, room = self.heap, self.now, self.room
        skipped: list[tuple[float, int]] = []
        found = None
        while heap:
            v, r = heap[0]
            if v != now[r]:  # stale
                heapq.heappop(heap)
            elif room[r] >= need:
                found = r
                break
            elif len(skipped) < self.MAX_SKIPPED:
                skipped.append(heapq.heappop(heap))
            else:
                break
        else:  # no GPU has room: the least loaded of all
            found = skipped[0][1] if skipped else None
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def changed(self, ranks) -> None:
        """The loads of ``ranks`` changed (every rank: the heap is made again when next
        needed)."""
        if self.heap is None or not self.usable:
            return
        if len(ranks) == len(self.now):
            self.heap = None
            return
        for r in ranks:
            v = float(self.load[r])
            if v != v:
                self.usable = False
                return
            self.now[r] = v
            heapq.heappush(self.heap, (v, r))


def _loads(ctx: Context, chosen: list[tuple[Option, Cost]], plan: Plan) -> np.ndarray:
    """Estimated seconds per GPU of ``plan``, placed from ``chosen`` (UVM misses included)."""
    load = np.zeros(ctx.n)
    for opt, cost in chosen:
        s = plan.shards[opt.table]
        alpha = ctx.w.zipf_alpha
        extra = 0.0 if s.tier == "hbm" else miss_s(ctx, opt, cost, s.cache_fraction, alpha)
        k = len(s.ranks)
        at = slice(None) if k == ctx.n else s.ranks[0] if k == 1 else list(s.ranks)
        load[at] += cost.part_s + extra
    return load


def _least_loaded(load: np.ndarray, room: np.ndarray, need: float, k: int) -> tuple[int, ...]:
    ok = np.flatnonzero(room >= need)
    pool = ok if len(ok) >= k else np.arange(len(load))
    if k == 1:  # the least loaded, the lowest rank of equals (the sort's first), without sorting
        vals = load[pool]
        j = int(np.argmin(vals))
        if vals[j] == vals[j]:  # not NaN (which argmin takes for the least, the sort for the most)
            return (int(pool[j]),)
    best = pool[np.lexsort((pool, load[pool]))][:k]
    return tuple(int(r) for r in sorted(best))


# ------------------------------------------------------------------------------ planners
@dataclass(frozen=True)
class Planner:
    """A planner as its stages (module docstring); ``dataclasses.replace`` swaps one (``compare``
    None: :func:`best_estimated`)."""

    enumerate: Callable = enumerate_options
    estimate: Callable = estimate
    choose: Callable = choose
    place: Callable = place
    #: (cluster, workload, candidate plans, stack) -> the plan returned (stage 6; None:
    #: :func:`best_estimated`, defined below)
    compare: Callable | None = None

    def plan(self, cluster, w: WorkloadSpec, stack: StackSpec | None = None) -> Plan:
        """The plan of ``w`` on ``cluster`` under ``stack`` (default: the default stack): every
        option of every table estimated, a per-GPU target of (Σ over tables of the cheapest
        option's total seconds) / GPUs, one option chosen per table against it, placed and
        rebalanced; then the candidates of :meth:`candidates` compared by their estimated
        iteration (module docstring, stage 6)."""
        return (self.compare or best_estimated)(cluster, w, self.compared(cluster, w), stack)

    def compared(self, cluster, w: WorkloadSpec) -> list[Plan]:
        """The candidate plans :meth:`plan` compares (stages 1-5, then :meth:`candidates`),
        kept per cluster (:data:`KEEP_CANDIDATES`) for the built-in stages: stages 1-5 read
        no dense precision (tested), so workloads that differ at most in a dense format of
        one width and kind (``lowering.dense_twin``: a sweep over fp32 and tf32) share them."""
        twin = dense_twin(w) if KEEP_CANDIDATES and self == _BUILT_IN else None
        if twin is not None:  # with the stages' settings
            twin = (*twin, REBALANCE_STEPS, BALANCED, DP_MAX_BYTES)
        memo = kept_for(_CANDIDATES, cluster) if twin is not None else None
        if memo is not None and twin in memo:
            return list(memo[twin])
        out = self._compared(cluster, w)
        if memo is not None:
            if len(memo) >= KEEP_CANDIDATES:
                memo.clear()
            memo[twin] = tuple(out)
        return out

    def _compared(self, cluster, w: WorkloadSpec) -> list[Plan]:
        """:meth:`compared`, made."""
        ctx = context(cluster, w)
        if self == _BUILT_IN and len({t.index for t in w.tables}) == len(w.tables):
            ctx, costed, chosen = _chosen_by_shape(ctx, w)
        else:
            price = _by_shape(ctx) if self.estimate is estimate else self.estimate
            costed = {
                t.index: [(o, price(ctx, t, o)) for o in self.enumerate(ctx, t)] for t in w.tables
            }
            data = sum(
                next(c for o, c in cs if o.kind == "TW").part_bytes for cs in costed.values()
            )
            ctx = replace(ctx, hbm_share=min(1.0, ctx.n * ctx.hbm_budget / data) if data else 1.0)
            tw_total = sum(min(c.total_s for _, c in cs) for cs in costed.values())
            target = tw_total / ctx.n
            chosen = []
            for t in w.tables:
                opt = self.choose(ctx, t, costed[t.index], target)
                chosen.append((opt, dict(costed[t.index])[opt]))
        plan = self.rebalance(ctx, costed, chosen)
        return self.candidates(ctx, costed, plan)

    def candidates(self, ctx: Context, costed: dict, plan: Plan) -> list[Plan]:
        """``plan`` first; then, for each way of sharding a table (TW, CW in k slices, TWRW,
        RW), the plan with every table ``plan`` splits sharded that way; then the plan with
        ``plan``'s replicated (DP) tables table-wise; each placed, each plan once."""
        chosen = []
        for s in plan.shards:
            opt = Option(s.table, s.kind, len(s.ranks))
            chosen.append((opt, dict(costed[s.table])[opt]))
        split = {o.table for o, _ in chosen if o.kind not in ("TW", "DP")}
        ways = sorted({(o.kind, o.parts) for i in split for o, _ in costed[i] if o.kind != "DP"})
        changes = [(split, way) for way in ways]
        dp = {o.table for o, _ in chosen if o.kind == "DP"}
        if dp:
            changes.append((dp, ("TW", 1)))
        out, seen = [plan], {plan.shards}
        for tables, way in changes:
            trial = [
                next(((o, c) for o, c in costed[o0.table] if (o.kind, o.parts) == way), (o0, c0))
                if o0.table in tables else (o0, c0)
                for o0, c0 in chosen
            ]  # fmt: skip
            p = self.place(ctx, trial, ctx.w.zipf_alpha)
            if p.shards not in seen:
                seen.add(p.shards)
                out.append(p)
        return out

    def rebalance(self, ctx: Context, costed: dict, chosen: list) -> Plan:
        """Place ``chosen``; then, while the most loaded GPU's heaviest own part can be split
        finer (more CW slices, TWRW, RW) so that the placed plan's most loaded GPU gets lighter,
        split it.  The per-table choice cannot see that parts spread over every GPU (RW, DP)
        leave less room than the mean for one big part; this is where that is mended."""
        plan = self.place(ctx, chosen, ctx.w.zipf_alpha)
        best = _loads(ctx, chosen, plan).max()
        for _ in range(REBALANCE_STEPS):
            load = _loads(ctx, chosen, plan)
            if load.max() <= load.mean() * (1 + BALANCED):
                break
            hot = int(np.argmax(load))
            own = [
                i for i, (o, _) in enumerate(chosen)
                if o.kind in ("TW", "CW", "TWRW") and hot in plan.shards[o.table].ranks
            ]  # fmt: skip
            if not own:
                break
            i = max(own, key=lambda j: chosen[j][1].part_s)
            tried = []
            for o, c in costed[chosen[i][0].table]:
                if o.kind != "DP" and o.parts > chosen[i][0].parts:
                    trial = chosen[:i] + [(o, c)] + chosen[i + 1 :]
                    p = self.place(ctx, trial, ctx.w.zipf_alpha)
                    tried.append((_loads(ctx, trial, p).max(), o.parts, trial, p))
            if not tried:
                break
            peak, _, trial, p = min(tried, key=lambda x: (x[0], x[1]))
            if peak >= best * (1 - 1e-3):
                break
            best, chosen, plan = peak, trial, p
        return plan


#: the built-in stages, whose candidates :meth:`Planner.compared` keeps
_BUILT_IN = Planner()
#: candidate lists kept per cluster (:meth:`Planner.compared`), at most; 0: none kept
KEEP_CANDIDATES = 64
_CANDIDATES: Registry = {}


class _CostedByShape(dict):
    """Per table index, its options and their costs (``Planner._compared``'s ``costed``), made
    when first looked up from its shape's: the built-in stages read nothing else of a table
    (:func:`_by_shape`), and a workload of thousands of alike tables has its few looked up."""

    def __init__(self, shapes: dict, tables: dict):
        super().__init__()
        self.shapes, self.tables = shapes, tables

    def __missing__(self, index: int) -> list:
        shape = self.shapes[_shape(self.tables[index])]
        if shape[0][0].table == index:  # the table the shape was enumerated for
            costed = shape
        else:
            costed = [(Option(index, o.kind, o.parts), c) for o, c in shape]
        self[index] = costed
        return costed


def _shape(t) -> tuple:
    return (t.rows, t.dim, t.pooling)


def _chosen_by_shape(ctx: Context, w: WorkloadSpec) -> tuple[Context, dict, list]:
    """Stages 1-3 of the built-in planner (``Planner._compared``) with each table shape
    enumerated, priced and chosen once (what they read of a table: :func:`_by_shape`): the
    context with its ``hbm_share``, ``costed`` (:class:`_CostedByShape`) and the chosen option
    and cost of every table, the same as table by table (the sums in the tables' order)."""
    price = _by_shape(ctx)
    shapes: dict[tuple, list] = {}
    for t in w.tables:
        if _shape(t) not in shapes:
            shapes[_shape(t)] = [(o, price(ctx, t, o)) for o in enumerate_options(ctx, t)]
    per_table = [shapes[_shape(t)] for t in w.tables]
    data = sum(next(c for o, c in cs if o.kind == "TW").part_bytes for cs in per_table)
    ctx = replace(ctx, hbm_share=min(1.0, ctx.n * ctx.hbm_budget / data) if data else 1.0)
    target = sum(min(c.total_s for _, c in cs) for cs in per_table) / ctx.n
    picks: dict[tuple, tuple[Option, Cost]] = {}
    chosen = []
    for t in w.tables:
        key = _shape(t)
        if key not in picks:
            opt = choose(ctx, t, shapes[key], target)
            picks[key] = (opt, dict(shapes[key])[opt])
        opt, cost = picks[key]
        if opt.table != t.index:
            opt = Option(t.index, opt.kind, opt.parts)
        chosen.append((opt, cost))
    return ctx, _CostedByShape(shapes, {t.index: t for t in w.tables}), chosen


def _by_shape(ctx: Context) -> Callable:
    """:func:`~zionsim.dlrm.plan_cost.estimate` on ``ctx``, priced once per table shape (rows,
    columns, pooling) and option kind and parts: all it reads of a table (a workload of many
    alike tables, such as Neo's model A, is priced once)."""
    seen: dict[tuple, Cost] = {}

    def price(_ctx: Context, t, o: Option) -> Cost:
        key = (t.rows, t.dim, t.pooling, o.kind, o.parts)
        if key not in seen:
            seen[key] = estimate(ctx, t, o)
        return seen[key]

    return price


def best_estimated(cluster, w: WorkloadSpec, plans: list[Plan], stack=None) -> Plan:
    """The plan of ``plans`` with the shortest estimated iteration under ``stack`` (the first of
    equals; a plan that overflows a GPU's HBM or a node's host DRAM is out unless all do, and a
    single plan is returned without estimating it)."""
    if len(plans) == 1:
        return plans[0]
    stack = resolve_stack(stack)
    spec = cluster.spec
    # all that _fits reads (a sweep's points on other NIC speeds check the same plans; the
    # memory of a plan reads no dense format of one width, lowering.dense_twin, tested)
    fe = spec.front_end
    given = (dense_twin(w) or repr(w), len(cluster.gpus), spec.gpus_per_node, spec.gpu.hbm_bytes,
             spec.host.dram_bytes, fe.servers if fe else 0,
             fe.server_dram_bytes if fe else 0.0)  # fmt: skip
    fits = [p for p in plans if _fits_kept(cluster, w, p, given)] or plans[:1]
    if len(fits) == 1:
        return fits[0]
    # each candidate against the best so far: one whose estimate is shown to be above it
    # without walking its trace is not walked (estimate.evaluate's cutoff; infinity here)
    times: list[float] = []
    for p in fits:
        times.append(iteration_estimate(cluster, w, p, stack, cutoff=min(times, default=None))
                     .iteration_s)  # fmt: skip
    return fits[int(np.argmin(times))]


#: :func:`_fits` answers kept (:func:`_fits_kept`), at most
KEEP_FITS = 4096
_FITS: dict[tuple, bool] = {}


def _fits_kept(cluster, w: WorkloadSpec, plan: Plan, given: tuple) -> bool:
    """:func:`_fits`, kept by ``given`` (the values it reads of ``cluster`` and ``w``) and the
    plan (its name and shards)."""
    key = (given, plan.name, plan.shards)
    hit = _FITS.get(key)
    if hit is None:
        if len(_FITS) >= KEEP_FITS:
            _FITS.clear()
        hit = _FITS[key] = _fits(cluster, w, plan)
    return hit


def _fits(cluster, w: WorkloadSpec, plan: Plan) -> bool:
    """Whether ``plan`` fits the GPUs' HBM and the nodes' host DRAM (the checks a run makes)."""
    spec, n = cluster.spec, len(cluster.gpus)
    mem = memory_by_rank(w, plan, n, spec.gpus_per_node, w.zipf_alpha)
    try:
        check_fits(mem, spec.gpu.hbm_bytes, [str(r) for r in range(n)])
        fe = spec.front_end  # the parameter servers, as the run checks them (sim/run.py)
        check_host_fits(
            mem["host_dram"], spec.host.dram_bytes, spec.gpus_per_node, mem["ps_dram"],
            fe.servers if fe else 0, fe.server_dram_bytes if fe else 0.0,
        )  # fmt: skip
    except CapacityError:
        return False
    return True


def round_robin(cluster, w: WorkloadSpec) -> Plan:
    """The naive baseline: table-wise, largest first, dealt round-robin (tiny tables DP); a table
    that does not fit in what HBM its GPU has left goes to UVM with that HBM as its hot part."""
    ctx = context(cluster, w)
    base = default_plan(w, ctx.n)
    room = np.full(ctx.n, ctx.hbm_budget)
    for s in base.shards:
        if s.kind == "DP":
            room -= estimate(ctx, w.tables[s.table], Option(s.table, "DP", ctx.n)).part_bytes
    shards = []
    for s in base.shards:
        if s.kind == "DP":
            shards.append(s)
            continue
        need = estimate(ctx, w.tables[s.table], Option(s.table, "TW", 1)).part_bytes
        r = s.ranks[0]
        if need <= room[r]:
            room[r] -= need
            shards.append(s)
        else:
            frac = max(0.0, room[r]) / need
            room[r] -= frac * need
            shards.append(Shard(s.table, "TW", s.ranks, "uvm", round(frac, 6)))
    return Plan("round_robin", tuple(shards))


def parameter_servers(cluster, w: WorkloadSpec) -> Plan:
    """Every table whole on a CPU parameter server (``ps`` tier): the service hosts of the
    front-end network, heaviest lookup traffic first on the least-loaded server with DRAM room,
    as ShadowSync's and Big Basin's trainers reach their sparse parameter servers.  (Tables in
    the training host's own DRAM, Zion's placement, are the ``uvm`` tier.)"""
    fe = cluster.spec.front_end
    servers = fe.servers
    per_el, per_row = EMBEDDING_OPTIMIZERS[w.optimizer["embedding"]]
    room = np.full(servers, fe.server_dram_bytes)
    load = np.zeros(servers)
    shards: dict[int, Shard] = {}
    for t in sorted(w.tables, key=lambda t: (-t.pooling * t.dim, -t.rows, t.index)):
        need = t.rows * (
            row_bytes(t.dim, w.precision["embedding"]) + 4 * (per_el * t.dim + per_row)
        )
        fits = np.flatnonzero(room >= need)
        k = int(fits[np.argmin(load[fits])]) if fits.size else int(np.argmax(room))
        room[k] -= need
        load[k] += t.pooling * t.dim
        shards[t.index] = Shard(t.index, "TW", (), "ps", 0.0, k)
    return Plan("parameter_servers", tuple(shards[t.index] for t in w.tables))


def hugectr(cluster, w: WorkloadSpec) -> Plan:
    """HugeCTR's MLPerf planner with NVIDIA's settings (``hugectr_plan.py``)."""
    from zionsim.dlrm.hugectr_plan import hugectr_plan

    return hugectr_plan(cluster, w)


def hugectr_hybrid(cluster, w: WorkloadSpec, settings=None) -> Plan:
    """HugeCTR's hybrid embedding (MLPerf DLRM v1, ``hybrid.py``): frequent rows replicated,
    infrequent rows spread over every GPU; NVIDIA's ``HybridEmbeddingParam`` unless ``settings``
    (a stack's ``planner.hybrid``) say otherwise."""
    from zionsim.dlrm.hybrid import hybrid_plan

    return hybrid_plan(cluster, w, settings)


def dle(cluster, w: WorkloadSpec) -> Plan:
    """NVIDIA DeepLearningExamples' PyTorch DLRM device mapping (``dle_plan.py``)."""
    from zionsim.dlrm.dle_plan import dle_plan

    return dle_plan(cluster, w)


PLANNERS: dict[str, Callable] = {
    "greedy": Planner().plan,
    "round_robin": round_robin,
    "ps": parameter_servers,
    "hugectr": hugectr,
    "hugectr_hybrid": hugectr_hybrid,
    "dle": dle,
}


def named_plan(name: str, cluster, w: WorkloadSpec, stack=None) -> Plan:
    """The plan of planner ``name`` (a key of :data:`PLANNERS`, or ``auto``: the planner of
    ``stack``, a :class:`~zionsim.dlrm.stack.StackSpec`, with its settings; greedy without one)."""
    if name == "auto":
        name = getattr(stack, "planner", "greedy")
        if name == "hugectr" and stack.planner_settings is not None:
            from zionsim.dlrm.hugectr_plan import hugectr_plan

            return hugectr_plan(cluster, w, stack.planner_settings)
    if name == "greedy":
        return Planner().plan(cluster, w, stack)
    if name == "hugectr_hybrid":
        return hugectr_hybrid(
            cluster, w, getattr(getattr(stack, "planner_settings", None), "hybrid", None)
        )
    return PLANNERS[name](cluster, w)
