"""Issue 25: HugeCTR's data distributor (counts all-to-all, host round trip, keys all-to-all of
the next batch between the forward and gradient exchanges), present only where the stack runs
it, and the RoCE preset of Juniper's MLPerf cluster."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dlrm.test_hugectr_pipeline import BASE as PIPELINE
from zionsim.base.errors import InputError
from zionsim.dlrm.stack import load_stack, stack_from_dict
from zionsim.hardware.topology import load_topology
from zionsim.measure.validate import load_cases
from zionsim.sim.run import run_point

BASE = {**PIPELINE, "iterations": 2}  # the 4-GPU HugeCTR DCNv2 run, two iterations
DDL = ("ddl_kernels", "ddl_counts", "ddl_host_sync", "ddl_keys")


def _rank0(result):
    return [op for op in result.trace.ops if op.rank == 0]


def _names(result) -> list[str]:
    return [op.name for op in _rank0(result)]


def test_hugectr_distributes_the_next_batch_between_the_exchanges():
    """DCNv2 under hugectr: no input all-to-all at the iteration's start; the distributor's
    three ops on the a2a stream after the forward exchange and before the gradient one, the
    keys after the host round trip after the counts, and the lookup waits for none of them."""
    res = run_point(BASE)
    ops = _rank0(res)
    names = [op.name for op in ops]
    assert "input_a2a" not in names
    a2a = [op.name for op in ops if op.stream == "a2a"]
    assert a2a.index("pooled_a2a") < a2a.index("ddl_counts")
    assert a2a.index("ddl_counts") < a2a.index("ddl_host_sync") < a2a.index("ddl_keys")
    assert a2a.index("ddl_keys") < a2a.index("grad_a2a")
    by_name = {op.name: op for op in ops}
    assert by_name["ddl_host_sync"].deps == (by_name["ddl_counts"].id,)
    assert by_name["ddl_keys"].deps == (by_name["ddl_host_sync"].id,)
    assert not {by_name[n].id for n in DDL} & set(by_name["emb_fwd"].deps)
    kernels = by_name["ddl_kernels"]  # its own GPU work, before the counts leave
    assert kernels.stream == "embedding" and kernels.args["nbytes"] > 0
    assert by_name["ddl_counts"].deps == (kernels.id,)
    sync = res.events[(res.events["rank"] == 0) & (res.events["name"] == "ddl_host_sync")]
    assert sync["duration_s"].to_numpy() == pytest.approx(5e-6)


def test_distributor_carries_the_index_bytes_at_the_stacks_key_width():
    """Counts plus keys are the input all-to-all's bytes at HugeCTR's key width (4 of the
    workload's 8 bytes): one count per local sample and served table part, the rest keys."""
    with_ddl = run_point(BASE)
    without = run_point({**BASE, "stack.data_distributor": False})
    colls = {op.name: with_ddl.trace.collectives[op.args["coll"]] for op in _rank0(with_ddl)
             if op.name in ("ddl_counts", "ddl_keys")}  # fmt: skip
    inp = next(without.trace.collectives[op.args["coll"]] for op in _rank0(without)
               if op.name == "input_a2a")  # fmt: skip
    moved = colls["ddl_counts"].matrix.sum() + colls["ddl_keys"].matrix.sum()
    assert moved == pytest.approx(inp.matrix.sum() * 4 / 8)
    per_owner = colls["ddl_counts"].matrix.col
    assert per_owner.max() > 0
    # a count is key_bytes wide, one per local sample and table part served
    assert np.all(np.mod(per_owner, 256 * 4) == 0)


def test_no_distributor_for_hybrid_embedding_or_other_stacks():
    """HugeCTR's DLRM v1 (hybrid embedding, ``data_distributor: false``) and TorchRec keep the
    input all-to-all at the iteration's start and have no distributor ops."""
    assert load_stack("hugectr").data_distributor
    assert not load_stack("torchrec").data_distributor
    for opts in (
        {**BASE, "stack.data_distributor": False},
        {**BASE, "workload": "mlperf_dlrm", "stack.data_distributor": False},
        {**BASE, "stack": "torchrec"},
    ):
        names = _names(run_point(opts))
        assert "input_a2a" in names and not set(DDL) & set(names)
    # the DLRM v1 runs use HugeCTR's v1 build, a stack of its own without the distributor
    assert not load_stack("hugectr_dlrm_v1").data_distributor
    v1 = [c for c in load_cases() if c.family == "end_to_end"
          and c.params["options"].get("workload") == "mlperf_dlrm"
          and c.params["options"].get("stack", "").startswith("hugectr")]  # fmt: skip
    assert v1 and all(c.params["options"]["stack"] == "hugectr_dlrm_v1" for c in v1)


def test_distributor_spans_every_gpu_and_its_peers_grow_with_nodes():
    """Flat over the job (no hierarchical variant): the all-to-alls' members are all ranks, so
    at a fixed global batch each GPU sends fewer bytes to more peers as nodes are added."""
    sent, peers = [], []
    for nodes in (1, 2):
        opts = {**BASE, "nodes": nodes, "batch_per_gpu": 512 // nodes}
        res = run_point(opts)
        keys = next(res.trace.collectives[op.args["coll"]] for op in _rank0(res)
                    if op.name == "ddl_keys")  # fmt: skip
        assert len(keys.ranks) == 4 * nodes
        sent.append(keys.matrix.sum(1).max())
        peers.append(len(keys.ranks) - 1)
    assert sent[1] < sent[0] and peers[1] > peers[0]


@pytest.mark.parametrize(
    "value, field",
    [
        ("yes", "data_distributor"),
        ({"key_bytes": 3}, "key_bytes"),
        ({"keybytes": 4}, "keybytes"),
        ({"host_sync": 5}, "host_sync"),
    ],
)
def test_bad_distributor_settings_name_the_field(value, field):
    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "x", "data_distributor": value}, "x.yaml")
    assert field in str(err.value)


def test_distributor_settings_parse():
    s = stack_from_dict({"name": "x", "data_distributor": {"key_bytes": 8, "host_sync": "3 us"}})
    assert (s.data_distributor, s.data_distributor_key_bytes) == (True, 8)
    assert s.data_distributor_host_sync_s == pytest.approx(3e-6)
    assert stack_from_dict({"name": "x", "data_distributor": True}).data_distributor
    off = stack_from_dict({"name": "x", "data_distributor": False})
    assert not off.data_distributor and "data_distributor" not in off.to_dict()


def test_juniper_roce_preset_is_its_own_rail_aligned_ethernet_fabric():
    """Juniper's MLPerf A100 cluster: 8 DGX A100, a 200 GbE RoCEv2 NIC per GPU, rail-aligned,
    1:1; RoCEv2 headers on the InfiniBand efficiency; the RoCE case runs on it."""
    spec = load_topology("juniper_a100_roce")
    so = spec.scale_out
    assert (spec.nodes, spec.gpus_per_node) == (8, 8)
    assert (so.kind, so.nics_per_node, so.nic_bw_Bps) == ("roce", 8, 25e9)
    assert so.rail_optimized and so.oversubscription == 1.0
    assert "infiniband" not in spec.links
    ib = load_topology("dgx_a100", nodes=1).links["infiniband"]
    assert spec.links["roce"].efficiency == pytest.approx(ib.efficiency * 0.980 / 0.994, abs=1e-3)
    case = next(c for c in load_cases() if c.id == "a100x64_dcnv2_hugectr_v40_roce")
    assert case.params["options"]["topology"] == "juniper_a100_roce"
