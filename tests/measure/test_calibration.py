"""Calibration: kernel-time CSV and compute fit, overlays, and ``zionsim calibrate``."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import DATA, TINY
from tests.measure.test_nccl_logs import TRUE_EFFICIENCY, TRUE_OVERHEAD, _synthetic_log
from zionsim.base.errors import InputError
from zionsim.cli.main import main
from zionsim.hardware import compute
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology
from zionsim.measure.calibration import calibrate, overlay
from zionsim.measure.kernel_times import fit_compute, kernel_time_s, parse_kernel_csv
from zionsim.measure.nccl_logs import read_nccl_log
from zionsim.network import nccl
from zionsim.network.simulate import simulate_collective

ALLTOALL = DATA / "nccl_tests_alltoall.log"
KERNELS = DATA / "kernel_times.csv"
#: the "true" compute parameters of the synthetic kernel times the fit must recover
TRUE_GEMM = compute.GemmFit(eff_max=0.78, half_time_s=7e-6, exponent=0.62)
TRUE_GATHER = 0.55


def _true_model(gpu) -> compute.ComputeModel:
    """The built-in compute model with TRUE_GEMM (for every dtype, as a measured curve is) and
    TRUE_GATHER for ``gpu``'s architecture."""
    base, arch = compute.load_compute_model(), compute.architecture(gpu)
    a = replace(base.arch[arch], gemm=TRUE_GEMM, gemm_dtype=(), gather_eff=TRUE_GATHER)
    return replace(base, arch={**base.arch, arch: a})


def _synthetic_csv(gpu) -> str:
    """A kernel CSV whose times come from the true model (GEMMs and embedding bags)."""
    rows = []
    for s in (128, 256, 512, 1024, 2048, 4096, 8192):
        for m, n, k, dtype in (
            (s, s, s, "fp16"),
            (4 * s, s // 2, s, "fp16"),
            (s, s, s // 2, "fp32"),
        ):
            rows.append({"kind": "gemm", "m": m, "n": n, "k": k, "dtype": dtype})
    for dim in (16, 64, 128, 256):
        for kind in ("embedding_fwd", "embedding_bwd"):
            emb = {"dim": dim, "pooling": 20, "batch": 2048, "tables": 8, "dtype": "fp16"}
            rows.append({"kind": kind, **emb, "fused": True, "optimizer": "rowwise_adagrad"})
    df = pd.DataFrame(rows)
    df["time_us"] = [kernel_time_s(gpu, r, _true_model(gpu)) * 1e6 for _, r in df.iterrows()]
    columns = ["kind", "m", "n", "k", "dtype", "dim", "pooling", "batch", "tables", "time_us"]
    return df[columns].to_csv(index=False, float_format="%.9g")


def test_kernel_fit_recovers_known_parameters(tiny_cluster):
    """Kernel times made with known GEMM and gather parameters are refitted within 2 %."""
    gpu = tiny_cluster.spec.gpu
    kernels = parse_kernel_csv(_synthetic_csv(gpu), "synthetic.csv")
    fitted, report = fit_compute(gpu, kernels)
    assert fitted["gemm"]["eff_max"] == pytest.approx(TRUE_GEMM.eff_max, rel=0.02)
    assert fitted["gemm"]["half_time_s"] == pytest.approx(TRUE_GEMM.half_time_s, rel=0.02)
    assert fitted["gemm"]["exponent"] == pytest.approx(TRUE_GEMM.exponent, rel=0.02)
    assert fitted["gather_eff"] == pytest.approx(TRUE_GATHER, rel=0.02)
    assert report["error_pct"].abs().max() < 0.1 < report["before_error_pct"].abs().max()


def test_kernel_csv_format():
    """The sample CSV parses: µs to s, embedding defaults, comment lines skipped."""
    df = parse_kernel_csv(KERNELS.read_text(), "k.csv")
    assert set(df["kind"]) == {"gemm", "embedding_fwd", "embedding_bwd"}
    gemm = df[df["kind"] == "gemm"].iloc[0]
    assert (gemm["m"], gemm["n"], gemm["k"], gemm["dtype"]) == (512, 512, 512, "fp16")
    emb = df[df["kind"] == "embedding_bwd"].iloc[0]
    assert emb["fused"] and emb["optimizer"] == "rowwise_adagrad"
    assert (df["time_s"] < 1e-1).all() and df["line"].iloc[0] > 1


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("kind,m,n,k,dtype,time_us\nconv,1,1,1,fp16,3\n", r"k.csv: line 2: kind: unknown"),
        ("kind,m,n,k,dtype,time_us\ngemm,1,1,,fp16,3\n", r"line 2: k: missing"),
        ("kind,m,n,k,dtype,time_us\ngemm,1,1,1,fp64,3\n", r"line 2: dtype: unknown dtype"),
        ("kind,m,n,k,dtype,time_us\n# c\ngemm,1,1,1,fp16,-3\n", r"line 3: time_us: must be > 0"),
        ("kind,m,n,k,dtype\ngemm,1,1,1,fp16\n", r"line 1: header"),
    ],
)
def test_kernel_csv_errors(text, match):
    """Bad kernel rows are refused naming the file, the line and the column."""
    with pytest.raises(InputError, match=match):
        parse_kernel_csv(text, "k.csv")


