"""Software-stack profiles (zionsim/dlrm/stack.py, stacks/*.yaml) and the Neo presets' size."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.conftest import TINY
from zionsim.base.config import builtin_names
from zionsim.base.errors import InputError
from zionsim.dlrm.stack import BARE, load_stack, stack_from_dict
from zionsim.dlrm.workload import load_workload
from zionsim.hardware.cluster import Cluster
from zionsim.sim.run import run_point, simulate_run

STACKS = Path(__file__).resolve().parents[2] / "stacks"


@pytest.mark.parametrize(
    ("name", "params", "mflops"),
    [("neo_model_a", 793e9, 638), ("neo_model_i", 332e9, 60), ("neo_model_f", 12e12, 5)],
)
def test_neo_presets_match_the_paper(name, params, mflops):
    """Neo Table 3: parameters and MFLOPs/sample within 5 %."""
    w = load_workload(name)
    assert w.embedding_params + w.dense_params == pytest.approx(params, rel=0.05)
    assert w.flops_per_sample / 1e6 == pytest.approx(mflops, rel=0.05)
    assert w.top_input_width == w.bottom_mlp[-1]  # no 389k-wide layer


def test_every_stack_loads_and_cites_every_number():
    """Each built-in stack loads, and every line with a number names its source in brackets."""
    names = builtin_names("stacks")
    assert {"torchrec", "hugectr", "nvidia_pytorch_dlrm", "tensorflow_sok"} <= set(names)
    for name in names:
        load_stack(name)
        text = (STACKS / f"{name}.yaml").read_text()
        refs = set(re.findall(r"^  (\w+):", text.split("references:")[1], re.M))
        top = None
        for line in text.splitlines():
            if re.match(r"^\w", line):
                top = line.split(":")[0]
            value = line.split("#")[0].split(":", 1)[-1]
            if top in ("name", "description", "references") or not re.search(r"\d", value):
                continue
            cited = set(re.findall(r"\[(\w+)", line))
            assert cited and cited <= refs | {"assumption", "fitted"}, f"{name}: {line}"


def test_bad_stack_field_is_named():
    """An unknown field or precision is refused naming the field."""
    with pytest.raises(InputError, match="kernel_lunch"):
        stack_from_dict({"name": "x", "kernel_lunch": "2 us"})
    with pytest.raises(InputError, match="precision.dense"):
        stack_from_dict({"name": "x", "precision": {"dense": "fp64"}})


def _run(stack, workload="tiny"):
    cluster = Cluster.load(TINY) if workload == "tiny" else Cluster.load("zionex", nodes=1)
    return simulate_run(cluster, load_workload(workload), iterations=2, stack=stack)


def test_serial_host_work_adds_its_time_to_a_bare_run():
    """Host work of a stack whose steps synchronise adds exactly its time to the iteration."""
    bare = _run(BARE).summary["iteration_time_s"]
    host = {"per_step": "1 ms", "overlap": False}
    slow = _run(stack_from_dict({"name": "s", "host": host}))
    assert slow.summary["iteration_time_s"] == pytest.approx(bare + 1e-3, rel=1e-9)
    assert slow.summary["breakdown_s"]["framework"] == pytest.approx(1e-3)


def test_overlapped_host_work_costs_only_what_exceeds_the_gpu():
    """A host that runs ahead hides behind a longer GPU step, and sets the pace when longer."""
    bare = _run(BARE).summary["iteration_time_s"]
    short = _run(stack_from_dict({"name": "s", "host": {"per_step": f"{bare / 4} s"}}))
    assert short.summary["iteration_time_s"] == pytest.approx(bare, rel=1e-9)
    long = _run(stack_from_dict({"name": "s", "host": {"per_step": f"{3 * bare} s"}}))
    assert long.summary["iteration_time_s"] == pytest.approx(3 * bare, rel=0.05)
    # the host's 3 x bare less the bare GPU step: exactly 2 x bare, up to float rounding (a
    # strict ">" passed or failed on the last bit of the GPU step's time)
    assert long.summary["breakdown_s"]["framework"] == pytest.approx(2 * bare, rel=1e-9)


def test_eager_dispatch_and_per_sample_work_scale_as_stated():
    """Per-kernel dispatch and per-sample host work never speed a run up, and a host-bound step
    grows with the batch by the per-sample time."""
    w = load_workload("tiny")
    c = Cluster.load(TINY)
    host = {"per_step": "5 ms", "per_sample": "1 us", "dispatch": "10 us"}
    s = stack_from_dict({"name": "s", "host": host})
    t = [
        simulate_run(c, dataclasses.replace(w, batch_per_gpu=b), iterations=3, stack=s)
        for b in (64, 128)
    ]
    step = [r.summary["iteration_time_s"] for r in t]
    assert step[1] - step[0] == pytest.approx(64e-6, rel=1e-6)  # host-bound: 64 more samples
    assert step[0] > 5e-3 and t[0].summary["breakdown_s"]["framework"] > 5e-3


def test_step_overhead_is_refused_with_its_replacement():
    """The old serial ``step_overhead`` field names what replaced it."""
    with pytest.raises(InputError, match="host.per_step"):
        stack_from_dict({"name": "s", "step_overhead": "1 ms"})


def test_more_kernels_and_interference_never_speed_up():
    """Extra kernels per layer, launch cost and compute slowdown each cost time, never save it."""
    base = _run(BARE, "mlperf_dlrm").summary["iteration_time_s"]
    for fields in (
        {"mlp_kernels": {"forward": 3, "backward": 5}},
        {"kernel_launch": "20 us"},
        {"dense_optimizer_kernels_per_tensor": 4},
        {"interference": {"compute_slowdown": 0.5, "comm_slowdown": 0.5}},
    ):
        t = _run(stack_from_dict({"name": "s", **fields}), "mlperf_dlrm").summary[
            "iteration_time_s"
        ]
        assert t > base, fields


def test_stack_precision_replaces_the_workloads():
    """hugectr trains the MLPs in FP16: the run's GEMMs are FP16 and the summary names it."""
    r = run_point({"topology": TINY, "workload": "tiny", "stack": "hugectr", "iterations": 2})
    assert r.summary["stack"] == "hugectr"
    dtypes = {o.args.get("dtype") for o in r.trace.ops if o.kind == "gemm"}
    assert dtypes == {"fp16"}


