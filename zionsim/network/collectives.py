"""Collective algorithms: a collective on a group of GPUs → phases of point-to-point flows.

Algorithms know nothing of link rates; the network model (``network.flows``) decides how fast the
flows go.  A :class:`Schedule` is a sequence of :class:`Phase` s; phases run one after another,
the flows inside a phase run together (NCCL pipelines chunks, so a pipelined ring is one phase
whose flows stream for the whole operation).  Sizes follow nccl-tests (DESIGN §9): all_reduce the
buffer, all_gather the total output, reduce_scatter the total input, all_to_all the per-rank send
buffer.  This module holds ring, tree, hierarchical, NVLS and CollNet algorithms, the table of
all of them (:data:`ALGORITHMS`) and :func:`schedule`; :class:`Phase` and :class:`Schedule` live
in ``phases.py`` and the point-to-point ones (all_to_all, send/recv) in ``point_to_point.py``,
both re-exported here.

Modelling assumptions:

1. Ring: ``C`` channels, one per NIC of a node when the group spans nodes (each channel enters a
   node through one NIC and leaves through the next, so every NIC carries one channel each way),
   else one channel on an NVSwitch (its GPU↔switch edge already aggregates all NVLinks) and the
   ring plus its reverse on a point-to-point NVLink mesh.  Each rank streams ``2(n−1)/n·S/C``
   (all_reduce) or ``(n−1)/n·S/C`` (reduce_scatter, all_gather) to its ring successor.
2. Tree (all_reduce): NCCL's double binary tree, one pair per channel — a chain inside each node
   and NCCL's binary tree over nodes (trees.cc: node 0 the root with one child; the pair's second
   tree mirrored for an even node count, shifted by one node for odd); across nodes there is one
   channel per NIC (rail) with its own head GPU, so every rail carries tree traffic, each tree
   reducing and broadcasting ``S/(2C)``.
3. Hierarchical (2D) all_reduce: intra-node ring reduce-scatter, inter-node ring all_reduce of each
   shard among same-index GPUs (one rail each), intra-node ring all_gather; three phases.
4. NVLS (NVSwitch generation ≥ 3): in-switch reduction; each GPU sends ``S(1+1/g)`` to the switch
   and receives the same (multimem load-reduce of its slice + multicast store).  Across nodes the
   ``S/g`` shards are all-reduced among same-index GPUs: in the network (NVLS with SHARP,
   assumption 6) or by double binary trees (NVLSTree), pipelined with the intra-node legs.
5. all_to_all and send/recv: ``point_to_point.py``.
6. In-network reduction (CollNet with SHARP): a device's slice goes once up the fabric's
   reduction tree — to its leaf, whose reduced stream goes to its parent, up to the lowest
   switch above all participants — and the result comes back down the same legs, so a NIC
   carries the slice once each way (a ring carries ``2(n−1)/n`` of it).  CollNet Direct
   (all_reduce, NVSwitch nodes): inside a node every GPU scatters ``S/h`` to each of ``h``
   heads (one per NIC) and gathers the result back; each head's slice is reduced in the
   network.  Both legs run together (NCCL pipelines them).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import lru_cache

import numpy as np

from zionsim.base.errors import InputError
from zionsim.network.peer_bytes import OuterSum
from zionsim.network.phases import Phase, Schedule, busbw_factor, merge  # noqa: F401 - re-exported
from zionsim.network.point_to_point import direct_all_to_all, pxn_all_to_all, send_recv

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")


# ------------------------------------------------------------------------------ ring orders
def _by_node(cluster, ranks: np.ndarray) -> list[np.ndarray]:
    nodes = cluster.node_of(ranks)
    return [ranks[nodes == k] for k in np.unique(nodes)]


@lru_cache(maxsize=64)
def _best_cycle(mesh: tuple, locals_: tuple[int, ...]) -> tuple[int, ...]:
    """Ring order of ``locals_`` that maximises (min, sum) NVLink links along the cycle."""
    links = {}
    for a, b, n in mesh:
        links[a, b] = links[b, a] = n
    if len(locals_) > 9:
        return locals_
    first, best, best_key = locals_[0], locals_, (-1, -1)
    for perm in itertools.permutations(locals_[1:]):
        cyc = (first,) + perm
        hops = [links.get((cyc[i], cyc[(i + 1) % len(cyc)]), 0) for i in range(len(cyc))]
        key = (min(hops), sum(hops))
        if key > best_key:
            best, best_key = cyc, key
    return best


def _node_order(cluster, members: np.ndarray) -> np.ndarray:
    su = cluster.spec.scale_up
    if su.kind != "mesh" or len(members) < 3:
        return members
    local = cluster.local_of(members)
    order = _best_cycle(su.mesh, tuple(int(x) for x in local))
    pos = {int(l_): i for i, l_ in enumerate(local)}
    return members[[pos[x] for x in order]]


def rings(cluster, ranks: np.ndarray) -> list[np.ndarray]:
    """Ring orders (one per channel) over ``ranks`` — assumption 1."""
    groups = [_node_order(cluster, g) for g in _by_node(cluster, np.sort(ranks))]
    if len(groups) == 1:
        ring = groups[0]
        if cluster.spec.scale_up.kind == "mesh" and len(ring) > 2:
            return [ring, ring[::-1]]
        return [ring]
    r = min(len(g) for g in groups)
    channels = max(1, min(cluster.spec.scale_out.nics_per_node, r))
    out = []
    for c in range(channels):
        offset = c * r // channels
        out.append(np.concatenate([np.roll(g, -offset) for g in groups]))
    return out


def _ring_phase(cluster, ranks, per_rank_bytes: float, steps: int) -> Phase:
    chans = rings(cluster, ranks)
    src = np.concatenate(chans)
    dst = np.concatenate([np.roll(c, -1) for c in chans])
    nbytes = np.full(len(src), per_rank_bytes / len(chans))
    return Phase(src, dst, nbytes, steps)


# ------------------------------------------------------------------------------ algorithms
def ring_all_reduce(cluster, ranks, size, matrix=None):
    """Ring all_reduce (assumption 1): one pipelined phase, ``2(n−1)/n·size`` bytes from each rank
    to its successor, split over the channels, in ``2(n−1)`` steps."""
    n = len(ranks)
    return (_ring_phase(cluster, ranks, 2 * (n - 1) / n * size, 2 * (n - 1)),)


def ring_reduce_scatter(cluster, ranks, size, matrix=None):
    """Ring reduce_scatter, also all_gather (assumption 1): ``(n−1)/n·size`` bytes per rank in
    ``n−1`` steps."""
    n = len(ranks)
    return (_ring_phase(cluster, ranks, (n - 1) / n * size, n - 1),)


ring_all_gather = ring_reduce_scatter


def tree_channels(cluster, ranks: np.ndarray) -> int:
    """Tree channels: one per NIC of a node across nodes (every rail), one inside a node."""
    if len(np.unique(cluster.node_of(ranks))) == 1:
        return 1
    g = min(len(x) for x in _by_node(cluster, np.sort(ranks)))
    return max(1, min(cluster.spec.scale_out.nics_per_node, g))


def _tree_phase(cluster, ranks, size: float) -> Phase:
    """Double binary trees, one pair per channel (assumption 2): chains inside nodes, a binary
    tree over nodes whose heads are the channel's GPUs (so channel ``c`` leaves every node through
    the NIC of local GPU ``c·g/C``); each tree reduces and broadcasts ``S/(2C)``."""
    groups = [np.sort(g) for g in _by_node(cluster, np.sort(ranks))]
    n_nodes = len(groups)
    channels = tree_channels(cluster, ranks)
    g = min(len(x) for x in groups)
    src, dst = [], []
    for c in range(channels):
        offset = c * g // channels
        for t in range(2):
            chains = [np.roll(x, -offset) if t == 0 else np.roll(x, -offset)[::-1] for x in groups]
            if t == 1:  # the mirror tree: same head GPU, reversed chain and node order
                chains = [np.concatenate([x[-1:], x[:-1]]) for x in chains]
            heads = [x[0] for x in chains]
            edges = [(x[i + 1], x[i]) for x in chains for i in range(len(x) - 1)]
            up = dtree_parents(n_nodes, t)
            edges += [(heads[k], heads[u]) for k, u in enumerate(up) if u >= 0]
            for child, parent in edges:
                src += [child, parent]
                dst += [parent, child]
    levels = max(_tree_levels(dtree_parents(n_nodes, t)) for t in range(2))
    depth = levels + max(len(x) for x in groups) - 1
    return Phase(np.array(src), np.array(dst), np.full(len(src), size / (2 * channels)), 2 * depth)


def _btree_parent(n: int, r: int) -> int:
    """Parent of node ``r`` in NCCL's binary tree over ``n`` nodes (-1 for the root, node 0,
    which has one child).  NVIDIA/nccl src/graph/trees.cc, ncclGetBtree: the lowest set bit of
    ``r`` gives its level; the parent clears that bit and sets the next one, or only clears it
    when that would fall outside ``n``."""
    if r == 0:
        return -1
    low = r & -r
    parent = (r ^ low) | (low << 1)
    return parent if parent < n else r ^ low


def dtree_parents(n: int, tree: int) -> list[int]:
    """Parents of nodes ``0..n-1`` in tree 0 or 1 of NCCL's double binary tree (trees.cc,
    ncclGetDtree): tree 0 is :func:`_btree_parent`'s tree; tree 1 its mirror (``r → n-1-r``)
    when ``n`` is even, or the same tree shifted by one node when ``n`` is odd."""
    if tree == 0:
        return [_btree_parent(n, r) for r in range(n)]
    if n % 2 == 0:
        back = [_btree_parent(n, n - 1 - r) for r in range(n)]
        return [-1 if u < 0 else n - 1 - u for u in back]
    back = [_btree_parent(n, (r - 1) % n) for r in range(n)]
    return [-1 if u < 0 else (u + 1) % n for u in back]


def _tree_levels(parents: list[int]) -> int:
    """Number of levels of a tree given by its parent list (1 for a lone root)."""

    def level(r: int) -> int:
        return 1 if parents[r] < 0 else 1 + level(parents[r])

    return max(level(r) for r in range(len(parents)))


def tree_all_reduce(cluster, ranks, size, matrix=None):
    """Double binary tree all_reduce over every rail (:func:`_tree_phase`), one phase."""
    return (_tree_phase(cluster, ranks, size),)


def hierarchical_all_reduce(cluster, ranks, size, matrix=None):
    """2D all_reduce (assumption 3): intra-node reduce-scatter, ring all_reduce of each
    ``size/g`` shard along its rail, intra-node all_gather; a plain ring on one node or with one
    GPU per node."""
    groups = _by_node(cluster, np.sort(ranks))
    g = min(len(x) for x in groups)
    if len(groups) == 1 or g == 1:
        return ring_all_reduce(cluster, ranks, size)
    intra_rs = merge([_ring_phase(cluster, x, (g - 1) / g * size, g - 1) for x in groups])
    rails = [np.array([x[i] for x in groups]) for i in range(g)]
    n = len(groups)
    inter = merge([_ring_phase(cluster, r, 2 * (n - 1) / n * size / g, 2 * (n - 1)) for r in rails])
    return (intra_rs, inter, intra_rs)


def nvls_all_reduce(cluster, ranks, size, matrix=None):
    """NVLink SHARP all_reduce (assumption 4; NVSwitch generation ≥ 3, else InputError).  Across
    nodes (NCCL runs it only with CollNet/SHARP): each GPU sends ``size`` to its switch and gets
    its ``size/g`` reduced slice back, the slices are reduced in the network along the rails
    (assumption 6), then sent up and multicast back (``size``)."""
    _nvls_check(cluster)
    groups = _by_node(cluster, np.sort(ranks))
    g = min(len(x) for x in groups)
    switch = [cluster.router.local("nvswitch", int(cluster.node_of(x[:1])[0])) for x in groups]
    if len(groups) == 1:
        x, sw = groups[0], switch[0]
        per = size * (1 + 1 / g)
        src = np.concatenate([x, np.full(len(x), sw)])
        dst = np.concatenate([np.full(len(x), sw), x])
        return (Phase(src, dst, np.full(2 * len(x), per), 2),)

    return _nvls_multinode(cluster, groups, switch, size, inter="sharp")


def _nvls_multinode(cluster, groups, switch, size, inter: str):
    """Multi-node NVLS: NVLS reduce-scatter inside each node, the shards all-reduced across
    nodes among same-index GPUs (``sharp``: in the network, as NCCL's NVLS with CollNet;
    ``tree`` for NVLSTree; ``ring``), NVLS all-gather inside each node; the three legs are
    pipelined by NCCL, so they run as one phase."""
    g = min(len(x) for x in groups)

    def leg(out_bytes, in_bytes):
        src = np.concatenate(
            [np.concatenate([x, np.full(len(x), s)]) for x, s in zip(groups, switch, strict=True)]
        )
        dst = np.concatenate(
            [np.concatenate([np.full(len(x), s), x]) for x, s in zip(groups, switch, strict=True)]
        )
        nb = np.concatenate(
            [
                np.concatenate([np.full(len(x), out_bytes), np.full(len(x), in_bytes)])
                for x in groups
            ]
        )
        return Phase(src, dst, nb, 1)

    n = len(groups)
    rails = [np.array([x[i] for x in groups]) for i in range(g)]
    intra = leg(size + size / g, size / g + size)
    if inter == "sharp":
        return (merge([_routed(cluster, intra), _sharp_phase(cluster, rails, size / g)]),)
    if inter == "tree":
        across = merge([_tree_phase(cluster, r, size / g) for r in rails])
    else:
        across = merge(
            [_ring_phase(cluster, r, 2 * (n - 1) / n * size / g, 2 * (n - 1)) for r in rails]
        )
    return (merge([intra, across]),)


def nvls_tree_all_reduce(cluster, ranks, size, matrix=None):
    """NVLSTree all_reduce: NVLS reduction inside each node (NVSwitch-3), trees across nodes;
    plain NVLS on one node."""
    groups = _by_node(cluster, np.sort(ranks))
    if len(groups) == 1:
        return nvls_all_reduce(cluster, ranks, size)
    _nvls_check(cluster)
    switch = [cluster.router.local("nvswitch", int(cluster.node_of(x[:1])[0])) for x in groups]
    return _nvls_multinode(cluster, groups, switch, size, inter="tree")


def collnet_direct_all_reduce(cluster, ranks, size, matrix=None):
    """CollNet Direct all_reduce (assumption 6; 2+ nodes, else InputError): inside each node
    every GPU sends ``size/h`` to each of its node's ``h`` heads (one per NIC) and gets the
    reduced ``size/h`` back from each; each head's slice is reduced in the network with the
    same-channel heads of the other nodes.  NCCL pipelines the legs: one phase."""
    groups = _by_node(cluster, np.sort(ranks))
    if len(groups) < 2:
        raise InputError("CollNet needs 2 or more nodes", field="--algorithm", allowed="ring, tree")
    g = min(len(x) for x in groups)
    h = max(1, min(cluster.spec.scale_out.nics_per_node, g))
    heads = [x[[c * g // h for c in range(h)]] for x in groups]  # GPU c·g/h uses NIC c
    src, dst = [], []
    for x, hd in zip(groups, heads, strict=True):
        a, b = np.meshgrid(x, hd, indexing="ij")
        keep = a != b
        src += [a[keep], b[keep]]
        dst += [b[keep], a[keep]]
    src = np.concatenate(src)
    intra = Phase(src, np.concatenate(dst), np.full(len(src), size / h), 2)
    rails = [np.array([hd[c] for hd in heads]) for c in range(h)]
    return (merge([_routed(cluster, intra), _sharp_phase(cluster, rails, size / h)]),)


def _nvls_check(cluster):
    """InputError unless the cluster's GPUs sit on an NVSwitch of generation 3 or later."""
    su = cluster.spec.scale_up
    if su.kind != "nvswitch" or su.nvswitch_generation < 3:
        raise InputError(
            "NVLS needs an NVSwitch of generation 3 or later",
            field="--algorithm",
            allowed="ring, tree, hierarchical",
        )


