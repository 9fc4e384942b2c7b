"""The planner's shortcuts give the plans of the long way: the built-in stages enumerate,
price and choose once per table shape (``planner._chosen_by_shape``) instead of once per
table; placement keeps a heap of GPU loads for parts on one GPU (``planner._LeastLoaded``)
instead of scanning every GPU per part (``planner._least_loaded``), whatever the ties, the room
left, the UVM parts and loads that are not numbers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from zionsim.dlrm import planner
from zionsim.dlrm.plan_cost import Cost, Option, context
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.run import _build

CASES = [
    {"workload": "neo_model_a", "nodes": 1},  # thousands of alike tables: ties everywhere
    {"workload": "neo_model_i", "nodes": 1, "batch_per_gpu": 256},  # UVM parts
    {"workload": "mlperf_dlrm", "nodes": 4},  # TWRW, RW, CW and DP among the candidates
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "topology": "dgx_h100"},
    {"workload": "tiny", "nodes": 2},
]


def _table_by_table(monkeypatch):
    """The long way for stages 1-3: a planner equal to the built-in one in all but identity."""
    monkeypatch.setattr(planner, "_BUILT_IN", None)


def _assert_same_plans(options, monkeypatch, long_way) -> None:
    """The planner's candidates for ``options``, then again after ``long_way(monkeypatch)``
    has taken the path the fast one must equal: the same."""
    inputs = resolve_inputs(options, "test")
    cluster, w = _build(inputs), inputs.workload
    monkeypatch.setattr(planner, "KEEP_CANDIDATES", 0)
    fast = planner.Planner()._compared(cluster, w)
    long_way(monkeypatch)
    assert planner.Planner()._compared(cluster, w) == fast


@pytest.mark.parametrize("options", CASES)
def test_choosing_per_shape_is_choosing_per_table(options, monkeypatch):
    _assert_same_plans(options, monkeypatch, _table_by_table)


def test_costed_by_shape_is_costed_per_table():
    """Every table's options and costs, looked up, are those enumerated and priced for it."""
    inputs = resolve_inputs({"workload": "mlperf_dlrm", "nodes": 2}, "test")
    cluster, w = _build(inputs), inputs.workload
    ctx, costed, _ = planner._chosen_by_shape(planner.context(cluster, w), w)
    for t in reversed(w.tables):
        want = [(o, planner.estimate(ctx, t, o)) for o in planner.enumerate_options(ctx, t)]
        assert costed[t.index] == want


def _scan_only(monkeypatch):
    monkeypatch.setattr(planner._LeastLoaded, "pick", lambda self, need: None)


def test_the_heap_is_used_for_many_tables(monkeypatch):
    """Neo's model A (4,096 tables) is placed from the heap; MLPerf DLRM (26) by the scan."""
    picked = []
    pick = planner._LeastLoaded.pick

    def counted(self, need):
        picked.append(self.usable)
        return pick(self, need)

    monkeypatch.setattr(planner._LeastLoaded, "pick", counted)
    monkeypatch.setattr(planner, "KEEP_CANDIDATES", 0)
    for workload, heap in (("neo_model_a", True), ("mlperf_dlrm", False)):
        inputs = resolve_inputs({"workload": workload, "nodes": 2}, "test")
        picked.clear()
        planner.Planner()._compared(_build(inputs), inputs.workload)
        assert picked and set(picked) == {heap}


@pytest.mark.parametrize("options", CASES)
def test_heap_places_as_the_scan(options, monkeypatch):
    monkeypatch.setattr(planner._LeastLoaded, "MIN_PARTS", 0)  # the heap for a few tables too
    _assert_same_plans(options, monkeypatch, _scan_only)


def _random_parts(rng, ctx, nan: bool) -> list[tuple[Option, Cost]]:
    kinds = ["TW"] * 30 + ["CW", "CW", "TWRW", "RW", "DP"]
    parts = []
    for i in range(len(ctx.w.tables)):
        kind = kinds[rng.integers(len(kinds))]
        k = {"TW": 1, "CW": 2, "RW": ctx.n, "DP": ctx.n, "TWRW": ctx.g}[kind]
        seconds = float(rng.integers(0, 4))  # few values: many equal loads
        if nan and rng.random() < 0.01:
            seconds = float("nan")
        # bytes of 40 per GPU: GPUs filled exactly, then passed over, then UVM
        part_bytes = 1.0 if k == ctx.n else float(rng.integers(1, 5))
        parts.append((Option(i, kind, k), Cost(seconds, part_bytes, k)))
    return parts


@pytest.mark.parametrize("seed", range(12))
def test_heap_places_random_parts_as_the_scan(seed, monkeypatch):
    """Random parts on 2 nodes, more than their HBM holds (so picks pass over full GPUs and
    parts go to UVM), in some cases seconds that are not a number; at most 1-19 GPUs passed
    over per pick."""
    rng = np.random.default_rng(seed)
    inputs = resolve_inputs({"workload": "tiny", "nodes": 2}, "test")
    ctx = context(_build(inputs), inputs.workload)
    w = inputs.workload
    tables = tuple(replace(t, index=i) for i, t in enumerate(w.tables * 320))[:320]
    ctx = replace(ctx, w=replace(w, tables=tables), hbm_budget=40.0)
    monkeypatch.setattr(planner._LeastLoaded, "MAX_SKIPPED", int(rng.integers(1, 20)))
    monkeypatch.setattr(planner._LeastLoaded, "MIN_PARTS", 0)
    parts = _random_parts(rng, ctx, nan=seed % 4 == 1)
    fast = planner.place(ctx, parts, 1.0)
    _scan_only(monkeypatch)
    assert planner.place(ctx, parts, 1.0) == fast
