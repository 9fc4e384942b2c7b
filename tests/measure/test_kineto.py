"""Kineto (PyTorch profiler) traces → zionsim traces: classification, shapes, matching, replay."""

from __future__ import annotations

import copy
import json
from collections import Counter

import numpy as np
import pytest

from tests.conftest import DATA, TINY
from zionsim.base.errors import InputError
from zionsim.cli.main import main
from zionsim.dlrm.retarget import retarget
from zionsim.dlrm.trace_file import trace_from_dict, trace_to_dict
from zionsim.hardware.cluster import Cluster
from zionsim.io.files import read_trace
from zionsim.measure.kineto import REF_HBM_BPS, import_kineto, read_kineto
from zionsim.measure.kineto_events import classify_kernel, embedding_shape, gemm_shape
from zionsim.sim.run import simulate_run

TRACE = DATA / "kineto_tiny.json"


@pytest.fixture()
def docs() -> list[dict]:
    """The two per-rank traces of the tiny sample, freshly loaded (tests may edit them)."""
    return json.loads(TRACE.read_text())


def test_classify_kernel_names():
    """Kernel names map to kinds, categories and collective ops."""
    cases = {
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": (
            "collective", "all_reduce", "all_reduce"),
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": (
            "collective", "all_gather", "all_gather"),
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": (
            "collective", "reduce_scatter", "reduce_scatter"),
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": (
            "collective", "all_to_all", "all_to_all"),
        "ampere_sgemm_128x64_nn": ("gemm", "gemm", None),
        "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4": ("gemm", "gemm", None),
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x3_tn_align4>(Params)": (
            "gemm", "gemm", None),
        "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float>(...)": (
            "embedding_fwd", "embedding", None),
        "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_warp_per_row_1": (
            "embedding_bwd", "embedding", None),
        "void fbgemm_gpu::bounds_check_indices_kernel<long, 32>(...)": (
            "memory", "interaction", None),
        "void at::native::multi_tensor_apply_kernel<TensorListMetadata<2>>(...)": (
            "memory", "optimizer", None),
        "void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>(...)": (
            "memory", "interaction", None),
    }  # fmt: skip
    for name, expected in cases.items():
        assert classify_kernel(name) == expected, name


def test_shapes_from_input_dims():
    """GEMM (m, n, k, dtype) and embedding sizes come from the profiler's Input Dims."""
    f = "float"
    assert gemm_shape([[64], [256, 13], [13, 64], [], []], [f, f, f, "Scalar", "Scalar"]) == (
        256, 64, 13, "fp32")  # fmt: skip
    assert gemm_shape([[256, 13], [64, 13], [64]], [f, f, f]) == (256, 64, 13, "fp32")  # linear
    assert gemm_shape([[8, 3, 64], [8, 64, 3]], ["c10::Half"] * 2) == (24, 3, 64, "fp16")  # bmm
    assert gemm_shape([[4, 4], [3, 5]], [f, f]) is None
    assert gemm_shape([[4, 4], [4, 4]], ["double", "double"]) is None  # no fp64 in zionsim
    emb = embedding_shape([[1000, 64], [1024], [512], []], [f, "long int", "long int", "Scalar"])
    assert emb == {"lookups": 1024.0, "row_bytes": 256.0, "bags": 512.0}
    assert embedding_shape([[65536], [1024]], [f, "long int"]) is None  # flattened TBE weights


def test_import_tiny_trace():
    """The tiny trace: 17 ops per rank of the expected kinds and streams, 4 collectives."""
    trace = read_kineto(TRACE)
    assert trace.ranks == 2 and len(trace.ops) == 34
    for ops in trace.by_rank():
        kinds = {"collective": 4, "gemm": 7, "embedding_fwd": 1, "embedding_bwd": 1, "memory": 4}
        assert Counter(o.kind for o in ops) == kinds
        assert Counter(o.stream for o in ops) == {"compute": 13, "a2a": 3, "allreduce": 1}
        memory = Counter(o.category for o in ops if o.kind == "memory")
        assert memory == {"interaction": 3, "optimizer": 1}
    assert [c.op for c in trace.collectives] == ["all_to_all"] * 3 + ["all_reduce"]
    assert [c.size_bytes for c in trace.collectives] == [8192, 131072, 131072, 964 * 4]
    assert all(list(c.ranks) == [0, 1] for c in trace.collectives)
    assert trace.collectives[1].matrix.sum() == 2 * 131072  # splits → per-peer bytes
    gemms = [
        (o.args["m"], o.args["n"], o.args["k"]) for o in trace.by_rank()[0] if o.kind == "gemm"
    ]
    assert gemms[0] == (256, 64, 13) and (768, 3, 64) in gemms  # bottom MLP, interaction bmm
    emb = next(o for o in trace.ops if o.kind == "embedding_bwd")
    assert emb.args["lookups"] == 1024 and emb.args["row_bytes"] == 256
    again = trace_from_dict(trace_to_dict(trace), "kineto_tiny.json")
    assert len(again.ops) == 34 and again.meta["ranks_global"] == [0, 1]


