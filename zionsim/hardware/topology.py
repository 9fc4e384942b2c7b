"""Cluster specifications: a topology YAML → :class:`ClusterSpec`.

A topology file holds one node type plus the scale-out fabric that joins the nodes.

The file format is documented in ``docs/topologies.md``; ``topologies/zionex.yaml`` is the
reference example.  Everything here is validated once, at load, and stored in SI units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zionsim.base import bounds
from zionsim.base.config import Fields, apply_overrides, load_with_overrides, parse_override
from zionsim.hardware.gpus import expand_gpu_preset

DTYPES = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8")
SCALE_UP_KINDS = ("nvswitch", "mesh", "none")
SCALE_OUT_KINDS = ("roce", "infiniband", "ethernet")
NIC_ATTACH = ("pcie_switch", "host")
LINK_KINDS = ("nvlink", "pcie", "upi", "dram") + SCALE_OUT_KINDS
#: the role of each link kind, so topologies with different kinds (roce vs ethernet) compare
LINK_ROLES = {
    "nvlink": "scale_up",
    "pcie": "pcie",
    "upi": "socket",
    "dram": "memory",
    **{kind: "scale_out" for kind in SCALE_OUT_KINDS},
    "frontend": "front_end",
}
#: GPU generations with compute-model and NCCL parameters (``gpu.architecture``)
GPU_ARCHITECTURES = ("volta", "ampere", "hopper", "blackwell")
#: ... and ``cpu``: a CPU trainer host whose CPU complex stands in the GPU's place (one rank per
#: host, no NCCL; docs/topologies.md "CPU trainers")
TRAINER_ARCHITECTURES = (*GPU_ARCHITECTURES, "cpu")


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: peak FLOP/s per dtype, HBM capacity and bandwidth."""

    model: str
    flops: dict[str, float]
    hbm_bytes: float
    hbm_bw_Bps: float
    #: compute-model parameters fitted for this GPU (topology ``compute:``), over its
    #: architecture's defaults: ``launch_s``, ``stream_eff``, ``gather_eff`` and ``gemm``
    #: (``eff_max``, ``half_time_s``, ``exponent``); empty = the defaults
    compute: dict = field(default_factory=dict, compare=False)
    #: the generation whose compute-model and NCCL parameters apply (``gpu.architecture``);
    #: empty = the family named in ``model`` (``hardware.compute.architecture``)
    architecture: str = ""
    #: streaming multiprocessors (``gpu.sm_count``) and the idle latency of a load that misses
    #: L2 (``gpu.memory_latency``), for the latency bound of random-row gathers
    #: (``hardware.compute.gather_bandwidth_Bps``); 0 = the architecture's default
    sm_count: int = 0
    memory_latency_s: float = 0.0
    #: L2 cache capacity (``gpu.l2_cache``), for the L2 hits of embedding lookups
    #: (``hardware.l2_cache``); 0 = the architecture's default
    l2_bytes: float = 0.0


@dataclass(frozen=True)
class HostSpec:
    """CPU sockets of one node; ``dram_bytes`` is the node total, bandwidths are per socket."""

    sockets: int
    dram_bytes: float
    dram_bw_Bps: float
    socket_link_bw_Bps: float


@dataclass(frozen=True)
class ScaleUpSpec:
    """Intra-node GPU fabric: an NVSwitch, a point-to-point NVLink mesh, or none (PCIe only)."""

    kind: str
    link_bw_Bps: float = 0.0
    links_per_gpu: int = 0
    nvswitch_generation: int = 0
    mesh: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class PcieSpec:
    """PCIe tree of a node: ``bw_Bps`` per GPU or NIC link and ``uplink_bw_Bps`` per
    switch-to-socket link (bytes/s per direction), and ``switches`` per node (0: GPUs and NICs
    hang off the sockets)."""

    bw_Bps: float
    switches: int
    uplink_bw_Bps: float


@dataclass(frozen=True)
class ScaleOutSpec:
    """Scale-out fabric: NICs per node and a folded-Clos of ``tiers`` switch levels."""

    kind: str
    nic_bw_Bps: float
    nics_per_node: int
    nic_attach: str
    switch_radix: int
    tiers: int
    oversubscription: float
    rail_optimized: bool


@dataclass(frozen=True)
class LinkSpec:
    """Achieved fraction of line rate and per-hop latency of one link kind."""

    efficiency: float
    latency_s: float


