"""nccl-tests logs: parsing, writing and refitting the protocol parameters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import DATA, TINY
from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.measure.nccl_fit import fit_from_nccl_logs
from zionsim.measure.nccl_logs import (
    format_nccl_tests,
    parse_nccl_tests,
    read_nccl_log,
)
from zionsim.network import nccl
from zionsim.network.simulate import simulate_collective

ALL_REDUCE = DATA / "nccl_tests_all_reduce.log"
ALLTOALL = DATA / "nccl_tests_alltoall.log"
#: the "true" protocol parameters of the synthetic logs the fit must recover
TRUE_OVERHEAD = {"LL": 20e-6, "LL128": 45e-6, "Simple": 110e-6}
TRUE_EFFICIENCY = {"LL": 0.6, "LL128": 0.88, "Simple": 0.97}

OLD_ALLTOALL = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#   Rank  0 Pid  12001 on     host-a device  0 [0x1a] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12001 on     host-a device  1 [0x1b] Tesla V100-SXM2-32GB
#
#                                      out-of-place                in-place
#  size  count   type redop   time  algbw  busbw error    time  algbw  busbw error
#   (B) (elements)            (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
   1024    128  float        20.50   0.05   0.02 0e+00   20.80   0.05   0.02 0e+00
   2048    256  float        20.90   0.10   0.05 0e+00   21.00   0.10   0.05 0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.035
"""


def test_all_reduce_log():
    """The all_reduce sample: 31 sizes, 8 ranks, busbw and the footer average."""
    df = read_nccl_log(ALL_REDUCE)
    assert (df["op"] == "all_reduce").all() and len(df) == 31
    assert df["size_bytes"].iloc[0] == 8 and df["size_bytes"].iloc[-1] == 8 * 2**30
    assert (np.diff(df["size_bytes"]) > 0).all()
    row = df.set_index("size_bytes").loc[2**30]
    assert row["busbw_GBps"] == pytest.approx(233.72) and row["ip_busbw_GBps"] == 228.27
    assert row["time_s"] == pytest.approx(8039.6e-6) and row["count"] == 2**28
    assert (df["ranks"] == 8).all() and (df["oop_wrong"] == 0).all()
    assert df.attrs["devices"][7]["name"] == "NVIDIA A100-SXM4-80GB"
    assert df.attrs["params"]["nGpus"] == 8 and df.attrs["params"]["iters"] == 20
    both = np.r_[df["oop_busbw_GBps"], df["ip_busbw_GBps"]]
    assert df.attrs["avg_busbw_GBps"] == 82.4586
    assert both.mean() == pytest.approx(82.4586, abs=0.01)  # the footer averages every result


def test_alltoall_log():
    """The all-to-all sample: op from the echoed command, 16 ranks, none/-1, N/A checks."""
    df = parse_nccl_tests(ALLTOALL.read_text(), "a2a.log")
    assert (df["op"] == "all_to_all").all() and len(df) == 21
    assert (df["redop"] == "none").all() and (df["root"] == -1).all()
    assert df["oop_wrong"].isna().all() and df["ip_wrong"].isna().all()
    assert (df["ranks"] == 16).all()
    assert {d["host"] for d in df.attrs["devices"]} == {"dlrm-a-0", "dlrm-a-1"}
    assert df["busbw_GBps"].iloc[-1] == 21.60 and df.attrs["avg_busbw_GBps"] == 10.1764
    assert (df["count"] * 4 * 16 == df["size_bytes"]).all()  # count is per peer


@pytest.mark.parametrize(("path", "factor"), [(ALL_REDUCE, 2 * 7 / 8), (ALLTOALL, 15 / 16)])
def test_busbw_is_algbw_times_the_bus_factor(path, factor):
    """busbw = algbw × nccl-tests' factor, within the printed rounding."""
    df = read_nccl_log(path)
    big = df[df["algbw_GBps"] > 5]
    assert np.allclose(big["busbw_GBps"], big["algbw_GBps"] * factor, atol=0.02)


def test_old_format_without_root():
    """Old logs: ``error`` columns, no root column, an empty redop for all-to-all."""
    df = parse_nccl_tests(OLD_ALLTOALL, "old.log", op="all_to_all")
    assert list(df["size_bytes"]) == [1024, 2048]
    assert (df["redop"] == "none").all() and (df["root"] == -1).all()
    assert (df["oop_wrong"] == 0).all() and df["ranks"].iloc[0] == 2


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda t: t.replace("  233.72      0", "  233.72"), 47),  # a field missing
        (lambda t: t.replace("233.72", "23x.72"), 47),  # not a number
        (lambda t: t.replace("# Out of", "node-017: Test NCCL failure common.cu:1\n#"), 51),
    ],
)
def test_bad_text_names_source_and_line(edit, line):
    """Malformed text raises InputError naming the file and the line."""
    with pytest.raises(InputError, match=rf"bad\.log: line {line}:"):
        parse_nccl_tests(edit(ALL_REDUCE.read_text()), "bad.log")


