"""Point-to-point traffic through a NIC: which flows of a phase cross the scale-out fabric,
and the fraction of its fair rate each reaches when a NIC carries many sender→receiver
connections (an all-to-all) instead of one (send/recv): :func:`p2p_net_efficiency`, with
``p2p_net_peer_overhead`` from ``zionsim/data/nccl_model.yaml``."""

from __future__ import annotations

import numpy as np

from zionsim.network.layout_key import layout_of


def crosses_fabric(cluster, routes, n_rows: int) -> np.ndarray:
    """Which of a phase's ``n_rows`` flows cross the scale-out fabric: a plain row whose route
    has a fabric edge, a flow-class row whose members' routes have a NIC edge."""
    plain, on_net, nic_up, nic_down = _fabric_edges(cluster, routes)
    out = np.zeros(n_rows, dtype=bool)
    if on_net is not None:
        out[: len(plain)] = on_net.any(axis=1)
    if nic_up is not None:
        out[len(plain) : n_rows] = (nic_up | nic_down).any(axis=1)
    return out


def _fabric_edges(cluster, routes) -> tuple:
    """(the plain routes; per plain route step whether it is a fabric edge, None without plain
    steps; per flow-class member route step whether it is a NIC → fabric edge, and whether a
    fabric → NIC edge, both None without classes).  ``routes``: a phase's route array, or its
    flow classes (``plain`` rows, then ``routes`` of the class members)."""
    router = cluster.router
    classed = not isinstance(routes, np.ndarray)
    plain = routes.plain if classed else routes
    on_net = nic_up = nic_down = None
    if len(plain) and plain.shape[1]:
        # fabric edges, and False at index -1 for the routes' padding
        on_net = np.append(router.edge_kind == cluster.spec.scale_out.kind, False)[plain]
    if classed and len(routes.classes):
        nic_up = np.isin(routes.routes, router.nic_up_edges())
        nic_down = np.isin(routes.routes, router.nic_down_edges())
    return plain, on_net, nic_up, nic_down


#: remember :func:`p2p_net_efficiency` per phase and routes (by identity, held) and cluster
#: layout (:func:`kept_p2p_efficiency`); False: computed each time (the tests comparing the two)
REUSE_P2P = True
#: entries of :data:`_P2P` kept, at most
KEEP_P2P = 4096
_P2P: dict[tuple, tuple] = {}


def kept_p2p_efficiency(cluster, t: dict, phase, routes) -> np.ndarray:
    """:func:`p2p_net_efficiency`, remembered while :data:`REUSE_P2P` for the very same phase
    and routes objects (``nccl.choose`` keeps a schedule and its routes per cluster layout and
    weighs two protocols on them; a sweep over link rates meets them on every cluster) on a
    cluster of the same layout (``layout_key.layout_of``: what the routes and the router's edge
    kinds read; not the rates, which the efficiency does not read), link count, fabric kind and
    ``p2p_net_peer_overhead``.  Read only (shared)."""
    layout = layout_of(cluster) if REUSE_P2P else None
    if layout is None:
        return p2p_net_efficiency(cluster, t, phase, routes)
    key = (id(phase), id(routes), layout, len(cluster.router.capacity_Bps),
           cluster.spec.scale_out.kind, float(t.get("p2p_net_peer_overhead", 0.0)))  # fmt: skip
    hit = _P2P.get(key)
    if hit is not None and hit[0] is phase and hit[1] is routes:
        return hit[2]
    out = p2p_net_efficiency(cluster, t, phase, routes)
    out.flags.writeable = False
    if len(_P2P) >= KEEP_P2P:
        _P2P.clear()
    _P2P[key] = (phase, routes, out)  # held: no other object takes their identities meanwhile
    return out


def p2p_net_efficiency(cluster, t: dict, phase, routes) -> np.ndarray:
    """Fraction of its fair network rate each point-to-point flow of ``phase`` reaches: 1 for
    flows that stay inside a node, ``1 / (1 + c·(1 − 1/k))`` for flows that cross the scale-out
    fabric, where ``k`` is the number of sender→receiver connections (a PXN flow's ``weight``)
    that share the busier of the flow's sending and receiving NIC, and ``c`` is
    ``p2p_net_peer_overhead`` (nccl_model.yaml).  One connection per NIC (send/recv) runs at the
    link's rate; an all-to-all's many connections per NIC lose up to ``c/(1+c)`` of it.  A flow
    class's members are alike: the row takes its members' busiest NIC."""
    ones = np.ones(len(phase.nbytes))
    c = float(t.get("p2p_net_peer_overhead", 0.0))
    classed = not isinstance(routes, np.ndarray)
    plain = routes.plain if classed else routes
    if c == 0.0 or not len(ones) or (plain.shape[1] == 0 and not classed):
        return ones
    n_edges = len(cluster.router.capacity_Bps)
    pairs = ones if phase.weight is None else np.asarray(phase.weight, dtype=float)
    plain, on_net, c_out, c_in = _fabric_edges(cluster, routes)  # c_: a member's NIC edges
    n_plain = len(plain)
    k_out, k_in = np.zeros(n_edges), np.zeros(n_edges)
    crosses = np.zeros(n_plain, dtype=bool)
    if on_net is not None:
        crosses = on_net.any(axis=1)
        rows = np.arange(n_plain)
        egress = plain[rows, np.argmax(on_net, axis=1)]  # NIC → fabric: the first fabric edge
        ingress = plain[rows, plain.shape[1] - 1 - np.argmax(on_net[:, ::-1], axis=1)]
        w = pairs[:n_plain][crosses]
        k_out += np.bincount(egress[crosses], weights=w, minlength=n_edges)
        k_in += np.bincount(ingress[crosses], weights=w, minlength=n_edges)
    if c_out is not None:
        r = routes.routes
        row_w = np.broadcast_to(pairs[n_plain:, None], r.shape)
        k_out += np.bincount(r[c_out], weights=(row_w * routes.frac)[c_out], minlength=n_edges)
        k_in += np.bincount(r[c_in], weights=(row_w * routes.frac)[c_in], minlength=n_edges)
    if not crosses.any() and c_out is None:
        return ones
    out = ones.copy()
    if crosses.any():
        k = np.maximum(np.maximum(k_out[egress], k_in[ingress]), 1.0)
        out[:n_plain] = np.where(crosses, 1.0 / (1.0 + c * (1.0 - 1.0 / k)), 1.0)
    if c_out is not None:
        r = routes.routes
        k_edge = np.where(c_out, k_out[np.maximum(r, 0)], np.where(c_in, k_in[np.maximum(r, 0)], 0))
        k = np.maximum(k_edge.max(axis=1), 1.0)
        out[n_plain:] = 1.0 / (1.0 + c * (1.0 - 1.0 / k))
    return out
