"""Topology files: every built-in loads, bad input gives a one-line error naming file and field."""

import subprocess
import sys

import pytest
import yaml

from tests.conftest import TINY
from zionsim.base.config import builtin_names
from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology


@pytest.mark.parametrize("name", builtin_names("topologies"))
def test_builtins_load_and_build(name):
    """Each shipped topology validates and builds a connected graph at 2 nodes."""
    c = Cluster.load(name, nodes=2)
    assert len(c.gpus) == 2 * c.spec.gpus_per_node


def test_required_platforms_ship():
    """The five platforms of the brief are built in."""
    assert {"bigbasin", "zion", "zionex", "dgx_a100", "dgx_h100"} <= set(
        builtin_names("topologies")
    )


def test_overrides_and_run_options():
    """--set and --nodes change the spec in SI units."""
    s = load_topology("zionex", nodes=4, overrides=["scale_out.nic_bw=400Gbps", "gpu.hbm=80GiB"])
    assert (s.nodes, s.scale_out.nic_bw_Bps, s.gpu.hbm_bytes) == (4, 50e9, 80 * 2**30)


def test_auto_tiers_grow_with_the_node_count():
    """``tiers: auto`` keeps leaf + spine while the leaves fit one spine's ports, then adds a
    core; an explicit tier count is kept (and a 2-tier fabric too big to build is an error)."""
    # ZionEX: radix 64, non-blocking, 8 NICs per node -> 32 NIC ports per leaf, N/4 leaves
    assert load_topology("zionex", nodes=256).scale_out.tiers == 2
    big = Cluster.load("zionex", nodes=257)
    assert big.spec.scale_out.tiers == 3
    assert "t3" in big.router.path_names(big.gpus[0], big.gpus[-1])  # crosses the core
    fixed = load_topology("zionex", nodes=257, overrides=["scale_out.tiers=2"])
    assert fixed.scale_out.tiers == 2
    with pytest.raises(InputError) as err:
        Cluster.build(fixed)
    assert err.value.field == "scale_out.tiers"


def _broken(tmp_path, edit):
    data = yaml.safe_load(open(TINY))
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["gpu"].pop("hbm"), "gpu.hbm"),
        (lambda d: d["scale_out"].update(nic_bw="-100 Gbps"), "scale_out.nic_bw"),
        (lambda d: d["scale_up"].update(kind="warp"), "scale_up.kind"),
        (lambda d: d["links"].pop("roce"), "links.roce"),
        (lambda d: d.update(nodes=0), "nodes"),
    ],
)
def test_bad_fields_name_file_and_field(tmp_path, edit, field):
    """Missing, negative or unknown values name the file and the field."""
    path = _broken(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_topology(path)
    assert err.value.file == path and err.value.field == field


def test_disconnected_graph_is_an_error(tiny_cluster):
    """A graph in which a device reaches nothing is rejected, naming the device."""
    from zionsim.hardware.graph import _check_connected

    g = tiny_cluster.graph.copy()
    g.remove_edges_from([e for e in list(g.edges) if "n1/nic0" in e])
    with pytest.raises(InputError, match="disconnected: n1/nic0"):
        _check_connected(g, tiny_cluster.spec)


def test_cli_unknown_topology_is_one_line():
    """The CLI prints one line and exits 2 on an unknown name."""
    r = subprocess.run(
        [sys.executable, "-m", "zionsim.cli", "topology", "nope"], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown topology 'nope'" in r.stderr
    assert "Traceback" not in r.stderr


def test_topology_summary_and_plot(tmp_path, tiny_cluster):
    """The summary counts devices and bandwidths; the plot renders headless to a PNG."""
    from zionsim.hardware.summary import topology_summary
    from zionsim.io.plots import plot_topology, save

    s = topology_summary(tiny_cluster)
    assert (s["gpus"], s["devices_gpu"], s["devices_nic"]) == (4, 4, 4)
    assert s["scale_up_per_gpu_GBps"] == 100.0  # 4 links × 25 GB/s
    assert s["scale_out_per_gpu_GBps"] == 12.5  # 2 × 100 Gb/s over 2 GPUs
    assert s["bisection_GBps"] == 25.0  # node 0's two 100 Gb/s NICs
    path = tmp_path / "t.png"
    save(plot_topology(tiny_cluster), path)
    assert path.read_bytes()[:4] == b"\x89PNG"