@dataclass(frozen=True)
class FrontEndSpec:
    """The data-center (front-end) network beside the training fabric, and its pool of CPU
    service hosts (EASGD sync servers, embedding parameter servers).  Training hosts reach it
    through ``nics_per_node`` NICs on their CPU sockets; each service host is one CPU with its
    DRAM behind one NIC.  The front-end switch is non-blocking (assumption)."""

    nic_bw_Bps: float
    nics_per_node: int
    efficiency: float
    latency_s: float
    servers: int
    server_dram_bytes: float
    server_dram_bw_Bps: float
    server_nic_bw_Bps: float


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster: ``nodes`` identical nodes on one scale-out fabric."""

    name: str
    description: str
    nodes: int
    gpus_per_node: int
    gpu: GpuSpec
    host: HostSpec
    scale_up: ScaleUpSpec
    pcie: PcieSpec
    scale_out: ScaleOutSpec
    links: dict[str, LinkSpec]
    front_end: FrontEndSpec | None = None
    #: multiplies every software latency of the collective model (1 = as calibrated)
    collective_latency_scale: float = 1.0
    #: NCCL protocol parameters fitted for this cluster (``collectives.protocols``), over the
    #: built-in model: overhead (s) and payload efficiency per protocol; empty = built-in
    collective_overhead_s: dict[str, float] = field(default_factory=dict)
    collective_efficiency: dict[str, float] = field(default_factory=dict)
    #: host CPU vendor as NCCL sees it (``collectives.cpu_vendor``): intel or amd; sets NCCL's
    #: net post overhead per ring step and its multi-node LL bandwidth cap
    collective_cpu_vendor: str = "intel"
    #: in-network reduction (``collectives.sharp``: InfiniBand SHARP through NCCL's CollNet
    #: plugin): lets NVLS span nodes, as NCCL does only with CollNet
    collective_sharp: bool = False
    file: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def gpus(self) -> int:
        """GPUs in the whole cluster (nodes × GPUs per node)."""
        return self.nodes * self.gpus_per_node

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The same cluster with another node count (validated like a file value)."""
        return cluster_from_dict({**self.raw, "nodes": nodes}, self.file)


TOP_KEYS = {
    "name",
    "collectives",
    "compute",
    "description",
    "references",
    "nodes",
    "gpus_per_node",
    "gpu",
    "host",
    "scale_up",
    "pcie",
    "scale_out",
    "links",
    "front_end",
}


#: ``front_end.*`` fields a file may leave out (so ``--set front_end.servers=16`` reaches them);
#: docs/topologies.md.  Sources:
#: [dsi] M. Zhao et al., ISCA 2022 (arXiv:2108.09373), Sec. 2: a ZionEX node's 4 CPUs reach the
#: front-end network through 100 Gb/s NICs, one per CPU; Meta's CPU hosts use 100 Gb/s NICs.
#: [nccl209] NVIDIA/nccl issue 209: NCCL over TCP on Ethernet reaches 0.70 of line rate.
#: [tcp_rtt] Linux TCP round trip on a data-center network is tens of microseconds (Google's
#: Snap/Pony Express, SOSP 2019, report ~20-30 us kernel TCP round trips): 10 us one way per hop.
#: [skx] Intel Xeon Scalable (Skylake-SP): 6 DDR4-2666 channels = 128 GB/s per socket.
#: [shadowsync] Q. Zheng et al., ShadowSync (arXiv:2003.03477): trainers and parameter servers
#: (sparse PSs for embeddings, dense "sync PSs" for EASGD) are separate CPU hosts.
FRONT_END_DEFAULTS = {
    "nic_bw": "100 Gbps",  # per front-end NIC of a training host [dsi]
    "nics_per_node": "auto",  # auto: one per CPU socket [dsi]
    "efficiency": 0.70,  # TCP over Ethernet [nccl209]
    "latency": "10 us",  # per front-end hop [tcp_rtt]
    "servers": 16,  # assumption: the pool of CPU service hosts a job may use [shadowsync]
    "server": {
        "dram": "256 GB",  # assumption: a 2-socket host with 16 x 16 GB DIMMs
        "dram_bw": "256 GB/s",  # 2 sockets x 128 GB/s peak [skx]
        "nic_bw": "100 Gbps",  # [dsi]
    },
}

#: ``collectives.*`` fields a file may leave out (so ``--set`` can reach them): docs/topologies.md
COLLECTIVE_DEFAULTS = {"latency_scale": 1.0, "cpu_vendor": "intel", "sharp": False}


