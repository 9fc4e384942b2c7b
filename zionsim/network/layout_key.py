"""A cluster's layout fingerprint: what NCCL schedules, their routes and the point-to-point
NIC efficiency read of a cluster, and not its link rates, so that the clusters of a sweep over
rates share what was computed on one of them (``nccl._scheduled``, ``nccl_p2p``)."""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

#: clusters above this many GPUs are not fingerprinted (nor swept), their schedules not kept
MEMO_MAX_GPUS = 4096
_LAYOUTS: dict[int, tuple[weakref.ref, str | None]] = {}
#: router fields that are rates, not layout (its paths, computed with them, are compared)
_RATE_FIELDS = ("graph", "spec", "bw_Bps", "capacity_Bps", "latency_s")


def layout_of(cluster) -> str | None:
    """A fingerprint of what schedules and paths read of ``cluster`` (None: too large to
    fingerprint, :data:`MEMO_MAX_GPUS`), computed once per cluster object."""
    entry = _LAYOUTS.get(id(cluster))
    if entry is not None and entry[0]() is cluster:
        return entry[1]
    for k in [k for k, (ref, _) in _LAYOUTS.items() if ref() is None]:
        del _LAYOUTS[k]
    spec, router = cluster.spec, cluster.router
    digest = None
    if spec.nodes * spec.gpus_per_node <= MEMO_MAX_GPUS:
        h = hashlib.sha256()
        head = (type(cluster).__name__, type(router).__name__,
                getattr(router, "flow_classes", True), getattr(cluster, "nodes", None), spec.nodes,
                spec.gpus_per_node, repr(spec.scale_up), spec.scale_out.nics_per_node)  # fmt: skip
        h.update(repr(head).encode())
        for name, value in sorted(vars(router).items()):
            if name in _RATE_FIELDS:
                continue
            h.update(name.encode())
            if isinstance(value, np.ndarray):
                h.update(repr((value.dtype.str, value.shape)).encode())
                h.update(np.ascontiguousarray(value).tobytes())
            else:
                h.update(repr(value).encode())
        digest = h.hexdigest()
    _LAYOUTS[id(cluster)] = (weakref.ref(cluster), digest)
    return digest