def _routed(cluster, phase: Phase) -> Phase:
    """``phase`` with its router paths written out (to merge it with explicitly routed legs)."""
    if phase.routes is not None:
        return phase
    return replace(phase, routes=cluster.router.routes(phase.src, phase.dst))


def _sharp_phase(cluster, rails: list[np.ndarray], slice_bytes: float) -> Phase:
    """In-network reduction (assumption 6) of ``slice_bytes`` on each rail (one device per
    node): every device sends its slice up the fabric's reduction tree, each switch forwards one
    reduced stream to its parent, and the result comes back down the same legs.  A fabric
    switch, which has no device id, is written -1 in ``src``/``dst``."""
    src, dst, routes = [], [], []
    for rail in rails:
        up, down = cluster.router.reduction_tree(rail)
        k, extra = len(rail), len(up) - len(rail)
        switch = np.full(k + 2 * extra, -1)
        src += [rail, switch]  # up legs leave the devices, down legs reach them
        dst += [switch, rail]
        routes += [up[:k], up[k:], down[k:], down[:k]]
    src = np.concatenate(src)
    width = max(r.shape[1] for r in routes)
    rows = np.concatenate(
        [np.pad(r, ((0, 0), (0, width - r.shape[1])), constant_values=-1) for r in routes]
    )
    return Phase(src, np.concatenate(dst), np.full(len(src), slice_bytes), 2, None, rows)