def load_topology(
    name_or_path: str | Path,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    overrides: dict[str, Any] | list[str] | None = None,
) -> ClusterSpec:
    """Load a built-in topology by name, or a YAML path, with run options and ``--set`` overrides.

    >>> load_topology("zionex", nodes=2).gpus
    16
    A GPU preset (``gpu: h100`` in the file or ``--set gpu=h100``, ``hardware.gpus``) is resolved
    before the other overrides, so ``--set scale_up.link_bw=...`` wins over the preset's NVLink.
    """
    if isinstance(overrides, list):
        overrides = dict(parse_override(o) for o in overrides)
    overrides = overrides or {}
    first = {k: v for k, v in overrides.items() if k == "gpu"}
    data, file = load_with_overrides(
        name_or_path,
        "topologies",
        first,
        defaults={"collectives": COLLECTIVE_DEFAULTS, "front_end": FRONT_END_DEFAULTS},
    )
    rest = {k: v for k, v in overrides.items() if k != "gpu"}
    data = apply_overrides(expand_gpu_preset(data, file), rest, file)
    if nodes is not None:
        data["nodes"] = nodes
    if gpus_per_node is not None:
        data["gpus_per_node"] = gpus_per_node
    return cluster_from_dict(data, file)


def cluster_from_dict(data: dict, file: str = "<topology>") -> ClusterSpec:
    """Validate a topology mapping; every error names the file and the field."""
    data = expand_gpu_preset(data, file)
    f = Fields(data, file)
    f.check_keys(TOP_KEYS)
    gpus_per_node = f.integer("gpus_per_node")
    nodes = f.integer("nodes")
    bounds.count(nodes * gpus_per_node, "gpus", file=file, field="nodes x gpus_per_node")
    coll = f.sub("collectives", {})
    spec = ClusterSpec(
        name=str(f.raw("name", Path(file).stem)),
        description=str(f.raw("description", "")),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu=replace(_gpu(f.sub("gpu")), compute=_compute(f.sub("compute", {}))),
        host=_host(f.sub("host")),
        scale_up=_scale_up(f.sub("scale_up"), gpus_per_node),
        pcie=_pcie(f.sub("pcie")),
        scale_out=_scale_out(f.sub("scale_out"), f.integer("nodes")),
        links=_links(f.sub("links")),
        front_end=_front_end(f, _host(f.sub("host")).sockets),
        collective_latency_scale=_collectives(coll),
        collective_overhead_s=_protocols(coll, "overhead"),
        collective_efficiency=_protocols(coll, "efficiency"),
        collective_cpu_vendor=coll.choice("cpu_vendor", ("intel", "amd"), "intel"),
        collective_sharp=coll.flag("sharp", False),
        file=file,
        raw=data,
    )
    _check_link_kinds(spec, f)
    return spec


def _gpu(f: Fields) -> GpuSpec:
    f.check_keys(
        {
            "model",
            "architecture",
            "flops",
            "hbm",
            "hbm_bw",
            "sm_count",
            "memory_latency",
            "l2_cache",
        }
    )
    arch = "architecture" in f.data
    flops_f = f.sub("flops")
    flops_f.check_keys(DTYPES)
    flops = {k: flops_f.quantity(k, "flops") for k in flops_f.data}
    if not flops:
        raise f.error("flops", "needs at least one dtype", allowed=", ".join(DTYPES))
    return GpuSpec(
        model=str(f.raw("model", "gpu")),
        flops=flops,
        hbm_bytes=f.quantity("hbm", "bytes"),
        hbm_bw_Bps=f.quantity("hbm_bw", "bandwidth"),
        architecture=f.choice("architecture", TRAINER_ARCHITECTURES) if arch else "",
        sm_count=f.integer("sm_count") if "sm_count" in f.data else 0,
        memory_latency_s=(
            f.quantity("memory_latency", "time") if "memory_latency" in f.data else 0.0
        ),
        l2_bytes=f.quantity("l2_cache", "bytes") if "l2_cache" in f.data else 0.0,
    )


def _host(f: Fields) -> HostSpec:
    f.check_keys({"sockets", "dram", "dram_bw", "socket_link_bw"})
    sockets = f.integer("sockets")
    link = f.quantity("socket_link_bw", "bandwidth", 1.0 if sockets == 1 else ...)
    return HostSpec(
        sockets=sockets,
        dram_bytes=f.quantity("dram", "bytes"),
        dram_bw_Bps=f.quantity("dram_bw", "bandwidth"),
        socket_link_bw_Bps=link,
    )


