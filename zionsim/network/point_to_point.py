"""NCCL's point-to-point collectives: all_to_all(v), direct or rail-aligned (PXN), and send/recv.

Modelling assumption (``collectives.py`` lists the others): all_to_all(v) direct is one flow per
ordered pair with its bytes.  PXN (rail-aligned): data for GPU ``(b, m)`` first crosses NVLink to
GPU ``(a, m)`` on the sender's node, which sends the aggregate of its node over its own rail;
both legs stream together (pipelined relay).  Per-peer byte matrices may be dense or
``peer_bytes.OuterSum`` (a DLRM layout's); the sums PXN needs have a closed form for the latter.
For the latter, PXN's node-pair flows also travel as flow classes (``network.flows``
assumption 6): one row per rail, pair of node *colours* and fabric relation, where a colour
is a node's byte sums and the shape of the fabric around its NIC, so the members of a row are
alike in the matrix and, by the fabric's symmetries, in the network (:func:`_pxn_classes`).
"""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError
from zionsim.network.peer_bytes import OuterSum
from zionsim.network.phases import ClassRoutes, FlowClass, Phase, merge

#: PXN's node-pair flows as flow classes where they are alike (module docstring); False: one
#: flow each, the per-flow model the classes must reproduce (bench/run.py ``--per-flow``)
CLASSES = True
#: ... from this many node-pair flows on (measured with bench/run.py: at 16 ZionEX nodes,
#: 1,920 flows, checking and splitting classes when an all-reduce overlaps costs more than the
#: flows themselves; at 128 nodes, 130 k flows, classes are faster)
CLASSES_FROM = 20_000


def _uniform_matrix(ranks, size):
    n = len(ranks)
    return OuterSum(row=np.full(n, size / n), col=np.zeros(n))


def direct_all_to_all(cluster, ranks, size, matrix=None):
    """all_to_all(v) (module docstring): one flow per ordered pair with bytes, ``matrix[i, j]`` from
    rank ``i`` to ``j`` (default ``size/n`` each)."""
    m = np.asarray(_uniform_matrix(ranks, size) if matrix is None else matrix)
    i, j = np.nonzero(~np.eye(len(ranks), dtype=bool) & (m > 0))
    return (Phase(ranks[i], ranks[j], m[i, j], 1),)


def pxn_all_to_all(cluster, ranks, size, matrix=None):
    """Rail-aligned all_to_all(v) (PXN, module docstring): an NVLink relay to the same-rail GPU
    of the sender's node and one aggregated flow per rail and node pair, both in one phase;
    direct inside a node or without a scale-up fabric."""
    m = _uniform_matrix(ranks, size) if matrix is None else matrix
    if cluster.spec.scale_up.kind == "none" or len(np.unique(cluster.node_of(ranks))) == 1:
        return direct_all_to_all(cluster, ranks, size, m)
    node, local = cluster.node_of(ranks), cluster.local_of(ranks)
    g = cluster.spec.gpus_per_node
    if CLASSES and isinstance(m, OuterSum):
        classed = _pxn_classes(cluster, ranks, node, local, m)
        if classed is not None:
            return (classed,)
    relay, agg, senders = _pxn_sums(cluster, node, local, m)
    # relay leg: sender (a, l) → (a, m) carries everything for GPUs with local index m
    s_idx, m_idx = np.nonzero(relay)
    per = cluster.router.per_node
    gpu_slot = np.array([cluster.router.local("gpu", 0, int(x)) for x in range(g)])
    proxy = node[s_idx] * per + gpu_slot[m_idx]
    keep = proxy != ranks[s_idx]
    intra = Phase(ranks[s_idx][keep], proxy[keep], relay[s_idx, m_idx][keep], 1)
    # network leg: (a, m) → (b, m) carries the data of every sender on node a (module docstring);
    # its weight is the number of senders merged into it (network.flows assumption 3)
    a, b, r = np.nonzero(agg)
    net = Phase(
        a * per + gpu_slot[r], b * per + gpu_slot[r], agg[a, b, r], 1, weight=senders[a, b, r]
    )
    return (merge([intra, net]),)


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


