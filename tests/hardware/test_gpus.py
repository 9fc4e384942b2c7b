"""GPU presets (zionsim/data/gpus.yaml): selection, NVLink, precedence, sources."""

from __future__ import annotations

import re

import pytest

from zionsim.base.config import builtin_dir
from zionsim.base.errors import InputError
from zionsim.hardware.compute import architecture
from zionsim.hardware.gpus import PRESET_FILE, find_preset, load_presets, preset_names
from zionsim.hardware.topology import load_topology
from zionsim.network.nccl import generation

EXPECTED = {  # name: (model, architecture, fp16 FLOP/s, HBM bytes, HBM B/s, NVLink per GPU B/s)
    "v100": ("V100-SXM2-32GB", "volta", 125e12, 32e9, 900e9, 150e9),
    "a100_40gb": ("A100-SXM4-40GB", "ampere", 312e12, 40e9, 1555e9, 300e9),
    "a100_80gb": ("A100-SXM4-80GB", "ampere", 312e12, 80e9, 2039e9, 300e9),
    "h100_sxm": ("H100-SXM5-80GB", "hopper", 989e12, 80e9, 3350e9, 450e9),
    "h200": ("H200-SXM5-141GB", "hopper", 989e12, 141e9, 4800e9, 450e9),
    "b200": ("B200-SXM-180GB", "blackwell", 2250e12, 180e9, 7672e9, 900e9),
}


def test_the_six_presets():
    assert preset_names() == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_set_gpu_on_an_nvswitch_topology(name):
    """``--set gpu=NAME`` on ZionEX: the preset's GPU and its NVLink on the NVSwitch."""
    spec = load_topology("zionex", nodes=1, overrides=[f"gpu={name}"])
    model, arch, fp16, hbm, hbm_bw, nvlink = EXPECTED[name]
    assert spec.gpu.model == model
    assert spec.gpu.flops["fp16"] == pytest.approx(fp16)
    assert (spec.gpu.hbm_bytes, spec.gpu.hbm_bw_Bps) == pytest.approx((hbm, hbm_bw))
    su = spec.scale_up
    assert su.link_bw_Bps * su.links_per_gpu == pytest.approx(nvlink)
    assert architecture(spec.gpu) == arch
    assert spec.host == load_topology("zionex", nodes=1).host  # only GPU and NVLink change


def test_nccl_generation_follows_the_preset():
    from zionsim.hardware.cluster import Cluster

    assert generation(Cluster.load("zionex", nodes=1, overrides=["gpu=h100"])) == "hopper"
    assert generation(Cluster.load("dgx_h100", nodes=1, overrides=["gpu=v100"])) == "volta"


def test_nvswitch_generation_enables_nvls():
    assert load_topology("zionex", overrides=["gpu=a100"]).scale_up.nvswitch_generation == 2
    assert load_topology("zionex", overrides=["gpu=h100"]).scale_up.nvswitch_generation == 3
    assert load_topology("zionex", overrides=["gpu=b200"]).scale_up.nvswitch_generation == 4


def test_mesh_keeps_its_wiring():
    """On an NVLink mesh (Big Basin) only the link speed follows the preset."""
    base = load_topology("bigbasin")
    b200 = load_topology("bigbasin", overrides=["gpu=b200"])
    assert b200.scale_up.mesh == base.scale_up.mesh
    assert b200.scale_up.link_bw_Bps == pytest.approx(50e9)
    assert b200.gpu.model == "B200-SXM-180GB"


def test_topology_field_and_set_agree(tmp_path):
    """``gpu: h100`` in a file is the same as ``--set gpu=h100``; names are case-insensitive."""
    text = (builtin_dir("topologies") / "zionex.yaml").read_text()
    start, end = text.index("\ngpu:\n"), text.index("\nhost:\n")
    path = tmp_path / "mine.yaml"
    path.write_text(text[:start] + "\ngpu: H100-SXM\n" + text[end:])
    from_file = load_topology(path)
    from_set = load_topology("zionex", overrides={"gpu": "h100"})
    assert from_file.gpu == from_set.gpu
    assert from_file.scale_up == from_set.scale_up


def test_explicit_overrides_win_over_the_preset():
    spec = load_topology(
        "zionex", overrides=["scale_up.link_bw=50GB/s", "gpu=h100", "gpu.hbm=96GB"]
    )
    assert spec.scale_up.link_bw_Bps == pytest.approx(50e9)
    assert spec.scale_up.links_per_gpu == 18
    assert spec.gpu.hbm_bytes == pytest.approx(96e9)
    mapping = load_topology("zionex", overrides={"gpu": {"preset": "h200", "hbm": "100 GB"}})
    assert mapping.gpu.hbm_bytes == pytest.approx(100e9)
    assert mapping.gpu.hbm_bw_Bps == pytest.approx(4800e9)


def test_unknown_preset_names_the_field():
    with pytest.raises(InputError) as err:
        load_topology("zionex", overrides=["gpu=h9000"])
    line = err.value.one_line()
    assert "gpu" in line and "h9000" in line and "h100_sxm" in line
    with pytest.raises(InputError, match="gpu.preset"):
        load_topology("zionex", overrides={"gpu": {"preset": 100}})
    with pytest.raises(InputError, match="gpu.architecture"):
        load_topology("zionex", overrides={"gpu": {"preset": "a100", "architecture": "kepler"}})


def test_builtin_topologies_match_their_presets():
    """The presets repeat the built-in topologies' GPUs (one set of numbers, two places)."""
    for topo, name in (("zionex", "a100_40gb"), ("dgx_a100", "a100_80gb"), ("dgx_h100", "h100")):
        own = load_topology(topo, nodes=1)
        preset = load_topology(topo, nodes=1, overrides=[f"gpu={name}"])
        assert own.gpu.model == preset.gpu.model
        assert own.gpu.hbm_bytes == preset.gpu.hbm_bytes
        assert own.gpu.hbm_bw_Bps == preset.gpu.hbm_bw_Bps
        assert {k: preset.gpu.flops[k] for k in own.gpu.flops} == own.gpu.flops
        assert own.scale_up == preset.scale_up


def test_aliases_are_unique():
    seen = [n for name, p in load_presets().items() for n in (name, *p.get("aliases", ()))]
    assert len(seen) == len(set(seen))
    assert find_preset("A100-SXM4-80GB")[0] == "a100_80gb"


def test_every_number_cites_a_source():
    """Each value line under ``presets:`` carries ``[key]`` of ``sources`` or says assumption."""
    text = PRESET_FILE.read_text()
    sources = set(re.findall(r"^  (\w+): ", text.split("\npresets:\n")[0], re.M))
    for line in text.split("\npresets:\n")[1].splitlines():
        if re.match(r"\s+\w+: [\d.]+( \S+)?\s*(#|$)", line):
            keys = re.findall(r"\[(\w+)\]", line)
            assert keys or "assumption" in line, line
            assert set(keys) <= sources, line
