"""The planner's placement keeps a heap of GPU loads for parts on one GPU
(``planner._LeastLoaded``) instead of scanning every GPU per part: the same plans as the scan
(``planner._least_loaded``), whatever the ties, the room left, the UVM parts and loads that
are not numbers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from zionsim.dlrm import planner
from zionsim.dlrm.plan_cost import Cost, Option, context
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.run import _build


def _scan_only(monkeypatch):
    monkeypatch.setattr(planner._LeastLoaded, "pick", lambda self, need: None)


@pytest.mark.parametrize(
    "options",
    [
        {"workload": "neo_model_a", "nodes": 1},  # thousands of alike tables: ties everywhere
        {"workload": "neo_model_i", "nodes": 1, "batch_per_gpu": 256},  # UVM parts
        {"workload": "mlperf_dlrm", "nodes": 4},  # TWRW, RW, CW and DP among the candidates
        {"workload": "tiny", "nodes": 2},
    ],
)
def test_heap_places_as_the_scan(options, monkeypatch):
    inputs = resolve_inputs(options, "test")
    cluster, w = _build(inputs), inputs.workload
    monkeypatch.setattr(planner, "KEEP_CANDIDATES", 0)
    fast = planner.Planner()._compared(cluster, w)
    _scan_only(monkeypatch)
    assert planner.Planner()._compared(cluster, w) == fast


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
    parts = _random_parts(rng, ctx, nan=seed % 4 == 1)
    fast = planner.place(ctx, parts, 1.0)
    _scan_only(monkeypatch)
    assert planner.place(ctx, parts, 1.0) == fast
