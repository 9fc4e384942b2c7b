"""Collective algorithms: a collective on a group of GPUs → phases of point-to-point flows.

Algorithms know nothing of link rates; the network model (``network.flows``) decides how fast the
flows go.  A :class:`Schedule` is a sequence of :class:`Phase` s; phases run one after another,
the flows inside a phase run together (NCCL pipelines chunks, so a pipelined ring is one phase
whose flows stream for the whole operation).  Sizes follow nccl-tests (DESIGN §9): all_reduce the
buffer, all_gather the total output, reduce_scatter the total input, all_to_all the per-rank send
buffer.

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
5. all_to_all(v) direct: one flow per ordered pair with its bytes.  PXN (rail-aligned): data for
   GPU ``(b, m)`` first crosses NVLink to GPU ``(a, m)`` on the sender's node, which sends the
   aggregate of its node over its own rail; both legs stream together (pipelined relay).
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
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from zionsim.base.errors import InputError
from zionsim.network.peer_bytes import OuterSum

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")


@dataclass(frozen=True)
class Phase:
    """Flows that run together: device ids, payload bytes, merge weights and ring steps."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    steps: int
    weight: np.ndarray | None = None
    #: each flow's edge ids (padded with -1) where the algorithm routes it itself (legs that
    #: end in a fabric switch, as in-network reduction); None: the router's path src → dst
    routes: np.ndarray | None = None


@dataclass(frozen=True)
class Schedule:
    """A collective as it runs: ``op`` with ``algorithm`` on ``ranks`` (GPU device ids),
    ``size_bytes`` as nccl-tests counts it, and its phases in order."""

    op: str
    algorithm: str
    ranks: np.ndarray
    size_bytes: float
    phases: tuple[Phase, ...]


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw × factor."""
    if n <= 1:
        return 0.0 if op != "send_recv" else 1.0
    return {"all_reduce": 2 * (n - 1) / n, "send_recv": 1.0}.get(op, (n - 1) / n)


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
    intra_rs = _merge([_ring_phase(cluster, x, (g - 1) / g * size, g - 1) for x in groups])
    rails = [np.array([x[i] for x in groups]) for i in range(g)]
    n = len(groups)
    inter = _merge(
        [_ring_phase(cluster, r, 2 * (n - 1) / n * size / g, 2 * (n - 1)) for r in rails]
    )
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
        return (_merge([_routed(cluster, intra), _sharp_phase(cluster, rails, size / g)]),)
    if inter == "tree":
        across = _merge([_tree_phase(cluster, r, size / g) for r in rails])
    else:
        across = _merge(
            [_ring_phase(cluster, r, 2 * (n - 1) / n * size / g, 2 * (n - 1)) for r in rails]
        )
    return (_merge([intra, across]),)


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
    return (_merge([_routed(cluster, intra), _sharp_phase(cluster, rails, size / h)]),)


def _nvls_check(cluster):
    """InputError unless the cluster's GPUs sit on an NVSwitch of generation 3 or later."""
    su = cluster.spec.scale_up
    if su.kind != "nvswitch" or su.nvswitch_generation < 3:
        raise InputError(
            "NVLS needs an NVSwitch of generation 3 or later",
            field="--algorithm",
            allowed="ring, tree, hierarchical",
        )


def _uniform_matrix(ranks, size):
    n = len(ranks)
    return OuterSum(row=np.full(n, size / n), col=np.zeros(n))


def direct_all_to_all(cluster, ranks, size, matrix=None):
    """all_to_all(v) (assumption 5): one flow per ordered pair with bytes, ``matrix[i, j]`` from
    rank ``i`` to ``j`` (default ``size/n`` each)."""
    m = np.asarray(_uniform_matrix(ranks, size) if matrix is None else matrix)
    i, j = np.nonzero(~np.eye(len(ranks), dtype=bool) & (m > 0))
    return (Phase(ranks[i], ranks[j], m[i, j], 1),)