def _pxn_classes(cluster, ranks, node, local, m: OuterSum) -> Phase | None:
    """PXN all-to-all of an :class:`OuterSum` among the same GPUs of every node in node-major
    order (whole nodes, or one rail), its node-pair flows as classes (module docstring); None
    where that is not the case, where there are too few flows to gain (:data:`CLASSES_FROM`) or
    where the colours would not halve the rows.

    The flow from node ``a`` to GPU ``(b, l)`` carries ``R_a cnt_bl + n_a C_bl`` bytes from
    ``senders`` ranks (:func:`_pxn_sums_outer`): it depends on ``a`` through ``(R_a, n_a,
    pos_a)`` and on ``b`` through ``(cnt_bl, C_bl, live_bl)``.  A node's colour on rail ``l``
    is those values and the shape of the fabric around its rail-``l`` NIC (nodes under its leaf
    switch, nodes and leaves in its tier-2 group); a row holds the flows of one rail, source
    colour, destination colour and fabric relation (``Router.relation``).  The fabric's own
    symmetries (nodes under a leaf, leaves of a group, groups of the core) make them alike; the
    network checks that their rates agree and splits a row where they do not."""
    n_nodes, g = cluster.spec.nodes, cluster.spec.gpus_per_node
    nodes_in = np.unique(node)
    k = len(nodes_in)
    per = len(node) // k  # ranks per node: the same local indices on every node, node-major
    alike = len(node) == k * per and (node == np.repeat(nodes_in, per)).all()
    if not alike or not (local.reshape(k, per) == local[:per]).all() or k < 3:
        return None
    if k * (k - 1) * per < CLASSES_FROM:
        return None  # few flows: one each is cheaper
    if not getattr(cluster.router, "flow_classes", True):
        return None  # a faulted cluster's nodes are not alike (hardware/faults.py)
    sums = _outer_node_sums(node, local, m, n_nodes, g)
    router = cluster.router
    gpu_slot = np.array([router.local("gpu", 0, int(x)) for x in range(g)])
    rows = []  # (FlowClass, route, frac, group, bytes per member, weight per member, src, dst)
    for lane in np.sort(local[:per]).tolist():
        devs = nodes_in * router.per_node + gpu_slot[lane]
        lane_rows = _pxn_lane_classes(router, nodes_in, devs, lane, sums)
        if lane_rows is None:
            return None  # hardly alike: one flow each
        rows += lane_rows
    width = max((len(r[1]) for r in rows), default=0)
    c_routes = np.full((len(rows), width), -1, dtype=np.int32)
    c_frac = np.zeros((len(rows), width))
    c_group = np.full((len(rows), width), -1, dtype=np.int16)
    for i, r in enumerate(rows):
        c_routes[i, : len(r[1])], c_frac[i, : len(r[1])], c_group[i, : len(r[1])] = r[1:4]
    members = np.array([r[0].members for r in rows], dtype=float)
    relay = _relay_outer(local, m, g)
    s_idx, m_idx = np.nonzero(relay)
    proxy = node[s_idx] * router.per_node + gpu_slot[m_idx]
    keep = proxy != ranks[s_idx]
    intra_src, intra_dst = ranks[s_idx][keep], proxy[keep]
    classes = ClassRoutes(
        router.routes(intra_src, intra_dst), c_routes, c_frac, c_group,
        tuple(r[0] for r in rows),
    )  # fmt: skip
    return Phase(
        np.concatenate([intra_src, np.array([r[6] for r in rows], dtype=np.int64)]),
        np.concatenate([intra_dst, np.array([r[7] for r in rows], dtype=np.int64)]),
        np.concatenate([relay[s_idx, m_idx][keep], members * np.array([r[4] for r in rows])]),
        1,
        np.concatenate([np.ones(len(intra_src)), members * np.array([r[5] for r in rows])]),
        classes=classes,
    )


def _pxn_lane_classes(router, nodes_in, devs, lane: int, sums) -> list | None:
    """The class rows of rail ``lane`` (:func:`_pxn_classes`), each (FlowClass, route, frac,
    group, bytes and weight per member, one member's source and destination); None when the
    colours would not make rows at least twice fewer than the node pairs."""
    n_a, row_a, pos_a, cnt_bl, col_bl, live_bl = sums
    k = len(nodes_in)
    shape = _fabric_shape(router, devs)
    src_part = np.c_[row_a, pos_a, n_a][nodes_in]
    _, sc = np.unique(np.c_[src_part, shape], axis=0, return_inverse=True)
    dst_part = np.c_[cnt_bl[nodes_in, lane], col_bl[nodes_in, lane], live_bl[nodes_in, lane]]
    _, dc = np.unique(np.c_[dst_part, shape], axis=0, return_inverse=True)
    sc, dc = sc.ravel(), dc.ravel()
    if (sc.max() + 1) * (dc.max() + 1) * 3 * 2 > k * (k - 1):
        return None
    rows = []
    for A in (np.flatnonzero(sc == c) for c in range(sc.max() + 1)):
        a0 = nodes_in[A[0]]  # every node of A has the same sums, every node of B too
        for B in (np.flatnonzero(dc == c) for c in range(dc.max() + 1)):
            b0 = nodes_in[B[0]]
            nbytes = row_a[a0] * cnt_bl[b0, lane] + n_a[a0] * col_bl[b0, lane]
            if nbytes <= 0:
                continue
            live = live_bl[b0, lane]
            weight = n_a[a0] * live + pos_a[a0] * (cnt_bl[b0, lane] - live)
            for rel in (0, 1, 2):
                edges, frac, group, members = router.class_route(devs[A], devs[B], rel)
                if members == 0:
                    continue
                rep = router.class_pairs(devs[A[:1]], devs[B], rel)
                if not len(rep[0]):
                    rep = router.class_pairs(devs[A], devs[B], rel)
                cls = FlowClass(devs[A], devs[B], rel, members)
                rows.append((cls, edges, frac, group, nbytes, weight, rep[0][0], rep[1][0]))
    return rows


