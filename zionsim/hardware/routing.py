"""Routing: device pairs → paths as rows of edge ids, vectorised for thousands of GPUs.

Routes are shortest paths by hop count, with bandwidth as the tie-break (weight ``1 + 1 GB/s / bw``
per edge), and never transit a GPU, a NIC or a DRAM node (GPUs do not forward NVLink traffic).
Where several paths still tie, one is chosen per (source, destination) pair by a fixed hash, as
per-flow ECMP does.  Inside a node, routes are computed once on node 0 and shifted to node ``k``
by edge-id offset.  Between nodes, a device leaves through its nearest NIC (ties broken so that
GPU ``i`` of ``g`` prefers NIC ``i·nics//g``, which is how NCCL pairs GPUs with NICs), crosses
the Clos and enters the destination node through the destination device's nearest NIC.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from zionsim.hardware.graph import fabric_shape, nic_leaf

_NO_TRANSIT = {"gpu", "nic", "dram"}


class Router:
    """Paths between devices of one hardware graph, and the per-edge arrays of that graph."""

    def __init__(self, g: nx.DiGraph):
        self.graph, self.spec = g, g.graph["spec"]
        edges = sorted(g.edges(data=True), key=lambda e: e[2]["id"])
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
        """Edge ids of the path of each (src, dst) pair, padded with -1: shape (F, H)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        d = self.per_node
        ns, ls, nd, ld = src // d, src % d, dst // d, dst % d
        epn = self.edges_per_node
        intra = _shift(self._t_intra[ls, ld], ns * epn)
        up = _shift(self._t_up[ls], ns * epn)
        down = _shift(self._t_down[ld], nd * epn)
        if self.spec.nodes == 1:
            return intra
        nic_s = ns * self.spec.scale_out.nics_per_node + self._nic_of[ls]
        nic_d = nd * self.spec.scale_out.nics_per_node + self._nic_of[ld]
        leaf_s, leaf_d = self._leaf_of_nic[nic_s], self._leaf_of_nic[nic_d]
        pod_s, pod_d = self._pod_of_leaf[leaf_s], self._pod_of_leaf[leaf_d]
        cross_leaf, cross_pod = leaf_s != leaf_d, pod_s != pod_d
        fabric = np.stack(
            [
                self._nic_up[nic_s],
                np.where(cross_leaf, self._leaf_up[leaf_s], -1),
                np.where(cross_pod, self._pod_up[pod_s], -1),
                np.where(cross_pod, self._pod_down[pod_d], -1),
                np.where(cross_leaf, self._leaf_down[leaf_d], -1),
                self._nic_down[nic_d],
            ],
            axis=1,
        )
        inter = np.concatenate([up, fabric, down], axis=1)
        same = (ns == nd)[:, None]
        width = max(intra.shape[1], inter.shape[1])
        out = np.where(same, _pad(intra, width), _pad(inter, width))
        return out

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
        g0 = self.graph.subgraph([f"n0/{x}" for x in self.local_devices])
        kinds = {n: d["kind"] for n, d in g0.nodes(data=True)}
        eid = {(u, v): d["id"] for u, v, d in g0.edges(data=True)}
        n = self.per_node
        paths: dict[tuple[int, int], list[int]] = {}
        dist = np.full((n, n), np.inf)
        for a, src in enumerate(self.local_devices):
            sa = f"n0/{src}"
            view = nx.subgraph_view(
                g0, filter_edge=lambda u, v, sa=sa: u == sa or kinds[u] not in _NO_TRANSIT
            )
            pred, dists = nx.dijkstra_predecessor_and_distance(view, sa, weight=_weight)
            for b, dst in enumerate(self.local_devices):
                sb = f"n0/{dst}"
                if sb not in dists or a == b:
                    continue
                options = _all_paths(pred, sa, sb)
                nodes = options[(a * 2654435761 + b * 40503) % len(options)]
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
        self._t_up = np.stack([self._t_intra[a, nics[self._nic_of[a]]] for a in range(n)])
        self._t_down = np.stack([self._t_intra[nics[self._nic_of[b]], b] for b in range(n)])

    def _fabric(self) -> None:
        spec, g = self.spec, self.graph
        if spec.nodes == 1:
            return
        shape = fabric_shape(spec)
        npn = spec.scale_out.nics_per_node
        eid = lambda u, v: g.edges[u, v]["id"]  # noqa: E731
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


def _weight(u: str, v: str, d: dict) -> float:
    return 1.0 + 1e9 / d["bw_Bps"]


def _all_paths(pred: dict, src: str, dst: str) -> list[list[str]]:
    """Every shortest path from a Dijkstra predecessor map, in a deterministic order (the order
    of a depth-first walk over sorted predecessors).  Iterative, and a predecessor already on
    the path is skipped: with bounded link bandwidths every weight is finite and positive, so
    the map has no cycle, but a degenerate graph must not recurse without end."""
    out: list[list[str]] = []
    stack: list[tuple[str, tuple[str, ...]]] = [(dst, ())]
    while stack:
        node, tail = stack.pop()
        if node == src:
            out.append([src, *tail])
            continue
        nxt = [p for p in sorted(pred.get(node, ())) if p != node and p not in tail]
        stack.extend((p, (node, *tail)) for p in reversed(nxt))
    return out


def _shift(table: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return np.where(table >= 0, table + offset[:, None], -1)


def _pad(a: np.ndarray, width: int) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1)
