"""The HGX H100 4-GPU preset: GPUs wired directly by NVLink (no NVSwitch), so NCCL has no NVLS."""

import numpy as np
import pytest

from zionsim.base.errors import InputError
from zionsim.hardware.cluster import Cluster
from zionsim.hardware.topology import load_topology
from zionsim.network.simulate import simulate_collective


def test_hgx_4gpu_is_a_full_mesh_of_six_links_per_pair():
    spec = load_topology("hgx_h100_4gpu", nodes=1)
    assert spec.gpus_per_node == 4
    assert spec.scale_up.kind == "mesh"
    pairs = {frozenset((a, b)): n for a, b, n in spec.scale_up.mesh}
    assert len(pairs) == 6 and set(pairs.values()) == {6}
    # 18 NVLink4 links per GPU, as the 8-GPU board's GPUs have towards their NVSwitches
    links = np.zeros(4, dtype=int)
    for a, b, n in spec.scale_up.mesh:
        links[a] += n
        links[b] += n
    assert (links == 18).all()
    assert spec.scale_out.nics_per_node == 4


def test_no_nvls_without_an_nvswitch():
    mesh = Cluster.load("hgx_h100_4gpu", nodes=1)
    switched = Cluster.load("dgx_h100", nodes=1, gpus_per_node=4)
    assert simulate_collective(switched, "all_reduce", 2**25, algorithm="nvls").time_s > 0
    with pytest.raises(InputError):
        simulate_collective(mesh, "all_reduce", 2**25, algorithm="nvls")
    # the tuner's own choice on the mesh is never an NVLS algorithm, at any size
    for size in (2**16, 2**22, 2**27):
        assert "nvls" not in simulate_collective(mesh, "all_reduce", size).algorithm


def test_ring_on_the_mesh_is_slower_than_on_the_switch():
    """A ring over the direct wiring crosses one peer's 6 links per hop, not a GPU's 18 as
    through the NVSwitches (and 4 fully wired GPUs hold at most 2 arc-disjoint directed rings:
    the complete digraph on 4 vertices has no Hamiltonian decomposition, Tillson 1980): at a
    bandwidth-bound size the mesh's ring all-reduce takes longer."""
    mesh = Cluster.load("hgx_h100_4gpu", nodes=1)
    switched = Cluster.load("dgx_h100", nodes=1, gpus_per_node=4)
    t_mesh = simulate_collective(mesh, "all_reduce", 2**27, algorithm="ring").time_s
    t_switch = simulate_collective(switched, "all_reduce", 2**27, algorithm="ring").time_s
    assert t_mesh > 1.2 * t_switch