ALGORITHMS = {
    "all_reduce": {
        "ring": ring_all_reduce,
        "tree": tree_all_reduce,
        "hierarchical": hierarchical_all_reduce,
        "nvls": nvls_all_reduce,
        "nvls_tree": nvls_tree_all_reduce,
        "collnet_direct": collnet_direct_all_reduce,
    },
    "reduce_scatter": {"ring": ring_reduce_scatter},
    "all_gather": {"ring": ring_all_gather},
    "all_to_all": {"direct": direct_all_to_all, "pxn": pxn_all_to_all},
    "send_recv": {"direct": send_recv},
}


def schedule(
    cluster,
    op: str,
    ranks: np.ndarray,
    size_bytes: float,
    algorithm: str,
    matrix: np.ndarray | None = None,
) -> Schedule:
    """The phases of ``op`` on ``ranks`` (GPU device ids) with ``algorithm``."""
    if op not in ALGORITHMS:
        raise InputError(f"unknown collective {op!r}", field="--op", allowed=", ".join(OPS))
    if algorithm not in ALGORITHMS[op]:
        raise InputError(
            f"unknown algorithm {algorithm!r} for {op}",
            field="--algorithm",
            allowed=", ".join(ALGORITHMS[op]),
        )
    ranks = np.asarray(ranks, dtype=np.int64)
    if matrix is not None:
        if not isinstance(matrix, OuterSum):
            matrix = np.asarray(matrix, dtype=float)
        if matrix.shape != (len(ranks), len(ranks)) or matrix.min(initial=0.0) < 0:
            raise InputError(
                f"per-peer byte matrix must be {len(ranks)}x{len(ranks)} and >= 0", field="matrix"
            )
    phases = ALGORITHMS[op][algorithm](cluster, ranks, float(size_bytes), matrix)
    return Schedule(op, algorithm, ranks, float(size_bytes), tuple(phases))