def _scale_up(f: Fields, gpus_per_node: int) -> ScaleUpSpec:
    kind = f.choice("kind", SCALE_UP_KINDS)
    if kind == "none":
        f.check_keys({"kind"})
        return ScaleUpSpec(kind)
    if kind == "nvswitch":
        f.check_keys({"kind", "link_bw", "links_per_gpu", "nvswitch_generation"})
        return ScaleUpSpec(
            kind,
            link_bw_Bps=f.quantity("link_bw", "bandwidth"),
            links_per_gpu=f.integer("links_per_gpu"),
            nvswitch_generation=f.integer("nvswitch_generation"),
        )
    f.check_keys({"kind", "link_bw", "mesh"})
    mesh = f.raw("mesh")
    triples = []
    if not isinstance(mesh, list):
        raise f.error("mesh", "expected a list of [gpu_a, gpu_b, n_links]")
    for i, item in enumerate(mesh):
        ok = (
            isinstance(item, list)
            and len(item) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        )
        if (
            not ok
            or not (0 <= item[0] < gpus_per_node and 0 <= item[1] < gpus_per_node)
            or item[0] == item[1]
            or item[2] < 1
        ):
            raise f.error(
                f"mesh[{i}]",
                f"bad entry {item!r}",
                allowed=f"[a, b, n] with a != b in 0..{gpus_per_node - 1}, n >= 1",
            )
        pair = {item[0], item[1]}
        if any({a, b} == pair for a, b, _ in triples):
            raise f.error(
                f"mesh[{i}]",
                f"GPUs {item[0]} and {item[1]} are listed twice",
                allowed="one entry per GPU pair, its link count as n",
            )
        triples.append(
            (
                item[0],
                item[1],
                bounds.count(item[2], "links_per_gpu", file=f.file, field=f.path(f"mesh[{i}]")),
            )
        )
    return ScaleUpSpec(kind, link_bw_Bps=f.quantity("link_bw", "bandwidth"), mesh=tuple(triples))


def _pcie(f: Fields) -> PcieSpec:
    f.check_keys({"bw", "switches", "uplink_bw"})
    return PcieSpec(
        bw_Bps=f.quantity("bw", "bandwidth"),
        switches=f.integer("switches", minimum=0),
        uplink_bw_Bps=f.quantity("uplink_bw", "bandwidth"),
    )


def _scale_out(f: Fields, nodes: int) -> ScaleOutSpec:
    f.check_keys(
        {
            "kind",
            "nic_bw",
            "nics_per_node",
            "nic_attach",
            "switch_radix",
            "tiers",
            "oversubscription",
            "rail_optimized",
        }
    )
    over = f.quantity("oversubscription", "fraction", 1.0)
    if over < 1.0:
        raise f.error("oversubscription", f"must be >= 1 (down:up ratio), got {over:g}")
    radix, npn = f.integer("switch_radix", minimum=2), f.integer("nics_per_node")
    rail = f.flag("rail_optimized", False)
    if f.raw("tiers", "auto") == "auto":
        leaves = leaf_count(nodes, npn, radix, over, rail)
        tiers = 2 if leaves <= radix else 3
    else:
        tiers = f.integer("tiers")
        if tiers > 3:
            raise f.error("tiers", f"must be 1, 2, 3 or auto, got {tiers}")
    return ScaleOutSpec(
        kind=f.choice("kind", SCALE_OUT_KINDS),
        nic_bw_Bps=f.quantity("nic_bw", "bandwidth"),
        nics_per_node=npn,
        nic_attach=f.choice("nic_attach", NIC_ATTACH),
        switch_radix=radix,
        tiers=tiers,
        oversubscription=over,
        rail_optimized=rail,
    )


def leaf_down_ports(radix: int, oversubscription: float) -> int:
    """Ports of a leaf switch that face NICs: ``radix·o/(1+o)``, at least one."""
    return max(1, math.floor(radix * oversubscription / (1 + oversubscription)))


def leaf_count(
    nodes: int, nics_per_node: int, radix: int, oversubscription: float, rail_optimized: bool
) -> int:
    """Leaf switches of a multi-tier Clos holding every NIC (rail-optimised: per rail)."""
    down = leaf_down_ports(radix, oversubscription)
    if rail_optimized:
        return math.ceil(nodes / down) * nics_per_node
    return math.ceil(nodes * nics_per_node / down)


