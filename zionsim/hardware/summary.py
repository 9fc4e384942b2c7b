"""Summary tables computed from the model (pure: no printing, no files)."""

from __future__ import annotations

from collections import Counter

import networkx as nx

from zionsim.hardware.graph import fabric_shape


def topology_summary(cluster) -> dict:
    """Devices, link counts by kind, per-GPU scale-up/scale-out and bisection bandwidth."""
    spec, g = cluster.spec, cluster.graph
    devices = Counter(d["kind"] for _, d in g.nodes(data=True))
    links = Counter(d["kind"] for _, _, d in g.edges(data=True))
    gpu0 = cluster.router.device_name(int(cluster.gpus[0]))
    up = sum(d["bw_Bps"] for _, _, d in g.out_edges(gpu0, data=True) if d["kind"] == "nvlink")
    so = spec.scale_out
    out = {
        "topology": spec.name,
        "nodes": spec.nodes,
        "gpus": spec.gpus,
        "gpu": spec.gpu.model,
        **{f"devices_{k}": v for k, v in sorted(devices.items())},
        **{f"links_{k}": v // 2 for k, v in sorted(links.items())},
        "scale_up": spec.scale_up.kind,
        "scale_up_per_gpu_GBps": up / 1e9,
        "scale_out": so.kind,
        "scale_out_per_gpu_GBps": so.nics_per_node * so.nic_bw_Bps / spec.gpus_per_node / 1e9,
    }
    if spec.nodes > 1:
        shape = fabric_shape(spec)
        out.update(
            {
                "switch_tiers": so.tiers,
                "leaf_switches": shape["leaves"],
                "oversubscription": so.oversubscription,
            }
        )
    if spec.front_end is not None:
        fe = spec.front_end
        out["front_end_per_node_GBps"] = fe.nics_per_node * fe.nic_bw_Bps / 1e9
        out["service_hosts"] = fe.servers
    out["bisection_GBps"] = bisection_Bps(cluster) / 1e9
    return out


def bisection_Bps(cluster) -> float:
    """Max flow (line rate, one direction) from the first half of the GPUs to the second half,
    over the training fabric (the front-end network is left out).

    Halves are by node when there are several nodes, else by GPU index inside the node.
    """
    gpus = [cluster.router.device_name(int(d)) for d in cluster.gpus]
    half = len(gpus) // 2
    if half == 0:
        return 0.0
    g = nx.DiGraph()
    g.add_edges_from(
        (u, v, {"capacity": d["bw_Bps"]})
        for u, v, d in cluster.graph.edges(data=True)
        if d["kind"] != "frontend"
    )
    for x in gpus[:half]:
        g.add_edge("_src", x, capacity=float("inf"))
    for x in gpus[half:]:
        g.add_edge(x, "_dst", capacity=float("inf"))
    return float(nx.maximum_flow_value(g, "_src", "_dst"))