def test_summary_reports_model_size():
    """summary.json carries params and MFLOPs/sample of the workload."""
    r = run_point({"topology": TINY, "workload": "tiny", "iterations": 2})
    w = load_workload("tiny")
    assert r.summary["model"]["params"] == w.embedding_params + w.dense_params
    assert r.summary["model"]["mflops_per_sample"] == pytest.approx(w.flops_per_sample / 1e6)


def test_communication_follows_dense_only_under_mixed_precision():
    """``communication: dense``: the exchange is cast to the dense 16-bit type under AMP (DLE's
    PyTorch DLRM), and stays at the workload's precision in TF32/FP32 training."""
    from zionsim.dlrm.stack import apply_stack
    from zionsim.dlrm.workload import with_precision

    stack = stack_from_dict({"name": "s", "precision": {"communication": "dense"}})
    w = load_workload("mlperf_dlrm")
    amp = apply_stack(with_precision(w, {"dense": "fp16"}), stack)
    tf32 = apply_stack(with_precision(w, {"dense": "tf32"}), stack)
    assert amp.precision["communication"] == "fp16"
    assert tf32.precision["communication"] == w.precision["communication"] == "fp32"
    with pytest.raises(InputError, match="communication"):
        stack_from_dict({"name": "s", "precision": {"communication": "fp8"}})


def test_embedding_stream_overlaps_but_never_runs_two_kernels_at_once():
    """``embedding_stream``: lookups on their own stream hide communication (never slower), and a
    GPU's two compute streams take turns: no two compute kernels of a rank overlap in time."""
    base = {"topology": TINY, "workload": "tiny", "iterations": 3}
    serial = stack_from_dict({"name": "serial", "embedding_stream": False})
    streamed = stack_from_dict({"name": "streamed", "embedding_stream": True})
    a = run_point({**base, "stack": serial})
    b = run_point({**base, "stack": streamed})
    assert b.summary["iteration_time_s"] <= a.summary["iteration_time_s"] * (1 + 1e-9)
    ev = b.events
    kernels = ev[ev.stream.isin(["compute", "embedding"]) & (ev.kind != "host")]
    assert set(kernels.stream) == {"compute", "embedding"}
    for _, r in kernels.groupby("rank"):
        r = r.sort_values("start_s")
        assert (r.start_s.to_numpy()[1:] >= r.end_s.to_numpy()[:-1] - 1e-15).all()


def test_grouped_allreduce_is_one_call_after_the_last_gradient():
    """``grouped_allreduce``: DCNv2's 64 MB of dense gradients go in one all-reduce (DDP's 25 MiB
    buckets make several), and it waits for the last gradient of the backward."""
    import dataclasses

    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.plan import default_plan

    w = load_workload("mlperf_dlrm_dcnv2", batch_per_gpu=64)
    plan = default_plan(w, 4)
    bucketed = lower(w, plan, 4, gpus_per_node=2, stack=BARE)
    grouped = lower(
        w, plan, 4, gpus_per_node=2, stack=dataclasses.replace(BARE, grouped_allreduce=True)
    )

    def allreduces(trace):
        return [o for o in trace.ops if o.rank == 0 and o.category == "all_reduce"]

    assert len(allreduces(bucketed)) >= 2
    (one,) = allreduces(grouped)
    names = {grouped.ops[d].name for d in one.deps}
    assert {"bottom_wgrad0", "top_wgrad0"} <= names
    sizes = [c.size_bytes for c in grouped.collectives if c.op == "all_reduce"]
    assert sizes == [sum(c.size_bytes for c in bucketed.collectives if c.op == "all_reduce")]


