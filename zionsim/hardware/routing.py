"""Routing: device pairs → paths as rows of edge ids, vectorised for thousands of GPUs.

Routes are shortest paths by hop count, with bandwidth as the tie-break (weight ``1 + 1 GB/s / bw``
per edge), and never transit a NIC or a DRAM node.  A GPU is transited in one case only, as NCCL
does: two GPUs of a node that share no NVLink but reach each other over NVLink through one
intermediate GPU talk through it (NCCL's ``PATH_NVB``, preferred to any PCIe or CPU path:
``src/graph/paths.cc`` "Set 1 hop NVLink as NVB", ``ncclTopoCheckP2p`` "The connection may go
through an intermediate rank"; ``NCCL_NVB_DISABLE`` turns it off).  That is what lets a partial
NVLink mesh (DGX-1's hybrid cube-mesh) run an all-to-all without crossing PCIe and the CPUs.
Where several paths still tie, one is chosen per (source, destination) pair by a fixed hash, as
per-flow ECMP does.  Inside a node, routes are computed once on node 0 and shifted to node ``k``
by edge-id offset.  Between nodes, a device leaves through its nearest NIC (ties broken so that
GPU ``i`` of ``g`` prefers NIC ``i·nics//g``, which is how NCCL pairs GPUs with NICs), crosses
the Clos and enters the destination node through the destination device's nearest NIC.  A GPU
that reaches its NIC only through a CPU has no GPUDirect RDMA (NCCL's default GDR level): its
network traffic is staged in the DRAM of the NIC's CPU (:meth:`Router._staged`).
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from zionsim.hardware.class_routing import ClassRouting
from zionsim.hardware.class_routing import shift_edges as _shift
from zionsim.hardware.graph import HardwareGraph, fabric_shape, nic_leaf

_NO_TRANSIT = {"gpu", "nic", "dram"}


class Router(ClassRouting):
    """Paths between devices of one hardware graph, and the per-edge arrays of that graph."""

    def __init__(self, g: HardwareGraph):
        self.graph, self.spec = g, g.graph["spec"]
        edges = g.edges  # in id order
        self.edge_names = [(u, v) for u, v, _ in edges]
        self.edge_kind = np.array([d["kind"] for _, _, d in edges])
        self.bw_Bps = np.array([d["bw_Bps"] for _, _, d in edges], dtype=float)
        self.capacity_Bps = np.array([d["capacity_Bps"] for _, _, d in edges], dtype=float)
        self.latency_s = np.array([d["latency_s"] for _, _, d in edges], dtype=float)
        self.local_devices: list[str] = g.graph["local_devices"]
        self.per_node = len(self.local_devices)
        self.edges_per_node = g.graph["edges_per_node"]
        self._index = {name: i for i, name in enumerate(self.local_devices)}
        #: local GPU number of each local device slot (-1 for non-GPUs)
        self.local_gpu_index = np.array(
            [int(n[3:]) if n.startswith("gpu") else -1 for n in self.local_devices]
        )
        self._templates()
        self._fabric()

    # ----------------------------------------------------------------------------- devices
    def device(self, name: str) -> int:
        """Global device id of ``n<k>/<local>``."""
        node, local = name.split("/", 1)
        return int(node[1:]) * self.per_node + self._index[local]

    def device_name(self, dev: int) -> str:
        """Name ``n<k>/<local>`` of a global device id (inverse of :meth:`device`)."""
        return f"n{dev // self.per_node}/{self.local_devices[dev % self.per_node]}"

    def gpus(self) -> np.ndarray:
        """Device ids of all GPUs in rank order (node-major, local index minor)."""
        local = np.array([self._index[f"gpu{i}"] for i in range(self.spec.gpus_per_node)])
        return (np.arange(self.spec.nodes)[:, None] * self.per_node + local[None, :]).ravel()

    def local(self, kind_prefix: str, node: int, i: int = 0) -> int:
        """Device id of local device ``<kind_prefix><i>`` (or ``nvswitch``) of ``node``."""
        name = kind_prefix if kind_prefix == "nvswitch" else f"{kind_prefix}{i}"
        return node * self.per_node + self._index[name]

    # ----------------------------------------------------------------------------- routes
    def routes(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Edge ids of the path of each (src, dst) pair, padded with -1: shape (F, H), int32
        (edge ids fit 32 bits; a million-flow collective's routes take half the memory)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        d = self.per_node
        ns, ls, nd, ld = src // d, src % d, dst // d, dst % d
        epn = self.edges_per_node
        w_intra = self._t_intra.shape[2]
        if self.spec.nodes == 1:
            return _shift(self._t_intra[ls, ld], ns * epn)
        w_up, w_down = self._t_up.shape[1], self._t_down.shape[1]
        out = np.full((len(src), max(w_intra, w_up + 6 + w_down)), -1, dtype=np.int32)
        same = ns == nd
        if same.any():
            i = np.flatnonzero(same) if not same.all() else slice(None)
            out[i, :w_intra] = _shift(self._t_intra[ls[i], ld[i]], ns[i] * epn)
        if same.all():
            return out
        i = np.flatnonzero(~same) if same.any() else slice(None)
        ns, ls, nd, ld = ns[i], ls[i], nd[i], ld[i]
        npn = self.spec.scale_out.nics_per_node
        nic_s, nic_d = ns * npn + self._nic_of[ls], nd * npn + self._nic_of[ld]
        leaf_s, leaf_d = self._leaf_of_nic[nic_s], self._leaf_of_nic[nic_d]
        pod_s, pod_d = self._pod_of_leaf[leaf_s], self._pod_of_leaf[leaf_d]
        cross_leaf, cross_pod = leaf_s != leaf_d, pod_s != pod_d
        fabric = (
            self._nic_up[nic_s],
            np.where(cross_leaf, self._leaf_up[leaf_s], -1),
            np.where(cross_pod, self._pod_up[pod_s], -1),
            np.where(cross_pod, self._pod_down[pod_d], -1),
            np.where(cross_leaf, self._leaf_down[leaf_d], -1),
            self._nic_down[nic_d],
        )
        out[i, :w_up] = _shift(self._t_up[ls], ns * epn)
        for c, col in enumerate(fabric):
            out[i, w_up + c] = col
        out[i, w_up + 6 : w_up + 6 + w_down] = _shift(self._t_down[ld], nd * epn)
        return out

    def reduction_tree(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Legs of an in-network reduction (SHARP) among ``devices`` of different nodes: (up,
        down) edge-id rows padded with -1.  Up: each device to its leaf switch (through its
        nearest NIC), then one leg per switch below the root to its parent (the switch reduces
        what its children send, so it forwards one stream); down: the same legs reversed (the
        result multicast back).  The root is the lowest tier above every device's leaf."""
        devices = np.asarray(devices, dtype=np.int64)
        d, epn, npn = self.per_node, self.edges_per_node, self.spec.scale_out.nics_per_node
        ns, ls = devices // d, devices % d
        nic = ns * npn + self._nic_of[ls]
        leaves = np.unique(self._leaf_of_nic[nic])
        pods = np.unique(self._pod_of_leaf[leaves])
        to_nic, from_nic = _shift(self._t_up[ls], ns * epn), _shift(self._t_down[ls], ns * epn)
        up = [np.concatenate([to_nic, self._nic_up[nic][:, None]], 1)]
        down = [np.concatenate([self._nic_down[nic][:, None], from_nic], 1)]
        if len(leaves) > 1:  # leaves report to their tier-2 switch
            up.append(self._leaf_up[leaves][:, None])
            down.append(self._leaf_down[leaves][:, None])
        if len(pods) > 1:  # tier-2 switches report to the core
            up.append(self._pod_up[pods][:, None])
            down.append(self._pod_down[pods][:, None])
        width = max(x.shape[1] for x in up)
        return (
            np.concatenate([_pad(x, width) for x in up]),
            np.concatenate([_pad(x, width) for x in down]),
        )

    def latency(self, routes: np.ndarray) -> np.ndarray:
        """Sum of link latencies along each route (s)."""
        lat = np.append(self.latency_s, 0.0)
        return lat[routes].sum(axis=1) if routes.size else np.zeros(len(routes))

    def path_names(self, src: int, dst: int) -> list[str]:
        """Device names along the route from ``src`` to ``dst`` (for people and tests)."""
        row = self.routes(np.array([src]), np.array([dst]))[0]
        edges = [self.edge_names[e] for e in row if e >= 0]
        return [edges[0][0]] + [v for _, v in edges] if edges else [self.device_name(src)]

    # ----------------------------------------------------------------------------- set-up
    def _templates(self) -> None:
        g = self.graph
        names0 = [f"n0/{x}" for x in self.local_devices]
        in0 = set(names0)
        kinds = {n: g.nodes[n]["kind"] for n in names0}
        eid = g.edge_id
        succ0 = {
            u: [(v, _weight(g.edges[eid[u, v]][2])) for v in g.out[u] if v in in0] for u in names0
        }
        n = self.per_node
        paths: dict[tuple[int, int], list[int]] = {}
        dist = np.full((n, n), np.inf)
        for a, sa in enumerate(names0):
            pred, dists = _dijkstra(
                succ0, sa, lambda u, sa=sa: u == sa or kinds[u] not in _NO_TRANSIT
            )
            memo: dict[str, int] = {}  # shortest paths from sa, per destination
            for b, sb in enumerate(names0):
                if sb not in dists or a == b:
                    continue
                count = _path_count(pred, sa, sb, memo)
                nodes = _nth_path(pred, sa, sb, (a * 2654435761 + b * 40503) % count, memo)
                nodes = _nvb_path(g, kinds, sa, sb, a * 2654435761 + b * 40503) or nodes
                paths[a, b] = [eid[u, v] for u, v in zip(nodes, nodes[1:], strict=False)]
                dist[a, b] = dists[sb]
        width = max((len(p) for p in paths.values()), default=0)
        self._t_intra = np.full((n, n, width), -1, dtype=np.int64)
        for (a, b), p in paths.items():
            self._t_intra[a, b, : len(p)] = p
        nics = [self._index[f"nic{j}"] for j in range(self.spec.scale_out.nics_per_node)]
        self._nic_of = np.zeros(n, dtype=np.int64)
        counts: dict[str, int] = {}
        for a, name in enumerate(self.local_devices):
            kind = kinds[f"n0/{name}"]
            if kind == "nic":
                self._nic_of[a] = nics.index(a)
                continue
            rank, counts[kind] = counts.get(kind, 0), counts.get(kind, 0) + 1
            total = sum(1 for k in kinds.values() if k == kind)
            best = min(dist[a, j] for j in nics)
            tied = [i for i, j in enumerate(nics) if dist[a, j] <= best * (1 + 1e-12)]
            preferred = rank * len(nics) // total
            self._nic_of[a] = preferred if preferred in tied else tied[rank % len(tied)]
        nic = [nics[self._nic_of[a]] for a in range(n)]
        up = [self._staged(self._t_intra[a, nic[a]], kinds, up=True) for a in range(n)]
        down = [self._staged(self._t_intra[nic[b], b], kinds, up=False) for b in range(n)]
        width = max(len(p) for p in up + down)
        self._t_up = np.array([p + [-1] * (width - len(p)) for p in up], dtype=np.int64)
        self._t_down = np.array([p + [-1] * (width - len(p)) for p in down], dtype=np.int64)

    def _staged(self, row: np.ndarray, kinds: dict, up: bool) -> list[int]:
        """A device's path to (``up``) or from its NIC, staged through host memory where NCCL
        turns GPUDirect RDMA off: when the GPU reaches the NIC only through a CPU (NCCL's
        ``PATH_PHB`` or worse, beyond the default ``NCCL_NET_GDR_LEVEL`` of ``PXB``; NVIDIA/nccl
        src/graph/paths.cc:510-535) the network buffers live in host memory, so the GPU writes
        into the DRAM of the NIC's CPU and the NIC reads from it (and the reverse on receive):
        the path gains a CPU → DRAM → CPU detour at that CPU."""
        edges = [int(e) for e in row if e >= 0]
        names = [self.edge_names[e] for e in edges]
        if not names or kinds[names[0][0] if up else names[-1][1]] != "gpu":
            return edges
        cpus = [i for i, (u, _) in enumerate(names) if i > 0 and kinds[u] == "cpu"]
        if not cpus:
            return edges  # GPU and NIC share a PCIe switch: GPUDirect RDMA
        i = cpus[-1] if up else cpus[0]  # the CPU next to the NIC
        cpu = names[i][0]
        dram = next((v for v in self.graph.out[cpu] if kinds.get(v) == "dram"), None)
        if dram is None:
            return edges
        eid = self.graph.edge_id
        return edges[:i] + [eid[cpu, dram], eid[dram, cpu]] + edges[i:]

    def _fabric(self) -> None:
        spec, g = self.spec, self.graph
        if spec.nodes == 1:
            return
        shape = fabric_shape(spec)
        npn = spec.scale_out.nics_per_node
        eid = lambda u, v: g.edge_id[u, v]  # noqa: E731
        nic_names = [f"n{k}/nic{j}" for k in range(spec.nodes) for j in range(npn)]
        self._leaf_of_nic = np.array(
            [nic_leaf(spec, k, j, shape) for k in range(spec.nodes) for j in range(npn)],
            dtype=np.int64,
        )
        self._nic_up = np.array(
            [eid(n, f"leaf{lf}") for n, lf in zip(nic_names, self._leaf_of_nic, strict=True)],
            dtype=np.int64,
        )
        self._nic_down = np.array(
            [eid(f"leaf{lf}", n) for n, lf in zip(nic_names, self._leaf_of_nic, strict=True)],
            dtype=np.int64,
        )
        leaves = shape["leaves"]
        self._pod_of_leaf = np.arange(leaves) // max(1, shape["leaves_per_pod"])
        if spec.scale_out.tiers == 1:
            self._leaf_up = self._leaf_down = np.full(leaves, -1, dtype=np.int64)
            self._pod_up = self._pod_down = np.full(1, -1, dtype=np.int64)
            self._pod_of_leaf = np.zeros(leaves, dtype=np.int64)
            return
        self._leaf_up = np.array(
            [eid(f"leaf{lf}", f"t2.{self._pod_of_leaf[lf]}") for lf in range(leaves)],
            dtype=np.int64,
        )
        self._leaf_down = np.array(
            [eid(f"t2.{self._pod_of_leaf[lf]}", f"leaf{lf}") for lf in range(leaves)],
            dtype=np.int64,
        )
        pods = shape["pods"]
        if spec.scale_out.tiers == 3:
            self._pod_up = np.array([eid(f"t2.{p}", "t3") for p in range(pods)], dtype=np.int64)
            self._pod_down = np.array([eid("t3", f"t2.{p}") for p in range(pods)], dtype=np.int64)
        else:
            self._pod_up = self._pod_down = np.full(pods, -1, dtype=np.int64)