def test_dependencies_follow_the_timeline():
    """Embedding forward waits for the index all-to-all; the pooled all-to-all for it."""
    ops = read_kineto(TRACE).by_rank()[1]
    by_id = {o.id: o for o in ops}
    a2a = [o for o in ops if o.stream == "a2a"]
    emb = next(o for o in ops if o.kind == "embedding_fwd")
    assert a2a[0].id in emb.deps and emb.id in a2a[1].deps
    bwd = next(o for o in ops if o.kind == "embedding_bwd")
    assert a2a[2].id in bwd.deps  # gradients all-to-all before the embedding backward
    allreduce = next(o for o in ops if o.stream == "allreduce")
    assert [by_id[d].stream for d in allreduce.deps] == ["compute"]  # its producer
    assert all(d in by_id and d < o.id for o in ops for d in o.deps)


def test_replay_on_a_cluster():
    """The imported trace replays on a 2-GPU cluster with a positive iteration time."""
    trace = read_kineto(TRACE, global_batch=512)
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=2)
    run = simulate_run(cluster, trace=trace, iterations=2)
    assert run.summary["iteration_time_s"] > 0 and run.summary["samples_per_s"] > 0
    assert run.summary["breakdown_s"]["embedding"] > 0


def test_one_file_with_two_devices(docs):
    """One process driving two GPUs (one dict) splits into a rank per device."""
    merged = {"traceEvents": docs[0]["traceEvents"] + docs[1]["traceEvents"]}
    trace = import_kineto(merged, "merged.json")
    reference = import_kineto(docs, "two.json")
    assert trace.ranks == 2
    assert [o.kind for o in trace.ops] == [o.kind for o in reference.ops]


def test_step_filter(docs):
    """``step`` keeps the kernels launched inside ProfilerStep#<step>."""
    assert len(import_kineto(docs, step=5).ops) == 34
    with pytest.raises(InputError, match="no ProfilerStep#6.*ProfilerStep#5"):
        import_kineto(docs, "t.json", step=6)


def test_shapes_missing_fall_back_to_measured_time(docs):
    """Without Input Dims a GEMM becomes a memory op of duration × reference bandwidth."""
    for doc in docs:
        for e in doc["traceEvents"]:
            (e.get("args") or {}).pop("Input Dims", None)
    trace = import_kineto(docs)
    gemm = [o for o in trace.ops if o.category == "gemm"]
    assert all(o.kind == "memory" for o in gemm)
    assert gemm[0].args["nbytes"] == pytest.approx(gemm[0].args["measured_us"] * 1e-6 * REF_HBM_BPS)
    assert trace.meta["approximated_ops"] == 2 * (7 + 2 + 3)


def test_collective_sizes_needed(docs):
    """A collective without message size needs default_bytes."""
    for doc in docs:
        for e in doc["traceEvents"]:
            args = e.get("args") or {}
            for key in ("In msg nelems", "Out msg nelems"):
                args.pop(key, None)
    with pytest.raises(InputError, match="t.json: default_bytes: .*no message size"):
        import_kineto(copy.deepcopy(docs), "t.json")
    trace = import_kineto(docs, "t.json", default_bytes=2**20)
    assert {c.size_bytes for c in trace.collectives} == {2**20}


def test_unpaired_collectives_are_refused(docs):
    """Ranks with different numbers of all-to-all kernels cannot be matched."""
    docs[1]["traceEvents"] = [
        e
        for e in docs[1]["traceEvents"]
        if not e.get("name", "").startswith("ncclDevKernel_Send") or e["ts"] < 2_500_100
    ]
    with pytest.raises(InputError, match="all_to_all kernels per rank"):
        import_kineto(docs, "t.json")


def test_not_a_trace():
    """Input without traceEvents is refused, naming the source."""
    with pytest.raises(InputError, match="x.json: traceEvents: not a Kineto trace"):
        import_kineto({"foo": 1}, "x.json")


