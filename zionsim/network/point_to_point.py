"""NCCL's point-to-point collectives: all_to_all(v), direct or rail-aligned (PXN), and send/recv.

Modelling assumption (``collectives.py`` lists the others): all_to_all(v) direct is one flow per
ordered pair with its bytes.  PXN (rail-aligned): data for GPU ``(b, m)`` first crosses NVLink to
GPU ``(a, m)`` on the sender's node, which sends the aggregate of its node over its own rail;
both legs stream together (pipelined relay).  Per-peer byte matrices may be dense or
``peer_bytes.OuterSum`` (a DLRM layout's); the sums PXN needs have a closed form for the latter.
"""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError
from zionsim.network.peer_bytes import OuterSum
from zionsim.network.phases import Phase, merge


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