def pxn_all_to_all(cluster, ranks, size, matrix=None):
    """Rail-aligned all_to_all(v) (PXN, assumption 5): an NVLink relay to the same-rail GPU of the
    sender's node and one aggregated flow per rail and node pair, both in one phase; direct inside
    a node or without a scale-up fabric."""
    m = _uniform_matrix(ranks, size) if matrix is None else matrix
    if cluster.spec.scale_up.kind == "none" or len(np.unique(cluster.node_of(ranks))) == 1:
        return direct_all_to_all(cluster, ranks, size, m)
    node, local = cluster.node_of(ranks), cluster.local_of(ranks)
    g = cluster.spec.gpus_per_node
    relay, agg, senders = _pxn_sums(cluster, node, local, m)
    # relay leg: sender (a, l) → (a, m) carries everything for GPUs with local index m
    s_idx, m_idx = np.nonzero(relay)
    per = cluster.router.per_node
    gpu_slot = np.array([cluster.router.local("gpu", 0, int(x)) for x in range(g)])
    proxy = node[s_idx] * per + gpu_slot[m_idx]
    keep = proxy != ranks[s_idx]
    intra = Phase(ranks[s_idx][keep], proxy[keep], relay[s_idx, m_idx][keep], 1)
    # network leg: (a, m) → (b, m) carries the data of every sender on node a (assumption 5);
    # its weight is the number of senders merged into it (network.flows assumption 3)
    a, b, r = np.nonzero(agg)
    net = Phase(
        a * per + gpu_slot[r], b * per + gpu_slot[r], agg[a, b, r], 1, weight=senders[a, b, r]
    )
    return (_merge([intra, net]),)


def _pxn_sums(cluster, node, local, m):
    """PXN's per-leg byte sums of matrix ``m`` among ranks on ``node``/``local``: ``relay[i,
    l]``, what rank ``i`` sends to the GPUs of local index ``l`` (itself excluded);
    ``agg[a, b, l]`` and ``senders[a, b, l]``, the bytes from node ``a`` to GPU ``(b, l)`` of
    another node and how many of ``a``'s ranks send them.  Sums run over senders, then
    destination nodes, in rank order."""
    n, n_nodes, g = len(node), cluster.spec.nodes, cluster.spec.gpus_per_node
    if isinstance(m, OuterSum):
        return _pxn_sums_outer(node, local, m, n_nodes, g)
    nodes_in = np.unique(node)
    k = len(nodes_in)
    whole = n == k * g and (node == np.repeat(nodes_in, g)).all()
    if whole and (local == np.tile(np.arange(g), k)).all():
        # whole nodes in node-major order (every DLRM group and full-cluster collective): the
        # sums are reductions over axes of the (node, local, node, local) view of ``m`` itself,
        # no copy and no index arrays (a 16,384-rank matrix is 2 GiB)
        m4 = m.reshape(k, g, k, g)
        relay = m4.sum(axis=2).reshape(n, g)
        relay[np.arange(n), local] -= np.diagonal(m)  # a rank sends nothing to itself
        agg_k = m4.sum(axis=1)
        cnt_k = (m4 > 0).sum(axis=1, dtype=float)
        same = np.arange(k)
        agg_k[same, same] = 0.0  # same-node pairs go over the relay leg only
        cnt_k[same, same] = 0.0
        agg = np.zeros((n_nodes, n_nodes, g))
        senders = np.zeros((n_nodes, n_nodes, g))
        agg[np.ix_(nodes_in, nodes_in)] = agg_k
        senders[np.ix_(nodes_in, nodes_in)] = cnt_k
        return relay, agg, senders
    m_off = m.copy()
    np.fill_diagonal(m_off, 0.0)
    relay = np.zeros((n, g))
    np.add.at(relay, (np.repeat(np.arange(n), n), np.tile(local, n)), m_off.ravel())
    cross = node[:, None] != node[None, :]
    agg = np.zeros((n_nodes, n_nodes, g))
    senders = np.zeros((n_nodes, n_nodes, g))
    ii, jj = np.nonzero(cross & (m > 0))
    np.add.at(agg, (node[ii], node[jj], local[jj]), m[ii, jj])
    np.add.at(senders, (node[ii], node[jj], local[jj]), 1.0)
    return relay, agg, senders


