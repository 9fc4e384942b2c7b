"""Routes of flow classes (``network/flows.py`` assumption 6): the links that all pairs of two
device sets cross, each with the number of pairs crossing it, for the router of a Clos fabric.

A flow class stands for every pair of ``src`` × ``dst`` on different nodes at one *fabric
relation* (same leaf switch, same tier-2 group, through the core).  Its members' paths differ
only in the node they start or end in, so the links of the class are each source's way up, the
switches between the leaves and each destination's way down, counted per pair
(:meth:`ClassRouting.class_route`).  :class:`~zionsim.hardware.routing.Router` inherits these
methods; they read its per-edge arrays and fabric tables.
"""

from __future__ import annotations

import numpy as np


class ClassRouting:
    """Flow-class routes of a :class:`~zionsim.hardware.routing.Router` (module docstring)."""

    def nic_up_edges(self) -> np.ndarray:
        """Edge ids of every NIC → leaf switch link (none on one node)."""
        return getattr(self, "_nic_up", np.zeros(0, dtype=np.int64))

    def nic_down_edges(self) -> np.ndarray:
        """Edge ids of every leaf switch → NIC link (none on one node)."""
        return getattr(self, "_nic_down", np.zeros(0, dtype=np.int64))

    def leaf_pod(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaf switch and tier-2 group (pod) of each device's nearest NIC (zeros on one
        node)."""
        devices = np.asarray(devices, dtype=np.int64)
        if self.spec.nodes == 1:
            return np.zeros(len(devices), dtype=np.int64), np.zeros(len(devices), dtype=np.int64)
        npn = self.spec.scale_out.nics_per_node
        d = self.per_node
        leaf = self._leaf_of_nic[(devices // d) * npn + self._nic_of[devices % d]]
        return leaf, self._pod_of_leaf[leaf]

    def relation(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """How far each (src, dst) pair of devices on different nodes crosses the fabric: 0
        under one leaf switch, 1 under one tier-2 group, 2 through the core."""
        ls, ps = self.leaf_pod(src)
        ld, pd = self.leaf_pod(dst)
        return np.where(ls == ld, 0, np.where(ps == pd, 1, 2))

    def class_pairs(self, src: np.ndarray, dst: np.ndarray, rel: int):
        """Every pair of ``src`` × ``dst`` on different nodes whose :meth:`relation` is
        ``rel`` (the members of a flow class), source-major."""
        s = np.repeat(np.asarray(src, dtype=np.int64), len(dst))
        d = np.tile(np.asarray(dst, dtype=np.int64), len(src))
        keep = (s // self.per_node != d // self.per_node) & (self.relation(s, d) == rel)
        return s[keep], d[keep]

    def side_edges(self, devices: np.ndarray, up: bool, rel: int) -> np.ndarray:
        """Edges a flow class's members cross on one side (:meth:`class_route`), one row per
        device of ``devices`` (one local device on distinct nodes): its way to (``up``) or
        from the fabric through its NIC, and the leaf and tier-2 uplinks (downlinks) that
        pairs at relation ``rel`` take; -1 where there is none."""
        devices = np.asarray(devices, dtype=np.int64)
        d, epn = self.per_node, self.edges_per_node
        nodes = devices // d
        t = self._t_up if up else self._t_down
        rows = np.broadcast_to(t[devices[0] % d], (len(devices), t.shape[1]))
        own = shift_edges(rows, nodes * epn)
        npn = self.spec.scale_out.nics_per_node
        nic = nodes * npn + self._nic_of[devices % d]
        leaf, pod = self.leaf_pod(devices)
        none = np.full(len(devices), -1)
        cols = [
            (self._nic_up if up else self._nic_down)[nic],
            (self._leaf_up if up else self._leaf_down)[leaf] if rel >= 1 else none,
            (self._pod_up if up else self._pod_down)[pod] if rel == 2 else none,
        ]
        return np.concatenate([own, np.stack(cols, axis=1).astype(np.int32)], axis=1)

    def class_route(self, src: np.ndarray, dst: np.ndarray, rel: int):
        """The route row of a flow class (``phases.FlowClass``): the pairs of ``src`` × ``dst``
        on different nodes whose :meth:`relation` is ``rel``, where ``src`` are one local
        device on distinct nodes (likewise ``dst``).  Returns (edge ids, fraction of the pairs
        crossing each, position of the edge in a pair's own path as :meth:`routes` lays it
        out, number of pairs).

        A pair's path is the source's way up to its leaf (its node's edges), the switches
        between the two leaves and the destination's way down.  A source is in as many pairs
        as ``dst`` has devices at relation ``rel`` to it on other nodes: under its leaf (less
        itself), in its tier-2 group but not its leaf, or outside its group; its edges carry
        that many, its leaf's and group's uplinks the sum over their sources (the destination
        side likewise)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        d, epn = self.per_node, self.edges_per_node
        ns, nd = src // d, dst // d
        if len(np.unique(src % d)) != 1 or len(np.unique(dst % d)) != 1:
            raise ValueError("a flow class needs one local device per side")
        leaf_s, pod_s = self.leaf_pod(src)
        leaf_d, pod_d = self.leaf_pod(dst)
        per_src = _partners(rel, leaf_s, pod_s, np.isin(ns, nd), leaf_d, pod_d)
        per_dst = _partners(rel, leaf_d, pod_d, np.isin(nd, ns), leaf_s, pod_s)
        members = int(per_src.sum())
        w_up, w_down = self._t_up.shape[1], self._t_down.shape[1]
        pieces = []  # (edges, pairs crossing each, positions)
        up = shift_edges(np.broadcast_to(self._t_up[src[0] % d], (len(src), w_up)), ns * epn)
        pieces.append((up, np.broadcast_to(per_src[:, None], up.shape), np.arange(w_up)))
        down = shift_edges(np.broadcast_to(self._t_down[dst[0] % d], (len(dst), w_down)), nd * epn)
        if self.spec.nodes > 1:
            npn = self.spec.scale_out.nics_per_node
            nic_s = ns * npn + self._nic_of[src % d]
            nic_d = nd * npn + self._nic_of[dst % d]
            pieces.append((self._nic_up[nic_s][:, None], per_src[:, None], np.array([w_up])))

            def by(key, table, pairs, pos):
                cnt = np.bincount(key, weights=pairs)
                at = np.flatnonzero(cnt)
                pieces.append((table[at][:, None], cnt[at][:, None], np.array([pos])))

            if rel >= 1:
                by(leaf_s, self._leaf_up, per_src, w_up + 1)
            if rel == 2:
                by(pod_s, self._pod_up, per_src, w_up + 2)
                by(pod_d, self._pod_down, per_dst, w_up + 3)
            if rel >= 1:
                by(leaf_d, self._leaf_down, per_dst, w_up + 4)
            pieces.append((self._nic_down[nic_d][:, None], per_dst[:, None], np.array([w_up + 5])))
        pieces.append(
            (down, np.broadcast_to(per_dst[:, None], down.shape), np.arange(w_down) + w_up + 6)
        )
        edges, count, pos = _flatten(pieces)
        return edges.astype(np.int32), count / max(members, 1), pos.astype(np.int16), members


def _partners(rel: int, leaf, pod, same_node, o_leaf, o_pod) -> np.ndarray:
    """Per device of one side of a flow class: the devices of the other side (leaves
    ``o_leaf``, groups ``o_pod``) at relation ``rel`` to it on other nodes (``same_node``: the
    other side has a device on its node, which is under its leaf)."""
    n_leaves = int(max(leaf.max(), o_leaf.max())) + 1
    n_pods = int(max(pod.max(), o_pod.max())) + 1
    on_leaf = np.bincount(o_leaf, minlength=n_leaves)[leaf]
    in_pod = np.bincount(o_pod, minlength=n_pods)[pod]
    return (on_leaf - same_node, in_pod - on_leaf, len(o_leaf) - in_pod)[rel]


def _flatten(pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(edges, pairs crossing each, path positions) of a class route's pieces, each a block of
    edges (-1: none) with the pairs crossing each and its positions, as flat arrays."""
    edges, count, pos = [], [], []
    for e, n, p in pieces:
        e = np.asarray(e)
        n = np.broadcast_to(n, e.shape)
        keep = (e >= 0) & (n > 0)
        edges.append(e[keep])
        count.append(n[keep].astype(float))
        pos.append(np.broadcast_to(p, e.shape)[keep])
    return np.concatenate(edges), np.concatenate(count), np.concatenate(pos)


def shift_edges(table: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Node 0's edge-id rows moved to other nodes: each row plus its node's edge offset (-1,
    no edge, stays), as int32."""
    return np.where(table >= 0, table + offset[:, None], -1).astype(np.int32, copy=False)
