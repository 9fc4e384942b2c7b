"""The flow model against the per-link reservation oracle (``reservation_oracle.py``) on random
small clusters: no link above 100 % in either, and flow = reservation within 2 % for a collective
that runs alone (no overlap, so nothing for the two models to disagree on)."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import yaml

from tests.conftest import TINY
from tests.network.reservation_oracle import MODELS, run_collective
from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import cluster_from_dict
from zionsim.network import nccl
from zionsim.sim.results import links_table

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
SIZES = (8.0, 4096.0, 2.0**20, 2.0**26, 2.0**30)


def random_cluster(rng: np.random.Generator, architectures: tuple[str, ...] = ()) -> Cluster:
    """A valid small cluster: nodes, GPUs per node, fabric tiers and oversubscription, NICs per
    node and where they attach, NIC, NVLink and PCIe rates, the scale-up kind and SHARP all
    drawn (redrawn while the topology check rejects the combination, e.g. a fabric too small);
    with ``architectures``, the GPU's architecture drawn from them too (else the tiny cluster's
    A100)."""
    while True:
        try:
            c = Cluster.build(cluster_from_dict(_random_topology(rng), TINY))
            break
        except InputError:
            continue
    if not architectures:
        return c
    # NCCL's per-generation constants (NVLS only from Hopper on); set on the spec, as the topology
    # check accepts only the architectures the compute model has rows for
    gpu = replace(c.spec.gpu, architecture=str(rng.choice(architectures)))
    return replace(c, spec=replace(c.spec, gpu=gpu))


def _random_topology(rng: np.random.Generator) -> dict:
    d = copy.deepcopy(yaml.safe_load(open(TINY)))
    tiers = int(rng.choice([1, 2, 3]))
    d["nodes"] = int(rng.choice([1, 2, 3, 4, 6]))
    d["gpus_per_node"] = int(rng.choice([1, 2, 4, 8]))
    d["scale_up"] = {
        **d["scale_up"],
        "nvswitch_generation": int(rng.choice([2, 3])),
        "link_bw": f"{int(rng.choice([10, 25, 50]))} GB/s",
    }
    if rng.random() < 0.2:  # PCIe only
        d["scale_up"] = {"kind": "none"}
    d["pcie"] = {**d["pcie"], "bw": f"{int(rng.choice([16, 32, 64]))} GB/s"}
    d["scale_out"] = {
        **d["scale_out"],
        "nic_bw": f"{int(rng.choice([50, 100, 200, 400]))} Gbps",
        "nics_per_node": int(rng.choice([1, 2, 4, 8])),
        "nic_attach": str(rng.choice(["pcie_switch", "host"])),
        "tiers": tiers,
        "switch_radix": 64 if tiers == 1 else int(rng.choice([4, 8, 16])),
        "oversubscription": float(rng.choice([1.0, 2.0, 4.0])),
        "rail_optimized": bool(rng.random() < 0.3),
    }
    d["collectives"] = {"sharp": bool(rng.random() < 0.3)}  # in-network reduction (CollNet)
    for kind, eff in zip(("nvlink", "pcie", "roce"), rng.uniform(0.6, 1.0, 3), strict=True):
        d["links"][kind] = {**d["links"][kind], "efficiency": float(eff)}
    return d


def run_alone(cluster, op: str, size: float, model: str, algorithm: str | None = None):
    """(time s, links table as links.csv reports it) of one collective on an idle network."""
    ranks = cluster.gpus[[0, -1]] if op == "send_recv" else cluster.gpus
    choice = nccl.choose(cluster, op, ranks, size, algorithm=algorithm)
    t, net = run_collective(cluster, choice, model)
    return t, links_table(cluster, net.stats, net.env.now)


def _cases(seed: int, n: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        c = random_cluster(rng, nccl.GENERATIONS)
        ops = [op for op in OPS if len(c.gpus) > 1]
        yield c, [(op, float(rng.choice(SIZES))) for op in ops]


@pytest.mark.parametrize("model", MODELS)
def test_no_link_above_capacity_on_random_clusters(model):
    """Every collective the tuner picks, on 20 random clusters, loads no link past 100 % (the
    utilisation links.csv reports), in the flow model and in the oracle."""
    checked = 0
    for c, cases in _cases(11, 20):
        for op, size in cases:
            _, links = run_alone(c, op, size, model)
            assert links["utilisation"].max() <= 1 + 1e-9, (c.spec.raw, op, size)
            checked += 1
    assert checked >= 60


def test_flow_equals_reservation_for_a_collective_alone():
    """One collective alone (tuner's choice, every op, sizes 8 B–1 GiB, random clusters): max-min
    flows finish within 2 % of the per-link reservation bound."""
    worst = 0.0
    for c, cases in _cases(12, 20):
        for op, size in cases:
            t_flow, _ = run_alone(c, op, size, "flow")
            t_res, _ = run_alone(c, op, size, "reservation")
            worst = max(worst, abs(t_flow / t_res - 1))
            assert t_flow == pytest.approx(t_res, rel=0.02), (c.spec.raw, op, size)
    assert worst < 0.02


@pytest.mark.parametrize(
    "op,alg",
    [("all_reduce", a) for a in ("ring", "tree", "hierarchical")]
    + [("all_to_all", "direct"), ("all_to_all", "pxn"), ("all_gather", "ring")],
)
def test_flow_equals_reservation_per_algorithm_on_zionex(op, alg):
    """Each algorithm forced, 2 ZionEX nodes, 64 KiB, 64 MiB and 256 MiB: flow within 2 % of
    the reservation bound."""
    c = Cluster.load("zionex", nodes=2)
    for size in (2.0**16, 2.0**26, 2.0**28):
        t_flow, _ = run_alone(c, op, size, "flow", alg)
        t_res, _ = run_alone(c, op, size, "reservation", alg)
        assert t_flow == pytest.approx(t_res, rel=0.02), size


def test_flow_equals_reservation_when_uncontended(zionex1):
    """On one NVSwitch node a ring all_reduce has no contention: the models agree within 1 %."""
    for size in (2.0**20, 2.0**30):
        t_flow, _ = run_alone(zionex1, "all_reduce", size, "flow", "ring")
        t_res, _ = run_alone(zionex1, "all_reduce", size, "reservation", "ring")
        assert t_flow == pytest.approx(t_res, rel=0.01)


def test_uneven_all_to_allv_agrees():
    """A skewed all-to-allv (PXN, 2 H100 nodes): flow within 2 % of the reservation bound."""
    c = Cluster.load("dgx_h100", nodes=2)
    rng = np.random.default_rng(3)
    m = rng.pareto(1.5, (16, 16)) * 2**20
    np.fill_diagonal(m, 0)
    choice = nccl.choose(c, "all_to_all", c.gpus, float(m.sum(1).max()), matrix=m)
    times = {model: run_collective(c, choice, model)[0] for model in MODELS}
    assert times["flow"] == pytest.approx(times["reservation"], rel=0.02)
