"""Collectives over the network: bytes, busbw definitions, tuner choices, agreement, physics."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.hardware.cluster import Cluster
from zionsim.network.collectives import busbw_factor, schedule
from zionsim.network.simulate import simulate_collective


def test_busbw_factors_follow_nccl_tests():
    """all_reduce 2(n−1)/n; gather, scatter and all-to-all (n−1)/n."""
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert busbw_factor(op, 8) == pytest.approx(0.875)


@pytest.mark.parametrize("alg", ["ring", "tree", "hierarchical"])
def test_all_reduce_bytes_per_rank(tiny_cluster, alg):
    """Ring sends 2(n−1)/n·S per rank; every algorithm moves at least that much in total."""
    n, size = 4, 1e6
    s = schedule(tiny_cluster, "all_reduce", tiny_cluster.gpus, size, alg)
    total = sum(p.nbytes.sum() for p in s.phases)
    assert total >= n * 2 * (n - 1) / n * size * (1 - 1e-12)
    if alg == "ring":
        assert total == pytest.approx(n * 2 * (n - 1) / n * size)


def test_all_to_allv_conserves_bytes(tiny_cluster):
    """Direct and PXN all-to-allv deliver the same cross-node bytes as the matrix holds."""
    rng = np.random.default_rng(0)
    m = rng.integers(1, 1000, (4, 4)).astype(float)
    np.fill_diagonal(m, 0)
    direct = schedule(tiny_cluster, "all_to_all", tiny_cluster.gpus, 0, "direct", m)
    assert direct.phases[0].nbytes.sum() == pytest.approx(m.sum())
    pxn = schedule(tiny_cluster, "all_to_all", tiny_cluster.gpus, 0, "pxn", m)
    ph = pxn.phases[0]
    node = tiny_cluster.node_of
    crossing = node(ph.src) != node(ph.dst)
    assert ph.nbytes[crossing].sum() == pytest.approx(m[:2, 2:].sum() + m[2:, :2].sum())


def test_multinode_all_to_all_matches_maintainer_formula():
    """Large all-to-all on N nodes: busbw ≈ B·N/(N−1)·(n−1)/n (nccl-tests issue 130, maintainer's
    ideal) × the many-peer p2p efficiency 1/(1 + c(1 − 1/k)), k = 8 senders × (N−1) nodes on each
    rail NIC (PXN; nccl_model.yaml p2p_net_peer_overhead)."""
    c = Cluster.load("zionex", nodes=4)
    r = simulate_collective(c, "all_to_all", 2**30)
    from zionsim.network.nccl import load_model

    nic = c.spec.scale_out.nic_bw_Bps * c.spec.links["roce"].efficiency
    b = nic * load_model().efficiency["Simple"] / 1e9
    n, nodes = 32, 4
    k = 8 * (nodes - 1)
    eta = 1 / (1 + load_model().table["p2p_net_peer_overhead"] * (1 - 1 / k))
    ideal = b * nodes / (nodes - 1) * (n - 1) / n
    assert r.busbw_GBps == pytest.approx(ideal * eta, rel=0.03)


def test_faster_nics_never_slower():
    """Doubling NIC bandwidth never slows a multi-node collective."""
    for op in ("all_reduce", "all_to_all"):
        slow = simulate_collective(Cluster.load("zionex", nodes=2), op, 2**26)
        fast = simulate_collective(
            Cluster.load("zionex", nodes=2, overrides=["scale_out.nic_bw=400Gbps"]), op, 2**26
        )
        assert fast.time_s <= slow.time_s


def test_tuner_prefers_latency_protocols_for_small_messages(zionex1):
    """Small all_reduce uses LL, large uses Simple, as NCCL does."""
    assert simulate_collective(zionex1, "all_reduce", 4096).protocol == "LL"
    assert simulate_collective(zionex1, "all_reduce", 2**32).protocol == "Simple"


def test_nvls_only_on_nvswitch3(zionex1):
    """In-switch reduction is offered on NVSwitch gen 3 and is faster than a ring there."""
    from zionsim.base.errors import InputError

    with pytest.raises(InputError, match="NVLS"):
        simulate_collective(zionex1, "all_reduce", 2**30, algorithm="nvls")
    h100 = Cluster.load("dgx_h100", nodes=1)
    ring = simulate_collective(h100, "all_reduce", 2**30, algorithm="ring")
    nvls = simulate_collective(h100, "all_reduce", 2**30, algorithm="nvls")
    assert nvls.busbw_GBps > ring.busbw_GBps


def test_a100_all_reduce_within_10pct_of_measured(zionex1):
    """8× A100 all_reduce busbw within 10 % of the measured curve from 256 MiB (NCCL's cost
    model is 20-55 % faster than this Azure curve between 2 and 128 MiB: docs/validation.md)."""
    from pathlib import Path

    import zionsim

    ref = pd.read_csv(Path(zionsim.__file__).parent / "data/reference/nccl_allreduce_8xa100.csv")
    ref = ref[ref.size_bytes >= 2**28]
    a100 = Cluster.load("dgx_a100", nodes=1)
    for size, measured in zip(ref.size_bytes, ref.busbw_GBps, strict=True):
        sim = simulate_collective(a100, "all_reduce", int(size)).busbw_GBps
        assert abs(sim / measured - 1) < 0.10, (size, sim, measured)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "zionsim.cli", *args], capture_output=True, text=True
    )


def test_cli_rows_and_json(tmp_path):
    """JSON output is a list of rows with nccl-tests' columns; one size gives one row."""
    r = _cli(
        "collective",
        "--topology",
        TINY,
        "--op",
        "all_gather",
        "--sizes",
        "1073741824:1073741824",
        "--format",
        "json",
        "--out",
        str(tmp_path / "o"),
    )
    rows = json.loads(r.stdout)
    assert len(rows) == 1
    assert (
        list(rows[0])[:7]
        == ["size_bytes", "ranks", "algorithm", "protocol", "time_s", "algbw_GBps", "busbw_GBps"][
            :7
        ]
    )
    assert rows[0]["busbw_GBps"] == pytest.approx(rows[0]["algbw_GBps"] * 3 / 4)


