"""Embedding tables on CPU parameter servers (``ps`` tier): bytes, placement, links, errors."""

import numpy as np
import pytest
import yaml

from tests.conftest import TINY
from zionsim.base.errors import CapacityError, InputError
from zionsim.dlrm.plan import Plan, Shard, memory_by_rank
from zionsim.dlrm.plan_file import plan_to_dict
from zionsim.dlrm.planner import PLANNERS
from zionsim.dlrm.sharding import layout
from zionsim.dlrm.workload import load_workload, row_bytes
from zionsim.hardware.cluster import Cluster
from zionsim.io.files import read_plan
from zionsim.sim.run import simulate_run

N, G = 4, 2  # the tiny world: 2 nodes × 2 GPUs (16 service hosts on its front-end network)


def _ps_plan(w, servers):
    return Plan(
        "ps", tuple(Shard(t.index, "TW", (), "ps", 0.0, servers[t.index]) for t in w.tables)
    )


def test_ps_layout_bytes_follow_the_batch():
    """Each rank sends B·(L+1) indices and gets B·d pooled values per table; no HBM rows."""
    w = load_workload("tiny")
    lay = layout(w, _ps_plan(w, [0, 1, 2, 3]), N, G)
    B = w.batch_per_gpu
    for t in w.tables:
        k = t.index
        assert np.allclose(lay.ps_index[:, k], B * (t.pooling + 1) * w.index_bytes)
        assert np.allclose(lay.ps_gather[:, k], B * t.pooling * row_bytes(t.dim, "fp32"))
        assert np.allclose(lay.ps_pooled[:, k], B * t.dim * 4)
        assert lay.ps_dram_bytes[k] == t.rows * t.dim * 4  # sgd: no optimizer state
    assert lay.hbm_bytes.sum() == 0 and not lay.pooled_matrix.any() and lay.dp_params == 0


def test_ps_tables_take_no_hbm():
    """Tables on parameter servers add nothing to a GPU's embedding memory."""
    w = load_workload("tiny")
    mem = memory_by_rank(w, _ps_plan(w, [0, 0, 1, 1]), N, G)
    assert mem["embedding"].sum() == 0 and mem["ps_dram"].sum() > 0


def test_network_carries_the_ps_bytes():
    """The flows of parameter-server transfers carry exactly the bytes the layout implies."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    plan = _ps_plan(w, [0, 1, 2, 3])
    r = simulate_run(c, w, plan, iterations=2, warmup=1)
    ev = r.events[r.events["category"] == "parameter_server"]
    lay = layout(w, plan, N, G)
    # lookup: indices out, rows gathered, pooled back; update: gradients in, rows read + written
    per_it = (lay.ps_index + lay.ps_gather + 2 * lay.ps_pooled + 2 * lay.ps_update).sum()
    assert ev[ev["stream"] == "network"]["bytes"].sum() == pytest.approx(2 * per_it)
    assert r.summary["busy_s"]["parameter_server"] > 0


def test_servers_are_reached_over_the_front_end_not_the_training_fabric():
    """Parameter servers are service hosts: their bytes cross the front-end links and the
    servers' DRAM, never the RoCE back-end, on one node or two."""
    w = load_workload("tiny")
    for c in (Cluster.load(TINY), Cluster.load(TINY, nodes=1)):
        r = simulate_run(c, w, _ps_plan(w, [0, 1, 0, 1]), iterations=2, warmup=1)
        lay = layout(w, _ps_plan(w, [0, 1, 0, 1]), c.spec.gpus, G)
        into_servers = r.links[r.links["src"] == "fe"]["bytes"].sum()
        out_of_servers = r.links[r.links["dst"] == "fe"]["bytes"].sum()
        assert into_servers == out_of_servers  # the switch conserves bytes
        assert into_servers >= (lay.ps_index + lay.ps_pooled).sum() * (1 - 1e-9)
    assert "roce" not in set(r.links[r.links["bytes"] > 0]["kind"])  # one node: no fabric use


def test_faster_server_dram_never_slows_ps_lookups():
    """Doubling the servers' DRAM bandwidth never lengthens an iteration they serve."""
    w = load_workload("tiny")
    slow = Cluster.load(TINY, overrides=["front_end.server.dram_bw=1GB/s"])
    fast = Cluster.load(TINY, overrides=["front_end.server.dram_bw=2GB/s"])
    plan = _ps_plan(w, [0, 1, 2, 3])
    t_slow = simulate_run(slow, w, plan, iterations=2).summary["iteration_time_s"]
    t_fast = simulate_run(fast, w, plan, iterations=2).summary["iteration_time_s"]
    assert t_fast <= t_slow


def test_ps_planner_spreads_tables_over_service_hosts():
    """The ``ps`` planner places every table on a server and uses every server it can."""
    c = Cluster.load(TINY)
    w = load_workload("tiny")
    plan = PLANNERS["ps"](c, w)
    assert {s.tier for s in plan.shards} == {"ps"}
    assert sorted(s.server for s in plan.shards) == [0, 1, 2, 3]


def test_ps_plan_file_round_trips(tmp_path):
    """A plan with ``tier: ps`` and ``server: K`` survives a write and a read."""
    w = load_workload("tiny")
    plan = _ps_plan(w, [3, 2, 1, 0])
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_dict(plan, w)))
    assert read_plan(path, w, N, G, servers=4).shards == plan.shards


def test_unknown_server_is_a_clear_error(tmp_path):
    """A server beyond the cluster's service hosts names the field and the range."""
    w = load_workload("tiny")
    d = plan_to_dict(_ps_plan(w, [0, 1, 2, 9]), w)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(InputError, match=r"tables\[3\]\.server.*0\.\.3"):
        read_plan(path, w, N, G, servers=4)


def test_ps_tables_must_fit_server_dram():
    """Tables larger than a parameter server's DRAM are a capacity error naming the server."""
    c = Cluster.load(TINY, overrides=["front_end.server.dram=100KiB"])
    w = load_workload("tiny")
    with pytest.raises(CapacityError, match="parameter server 0 needs"):
        simulate_run(c, w, _ps_plan(w, [0, 0, 0, 0]), iterations=1, warmup=0)


def test_ps_trace_round_trips_and_rejects_bad_args():
    """A trace with parameter-server ops survives the file schema; a short byte list does not."""
    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict

    w = load_workload("tiny")
    trace = lower(w, _ps_plan(w, [0, 1, 2, 3]), N, gpus_per_node=G)
    data = trace_to_dict(trace)
    again = trace_from_dict(data)
    assert [o.args for o in again.ops] == [o.args for o in trace.ops]
    op = next(o for o in data["ops"] if o["args"].get("direction") == "ps_lookup")
    op["args"]["pooled"] = op["args"]["pooled"][:-1]
    with pytest.raises(InputError, match=r"args\.pooled"):
        trace_from_dict(data)