def _pxn_sums_outer(node, local, m: OuterSum, n_nodes: int, g: int):
    """:func:`_pxn_sums` of ``m[i, j] = row[i] + col[j]`` in closed form, O(ranks + nodes² g):
    ``relay[i, l] = cnt_l row_i + C_l - [l_i = l](row_i + col_i)`` with ``cnt_l`` ranks of local
    index ``l`` and ``C_l`` their ``col`` sum; ``agg[a, b, l] = R_a cnt_bl + n_a C_bl`` (a ≠ b)
    with ``R_a``/``n_a`` node ``a``'s ``row`` sum and rank count; ``senders[a, b, l]`` counts
    the pairs with bytes: all ``n_a`` for a destination with ``col > 0``, else ``a``'s ranks
    with ``row > 0`` (bytes are never negative)."""
    r, c = m.row, m.col
    cnt_l = np.bincount(local, minlength=g).astype(float)
    col_l = np.bincount(local, weights=c, minlength=g)
    relay = r[:, None] * cnt_l[None, :] + col_l[None, :]
    relay[np.arange(len(r)), local] -= r + c
    np.maximum(relay, 0.0, out=relay)  # rounding of the subtraction never leaves bytes < 0
    n_a = np.bincount(node, minlength=n_nodes).astype(float)
    row_a = np.bincount(node, weights=r, minlength=n_nodes)
    pos_a = np.bincount(node, weights=(r > 0).astype(float), minlength=n_nodes)
    cnt_bl = np.zeros((n_nodes, g))
    col_bl = np.zeros((n_nodes, g))
    live_bl = np.zeros((n_nodes, g))  # destinations (b, l) whose col > 0
    np.add.at(cnt_bl, (node, local), 1.0)
    np.add.at(col_bl, (node, local), c)
    np.add.at(live_bl, (node, local), (c > 0).astype(float))
    agg = row_a[:, None, None] * cnt_bl[None] + n_a[:, None, None] * col_bl[None]
    senders = n_a[:, None, None] * live_bl[None] + pos_a[:, None, None] * (cnt_bl - live_bl)[None]
    senders = np.where(agg > 0, senders, 0.0)
    same = np.arange(n_nodes)
    agg[same, same] = 0.0  # same-node pairs go over the relay leg only
    senders[same, same] = 0.0
    return relay, agg, senders


def send_recv(cluster, ranks, size, matrix=None):
    """One flow of ``size`` bytes from ``ranks[0]`` to ``ranks[1]`` (exactly two ranks)."""
    if len(ranks) != 2:
        raise InputError(f"send_recv needs 2 ranks, got {len(ranks)}", field="ranks")
    return (Phase(ranks[:1], ranks[1:], np.array([float(size)]), 1),)


def _merge(phases: list[Phase]) -> Phase:
    """Phases that run together as one (their flows share the network); explicit routes are
    kept if every phase has them (see :func:`_routed`)."""
    weights = [p.weight if p.weight is not None else np.ones(len(p.src)) for p in phases]
    routes = None
    if all(p.routes is not None for p in phases):
        width = max(p.routes.shape[1] for p in phases)
        routes = np.concatenate(
            [np.pad(p.routes, ((0, 0), (0, width - p.routes.shape[1])), constant_values=-1)
             for p in phases]
        )  # fmt: skip
    return Phase(
        np.concatenate([p.src for p in phases]),
        np.concatenate([p.dst for p in phases]),
        np.concatenate([p.nbytes for p in phases]),
        max(p.steps for p in phases),
        np.concatenate(weights),
        routes,
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