def test_cli_is_deterministic(tmp_path):
    """Same inputs twice: byte-identical output and files."""
    outs = []
    for i in range(2):
        d = tmp_path / f"run{i}"
        r = _cli(
            "collective", "--topology", TINY, "--sizes", "1K:1M", "--format", "csv", "--out", str(d)
        )
        outs.append((r.stdout, (d / "summary.json").read_bytes()))
    assert outs[0] == outs[1]


def test_pxn_whole_node_sums_match_the_general_path():
    """PXN's byte sums take a reshape fast path for whole nodes in node-major order; the same
    ranks in another order go through the general (index-array) path: same flows, same bytes."""
    c = Cluster.load("zionex", nodes=3)
    rng = np.random.default_rng(7)
    n = len(c.gpus)
    m = rng.random((n, n)) * 1e6
    m[rng.random((n, n)) < 0.3] = 0.0
    perm = rng.permutation(n)

    def flows(ranks, matrix):
        (phase,) = schedule(c, "all_to_all", ranks, 0.0, "pxn", matrix).phases
        out = {}
        for s, d, b, w in zip(phase.src, phase.dst, phase.nbytes, phase.weight, strict=True):
            out[int(s), int(d)] = (float(b), float(w))
        return out

    fast, general = flows(c.gpus, m), flows(c.gpus[perm], m[np.ix_(perm, perm)])
    assert fast.keys() == general.keys() and len(fast) > n
    for key, (b, w) in fast.items():
        assert b == pytest.approx(general[key][0], rel=1e-12) and w == general[key][1]


def test_double_binary_tree_is_nccls():
    """Tree shapes drawn in NVIDIA/nccl src/graph/trees.cc: the btree on 14 nodes, its mirror on
    12 (even) and its one-node shift on 13 (odd); node 0 (tree 0) has a single child."""
    from zionsim.network.collectives import dtree_parents

    t0 = {8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12, 1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}
    assert dtree_parents(14, 0) == [-1] + [t0[r] for r in range(1, 14)]
    mirror = {3: 11, 1: 3, 7: 3, 0: 1, 2: 1, 5: 7, 9: 7, 4: 5, 6: 5, 8: 9, 10: 9}
    assert dtree_parents(12, 1) == [mirror.get(r, -1) for r in range(12)]
    shift = {9: 1, 5: 9, 0: 9, 3: 5, 7: 5, 11: 0, 2: 3, 4: 3, 6: 7, 8: 7, 10: 11, 12: 11}
    assert dtree_parents(13, 1) == [shift.get(r, -1) for r in range(13)]
    assert dtree_parents(4, 0) == [-1, 2, 0, 2]  # on 4 nodes node 2 has a parent and 2 children


@pytest.mark.parametrize("order", ["node-major", "shuffled", "subset"])
def test_pxn_sums_of_an_outer_sum_match_the_dense_matrix(order):
    """m[i, j] = row[i] + col[j] (peer_bytes.OuterSum, how DLRM layouts keep their all-to-all
    matrices): PXN's relay, node-pair and sender sums in closed form equal the dense ones."""
    from zionsim.network.peer_bytes import OuterSum
    from zionsim.network.point_to_point import _pxn_sums

    c = Cluster.load("zionex", nodes=3)
    rng = np.random.default_rng(3)
    ranks = c.gpus
    if order == "shuffled":
        ranks = ranks[rng.permutation(len(ranks))]
    elif order == "subset":
        ranks = np.sort(rng.choice(ranks, 17, replace=False))
    n = len(ranks)
    row, col = rng.random(n) * 1e6, rng.random(n) * 1e5
    row[rng.random(n) < 0.4], col[rng.random(n) < 0.5] = 0.0, 0.0
    m = OuterSum(row=row, col=col)
    node, local = c.node_of(ranks), c.local_of(ranks)
    dense = _pxn_sums(c, node, local, m.dense())
    for got, want in zip(_pxn_sums(c, node, local, m), dense, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-6)
    assert m.sum(axis=1) == pytest.approx(m.dense().sum(axis=1))
    assert m.T.sum(axis=1) == pytest.approx(m.dense().sum(axis=0))
