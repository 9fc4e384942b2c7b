"""NCCL's per-GPU-generation constants (zionsim/data/nccl_model.yaml): every generation has its own
row, Blackwell's are NCCL 2.27.7's, and a generation without constants is an InputError, never a
silent Ampere (issue 26)."""

from dataclasses import replace

import pytest

from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.network import nccl
from zionsim.network.collectives import schedule

PER_GENERATION = (
    "ll_max_bw",
    "per_channel_ring_ll128_bw",
    "per_channel_tree_ll128_bw",
    "per_channel_tree_bw",
    "per_channel_nvls_tree_bw",
    "nvls_efficiency",
    "nvls_channels",
    "channels",
    "search_inter_speeds_GBps",
    "p2p_channels",
    "collnet_efficiency",
    "launch_fit_of",
)


def _as(c: Cluster, architecture: str) -> Cluster:
    """``c`` with its GPU of ``architecture`` (set on the spec: the topology check accepts only
    the architectures the compute model has rows for)."""
    return replace(c, spec=replace(c.spec, gpu=replace(c.spec.gpu, architecture=architecture)))


def _b200(nodes: int = 1) -> Cluster:
    return _as(Cluster.load("dgx_b200", nodes=nodes), "blackwell")


def _setting(c: Cluster, algorithm: str = "ring"):
    return nccl.setting(c, schedule(c, "all_reduce", c.gpus, 2**20, algorithm))


@pytest.mark.parametrize("key", PER_GENERATION)
def test_every_table_has_a_row_for_every_generation(key):
    assert set(nccl.load_model().table[key]) == set(nccl.GENERATIONS)


def test_blackwell_rows_are_nccl_2_27_tables():
    """2.25.1-2.27.7 set every Blackwell bandwidth to twice Hopper's (tuning.cc); NVLS
    efficiency 0.74 (HEAD) and 24 NVLS channels on one node, 32 across (nvls.cc)."""
    t = nccl.load_model().table
    for key in ("ll_max_bw", "per_channel_tree_ll128_bw", "per_channel_tree_bw"):
        assert t[key]["blackwell"] == pytest.approx([2 * v for v in t[key]["hopper"]])
    assert t["per_channel_ring_ll128_bw"]["blackwell"] == pytest.approx(2 * 36.7)
    assert t["nvls_efficiency"]["blackwell"] == 0.74
    one = _b200(1)
    two = _b200(2)
    assert nccl.generation(one) == "blackwell"
    assert nccl.nvls_channels(t, _setting(one, "nvls")) == 24
    assert nccl.nvls_channels(t, _setting(two, "nvls_tree")) == 32
    assert nccl.nvls_channels(t, _setting(Cluster.load("dgx_h100", nodes=2), "nvls_tree")) == 16


@pytest.mark.parametrize("nodes, channels", [(1, 32), (2, 8)])
def test_blackwell_graph_channels(nodes, channels):
    """One DGX B200: 32 channels (NVIDIA/nccl issue 1646's log).  Across nodes one channel per
    400 Gb/s NIC at sm100's 48 GB/s, not doubled (below 50 with more than 4 channels)."""
    c = _b200(nodes)
    assert nccl.graph_channels(nccl.cluster_model(c, None), _setting(c)) == channels


def test_blackwell_nvls_runs_at_its_own_efficiency():
    """The same B200 node under Hopper's constants (NVLS efficiency 0.85) moves a large NVLS
    all_reduce faster than under Blackwell's (0.74): the row is used, not Hopper's."""
    size = 2.0**33
    black = _b200(1)
    hop = _as(Cluster.load("dgx_b200", nodes=1), "hopper")
    tb = nccl.choose(black, "all_reduce", black.gpus, size, algorithm="nvls").estimate_s
    th = nccl.choose(hop, "all_reduce", hop.gpus, size, algorithm="nvls").estimate_s
    assert tb > th * 1.1


def test_unknown_generation_is_an_input_error():
    c = _as(Cluster.load("dgx_h100", nodes=1), "rubin")
    with pytest.raises(InputError, match="gpu.architecture.*no constants.*allowed: volta"):
        nccl.generation(c)
    with pytest.raises(InputError, match="gpu.architecture"):
        nccl.choose(c, "all_reduce", c.gpus, 1024)


def test_unnamed_gpu_family_is_an_input_error_not_ampere():
    c = Cluster.load("dgx_h100", nodes=1)
    c = replace(c, spec=replace(c.spec, gpu=replace(c.spec.gpu, model="MysteryGPU")))
    with pytest.raises(InputError, match="gpu.model"):
        nccl.generation(c)


def test_launch_of_every_generation_is_the_fit_the_yaml_names():
    m = nccl.load_model()
    for g in nccl.GENERATIONS:
        assert m.launch(g) == m.launch_s[m.table["launch_fit_of"][g]]
    with pytest.raises(InputError, match="launch"):
        m.launch("rubin")


def test_no_nvls_before_hopper():
    """NCCL builds no NVLS graph below sm90: an A100 on a third-generation NVSwitch gets no NVLS
    from the tuner, and asking for it is an InputError, not NVLS at efficiency 1."""
    c = _as(Cluster.load("dgx_b200", nodes=1), "ampere")
    assert c.spec.scale_up.nvswitch_generation >= 3
    assert nccl.choose(c, "all_reduce", c.gpus, 2.0**33).schedule.algorithm != "nvls"
    with pytest.raises(InputError, match="NVLS needs a Hopper"):
        nccl.choose(c, "all_reduce", c.gpus, 2.0**33, algorithm="nvls")
