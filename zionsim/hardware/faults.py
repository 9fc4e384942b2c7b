"""Faults and degraded links: a :class:`~zionsim.hardware.cluster.Cluster` with components taken
out of its graph, and flows rerouted around them.

A fault is written ``KIND=TARGET`` (``zionsim run --fault``, repeatable; ``faults:`` in a
variability file):

- ``nic=n1:0``: NIC 0 of node 1 (all its links);
- ``link=ID``: the link on data row ``ID`` of ``links.csv`` (0-based: the edge id) and its
  reverse (both directions of the full-duplex link);
- ``uplink=leaf0:3``: uplink 3 of leaf switch 0 (its tier-2 link);
- ``switch=leaf2`` (or ``t2.0``, ``t3``): a switch (all its links);
- ``node=n5``: a whole node.

What happens (the modelling assumptions):

1. The spines of a pod are one merged node (``graph.py`` assumption 4), so a failed leaf uplink
   takes ``1/up`` of the leaf's merged uplink away: ECMP spreads the leaf's traffic over the
   remaining spines.  All uplinks of a leaf failed remove its link.
2. A flow whose route crosses a removed link is rerouted as NCCL's PXN does: over the node's
   fabric (NVLink) to a GPU of the same node whose route is whole, which sends it on through
   its own NIC (another rail); at the destination likewise.  Proxies are tried in a fixed order
   (the next local GPU first), the source's node first, then the destination's, then both.
3. A route that no proxy repairs, a failed node (its ranks are gone: synchronous training
   needs every rank) or an in-network reduction over a removed link stop the job:
   :class:`JobStopped`, which the run turns into a record, not a traceback.
4. Large all-to-alls are not cut into flow classes on a faulted cluster (``point_to_point``):
   the classes assume every node's routes are alike.

``links`` factors (``sim/variability.py``) scale line rate and capacity of links by kind or id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from zionsim.base.errors import InputError
from zionsim.hardware.routing import Router

#: fault kinds and the form of their target
FORMS = {
    "nic": "n<node>:<nic>",
    "link": "<link id>",
    "uplink": "leaf<l>:<uplink>",
    "switch": "leaf<l>, t2.<p> or t3",
    "node": "n<node>",
}
ALLOWED = "nic=n1:0, link=ID, uplink=leaf0:3, switch=leaf2, node=n5"


class JobStopped(Exception):
    """The job cannot continue on the faulted cluster (``reason`` says why)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Fault:
    """One failed component: ``kind`` (:data:`FORMS`), ``target`` (a device, switch or link id)
    and ``index`` (the NIC or uplink number), with the ``text`` it was written as."""

    kind: str
    target: str
    index: int | None
    text: str


_PATTERNS = {
    "nic": re.compile(r"^n(\d+):(\d+)$"),
    "link": re.compile(r"^(\d+)$"),
    "uplink": re.compile(r"^(leaf\d+):(\d+)$"),
    "switch": re.compile(r"^(leaf\d+|t2\.\d+|t3)$"),
    "node": re.compile(r"^n(\d+)$"),
}


def parse_fault(text: str, file: str = "command line") -> Fault:
    """A fault text (module docstring) as a :class:`Fault`; InputError naming the forms."""
    kind, sep, target = str(text).partition("=")
    kind, target = kind.strip(), target.strip()
    if not sep or kind not in _PATTERNS or not _PATTERNS[kind].match(target):
        form = FORMS.get(kind)
        raise InputError(
            f"cannot read fault {text!r}" + (f": {kind}= takes {form}" if form else ""),
            file=file,
            field="fault",
            allowed=ALLOWED,
        )
    m = _PATTERNS[kind].match(target)
    if kind == "nic":
        return Fault(kind, f"n{m.group(1)}/nic{m.group(2)}", None, text)
    if kind == "uplink":
        return Fault(kind, m.group(1), int(m.group(2)), text)
    return Fault(kind, m.group(1) if kind != "node" else f"n{m.group(1)}", None, text)


