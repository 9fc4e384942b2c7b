"""Issue 25 (h25g): the kernels of HugeCTR's embedding-collection step that ``gpu_per_step``
stood in for, lowered as memory ops: the main stream's copies between iterations
(``input_copy``, ``ddl_cache``), the table lookup's row addresses (``emb_row_ptrs``) and the
network buffer copies after / before the exchanges (``emb_network_fwd`` / ``emb_network_bwd``);
none of them without the data distributor or under another stack."""

from __future__ import annotations

import pytest

from tests.dlrm.test_data_distributor import BASE
from zionsim.dlrm.lower_exchange import LABEL_BYTES, ROW_POINTER_BYTES
from zionsim.sim.run import run_point

NEW = ("input_copy", "ddl_cache", "emb_row_ptrs", "emb_network_fwd", "emb_network_bwd")
B = 256  # BASE's samples per GPU


def _ops(result) -> dict:
    return {op.name: op for op in result.trace.ops if op.rank == 0}


def test_step_copies_run_in_hugectrs_order_before_the_lookup():
    """input_copy then ddl_cache on the main stream, then the row addresses on the embedding
    stream, which the pooling waits for."""
    ops = _ops(run_point(BASE))
    copy, cache, ptrs = ops["input_copy"], ops["ddl_cache"], ops["emb_row_ptrs"]
    assert copy.stream == cache.stream == "compute"
    assert cache.deps == (copy.id,)
    assert ptrs.stream == "embedding" and cache.id in ptrs.deps
    assert ops["emb_fwd"].deps == (ptrs.id,)
    assert ops["step_gpu_work"].id in copy.deps


def test_step_copy_bytes_follow_the_batch_and_the_keys():
    """input_copy: dense features in FP16 plus a float label, read and written per sample;
    ddl_cache: at least every served key read and written at the 4-byte key width; the row
    addresses: key plus pointer per served key."""
    res = run_point(BASE)
    ops = _ops(res)
    assert ops["input_copy"].args["nbytes"] == pytest.approx(2 * B * (13 * 2 + LABEL_BYTES))
    assert ops["input_copy"].args["launches"] == 2
    lookups = ops["emb_fwd"].args["lookups"]
    assert ops["emb_row_ptrs"].args["nbytes"] == pytest.approx(lookups * (4 + ROW_POINTER_BYTES))
    assert ops["ddl_cache"].args["nbytes"] >= 2 * 4 * lookups
    doubled = _ops(run_point({**BASE, "batch_per_gpu": 2 * B}))
    assert doubled["input_copy"].args["nbytes"] == pytest.approx(
        2 * ops["input_copy"].args["nbytes"]
    )
    assert doubled["ddl_cache"].args["nbytes"] == pytest.approx(2 * ops["ddl_cache"].args["nbytes"])


def test_network_copies_sit_between_the_dense_net_and_the_exchanges():
    """network_forward after the pooled exchange, before the interaction; network_backward after
    the top MLP's backward, before the gradient exchange; both the local samples' pooled vectors
    of the model-parallel tables in FP16, read and written."""
    ops = _ops(run_point(BASE))
    fwd, bwd = ops["emb_network_fwd"], ops["emb_network_bwd"]
    assert ops["pooled_a2a"].id in fwd.deps
    first_inter = min(op.id for name, op in ops.items() if name.startswith("interaction_fwd"))
    assert fwd.id < first_inter
    assert ops["grad_a2a"].deps == (bwd.id,)
    assert fwd.args["nbytes"] == bwd.args["nbytes"] > 0
    assert fwd.args["nbytes"] <= 2 * B * 26 * 128 * 2


def test_step_copies_lengthen_the_step_by_their_memory_time():
    """The ops cost time (the step is longer with them than with the distributor's stand-in
    removed), and none exists without the distributor or under TorchRec."""
    with_ops = run_point(BASE)
    ev = with_ops.events[with_ops.events["rank"] == 0]
    for name in NEW:
        assert ev[ev["name"] == name]["duration_s"].min() > 0
    for opts in ({**BASE, "stack.data_distributor": False}, {**BASE, "stack": "torchrec"}):
        assert not set(NEW) & set(_ops(run_point(opts)))


def test_network_copies_read_a_partial_per_holder_or_per_node():
    """A row-wise table on 8 GPUs sends 8 partials of a sample; a TWRW table or a hierarchical
    shard one per node it spans; a table-wise shard one."""
    from zionsim.dlrm.lower_exchange import _partials
    from zionsim.dlrm.plan import Shard

    assert _partials(Shard(0, "TW", (3,)), 8, 8) == 1
    assert _partials(Shard(0, "RW", tuple(range(8))), 8, 8) == 8
    assert _partials(Shard(0, "TWRW", tuple(range(8, 32))), 8, 64) == 3
