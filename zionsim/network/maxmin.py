"""Max-min fair rates: the rate solver of the flow network (``flows.py``) and the certificate
that keeps its flow classes exact.

:func:`maxmin_rates` gives every flow (or class row: ``flows.py`` assumption 6) its max-min fair
rate on the directed links it crosses, by progressive filling, vectorised with numpy.
:func:`uncovered_classes` checks that every class row has each member on a bottleneck (a
saturated link on which no flow has a larger fair share: what makes an allocation max-min fair),
and :func:`refine_class` splits a class that fails into finer ones by the link levels its
members see.  Pure functions of arrays: no simpy, no state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np


def maxmin_rates(
    routes: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    cap: np.ndarray | None = None,
    classes: tuple | None = None,
) -> np.ndarray:
    """Max-min fair rate of each flow (bytes/s) by progressive filling.

    ``routes`` is (F, H) edge ids padded with -1; a flow with no edge gets ``inf``.  Each round
    finds the links with the smallest fair share per unit weight, fixes every flow crossing one of
    them at that share × its weight, and removes their load from the other links.  A flow's own
    ``cap`` (bytes/s) acts as a private link of that capacity.  ``classes`` = (rows, routes,
    frac) adds class rows' incidences (assumption 6): row ``rows[i]`` crosses ``routes[i]``
    with its weight and rate scaled by ``frac[i]`` (its rows in ``routes`` are all -1).

    The (flow, link) incidences are kept as flat arrays in flow-major order and each round works
    on those of the flows still unfixed only, so a round costs what is left, not F × H; every sum
    is taken over the same terms in the same order as a full pass would, so the rates do not
    depend on how many flows were fixed before.
    """
    n_flows, hops = routes.shape
    n_links = len(capacity)
    rate = np.zeros(n_flows)
    if n_flows == 0:
        return rate
    cap = np.full(n_flows, np.inf) if cap is None else cap
    inc_flow, inc_link, inc_frac = _incidences(routes, classes)
    inc_w = weight[inc_flow] if inc_frac is None else weight[inc_flow] * inc_frac
    has_link = np.zeros(n_flows, dtype=bool)
    has_link[inc_flow] = True
    rate[~has_link] = np.minimum(np.inf, cap[~has_link])
    active = has_link.copy()
    remaining = np.append(capacity.astype(float), np.inf)
    own_all = np.where(active, cap / weight, np.inf)
    while active.any():
        load = np.bincount(inc_link, weights=inc_w, minlength=n_links + 1)
        load[n_links] = 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(load > 0, remaining / load, np.inf)
        own = np.where(active, own_all, np.inf)
        level = min(share.min(), own.min())
        bottleneck = share <= level * (1 + 1e-9)
        hit = active & (own <= level * (1 + 1e-9))
        hit[inc_flow[bottleneck[inc_link]]] = True
        rate[hit] = level * weight[hit]
        active &= ~hit
        if not active.any():  # every flow has its rate: the loads left do not matter
            break
        fixed = hit[inc_flow]
        use = rate[inc_flow[fixed]] if inc_frac is None else rate[inc_flow[fixed]] * inc_frac[fixed]
        used = np.bincount(inc_link[fixed], weights=use, minlength=n_links + 1)
        remaining = np.maximum(remaining - used, 0.0)
        remaining[n_links] = np.inf
        keep = ~fixed
        inc_flow, inc_link, inc_w = inc_flow[keep], inc_link[keep], inc_w[keep]
        if inc_frac is not None:
            inc_frac = inc_frac[keep]
    return rate


def _incidences(routes: np.ndarray, classes: tuple | None = None):
    """(flow, link, frac) of every (flow, link) incidence, in flow-major order for ``routes``
    then the class rows' (frac None when there are none: 1)."""
    n_flows, hops = routes.shape
    flat = routes.ravel()
    valid = flat >= 0
    inc_link = flat[valid].astype(np.intp)  # bincount's own index type: no cast per round
    # flow of each incidence, in flow-major order (what np.nonzero(routes >= 0) gives), int32
    # while the flow count allows: a million-flow batch's incidences take half the memory
    idx_type = np.int32 if n_flows < 2**31 else np.int64
    inc_flow = np.repeat(np.arange(n_flows, dtype=idx_type), hops)[valid]
    if classes is None or not len(classes[0]):
        return inc_flow, inc_link, None
    rows, c_routes, c_frac = classes
    c_valid = c_routes >= 0
    c_flow = np.broadcast_to(np.asarray(rows, dtype=idx_type)[:, None], c_routes.shape)[c_valid]
    return (
        np.concatenate([inc_flow, c_flow]),
        np.concatenate([inc_link, c_routes[c_valid].astype(np.intp)]),
        np.concatenate([np.ones(len(inc_flow)), c_frac[c_valid]]),
    )


