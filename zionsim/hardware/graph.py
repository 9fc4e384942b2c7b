"""Hardware graph: a :class:`~zionsim.hardware.topology.ClusterSpec` → a :class:`HardwareGraph`
(plain dicts and lists, so that building a cluster needs no networkx; ``to_networkx`` gives the
``networkx.DiGraph`` that ``Cluster.graph`` exposes for plots and graph algorithms).

Nodes are devices, named ``n<k>/<device>`` inside node ``k`` (``gpu<i>``, ``nvswitch``,
``cpu<s>``, ``dram<s>``, ``pcie<p>``, ``nic<j>``) and ``leaf<l>``, ``t2.<p>``, ``t3`` for the
scale-out switches.  Each carries ``kind`` and its device attributes.  A full-duplex link is two
directed edges with ``kind``, ``bw_Bps`` (line rate), ``capacity_Bps`` (line rate × the kind's
achieved efficiency), ``latency_s`` and an integer ``id`` in creation order (the index into the
network's arrays).

Modelling assumptions:

1. An NVSwitch baseboard is one switch node; each GPU has ``links_per_gpu × link_bw`` to it.
2. GPUs and NICs are spread evenly over the PCIe switches; switch ``p`` hangs off socket
   ``p × sockets // switches``.  With no PCIe switches, devices hang off the sockets directly.
3. CPU sockets are fully connected by socket links (UPI); each socket owns an equal share of
   the node's DRAM, modelled as a ``dram<s>`` node whose edge to the socket is the memory bandwidth.
4. The scale-out fabric is a folded Clos.  Leaves give ``radix·o/(1+o)`` ports to NICs and the
   rest to the tier above (oversubscription ``o``).  Equal-cost spines are merged into one node per
   pod (``t2.<p>``) and one core (``t3``), i.e. ECMP is treated as ideal fluid spreading over the
   spines; per-flow hash collisions are not modelled.  Ports run at the NIC speed.
5. Edges of every node are created in the same order, so edge ``e`` of node 0 is edge
   ``e + k·edges_per_node`` of node ``k`` (the router relies on this).
6. The front-end (data-center) network is one non-blocking switch ``fe`` after the fabric: each
   node's front-end NICs hang off its CPU sockets (NIC ``j`` on socket ``j·sockets//nics``; a
   socket's NICs are one link of their summed speed), and each CPU service host ``svc<j>`` is a
   ``server_cpu`` behind one NIC with its DRAM (``server_dram``) behind a ``dram`` link.  The
   router does not route through it: ``services.py`` builds those paths.
"""

from __future__ import annotations

import math
from collections import deque

from zionsim.base.errors import InputError
from zionsim.hardware.topology import ClusterSpec, leaf_count, leaf_down_ports


class HardwareGraph:
    """Devices (``nodes``: name → attributes, in creation order) and directed links
    (``edges``: ``(u, v, attributes)`` in id order; ``edge_id[u, v]``); ``graph`` holds
    graph-level attributes, as networkx's ``G.graph`` does."""

    def __init__(self, **attrs):
        self.graph = dict(attrs)
        self.nodes: dict[str, dict] = {}
        self.edges: list[tuple[str, str, dict]] = []
        self.edge_id: dict[tuple[str, str], int] = {}
        self.out: dict[str, list[str]] = {}

    def add_node(self, name: str, **attrs) -> None:
        """Add device ``name`` with its attributes."""
        self.nodes[name] = attrs
        self.out.setdefault(name, [])

    def add_edge(self, u: str, v: str, **attrs) -> None:
        """Add the directed link ``u → v``; its id is its position in ``edges``."""
        self.edge_id[u, v] = len(self.edges)
        self.edges.append((u, v, attrs))
        self.out.setdefault(u, []).append(v)
        self.out.setdefault(v, [])

    def number_of_edges(self) -> int:
        """Directed links so far."""
        return len(self.edges)

    def to_networkx(self):
        """The same graph as a ``networkx.DiGraph`` (node, edge and graph attributes kept)."""
        import networkx as nx

        g = nx.DiGraph(**self.graph)
        g.add_nodes_from(self.nodes.items())
        g.add_edges_from(self.edges)
        return g


