"""Paths between GPUs and the CPU service hosts of the front-end network (``graph.py``
assumption 6): EASGD sync servers and embedding parameter servers that are hosts of their own,
not training hosts, as ShadowSync and Zion-era training ran them.

A GPU reaches the front end through its node's CPU socket that has a front-end NIC and is
nearest to it (the PCIe path to that socket, as a device-to-host copy; NCCL is not involved),
then the socket's front-end link, the non-blocking front-end switch and the service host's NIC.
Inside a service host, rows move between its DRAM and its CPU over the ``dram`` link.

Every function returns routes as the router does: rows of edge ids, padded with -1.
"""

from __future__ import annotations

import numpy as np

from zionsim.base.errors import InputError

#: parts of a service-host exchange: GPU to the host's CPU, the host's CPU back to the GPU, a read
#: of the host's DRAM by its CPU, a write of it
PARTS = ("to_host", "from_host", "read", "write")


def check_servers(cluster, servers, field: str = "plan") -> None:
    """InputError unless every index in ``servers`` names a service host of ``cluster``."""
    fe = cluster.spec.front_end
    have = 0 if fe is None else fe.servers
    k = np.asarray(servers, dtype=np.int64)
    if k.size and (k.max() >= have or k.min() < 0):
        raise InputError(
            f"service host {int(k.max())} does not exist: the front-end network has {have}",
            field=field,
            allowed=f"servers 0..{have - 1}, or more with --set front_end.servers=N",
        )


def service_routes(cluster, gpus, servers, part: str) -> np.ndarray:
    """Routes of ``part`` (:data:`PARTS`) for each (GPU device, service host index) pair."""
    check_servers(cluster, servers)
    fe = cluster.graph.graph["front_end"]
    g = np.asarray(gpus, dtype=np.int64)
    k = np.asarray(servers, dtype=np.int64)
    nic = np.array([fe["servers"][j][0] for j in k], dtype=np.int64)  # server cpu -> fe
    mem = np.array([fe["servers"][j][1] for j in k], dtype=np.int64)  # server dram -> cpu
    if part == "read":
        return mem[:, None].astype(np.int32)
    if part == "write":
        return (mem + 1)[:, None].astype(np.int32)
    cpu, up = _socket_and_uplink(cluster, g)
    r = cluster.router
    if part == "to_host":
        return _join(r.routes(g, cpu), up[:, None], (nic + 1)[:, None])
    return _join(nic[:, None], (up + 1)[:, None], r.routes(cpu, g))


def _socket_and_uplink(cluster, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each GPU device: the CPU device of the front-end socket nearest to it, and that
    socket's uplink edge id (socket -> fe; the downlink is the next id).  The socket of each
    local GPU slot is found once per cluster and kept with the graph's front-end edges."""
    r, fe = cluster.router, cluster.graph.graph["front_end"]
    sockets = [s for s, n in enumerate(fe["per_socket"]) if n]
    if not sockets:
        raise InputError(
            "the training hosts have no front-end NIC",
            field="front_end.nics_per_node",
            allowed="1 or more",
        )
    d = r.per_node
    node, local = gpus // d, gpus % d
    best = fe.setdefault("socket_of_slot", {})  # derived from the graph: computed once per slot
    for slot in np.unique(local):
        if int(slot) not in best:  # node 0's device in this slot
            best[int(slot)] = min(
                sockets, key=lambda s, g=int(slot): (len(r.path_names(g, r.local("cpu", 0, s))), s)
            )
    sock = np.array([best[int(s)] for s in local], dtype=np.int64)
    up = np.array(fe["up"], dtype=np.int64)[node, sock]
    cpu = np.array([r.local("cpu", int(n), int(s)) for n, s in zip(node, sock, strict=True)])
    return cpu, up


def _join(*parts: np.ndarray) -> np.ndarray:
    """Routes laid end to end: each row's edges in order, -1 padding moved to the end."""
    rows = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts], axis=1)
    order = np.argsort(rows < 0, axis=1, kind="stable")
    rows = np.take_along_axis(rows, order, axis=1)
    width = int((rows >= 0).sum(axis=1).max()) if len(rows) else 0
    return rows[:, : max(width, 1)].astype(np.int32)