def test_no_rows_and_unknown_op():
    """Text without results, or without a binary name, is refused with the source named."""
    with pytest.raises(InputError, match="empty.log.*no nccl-tests result rows"):
        parse_nccl_tests("# nothing here\n", "empty.log")
    rows = "\n".join(ALL_REDUCE.read_text().splitlines()[19:25])
    with pytest.raises(InputError, match="x.log: line 1: cannot tell"):
        parse_nccl_tests(rows, "x.log")
    assert (parse_nccl_tests(rows, "x.log", op="all_gather")["op"] == "all_gather").all()


def test_format_round_trip():
    """A written log parses back to the same sizes and bandwidths."""
    rows = pd.DataFrame({"size_bytes": [1024, 2**20, 2**30], "time_s": [20e-6, 150e-6, 0.05]})
    df = parse_nccl_tests(format_nccl_tests(rows, "all_gather", 4), "w.log")
    assert list(df["size_bytes"]) == [1024, 2**20, 2**30] and (df["op"] == "all_gather").all()
    algbw = rows["size_bytes"] / rows["time_s"] / 1e9
    assert np.allclose(df["busbw_GBps"], algbw * 3 / 4, atol=0.006)
    assert np.allclose(df["time_s"], rows["time_s"], rtol=1e-3)


def _synthetic_log(cluster, op, sizes, model, algorithm) -> pd.DataFrame:
    """Simulate ``op`` with ``model``, write it as an nccl-tests log, parse it back."""
    times = [
        simulate_collective(cluster, op, int(s), model=model, algorithm=algorithm).time_s
        for s in sizes
    ]
    rows = pd.DataFrame({"size_bytes": sizes, "time_s": times})
    text = format_nccl_tests(rows, op, len(cluster.gpus), comment="SYNTHETIC: zionsim test")
    return parse_nccl_tests(text, f"synthetic_{op}.log")


def test_fit_recovers_known_parameters():
    """A log simulated with known parameters is refitted to within 2 % (all six parameters)."""
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=4)
    true = nccl.load_model().with_fit(TRUE_OVERHEAD, TRUE_EFFICIENCY)
    sizes = 2 ** np.arange(16, 31)
    ar = _synthetic_log(cluster, "all_reduce", sizes, true, "ring")
    a2a = _synthetic_log(cluster, "all_to_all", sizes[::2], true, "direct")
    model, report = fit_from_nccl_logs(cluster, [ar, a2a])
    for p, eff in TRUE_EFFICIENCY.items():
        assert model.efficiency[p] == pytest.approx(eff, rel=0.02), p
        assert model.overhead_s[p] == pytest.approx(TRUE_OVERHEAD[p], rel=0.02), p
    assert set(report.loc[report["op"] == "all_reduce", "protocol"]) == {"LL", "LL128", "Simple"}
    held = report[report["role"] == "held_out"]
    assert set(held["op"]) == {"all_to_all"} and (held["algorithm"] == "direct").all()
    assert report["error_pct"].abs().max() < 1.0


def test_fit_alltoall_alone_moves_only_its_parameters():
    """all_to_all alone fits the Simple efficiency and LL launch floor, over two nodes (PXN)."""
    cluster = Cluster.load(TINY)
    base = nccl.load_model()
    true = base.with_fit({**base.overhead_s, "LL": 30e-6}, {**base.efficiency, "Simple": 0.9})
    df = _synthetic_log(cluster, "all_to_all", 2 ** np.arange(14, 30), true, "pxn")
    model, report = fit_from_nccl_logs(cluster, [df], base=base)
    assert model.efficiency["Simple"] == pytest.approx(0.9, rel=0.02)
    # every size pays the LL overhead (point-to-point kernels), so it is fitted from all of them
    assert model.overhead_s["LL"] == pytest.approx(30e-6, rel=0.02)
    assert model.efficiency["LL"] == base.efficiency["LL"]
    assert (report["algorithm"] == "pxn").all()
    assert any("all_to_all fitted alone" in n for n in report.attrs["notes"])
    assert report["error_pct"].abs().max() < 1.0


def test_fit_checks_rank_count(tiny_cluster):
    """A log of 8 ranks does not fit a 4-GPU cluster."""
    with pytest.raises(InputError, match="8 ranks but the cluster has 4 GPUs"):
        fit_from_nccl_logs(tiny_cluster, [read_nccl_log(ALL_REDUCE)])


@pytest.mark.parametrize(
    "bad, match",
    [("-12.00", "not a measurement"), ("nan", "not a measurement"), ("inf", "not a measurement"),
     ("1e400", "not a measurement"), ("N/A", "expected a number")],
)  # fmt: skip
def test_times_must_be_finite_and_positive(bad, match):
    """A negative, NaN, infinite or absent out-of-place time is refused, naming the line: it
    would otherwise go into the fit."""
    lines = ALL_REDUCE.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("1024 "))
    cells = lines[i].split()
    cells[5] = bad
    lines[i] = " ".join(cells)
    with pytest.raises(InputError, match=f"line {i + 1}: .*{match}"):
        parse_nccl_tests("\n".join(lines), "x.log")


def test_no_usable_points_is_one_line(tiny_cluster):
    """A log whose rows all fall below min_bytes cannot be fitted: one line, no KeyError."""
    df = parse_nccl_tests(ALL_REDUCE.read_text(), "x.log").head(3)
    cluster = Cluster.load(TINY, nodes=1, gpus_per_node=8)
    with pytest.raises(InputError, match="no usable nccl-tests points"):
        fit_from_nccl_logs(cluster, [df])