def uncovered_classes(
    routes: np.ndarray,
    classes: tuple,
    group: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    cap: np.ndarray,
    rate: np.ndarray,
) -> np.ndarray:
    """Positions (in ``classes``' rows) of the class rows whose members do not all have a
    bottleneck under ``rate`` (assumption 6), and each link's level: the largest rate per unit
    weight on it where it is saturated, else ``inf``.

    A flow's bottleneck is a saturated link on its path on which no flow has a larger rate per
    unit weight, or its own cap; an allocation where every flow has one is the max-min fair one.
    Rows that are one flow always have one (progressive filling fixed them at such a link).  A
    class row's members all have one when, at some position of their paths (``group``), every
    link they cross there is a bottleneck: each member crosses exactly one of those.
    Tolerances are relative, 1e-9, as in :func:`maxmin_rates`."""
    rows = np.asarray(classes[0])
    n_links, tol = len(capacity), 1 + 1e-9
    flow, link, frac = _incidences(routes, classes)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = rate / weight
    used = np.bincount(link, weights=rate[flow] * frac, minlength=n_links)
    saturated = used * tol >= capacity
    top = np.full(n_links, -np.inf)
    np.maximum.at(top, link, level[flow])
    c_routes = classes[1]
    valid = c_routes >= 0
    pos = np.broadcast_to(np.arange(len(rows))[:, None], c_routes.shape)[valid]
    c_link = c_routes[valid].astype(np.intp)
    ok = saturated[c_link] & (level[rows[pos]] * tol >= top[c_link])
    grp = group[valid].astype(np.int64)
    n_grp = int(grp.max()) + 1 if len(grp) else 1
    key = pos.astype(np.int64) * n_grp + grp
    size = len(rows) * n_grp
    bad = np.bincount(key, weights=~ok, minlength=size).reshape(-1, n_grp)
    seen = np.bincount(key, minlength=size).reshape(-1, n_grp)
    covered = ((seen > 0) & (bad == 0)).any(axis=1) | (rate[rows] * tol >= cap[rows])
    return np.flatnonzero(~covered), np.where(saturated, top, np.inf)


def refine_class(router, c, level: np.ndarray) -> list:
    """The finer classes of class ``c`` (``phases.FlowClass``) whose sources cross links of
    equal ``level`` on their side, and whose destinations do on theirs, as (class, route,
    frac, group, share of ``c``'s members) each; [] when all of ``c``'s are alike already."""
    sides = []
    for devs, up in ((c.src, True), (c.dst, False)):
        lv = np.append(level, np.inf)[router.side_edges(devs, up, c.rel)]
        # levels equal to 1e-9 are alike (sums taken in another order differ in ulps)
        q = np.where(np.isfinite(lv), np.round(np.log2(np.maximum(lv, 1e-300)) * 2**30), 0)
        sides.append(np.unique(q, axis=0, return_inverse=True)[1].ravel())
    if sides[0].max() == 0 and sides[1].max() == 0:
        return []
    out = []
    for a in range(sides[0].max() + 1):
        for b in range(sides[1].max() + 1):
            src, dst = c.src[sides[0] == a], c.dst[sides[1] == b]
            edges, frac, group, members = router.class_route(src, dst, c.rel)
            if members:
                sub = replace(c, src=src, dst=dst, members=members)
                out.append((sub, edges, frac, group, members / c.members))
    return out