def _weight(d: dict) -> float:
    return 1.0 + 1e9 / d["bw_Bps"]


def _nvb_path(g: HardwareGraph, kinds: dict, src: str, dst: str, salt: int) -> list[str] | None:
    """NCCL's NVLink-through-one-GPU path between two GPUs with no NVLink of their own, or None.

    Of the intermediate GPUs joined to both by NVLink, the one with the widest narrower link is
    used (NCCL keeps the path of most bandwidth), ties broken by a fixed hash of the pair.
    """
    if kinds[src] != "gpu" or kinds[dst] != "gpu" or (src, dst) in g.edge_id:
        return None

    def nvlink(u: str, v: str) -> float:
        e = g.edge_id.get((u, v))
        d = g.edges[e][2] if e is not None else None
        return d["bw_Bps"] if d is not None and d["kind"] == "nvlink" else 0.0

    best: list[tuple[float, str]] = []
    for mid in sorted(g.out[src]):
        if kinds.get(mid) == "gpu":
            bw = min(nvlink(src, mid), nvlink(mid, dst))
            if bw > 0:
                best.append((bw, mid))
    if not best:
        return None
    top = max(bw for bw, _ in best)
    tied = [mid for bw, mid in best if bw == top]
    return [src, tied[salt % len(tied)], dst]