def test_retarget_replicates_the_per_rank_pattern():
    """Retargeted to 4 ranks: each rank replays rank r mod 2, collectives span the new world."""
    trace = read_kineto(TRACE, global_batch=512)
    four = trace_from_dict(trace_to_dict(retarget(trace, 4)), "four.json")  # a valid trace
    assert four.ranks == 4 and len(four.ops) == 2 * len(trace.ops)
    assert [o.kind for o in four.by_rank()[3]] == [o.kind for o in trace.by_rank()[1]]
    assert all(list(c.ranks) == [0, 1, 2, 3] for c in four.collectives)
    assert [c.size_bytes for c in four.collectives] == [c.size_bytes for c in trace.collectives]
    old, new = trace.collectives[1].matrix, four.collectives[1].matrix
    assert new.shape == (4, 4) and new.sum(axis=1) == pytest.approx(np.tile(old.sum(axis=1), 2))
    assert four.meta["global_batch"] == 1024 and four.meta["ranks_global"] == [0, 1, 0, 1]
    assert retarget(trace, 2) is trace


def test_retarget_subgroups_need_a_multiple():
    """A collective over a subgroup is replicated per block; 3 ranks cannot hold blocks of 2."""
    trace = read_kineto(TRACE)
    sub = copy.deepcopy(trace_to_dict(trace))
    sub["ranks"] = 3  # rank 2 idle: the collectives become subgroups of ranks 0 and 1
    three = trace_from_dict(sub)
    six = retarget(three, 6)
    assert [list(c.ranks) for c in six.collectives[:2]] == [[0, 1], [3, 4]]
    with pytest.raises(InputError, match="must be a multiple of 3, got 4"):
        retarget(three, 4)


def test_cli_import_then_replay(tmp_path, capsys):
    """zionsim trace --import-kineto writes a trace that zionsim run replays, retargeted too."""
    two, four = tmp_path / "two.json", tmp_path / "four.json"
    assert main(["trace", "--import-kineto", str(TRACE), "--out", str(two)]) == 2  # no batch
    assert "--global-batch" in capsys.readouterr().err
    assert main(["trace", "--import-kineto", str(TRACE), "--global-batch", "256",
                 "--out", str(two)]) == 0  # fmt: skip
    assert read_trace(two).ranks == 2 and read_trace(two).meta["global_batch"] == 256
    argv = ["trace", "--import-kineto", str(TRACE), "--topology", TINY, "--nodes", "2"]
    assert main(argv + ["--global-batch", "512", "--out", str(four)]) == 0
    assert read_trace(four).ranks == 4 and read_trace(four).meta["global_batch"] == 1024
    run = ["run", "--trace", str(four), "--topology", TINY, "--iterations", "2", "--no-plot"]
    assert main(run + ["--out", str(tmp_path / "run"), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["gpus"] == 4 and summary["iteration_time_s"] > 0
    none = str(tmp_path / "none.json")
    assert main(["trace", "--import-kineto", none, "--global-batch", "8", "--out", "x"]) == 2


def _kernel(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda e: e.update(ts=[1]), r"ts: unexpected value"),
        (lambda e: e.update(dur=-5.0), r"dur: unexpected value"),
        (lambda e: e.pop("name"), r"name: unexpected value"),
        (lambda e: e.update(cat=7), r"cat: unexpected value"),
        (lambda e: e.update(args=True), r"args: unexpected value"),
        (lambda e: e["args"].update({"External id": {"a": 1}}), r"args.External id"),
        (lambda e: e["args"].update({"In msg nelems": -3}), r"args.In msg nelems"),
    ],
)
def test_malformed_events_are_refused(tmp_path, edit, match):
    """A complete event whose fields do not have their Kineto types is one line naming the
    event (these were TypeErrors and AttributeErrors)."""
    docs = json.loads(TRACE.read_text())
    edit(_kernel(docs[0]))
    path = tmp_path / "k.json"
    path.write_text(json.dumps(docs))
    with pytest.raises(InputError, match=r"traceEvents\[\d+\]\." + match):
        read_kineto(path)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '[{"traceEvents": [NaN]}]', "{"])
def test_unreadable_json_is_one_line(tmp_path, text):
    """Nesting that exhausts the JSON parser, NaN and cut-short files are refused in one line."""
    path = tmp_path / "k.json"
    path.write_text(text)
    with pytest.raises(InputError, match="cannot read a JSON trace"):
        read_kineto(path)