def test_kernels_from_another_architecture(tiny_cluster):
    """A row measured on a V100 does not calibrate an A100 cluster."""
    df = parse_kernel_csv(
        "kind,m,n,k,dtype,time_us,gpu\ngemm,64,64,64,fp16,9,Tesla V100\n", "v.csv"
    )
    with pytest.raises(InputError, match=r"v.csv: line 2: gpu: measured on 'Tesla V100'"):
        calibrate(tiny_cluster, kernels=df)


def test_overlay_round_trip(tmp_path):
    """Fitted overlay → topology: its protocols and compute parameters are the ones run."""
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=4)
    true = nccl.load_model().with_fit(TRUE_OVERHEAD, TRUE_EFFICIENCY)
    sizes = 2 ** np.arange(16, 31)
    log = _synthetic_log(cluster, "all_reduce", sizes, true, "ring")
    kernels = parse_kernel_csv(_synthetic_csv(cluster.spec.gpu), "k.csv")
    cal = calibrate(cluster, [log], kernels)
    path = tmp_path / "sub" / "tiny_calibrated.yaml"
    path.parent.mkdir()
    data = overlay(cal, "../tiny_cluster.yaml", {"nccl_logs": ["synthetic"]})
    (tmp_path / "tiny_cluster.yaml").write_text((DATA / "tiny_cluster.yaml").read_text())
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    mine = Cluster.load(str(path), nodes=1, gpus_per_node=4)
    assert mine.spec.name == "tiny_calibrated"
    for p in TRUE_OVERHEAD:
        assert mine.spec.collective_overhead_s[p] == pytest.approx(TRUE_OVERHEAD[p], rel=0.02)
        assert mine.spec.collective_efficiency[p] == pytest.approx(TRUE_EFFICIENCY[p], rel=0.02)
    for s, measured in zip(log["size_bytes"][::4], log["busbw_GBps"][::4], strict=True):
        got = simulate_collective(mine, "all_reduce", int(s), algorithm="ring").busbw_GBps
        assert got == pytest.approx(measured, rel=0.02), s
    gpu, true_c = mine.spec.gpu, _true_model(mine.spec.gpu)
    for m, n, k in ((512, 512, 512), (4096, 1024, 2048)):
        want = compute.gemm_time_s(gpu, m, n, k, "fp16", true_c)
        assert compute.gemm_time_s(gpu, m, n, k, "fp16") == pytest.approx(want, rel=0.02)
    bare = Cluster.load(TINY, nodes=1, gpus_per_node=4)
    assert nccl.cluster_model(bare).efficiency == nccl.load_model().efficiency