def _fabric_shape(router, devices: np.ndarray) -> np.ndarray:
    """Per device: how many of ``devices`` share its leaf switch and its tier-2 group, and how
    many leaves of the group they use (the fabric around it, as far as symmetry goes)."""
    leaf, pod = router.leaf_pod(devices)
    _, leaf_i, on_leaf = np.unique(leaf, return_inverse=True, return_counts=True)
    _, pod_i, in_pod = np.unique(pod, return_inverse=True, return_counts=True)
    pairs = np.unique(np.c_[pod, leaf], axis=0)
    leaves_of = np.bincount(np.searchsorted(np.unique(pod), pairs[:, 0]))
    return np.c_[on_leaf[leaf_i.ravel()], in_pod[pod_i.ravel()], leaves_of[pod_i.ravel()]]


def _relay_outer(local, m: OuterSum, g: int) -> np.ndarray:
    """PXN's relay sums of ``m[i, j] = row[i] + col[j]`` (:func:`_pxn_sums_outer`)."""
    r, c = m.row, m.col
    cnt_l = np.bincount(local, minlength=g).astype(float)
    col_l = np.bincount(local, weights=c, minlength=g)
    relay = r[:, None] * cnt_l[None, :] + col_l[None, :]
    relay[np.arange(len(r)), local] -= r + c
    np.maximum(relay, 0.0, out=relay)  # rounding of the subtraction never leaves bytes < 0
    return relay


def _outer_node_sums(node, local, m: OuterSum, n_nodes: int, g: int):
    """Per node ``a``: rank count, ``row`` sum and ranks with ``row > 0``; per GPU ``(b, l)``:
    rank count, ``col`` sum and ranks with ``col > 0`` (:func:`_pxn_sums_outer`)."""
    r, c = m.row, m.col
    n_a = np.bincount(node, minlength=n_nodes).astype(float)
    row_a = np.bincount(node, weights=r, minlength=n_nodes)
    pos_a = np.bincount(node, weights=(r > 0).astype(float), minlength=n_nodes)
    cnt_bl = np.zeros((n_nodes, g))
    col_bl = np.zeros((n_nodes, g))
    live_bl = np.zeros((n_nodes, g))  # destinations (b, l) whose col > 0
    np.add.at(cnt_bl, (node, local), 1.0)
    np.add.at(col_bl, (node, local), c)
    np.add.at(live_bl, (node, local), (c > 0).astype(float))
    return n_a, row_a, pos_a, cnt_bl, col_bl, live_bl


def _pxn_sums_outer(node, local, m: OuterSum, n_nodes: int, g: int):
    """:func:`_pxn_sums` of ``m[i, j] = row[i] + col[j]`` in closed form, O(ranks + nodes² g):
    ``relay[i, l] = cnt_l row_i + C_l - [l_i = l](row_i + col_i)`` with ``cnt_l`` ranks of local
    index ``l`` and ``C_l`` their ``col`` sum; ``agg[a, b, l] = R_a cnt_bl + n_a C_bl`` (a ≠ b)
    with ``R_a``/``n_a`` node ``a``'s ``row`` sum and rank count; ``senders[a, b, l]`` counts
    the pairs with bytes: all ``n_a`` for a destination with ``col > 0``, else ``a``'s ranks
    with ``row > 0`` (bytes are never negative)."""
    relay = _relay_outer(local, m, g)
    n_a, row_a, pos_a, cnt_bl, col_bl, live_bl = _outer_node_sums(node, local, m, n_nodes, g)
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
