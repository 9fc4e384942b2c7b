"""Plan refinement: local search over sharding plans, judged by the simulator itself.

The greedy planner (``dlrm/planner.py``) scores options with analytic estimates, which miss what
only a simulation sees (all-to-all imbalance, overlap with the dense part, idle ranks).  Starting
from its plan, :func:`refine` proposes one change at a time and keeps it when the simulated
iteration time drops:

1. **reshard** a table to another sharding (TW, CW in 2/4/8 slices, TWRW, RW, DP for small
   tables), its parts on the least-loaded ranks;
2. **migrate** one part of a table (a TW table, a CW slice, a TWRW table's node) from a heavily
   loaded rank to a lightly loaded one;
3. **swap** the ranks of two table-wise tables, one on a heavy rank and one on a light rank;
4. **split** a TW/CW table into 2 or 4 times the column slices, or **merge** a CW table's slices
   in pairs;
5. **columns**: shift columns between two slices of a CW table (slices of unequal width).

Per-rank loads that steer the proposals come from the plan's layout (embedding HBM traffic and
the bytes a rank sends in the pooled all-to-all: a rank that sends much more than the others
holds up everyone's all-to-all); the verdict is always the simulation (``Judge``: ``iterations``
iterations, ``warmup`` of them not measured).  A change whose plan overflows a GPU's HBM is
discarded without a simulation (it is counted as ``rejected_memory``).  Shards in the ``uvm``
or ``ps`` tiers are not moved.

Determinism: every choice comes from ``numpy.random.default_rng(seed)`` and the simulation is
deterministic, so a seed and a number of evaluations fix the result.  A time budget is turned into
a number of evaluations *before* the search, from the size of the first simulation (its simpy
events and the workload's tables, times :data:`EVAL_S_PER_EVENT` and :data:`EVAL_S_PER_TABLE`),
never from the wall clock: the same budget gives the same plan on a busy machine, only later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from zionsim.base.errors import CapacityError
from zionsim.dlrm.plan import Plan, Shard
from zionsim.dlrm.plan_cost import Option, context, estimate
from zionsim.dlrm.planner import DP_MAX_BYTES
from zionsim.dlrm.sharding import column_splits, layout, shard_widths
from zionsim.dlrm.workload import WorkloadSpec, row_bytes

MOVES = ("reshard", "migrate", "swap", "split", "merge", "columns")
#: how often each move is proposed (chosen by hand: resharding found most gains on MLPerf DLRMs)
MOVE_WEIGHTS = np.array([0.35, 0.2, 0.15, 0.1, 0.1, 0.1])
#: CPU seconds of one evaluation per simpy event of its simulation and per table of the workload
#: (lowering and capacity checks), fitted to ``python bench/planner.py`` eval cases on the
#: development machine: 0.115 s for mlperf_dlrm (9,018 events, 26 tables), 0.183 s for
#: mlperf_dlrm_dcnv2 (15,404, 26), 0.953 s for neo_model_a at 128 GPUs (42,618, 4,096)
EVAL_S_PER_EVENT = 1.1e-5
EVAL_S_PER_TABLE = 1.2e-4
#: a change is kept only when it is at least this much faster (relative): no churn on ties
MIN_GAIN = 1e-6


@dataclass
class RefineResult:
    """The outcome of :func:`refine`: start and best plan, their simulated iteration times
    (``iterations``/``warmup`` as judged), and what the search did."""

    start: Plan
    plan: Plan
    start_s: float
    best_s: float
    evaluations: int
    max_evals: int
    proposals: int
    rejected_memory: int
    moves: list[str] = field(default_factory=list)

    @property
    def gain(self) -> float:
        """Relative reduction of the iteration time (0.08 = 8 % faster than the start plan)."""
        return 1.0 - self.best_s / self.start_s if self.start_s else 0.0

    def changes(self, w: WorkloadSpec) -> list[dict]:
        """One row per table whose placement changed: its sharding and ranks before and after."""
        return [
            {"table": w.tables[a.table].name, "before": describe(a), "after": describe(b)}
            for a, b in zip(self.start.shards, self.plan.shards, strict=True)
            if a != b
        ]


def describe(s: Shard) -> str:
    """A shard in one short line: ``CW 3,9 (64+64)``, ``RW 0-63``, ``DP``."""
    if s.tier == "ps":
        return f"ps{s.server}"
    if s.kind == "DP":
        return "DP"
    r = s.ranks
    text = (
        f"{r[0]}-{r[-1]}"
        if len(r) > 2 and r == tuple(range(r[0], r[-1] + 1))
        else ",".join(map(str, r))
    )
    extra = f" ({'+'.join(map(str, s.widths))})" if s.widths else ""
    return f"{s.kind} {text}{extra}" + (f" uvm {s.cache_fraction:g}" if s.tier == "uvm" else "")


class Judge:
    """Simulated iteration time of a plan in seconds (None when it does not fit in memory),
    cached by plan; counts the simulations it ran.  ``w`` is the workload as ``stack`` trains
    it (``RunInputs.workload``: its precisions already the stack's)."""

    def __init__(self, cluster, w, *, iterations=2, warmup=1, stack=None):
        from zionsim.dlrm.stack import resolve_stack

        self.cluster, self.w = cluster, w
        self.iterations, self.warmup, self.stack = iterations, warmup, resolve_stack(stack)
        self.cache: dict[tuple, float | None] = {}
        self.evaluations = 0
        self.work = (0, len(w.tables))  # (simpy events of the last simulation, tables)

    def __call__(self, plan: Plan) -> float | None:
        """The plan's iteration time (cached)."""
        if plan.shards not in self.cache:
            self.cache[plan.shards] = self._simulate(plan)
        return self.cache[plan.shards]

    def _simulate(self, plan: Plan) -> float | None:
        from zionsim.dlrm.sync import sync_spec
        from zionsim.sim.engine import simulate_trace
        from zionsim.sim.results import Analysis
        from zionsim.sim.run import lower_checked

        try:  # ``w`` is the workload as the stack trains it: the stack is not applied again
            sync, fused = sync_spec(base=self.w.sync), self.stack.fused_embedding
            trace, _ = lower_checked(self.cluster, self.w, plan, fused, sync, self.stack)
        except CapacityError:
            return None
        rec = simulate_trace(self.cluster, trace, iterations=self.iterations)
        self.evaluations += 1
        self.work = (rec.events, len(self.w.tables))
        return float(Analysis(rec, self.warmup).iteration_times().mean())


def evals_for_budget(budget_s: float, events: int, tables: int) -> int:
    """Evaluations that fit in ``budget_s`` seconds at the nominal cost of one simulation of
    ``events`` simpy events for a workload of ``tables`` tables (deterministic: no clock is
    read)."""
    per_eval = EVAL_S_PER_EVENT * events + EVAL_S_PER_TABLE * tables
    return max(1, int(budget_s / per_eval)) if per_eval > 0 else 1


def refine(
    cluster,
    w: WorkloadSpec,
    plan: Plan,
    *,
    seed: int = 0,
    max_evals: int | None = None,
    budget_s: float | None = None,
    iterations: int = 2,
    warmup: int = 1,
    stack=None,
    on_eval: Callable[[int, int, float], None] | None = None,
) -> RefineResult:
    """Local search from ``plan`` (module docstring): at most ``max_evals`` simulations, or as
    many as ``budget_s`` nominal seconds allow (the smaller when both are given; 100 when neither
    is).  ``on_eval(done, total, best_s)`` is called after each simulation (a progress bar)."""
    judge = Judge(cluster, w, iterations=iterations, warmup=warmup, stack=stack)
    start_s = judge(plan)
    if start_s is None:
        raise CapacityError("the starting plan does not fit in HBM", field="plan")
    limits = [n for n in (max_evals,) if n is not None]
    if budget_s is not None:
        limits.append(evals_for_budget(budget_s, *judge.work))
    total = min(limits) if limits else 100
    search = _Search(cluster, w, plan, seed)
    best, best_s, moves = plan, start_s, []
    proposals = rejected = 0
    if on_eval:
        on_eval(judge.evaluations, total, best_s)
    while judge.evaluations < total and proposals < 50 * total:
        proposals += 1
        cand, text = search.propose(best)
        if cand is None or cand.shards in judge.cache:
            continue
        before = judge.evaluations
        t = judge(cand)
        if t is None:
            rejected += 1
            continue
        if t < best_s * (1 - MIN_GAIN):
            best, best_s = cand, t
            search.accept(best)
            moves.append(f"{text}: {t * 1e3:.3f} ms")
        if on_eval and judge.evaluations > before:
            on_eval(judge.evaluations, total, best_s)
    best = replace(best, name=f"{plan.name}+refined" if best is not plan else plan.name)
    return RefineResult(
        plan, best, start_s, best_s, judge.evaluations, total, proposals, rejected, moves
    )


class _Search:
    """Move proposals (module docstring) around the current plan, steered by estimated loads."""

    def __init__(self, cluster, w: WorkloadSpec, plan: Plan, seed: int):
        self.ctx = context(cluster, w)
        self.w, self.n, self.g = w, self.ctx.n, self.ctx.g
        self.rng = np.random.default_rng(seed)
        self.cost_cache: dict[tuple, float] = {}
        self.accept(plan)

    # ------------------------------------------------------------------ loads
    def part_s(self, s: Shard) -> float:
        """Estimated seconds of one part of shard ``s`` (the greedy planner's estimate)."""
        key = (s.table, s.kind, len(s.ranks))
        if key not in self.cost_cache:
            opt = Option(s.table, s.kind, len(s.ranks))
            self.cost_cache[key] = estimate(self.ctx, self.w.tables[s.table], opt).part_s
        return self.cost_cache[key]

    def accept(self, plan: Plan) -> None:
        """Make ``plan`` the current one: per-rank loads that steer the moves, from its layout
        (seconds of embedding HBM traffic, forward + backward ≈ 3 passes over the rows, plus the
        pooled all-to-all bytes the rank sends and the indices it receives over its NIC share),
        and each table's estimated cost (the greedy planner's)."""
        ctx = self.ctx
        lay = layout(self.w, plan, self.n, self.g, self.w.zipf_alpha)
        remote = (self.n - self.g) / self.n
        send = 2 * lay.pooled_matrix.sum(axis=1) + lay.input_matrix.sum(axis=0)
        hbm = 3 * (lay.lookup_bytes + lay.state_bytes) / ctx.gpu.hbm_bw_Bps
        self.load = hbm + send * remote / ctx.nic_Bps
        self.table_s = np.zeros(len(plan.shards))
        for s in plan.shards:
            if s.tier != "ps":
                self.table_s[s.table] = self.part_s(s) * len(s.ranks)

    def heavy(self) -> int:
        """A rank among the most loaded eighth (random)."""
        k = max(1, self.n // 8)
        return int(self.rng.choice(np.argsort(-self.load, kind="stable")[:k]))

    def light(self, k: int, exclude=(), load=None) -> tuple[int, ...]:
        """``k`` ranks drawn from the ``2k`` least loaded, ``exclude`` left out, sorted."""
        load = self.load if load is None else load
        order = [int(r) for r in np.argsort(load, kind="stable") if int(r) not in exclude]
        pool = order[: max(2 * k, k + 1)]
        if len(pool) < k:
            return ()
        return tuple(sorted(int(r) for r in self.rng.choice(pool, size=k, replace=False)))

    # ------------------------------------------------------------------ proposals
    def propose(self, plan: Plan) -> tuple[Plan | None, str]:
        """A neighbour of ``plan`` and a line saying what changed (None when the drawn move
        does not apply)."""
        move = MOVES[int(self.rng.choice(len(MOVES), p=MOVE_WEIGHTS / MOVE_WEIGHTS.sum()))]
        shards = list(plan.shards)
        new = getattr(self, f"_{move}")(shards)
        if not new:
            return None, ""
        text = []
        for s in new:
            text.append(f"{move} {self.w.tables[s.table].name}: {describe(shards[s.table])} -> "
                        f"{describe(s)}")  # fmt: skip
            shards[s.table] = s
        return Plan(plan.name, tuple(shards)), "; ".join(text)

    def _movable(self, shards, kinds, rank=None) -> list[Shard]:
        return [
            s
            for s in shards
            if s.tier == "hbm" and s.kind in kinds and (rank is None or rank in s.ranks)
        ]

    def _reshard(self, shards) -> list[Shard]:
        """A table (half the time by estimated cost, else uniformly) to another sharding."""
        cand = self._movable(shards, ("TW", "CW", "TWCW", "RW", "TWRW", "DP"))
        if not cand:
            return []
        cost = np.array([self.table_s[s.table] for s in cand]) + 1e-12
        p = cost / cost.sum() if self.rng.random() < 0.5 else None
        s = cand[int(self.rng.choice(len(cand), p=p))]
        t = self.w.tables[s.table]
        opts = self._options(t)
        opts = [o for o in opts if (o.kind, o.parts) != (s.kind, len(s.ranks))]
        if not opts:
            return []
        o = opts[int(self.rng.integers(len(opts)))]
        ranks = self._place(o, self.load)
        return [Shard(s.table, o.kind, ranks, comm_precision=s.comm_precision)] if ranks else []

    def _options(self, t) -> list[Option]:
        n, g = self.n, self.g
        opts = [Option(t.index, "TW", 1)]
        opts += [Option(t.index, "CW", k) for k in (2, 4, 8) if k <= n and t.dim // k >= 4]
        if n > g > 1:
            opts.append(Option(t.index, "TWRW", g))
        if n > 1:
            opts.append(Option(t.index, "RW", n))
            if t.rows * row_bytes(t.dim, self.w.precision["embedding"]) <= DP_MAX_BYTES:
                opts.append(Option(t.index, "DP", n))
        return opts

    def _place(self, o: Option, load: np.ndarray) -> tuple[int, ...]:
        """Ranks for option ``o``: every rank (RW, DP), the lighter of two light nodes (TWRW), or
        ``parts`` light ranks."""
        if o.kind in ("RW", "DP"):
            return tuple(range(self.n))
        if o.kind == "TWRW":
            node_load = load.reshape(-1, self.g).max(axis=1)
            nodes = np.argsort(node_load, kind="stable")[:2]
            node = int(self.rng.choice(nodes))
            return tuple(range(node * self.g, (node + 1) * self.g))
        return self.light(o.parts, load=load)

    def _migrate(self, shards) -> list[Shard]:
        """One part of a table on a heavy rank moves to a light rank (a TWRW table: its node)."""
        src = self.heavy()
        cand = self._movable(shards, ("TW", "CW", "TWCW", "TWRW"), src)
        if not cand:
            return []
        s = cand[int(self.rng.integers(len(cand)))]
        if s.kind == "TWRW":
            ranks = self._place(Option(s.table, "TWRW", self.g), self.load)
            return [replace(s, ranks=ranks)] if ranks != s.ranks else []
        dst = self.light(1, exclude=s.ranks)
        if not dst:
            return []
        ranks = tuple(dst[0] if r == src else r for r in s.ranks)
        ranks = ranks if s.widths else tuple(sorted(ranks))
        if s.kind == "TWCW" and len({r // self.g for r in ranks}) != 1:
            return []
        return [replace(s, ranks=ranks)]

    def _swap(self, shards) -> list[Shard]:
        """A TW table on a heavy rank and one on a light rank trade places."""
        src = self.heavy()
        a = self._movable(shards, ("TW",), src)
        dst = self.light(1, exclude=(src,))
        b = self._movable(shards, ("TW",), dst[0]) if dst else []
        if not a or not b:
            return []
        x = a[int(self.rng.integers(len(a)))]
        y = b[int(self.rng.integers(len(b)))]
        return [replace(x, ranks=y.ranks), replace(y, ranks=x.ranks)]

    def _split(self, shards) -> list[Shard]:
        """A TW or CW table on a heavy rank into twice the slices (new ones on light ranks)."""
        cand = self._movable(shards, ("TW", "CW"), self.heavy())
        if not cand:
            return []
        s = cand[int(self.rng.integers(len(cand)))]
        k = int(self.rng.choice([2, 4])) * len(s.ranks)
        t = self.w.tables[s.table]
        if k > self.n or t.dim // k < 4:
            return []
        more = self.light(k - len(s.ranks), exclude=s.ranks)
        if not more:
            return []
        return [
            Shard(s.table, "CW", tuple(sorted(s.ranks + more)), comm_precision=s.comm_precision)
        ]

    def _merge(self, shards) -> list[Shard]:
        """A CW table keeps the lighter half of its slices (two slices: table-wise)."""
        cand = self._movable(shards, ("CW",))
        if not cand:
            return []
        s = cand[int(self.rng.integers(len(cand)))]
        keep = sorted(s.ranks, key=lambda r: (self.load[r], r))[: len(s.ranks) // 2]
        kind = "TW" if len(keep) == 1 else "CW"
        return [Shard(s.table, kind, tuple(sorted(keep)), comm_precision=s.comm_precision)]

    def _columns(self, shards) -> list[Shard]:
        """Shift a quarter of the heaviest slice's columns (at least 4) to the lightest slice of
        a CW table (slices stay at least 4 columns wide)."""
        cand = self._movable(shards, ("CW", "TWCW"))
        if not cand:
            return []
        s = cand[int(self.rng.integers(len(cand)))]
        widths = shard_widths(s, self.w.tables[s.table].dim)
        loads = [self.load[r] for r in s.ranks]
        hi, lo = int(np.argmax(loads)), int(np.argmin(loads))
        step = max(4, widths[hi] // 4)
        if hi == lo or widths[hi] - step < 4:
            return []
        widths[hi] -= step
        widths[lo] += step
        even = widths == column_splits(sum(widths), len(widths))
        return [replace(s, widths=None if even else tuple(widths))]