def test_overlay_errors(tmp_path):
    """Unknown overlay fields, a missing base and a cycle are one-line errors naming the file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: zionex\ncompute: {gemm: {eff_maxx: 0.5}}\n")
    with pytest.raises(InputError, match=r"bad.yaml: compute.gemm.eff_maxx: unknown field"):
        load_topology(str(bad))
    bad.write_text("base: no_such_topology\n")
    with pytest.raises(InputError, match="unknown topology 'no_such_topology'"):
        load_topology(str(bad))
    bad.write_text("base: bad.yaml\n")
    with pytest.raises(InputError, match="bad.yaml: base: overlays form a cycle"):
        load_topology(str(bad))
    bad.write_text("base: zionex\ncollectives: {protocols: {Simple: {efficiency: 1.5}}}\n")
    with pytest.raises(InputError, match=r"collectives.protocols.Simple.efficiency: must be"):
        load_topology(str(bad))


def test_overlay_with_set_and_nodes(tmp_path):
    """An overlay takes --set overrides and node counts like its base."""
    path = tmp_path / "o.yaml"
    path.write_text("base: zionex\ncollectives: {protocols: {LL: {overhead: 5 us}}}\nfit: []\n")
    spec = load_topology(str(path), nodes=3, overrides=["scale_out.nic_bw=400Gbps"])
    assert spec.nodes == 3 and spec.scale_out.nic_bw_Bps == 50e9
    assert (
        spec.collective_overhead_s == {"LL": pytest.approx(5e-6)} and spec.with_nodes(2).gpus == 16
    )


def test_cli_calibrate_end_to_end(tmp_path, capsys):
    """calibrate on the sample logs and kernels: fit report, overlay, then used by collective."""
    out = tmp_path / "zionex_calibrated.yaml"
    argv = ["calibrate", "--topology", "zionex", "--nccl-log", str(ALLTOALL)]
    argv += ["--kernels", str(KERNELS), "--out", str(out), "--format", "json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    first = out.read_bytes()
    fit = {row["kinds"]: row for row in printed["fit"]}
    assert fit["all_to_all"]["points"] == 21
    assert fit["all_to_all"]["rms_error_pct_after"] < fit["all_to_all"]["rms_error_pct_before"]
    assert fit["gemm,embedding_fwd,embedding_bwd"]["rms_error_pct_after"] < 10
    data = yaml.safe_load(first)
    assert data["base"] == "zionex" and set(data) == {
        "base", "collectives", "compute", "fit", "provenance"}  # fmt: skip
    assert data["provenance"]["cluster"] == "zionex x 2 nodes x 8 GPUs"  # from the # Rank lines
    assert main(argv) == 0 and out.read_bytes() == first  # deterministic
    measured = read_nccl_log(ALLTOALL).set_index("size_bytes")["busbw_GBps"][2**20]
    busbw = {}
    for i, topology in enumerate(("zionex", str(out))):
        argv = ["collective", "--topology", topology, "--nodes", "2", "--op", "all_to_all"]
        argv += ["--sizes", "1M:1M", "--out", str(tmp_path / f"c{i}"), "--format", "csv"]
        assert main(argv) == 0
        csv = tmp_path / f"c{i}" / "collective.csv"
        busbw[topology] = pd.read_csv(csv)["busbw_GBps"].iloc[0]
    # the fitted curve, not the base; 20 %: the made-up alpha-beta sample has no Simple network
    # latency floor, which the per-protocol fit cannot take out of NCCL's (a post per remote peer,
    # on A100 also the GDR flush of each receive, issue 26 round 9 h26f): 14.4 % off at 1 MiB
    # before the flush, 15.5 % after
    assert busbw[str(out)] == pytest.approx(measured, rel=0.20)
    # the base is far from the sample (1.44 x it with the flush; 1.62 x before)
    assert abs(busbw["zionex"] - measured) > 2 * abs(busbw[str(out)] - measured)


def test_cli_calibrate_bad_input(tmp_path, capsys):
    """Nothing to fit, or a log of another world size: exit 2 with one line."""
    out = str(tmp_path / "o.yaml")
    assert main(["calibrate", "--out", out]) == 2
    argv = ["calibrate", "--topology", "zionex", "--nodes", "1", "--nccl-log", str(ALLTOALL)]
    assert main(argv + ["--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "16 ranks but the cluster has 8 GPUs" in err[-1] and len(err) == 2


@pytest.mark.parametrize(
    "row, match",
    [("gemm,512,inf,512,fp16,,,,,,,,7.7", "expected an integer"),
     ("gemm,512,nan,512,fp16,,,,,,,,7.7", "expected an integer"),
     ("gemm,512,99999999999,512,fp16,,,,,,,,7.7", "physical bound"),
     ("gemm,512,512,512,fp16,,,,,,,,1e30", "at most an hour"),
     ("gemm,512,512,512,fp16,,,,,,,,7.7,gpu,extra", "fields, the header has")],
)  # fmt: skip
def test_kernel_csv_refuses_non_finite_and_extra_cells(row, match):
    """Infinite, NaN or oversized cells and rows longer than the header are one-line errors."""
    header = "kind,m,n,k,dtype,rows,dim,pooling,batch,tables,fused,optimizer,time_us,gpu"
    with pytest.raises(InputError, match=match):
        parse_kernel_csv(f"{header}\n{row}\n", "k.csv")