def _front_end(top: Fields, sockets: int) -> FrontEndSpec:
    """``front_end:`` over :data:`FRONT_END_DEFAULTS` (a file may leave out any field)."""
    from zionsim.base.config import merge_fields

    data = merge_fields(FRONT_END_DEFAULTS, top.sub("front_end", {}).data)
    f = Fields(data, top.file, "front_end")
    f.check_keys(set(FRONT_END_DEFAULTS))
    s = f.sub("server")
    s.check_keys(set(FRONT_END_DEFAULTS["server"]))
    nics = sockets if f.raw("nics_per_node") == "auto" else f.integer("nics_per_node")
    return FrontEndSpec(
        nic_bw_Bps=f.quantity("nic_bw", "bandwidth"),
        nics_per_node=nics,
        efficiency=f.fraction("efficiency"),
        latency_s=f.quantity("latency", "time", strict=False),
        servers=f.integer("servers"),
        server_dram_bytes=s.quantity("dram", "bytes"),
        server_dram_bw_Bps=s.quantity("dram_bw", "bandwidth"),
        server_nic_bw_Bps=s.quantity("nic_bw", "bandwidth"),
    )


def _links(f: Fields) -> dict[str, LinkSpec]:
    f.check_keys(LINK_KINDS)
    out = {}
    for kind in f.data:
        lf = f.sub(kind)
        lf.check_keys({"efficiency", "latency"})
        out[kind] = LinkSpec(
            efficiency=lf.fraction("efficiency"),
            latency_s=lf.quantity("latency", "time", strict=False),
        )
    return out


def _collectives(f: Fields) -> float:
    f.check_keys({"latency_scale", "protocols", "cpu_vendor", "sharp"})
    return f.quantity("latency_scale", "fraction", 1.0, strict=False)


#: NCCL protocols whose parameters ``collectives.protocols`` may set (as ``nccl.PROTOCOLS``)
PROTOCOLS = ("LL", "LL128", "Simple")


def _protocols(f: Fields, what: str) -> dict[str, float]:
    """``collectives.protocols.<P>.overhead`` (s) or ``.efficiency`` of each protocol given."""
    pf = f.sub("protocols", {})
    pf.check_keys(PROTOCOLS)
    out = {}
    for p in pf.data:
        one = pf.sub(p)
        one.check_keys({"overhead", "efficiency"})
        if what in one.data:
            if what == "efficiency":
                out[p] = one.fraction(what)
            else:
                out[p] = one.quantity(what, "time", strict=False)
    return out


def _compute(f: Fields) -> dict:
    """Compute-model parameters of ``compute:`` in the keys of ``compute.ArchModel`` (SI)."""
    f.check_keys({"launch_overhead", "stream_efficiency", "gather_efficiency", "gemm"})
    out: dict = {}
    if "launch_overhead" in f.data:
        out["launch_s"] = f.quantity("launch_overhead", "time", strict=False)
    for key, name in (("stream_efficiency", "stream_eff"), ("gather_efficiency", "gather_eff")):
        if key in f.data:
            out[name] = f.fraction(key)
    if "gemm" in f.data:
        g = f.sub("gemm")
        g.check_keys({"eff_max", "half_time", "exponent"})
        gemm = {}
        if "eff_max" in g.data:
            gemm["eff_max"] = g.fraction("eff_max")
        if "half_time" in g.data:
            gemm["half_time_s"] = g.quantity("half_time", "time")
        if "exponent" in g.data:
            gemm["exponent"] = g.quantity("exponent", "fraction")
        out["gemm"] = gemm
    return out


def _check_link_kinds(spec: ClusterSpec, f: Fields) -> None:
    needed = {"pcie", "dram", spec.scale_out.kind}
    if spec.scale_up.kind != "none":
        needed.add("nvlink")
    if spec.host.sockets > 1:
        needed.add("upi")
    missing = sorted(needed - set(spec.links))
    if missing:
        raise f.error(
            f"links.{missing[0]}",
            "missing: every link kind in use needs an efficiency and a latency",
            allowed=", ".join(sorted(needed)),
        )


def scaled(spec: ClusterSpec, **changes: Any) -> ClusterSpec:
    """A copy of ``spec`` with top-level fields replaced (no re-validation: for tests)."""
    return replace(spec, **changes)