def _update_ops(stack, ranks, dense="fp32"):
    """Names and byte counts of one rank's embedding-update ops under ``stack``."""
    from zionsim.dlrm.lowering import lower
    from zionsim.dlrm.plan import Plan, Shard
    from zionsim.dlrm.workload import with_precision

    w = with_precision(load_workload("tiny"), {"dense": dense})
    plan = Plan("tw", tuple(Shard(t.index, "TW", (t.index % ranks,)) for t in w.tables))
    trace = lower(w, plan, ranks, stack=stack)
    ops = [
        o for o in trace.ops if o.rank == 0 and o.name.startswith("emb_") and o.name != "emb_fwd"
    ]
    return {o.name: o for o in ops}


def test_framework_embedding_update_is_torch_optim_over_a_sparse_gradient():
    """``embedding_update.optimizer: framework``: the fused lookup stays one kernel, the update
    becomes torch.optim's step (``emb_opt``, every lookup's row); the gradient is a kernel only
    where the stack says so (DeepLearningExamples: one GPU), and the loss scaler's unscale is a
    read and a write of every value under mixed precision only."""
    upd = {"optimizer": "framework", "gradient": {"single_gpu": "kernel", "multi_gpu": "view"},
           "amp_unscale": True}  # fmt: skip
    s = stack_from_dict({"name": "s", "embedding_update": upd})
    assert set(_update_ops(BARE, 2)) == {"emb_bwd"}
    one, two = _update_ops(s, 1), _update_ops(s, 2)
    assert set(one) == {"emb_bwd", "emb_opt"} and one["emb_bwd"].kind == "memory"
    assert set(two) == {"emb_opt"}
    assert one["emb_opt"].args["fused"] is False and one["emb_opt"].args["tables"] == 1
    amp = _update_ops(s, 2, dense="fp16")
    look = amp["emb_opt"].args["lookups"] * amp["emb_opt"].args["row_bytes"]
    assert amp["emb_unscale"].args["nbytes"] == pytest.approx(2 * look)
    # many lookups of few rows: torch.optim's step (lr-scaled copy, then every lookup's row
    # read and written) outweighs the fused backward's update of each distinct row once
    from zionsim.hardware import compute

    gpu = Cluster.load("dgx_a100", nodes=1).spec.gpu
    fused = compute.embedding_backward_time_s(gpu, 1e6, 512, 1, True, "sgd", 0, None, 1e4)
    torch_step = compute.embedding_optimizer_time_s(gpu, 1e6, 512, 1, "sgd", 0, None, 1e4)
    assert torch_step > 2 * fused


def test_bad_embedding_update_is_named():
    """An unknown optimizer or gradient kind names its field and the allowed values."""
    with pytest.raises(InputError, match="embedding_update.optimizer"):
        stack_from_dict({"name": "x", "embedding_update": {"optimizer": "adam"}})
    with pytest.raises(InputError, match="embedding_update.gradient.multi_gpu"):
        stack_from_dict({"name": "x", "embedding_update": {"gradient": {"multi_gpu": "copy"}}})
    with pytest.raises(InputError, match="embedding_update"):
        stack_from_dict({"name": "x", "embedding_update": {"unscale": True}})


def test_override_may_set_a_stack_field_the_file_leaves_out():
    """--set stack.X reaches a valid field that hugectr.yaml does not write (and the bare stack,
    which writes none); a misspelt one is refused with the fields the schema allows."""
    assert "embedding_update" not in (Path(__file__).parents[2] / "stacks/hugectr.yaml").read_text()
    stack = load_stack("hugectr", {"embedding_update.optimizer": "framework"})
    assert stack.embedding_optimizer == "framework"
    assert stack.gpu_per_step_s == load_stack("hugectr").gpu_per_step_s
    bare = load_stack("bare", ["gpu_per_step=7us", "host.per_step=3us"])
    assert (bare.gpu_per_step_s, bare.host_per_step_s) == pytest.approx((7e-6, 3e-6))
    assert dataclasses.replace(bare, gpu_per_step_s=0.0, host_per_step_s=0.0, file="") == (
        dataclasses.replace(BARE, file="")
    )
    for name, sets, field in [
        ("hugectr", {"embedding_update.optimiser": "framework"}, "embedding_update.optimiser"),
        ("hugectr", {"host.per_stpe": "1us"}, "host.per_stpe"),
        ("bare", {"gpu_per_stp": "1us"}, "gpu_per_stp"),
    ]:
        with pytest.raises(InputError, match="unknown field") as err:
            load_stack(name, sets)
        assert err.value.field == field and "allowed" in str(err.value)
