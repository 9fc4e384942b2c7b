"""The engine's shortcuts change no number (issue 29): an op's end that no op waits for is
marked, not fired as a simpy event, and counted as if it had been (``simpy_events``, which
``studies/refine.py`` turns a time budget into evaluations with); and what the engine keeps
with a lowered trace's ops (op seconds, rank templates) gives what building it anew gives."""

from __future__ import annotations

import pytest

from zionsim.base import kept
from zionsim.dlrm import estimate
from zionsim.io.files import to_json
from zionsim.sim import engine
from zionsim.sim.inputs import resolve_inputs
from zionsim.sim.run import simulate_inputs

CASES = [
    {"workload": "mlperf_dlrm", "nodes": 2},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "topology": "dgx_h100", "stack": "hugectr"},
    {"workload": "mlperf_dlrm", "nodes": 2, "sync": "shadow-ma", "iterations": 4},
    {"workload": "mlperf_dlrm_dcnv2", "nodes": 2, "sync": "foreground-ma", "sync_every": 2},
    {"workload": "neo_model_i", "nodes": 1, "batch_per_gpu": 256},  # UVM: host transfers
]


@pytest.mark.parametrize("options", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_elided_events_and_kept_derivations_change_nothing(options, monkeypatch):
    params = {"topology": "zionex", "iterations": 3, **options}
    fast = [simulate_inputs(resolve_inputs(params)) for _ in range(2)]  # the second reuses
    monkeypatch.setattr(engine, "ELIDE", False)
    monkeypatch.setattr(kept, "_KEPT", [])
    monkeypatch.setattr(kept, "KEEP_OPS", 0)
    monkeypatch.setattr(estimate, "REUSE", False)  # op seconds priced afresh
    slow = simulate_inputs(resolve_inputs(params))
    for run in fast:
        assert run.timing["simpy_events"] == slow.timing["simpy_events"]
        assert to_json(run.summary) == to_json(slow.summary)
        assert run.events.equals(slow.events)


def test_an_op_end_nobody_waits_for_is_not_scheduled(monkeypatch):
    """Most ends are elided (the point of it), and the count still includes them."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.sim.run import trace_of

    inputs = resolve_inputs({"topology": "zionex", "workload": "mlperf_dlrm", "nodes": 2})
    trace, _, cluster = trace_of(inputs, Cluster.build(inputs.cluster))
    made, base = [], engine.Environment

    class Recorded(base):
        def __init__(self):
            super().__init__()
            made.append(self)

    monkeypatch.setattr(engine, "Environment", Recorded)
    rec = engine.simulate_trace(cluster, trace, iterations=2)
    env = made[-1]
    assert env.elided > 0
    assert rec.events == env.events_scheduled > env.elided