def _dijkstra(succ: dict, source: str, leaves) -> tuple[dict, dict]:
    """Shortest distances from ``source`` and every predecessor on a shortest path (ties by
    exact equality), over ``succ[u] = [(v, weight)]``; only nodes where ``leaves(u)`` holds are
    left through (the others are endpoints)."""
    dist: dict[str, float] = {}
    seen, pred = {source: 0.0}, {source: []}
    heap, count = [(0.0, 0, source)], itertools.count(1)
    while heap:
        d, _, v = heapq.heappop(heap)
        if v in dist:
            continue
        dist[v] = d
        for u, w in succ[v] if leaves(v) else ():
            vu = d + w
            if u in dist:
                if vu == dist[u]:
                    pred[u].append(v)
            elif u not in seen or vu < seen[u]:
                seen[u] = vu
                heapq.heappush(heap, (vu, next(count), u))
                pred[u] = [v]
            elif vu == seen[u]:
                pred[u].append(v)
    return pred, dist


def _path_count(pred: dict, src: str, dst: str, memo: dict) -> int:
    """How many shortest paths lead from ``src`` to ``dst`` in a Dijkstra predecessor map."""
    if dst == src:
        return 1
    if dst not in memo:
        memo[dst] = sum(_path_count(pred, src, p, memo) for p in pred[dst])
    return memo[dst]


def _nth_path(pred: dict, src: str, dst: str, k: int, memo: dict) -> list[str]:
    """Shortest path number ``k`` from ``src`` to ``dst``, counting them in a fixed order (by
    the name of the last hop's predecessor, recursively), without listing them all."""
    if dst == src:
        return [src]
    for p in sorted(pred[dst]):
        n = _path_count(pred, src, p, memo)
        if k < n:
            return _nth_path(pred, src, p, k, memo) + [dst]
        k -= n
    raise AssertionError("path index beyond the path count")


def _pad(a: np.ndarray, width: int) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1)