def build_graph(spec: ClusterSpec) -> HardwareGraph:
    """The cluster as a directed graph; ``G.graph`` holds ``spec``, ``edges_per_node`` and the
    per-node ``local_devices`` order."""
    g = HardwareGraph(spec=spec, n_edges=0)
    for k in range(spec.nodes):
        _add_node_devices(g, spec, k)
        if k == 0:
            g.graph["edges_per_node"] = g.number_of_edges()
            g.graph["local_devices"] = [n.split("/", 1)[1] for n in g.nodes]
    _add_fabric(g, spec)
    if spec.front_end is not None:
        _add_front_end(g, spec)
    _check_connected(g, spec)
    return g


def _add_front_end(g: HardwareGraph, spec: ClusterSpec) -> None:
    """The front-end switch, the training hosts' front-end NICs and the service hosts
    (assumption 6); their edge ids go to ``g.graph["front_end"]``."""
    fe, sockets = spec.front_end, spec.host.sockets
    g.add_node("fe", kind="switch", tier=0.5, node=-1, local=0)
    per_socket = [0] * sockets
    for j in range(fe.nics_per_node):
        per_socket[j * sockets // fe.nics_per_node] += 1
    up = [[-1] * sockets for _ in range(spec.nodes)]  # edge id socket -> fe (fe -> socket: +1)
    for k in range(spec.nodes):
        for s, count in enumerate(per_socket):
            if count:
                up[k][s] = g.graph["n_edges"]
                _edge_pair(g, f"n{k}/cpu{s}", "fe", "frontend", fe.nic_bw_Bps * count, fe, count)
    servers = []  # per service host: edge ids (cpu -> fe, dram -> cpu); reverses are +1
    for j in range(fe.servers):
        cpu, dram = f"svc{j}/cpu", f"svc{j}/dram"
        g.add_node(cpu, kind="server_cpu", node=-1, local=j)
        g.add_node(dram, kind="server_dram", node=-1, local=j, dram_bytes=fe.server_dram_bytes)
        nic = g.graph["n_edges"]
        _edge_pair(g, cpu, "fe", "frontend", fe.server_nic_bw_Bps, fe)
        mem = g.graph["n_edges"]
        _edge_pair(g, dram, cpu, "dram", fe.server_dram_bw_Bps, spec.links["dram"])
        servers.append((nic, mem))
    g.graph["front_end"] = {"up": up, "servers": servers, "per_socket": per_socket}


def _edge_pair(g: HardwareGraph, a: str, b: str, kind: str, bw_Bps: float, link, count=1) -> None:
    """A full-duplex link ``a``–``b`` with ``link``'s efficiency and latency (``efficiency`` and
    ``latency_s`` attributes): ``a → b`` takes the next edge id, ``b → a`` the one after."""
    for u, v in ((a, b), (b, a)):
        g.add_edge(
            u,
            v,
            kind=kind,
            bw_Bps=bw_Bps,
            capacity_Bps=bw_Bps * link.efficiency,
            latency_s=link.latency_s,
            count=count,
            id=g.graph["n_edges"],
        )
        g.graph["n_edges"] += 1


def _link(
    g: HardwareGraph, spec: ClusterSpec, a: str, b: str, kind: str, bw_Bps: float, count: int = 1
) -> None:
    """A full-duplex link ``a``–``b`` of ``kind``: two directed edges at ``bw_Bps`` line rate
    (capacity derated by the kind's efficiency), with the next edge ids."""
    _edge_pair(g, a, b, kind, bw_Bps, spec.links[kind], count)


def _add_node_devices(g: HardwareGraph, spec: ClusterSpec, k: int) -> None:
    """Devices of node ``k``, then its links (memory, sockets, scale-up, PCIe), always in the
    same order (assumption 5)."""
    _add_devices(g, spec, k)
    _add_node_links(g, spec, k)


def _add_devices(g: HardwareGraph, spec: ClusterSpec, k: int) -> None:
    """GPUs, DRAM and CPU per socket, NVSwitch, PCIe switches and NICs of node ``k``."""
    p = f"n{k}/"
    host, pcie, su, so = spec.host, spec.pcie, spec.scale_up, spec.scale_out
    n_gpu = spec.gpus_per_node
    for i in range(n_gpu):
        g.add_node(
            f"{p}gpu{i}",
            kind="gpu",
            node=k,
            local=i,
            model=spec.gpu.model,
            flops=spec.gpu.flops,
            hbm_bytes=spec.gpu.hbm_bytes,
            hbm_bw_Bps=spec.gpu.hbm_bw_Bps,
        )
    for s in range(host.sockets):
        g.add_node(
            f"{p}dram{s}",
            kind="dram",
            node=k,
            local=s,
            dram_bytes=host.dram_bytes / host.sockets,
            dram_bw_Bps=host.dram_bw_Bps,
        )
    for s in range(host.sockets):
        g.add_node(f"{p}cpu{s}", kind="cpu", node=k, local=s)
    if su.kind == "nvswitch":
        g.add_node(
            f"{p}nvswitch", kind="nvswitch", node=k, local=0, generation=su.nvswitch_generation
        )
    for q in range(pcie.switches):
        g.add_node(f"{p}pcie{q}", kind="pcie_switch", node=k, local=q)
    for j in range(so.nics_per_node):
        g.add_node(f"{p}nic{j}", kind="nic", node=k, local=j, bw_Bps=so.nic_bw_Bps)


def _add_node_links(g: HardwareGraph, spec: ClusterSpec, k: int) -> None:
    """Links of node ``k``: DRAM–socket, socket–socket (UPI), GPU–NVSwitch or NVLink mesh,
    PCIe switch uplinks, and GPUs and NICs on PCIe (assumptions 1–3)."""
    p = f"n{k}/"
    host, pcie, su, so = spec.host, spec.pcie, spec.scale_up, spec.scale_out
    n_gpu = spec.gpus_per_node
    # memory and socket links
    for s in range(host.sockets):
        _link(g, spec, f"{p}dram{s}", f"{p}cpu{s}", "dram", host.dram_bw_Bps)
    for s in range(host.sockets):
        for t in range(s + 1, host.sockets):
            _link(g, spec, f"{p}cpu{s}", f"{p}cpu{t}", "upi", host.socket_link_bw_Bps)
    # scale-up fabric
    if su.kind == "nvswitch":
        for i in range(n_gpu):
            _link(
                g,
                spec,
                f"{p}gpu{i}",
                f"{p}nvswitch",
                "nvlink",
                su.links_per_gpu * su.link_bw_Bps,
                count=su.links_per_gpu,
            )
    elif su.kind == "mesh":
        for a, b, n in su.mesh:
            _link(g, spec, f"{p}gpu{a}", f"{p}gpu{b}", "nvlink", n * su.link_bw_Bps, count=n)
    # PCIe tree
    for q in range(pcie.switches):
        _link(
            g,
            spec,
            f"{p}pcie{q}",
            f"{p}cpu{q * host.sockets // pcie.switches}",
            "pcie",
            pcie.uplink_bw_Bps,
        )
    for i in range(n_gpu):
        _link(g, spec, f"{p}gpu{i}", _pcie_parent(spec, p, i, n_gpu), "pcie", pcie.bw_Bps)
    for j in range(so.nics_per_node):
        parent = (
            f"{p}cpu{j * host.sockets // so.nics_per_node}"
            if so.nic_attach == "host"
            else _pcie_parent(spec, p, j, so.nics_per_node)
        )
        _link(g, spec, f"{p}nic{j}", parent, "pcie", pcie.bw_Bps)


def _pcie_parent(spec: ClusterSpec, p: str, i: int, count: int) -> str:
    """PCIe switch (or socket, when there is none) of device ``i`` of ``count`` of its kind."""
    if spec.pcie.switches:
        return f"{p}pcie{i * spec.pcie.switches // count}"
    return f"{p}cpu{i * spec.host.sockets // count}"


def fabric_shape(spec: ClusterSpec) -> dict:
    """Switch counts of the scale-out Clos: leaves, pods, ports (see assumption 4)."""
    so = spec.scale_out
    nics = spec.nodes * so.nics_per_node
    radix = so.switch_radix
    if so.tiers == 1:
        if nics > radix:
            raise InputError(
                f"{nics} NICs do not fit on one {radix}-port switch",
                file=spec.file,
                field="scale_out.tiers",
                allowed="tiers: 2, 3 or auto",
            )
        return {"leaves": 1, "down": radix, "up": 0, "pods": 0, "leaves_per_pod": 1}
    down = leaf_down_ports(radix, so.oversubscription)
    up = radix - down
    leaves = leaf_count(spec.nodes, so.nics_per_node, radix, so.oversubscription, so.rail_optimized)
    if so.tiers == 2:
        if leaves > radix:
            raise InputError(
                f"{leaves} leaf switches exceed a 2-tier Clos of radix {radix}",
                file=spec.file,
                field="scale_out.tiers",
                allowed="tiers: 3 or auto",
            )
        return {"leaves": leaves, "down": down, "up": up, "pods": 1, "leaves_per_pod": leaves}
    per_pod = radix // 2
    return {
        "leaves": leaves,
        "down": down,
        "up": up,
        "pods": math.ceil(leaves / per_pod),
        "leaves_per_pod": per_pod,
    }


def nic_leaf(spec: ClusterSpec, node: int, nic: int, shape: dict) -> int:
    """Leaf switch of NIC ``nic`` of node ``node``."""
    so = spec.scale_out
    if so.tiers == 1:
        return 0
    if so.rail_optimized:
        per_rail = math.ceil(spec.nodes / shape["down"])
        return nic * per_rail + node // shape["down"]
    return (node * so.nics_per_node + nic) // shape["down"]


def _add_fabric(g: HardwareGraph, spec: ClusterSpec) -> None:
    so = spec.scale_out
    if spec.nodes == 1 and so.tiers >= 1:
        # a single node has no scale-out traffic; keep its NICs but add no switches
        return
    shape = fabric_shape(spec)
    kind, port = so.kind, so.nic_bw_Bps
    for leaf in range(shape["leaves"]):
        g.add_node(f"leaf{leaf}", kind="switch", tier=1, node=-1, local=leaf)
    for k in range(spec.nodes):
        for j in range(so.nics_per_node):
            _link(g, spec, f"n{k}/nic{j}", f"leaf{nic_leaf(spec, k, j, shape)}", kind, port)
    if so.tiers == 1:
        return
    for pod in range(shape["pods"]):
        members = range(
            pod * shape["leaves_per_pod"], min(shape["leaves"], (pod + 1) * shape["leaves_per_pod"])
        )
        physical = math.ceil(len(members) * shape["up"] / so.switch_radix)
        g.add_node(f"t2.{pod}", kind="switch", tier=2, node=-1, local=pod, count=physical)
        for leaf in members:
            _link(g, spec, f"leaf{leaf}", f"t2.{pod}", kind, shape["up"] * port, count=shape["up"])
    if so.tiers == 3:
        g.add_node("t3", kind="switch", tier=3, node=-1, local=0)
        for pod in range(shape["pods"]):
            n_leaves = min(shape["leaves_per_pod"], shape["leaves"] - pod * shape["leaves_per_pod"])
            _link(
                g,
                spec,
                f"t2.{pod}",
                "t3",
                kind,
                n_leaves * shape["up"] * port,
                count=n_leaves * shape["up"],
            )


def _check_connected(g, spec: ClusterSpec) -> None:
    """Every device reaches every other (``g``: a HardwareGraph or a networkx DiGraph)."""
    out = _successors(g)
    into: dict[str, list[str]] = {n: [] for n in out}
    for u, vs in out.items():
        for v in vs:
            into[v].append(u)
    names = sorted(out)
    both = _reach(out, names[0]) & _reach(into, names[0])
    cut = [n for n in names if n not in both]
    if cut:
        lonely = cut[0] if 2 * len(both) >= len(names) else names[0]
        raise InputError(
            f"the hardware graph is disconnected: {lonely} cannot reach the rest",
            file=spec.file,
            field="scale_up/pcie/scale_out",
            allowed="every device connected (check mesh, pcie.switches, nics)",
        )


def _successors(g) -> dict[str, list[str]]:
    if isinstance(g, HardwareGraph):
        return g.out
    return {n: list(g.successors(n)) for n in g.nodes}


def _reach(adj: dict[str, list[str]], start: str) -> set[str]:
    seen, todo = {start}, deque([start])
    while todo:
        for v in adj[todo.popleft()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return seen