def apply(cluster, faults: list[Fault], links=(), file: str = "command line"):
    """``cluster`` with ``faults`` removed and ``links`` (``LinkFactor``s) degraded: a new
    Cluster sharing the spec and graph, with a :class:`FaultedRouter`; the cluster itself when
    there is nothing to apply.  A failed node raises :class:`JobStopped`."""
    if not faults and not links:
        return cluster
    from zionsim.hardware.cluster import Cluster

    router = cluster.router
    cap, bw = router.capacity_Bps.copy(), router.bw_Bps.copy()
    for x in links:
        if x.kind:
            ids = np.flatnonzero(router.edge_kind == x.kind)
        else:
            ids = _link_ids(router, x.id, file)
        if not len(ids):
            raise InputError(f"no link of kind {x.kind!r}", file=file, field="links",
                             allowed=", ".join(sorted(set(router.edge_kind.tolist()))))  # fmt: skip
        cap[ids] *= x.factor
        bw[ids] *= x.factor
    failed = np.zeros(len(cap), dtype=bool)
    uplinks: dict[str, set[int]] = {}
    for f in faults:
        if f.kind == "node":
            _check_node(router, f, file)
            lost = _node_ranks(router, f.target)
            raise JobStopped(f"{f.text}: node {f.target} failed with ranks {lost}; synchronous "
                             "training needs every rank")  # fmt: skip
        if f.kind == "uplink":
            _uplink(router, f, file)  # checked
            uplinks.setdefault(f.target, set()).add(f.index)
        elif f.kind == "link":
            failed[_link_ids(router, int(f.target), file)] = True
        else:
            failed[_device_edges(router, f, file)] = True
    for leaf, gone in uplinks.items():
        ids, count = _uplink(router, Fault("uplink", leaf, 0, ""), file)
        if len(gone) >= count:
            failed[ids] = True
        else:  # the remaining spines carry the leaf's traffic (assumption 1)
            cap[ids] *= (count - len(gone)) / count
            bw[ids] *= (count - len(gone)) / count
    return Cluster(cluster.spec, cluster.hw, FaultedRouter(router, cap, bw, failed, faults))


def _check_node(router, f: Fault, file: str) -> None:
    if int(f.target[1:]) >= router.spec.nodes:
        raise InputError(f"no node {f.target}", file=file, field="fault",
                         allowed=f"n0..n{router.spec.nodes - 1}")  # fmt: skip


def _node_ranks(router, node: str) -> str:
    g = router.spec.gpus_per_node
    k = int(node[1:])
    return f"{k * g}..{k * g + g - 1}"


def _link_ids(router, link: int, file: str) -> np.ndarray:
    """Both directions of link ``link`` (an edge id)."""
    if not 0 <= link < len(router.edge_names):
        last = len(router.edge_names) - 1
        raise InputError(f"no link {link}", file=file, field="fault",
                         allowed=f"link ids 0..{last} (links.csv)")  # fmt: skip
    u, v = router.edge_names[link]
    back = router.graph.edge_id.get((v, u))
    return np.array([link] + ([back] if back is not None else []), dtype=np.int64)


def _uplink(router, f: Fault, file: str) -> tuple[np.ndarray, int]:
    """The merged uplink edges (both directions) of leaf ``f.target`` and its uplink count."""
    g = router.graph
    if f.target not in g.nodes:
        raise InputError(f"no switch {f.target}", file=file, field="fault", allowed=ALLOWED)
    ups = [v for v in g.out[f.target] if g.nodes[v].get("tier", 0) == 2]
    if not ups:
        raise InputError(f"{f.target} has no uplinks (a one-tier fabric)", file=file,
                         field="fault", allowed="nic=, link=, switch=")  # fmt: skip
    e = g.edge_id[f.target, ups[0]]
    count = int(g.edges[e][2].get("count", 1))
    if f.index >= count:
        raise InputError(f"{f.target} has {count} uplinks", file=file, field="fault",
                         allowed=f"{f.target}:0..{count - 1}")  # fmt: skip
    return _link_ids(router, e, file), count


def _device_edges(router, f: Fault, file: str) -> np.ndarray:
    """Every edge into or out of a NIC or switch."""
    g = router.graph
    if f.target not in g.nodes:
        what = "NIC" if f.kind == "nic" else "switch"
        raise InputError(f"no {what} {f.target}", file=file, field="fault", allowed=ALLOWED)
    ids = [i for i, (u, v) in enumerate(router.edge_names) if f.target in (u, v)]
    return np.array(ids, dtype=np.int64)


class FaultedRouter(Router):
    """A :class:`Router` whose ``capacity_Bps``/``bw_Bps`` are degraded and whose routes avoid
    the ``failed`` edges (module docstring, assumption 2)."""

    #: large all-to-alls are not cut into flow classes (module docstring, assumption 4)
    flow_classes = False

    def __init__(self, base: Router, cap, bw, failed: np.ndarray, faults):  # noqa: D107
        self.__dict__.update(base.__dict__)
        self.capacity_Bps, self.bw_Bps, self.failed = cap, bw, failed
        self.faults = tuple(faults)
        self._repaired: dict[tuple[int, int], list[int]] = {}

    def routes(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """As :meth:`Router.routes`, rows crossing a failed edge rerouted through proxies."""
        out = super().routes(src, dst)
        if not self.failed.any() or not out.size:
            return out
        bad = np.flatnonzero(self._broken(out))
        if not len(bad):
            return out
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        rows = {int(i): self._repair(int(src[i]), int(dst[i])) for i in bad}
        width = max(out.shape[1], max(len(r) for r in rows.values()))
        if width > out.shape[1]:
            out = np.pad(out, ((0, 0), (0, width - out.shape[1])), constant_values=-1)
        for i, r in rows.items():
            out[i] = -1
            out[i, : len(r)] = r
        return out

    @property
    def rerouted_pairs(self) -> int:
        """How many (source, destination) device pairs have been rerouted around the failed
        components so far (routes are repaired as the run asks for them)."""
        return len(self._repaired)

    def _broken(self, rows: np.ndarray) -> np.ndarray:
        return np.append(self.failed, False)[rows].any(axis=1)

    def _repair(self, s: int, d: int) -> list[int]:
        key = (s, d)
        if key not in self._repaired:
            self._repaired[key] = self._via_proxies(s, d)
        return self._repaired[key]

    def _via_proxies(self, s: int, d: int) -> list[int]:
        """The route ``s → p → d`` (or ``s → q → d``, ``s → p → q → d``) through GPUs ``p`` of
        ``s``'s node and ``q`` of ``d``'s whose legs are whole (assumption 2)."""
        base = super().routes
        ps, pd = self._proxies(s), self._proxies(d)
        chains = [[s, p, d] for p in ps] + [[s, q, d] for q in pd]
        chains += [[s, p, q, d] for p in ps for q in pd]
        for chain in chains:
            legs = base(np.array(chain[:-1]), np.array(chain[1:]))
            if not self._broken(legs).any():
                return [int(e) for e in legs.ravel() if e >= 0]
        names = ", ".join(f.text for f in self.faults)
        raise JobStopped(f"no route from {self.device_name(s)} to {self.device_name(d)} avoids "
                         f"the failed components ({names})")  # fmt: skip

    def _proxies(self, dev: int) -> list[int]:
        """The GPUs of ``dev``'s node other than ``dev``, the next local GPU first."""
        node, g = dev // self.per_node, self.spec.gpus_per_node
        gpus = [self.local("gpu", node, i) for i in range(g)]
        start = gpus.index(dev) + 1 if dev in gpus else 0
        return [x for x in gpus[start:] + gpus[:start] if x != dev]

    def reduction_tree(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Router.reduction_tree`; a tree crossing a failed link stops the job."""
        up, down = super().reduction_tree(devices)
        if self._broken(up).any() or self._broken(down).any():
            raise JobStopped("an in-network reduction (SHARP) tree crosses a failed link")
        return up, down
