"""Plots: each function takes model data plus an optional matplotlib ``ax`` and returns the axes.

matplotlib (and networkx, for the topology) is imported inside the functions (headless
backend), so importing zionsim, or this module, stays cheap.
"""

from __future__ import annotations

_COLORS = {
    "gpu": "#76b900",
    "nvswitch": "#1f77b4",
    "cpu": "#9467bd",
    "dram": "#c5b0d5",
    "pcie_switch": "#ff7f0e",
    "nic": "#d62728",
    "switch": "#7f7f7f",
    "server_cpu": "#8c564b",
    "server_dram": "#c49c94",
}
_EDGE_COLORS = {
    "nvlink": "#76b900",
    "pcie": "#ff7f0e",
    "upi": "#9467bd",
    "dram": "#c5b0d5",
    "roce": "#d62728",
    "infiniband": "#d62728",
    "ethernet": "#d62728",
    "frontend": "#8c564b",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bare_axes(figsize: tuple[float, float]):
    """The axes of a new figure pyplot does not manage (no backend, no pyplot import: a tenth
    of the headline run's CPU time); for figures a writer only renders to PNG."""
    return _figure_class()(figsize=figsize).subplots()


def _figure_class():
    """``matplotlib.figure.Figure``; when this process imports it first, imported without the
    property lists matplotlib writes into docstrings as it defines each artist class
    (``matplotlib.artist.kwdoc``: a third of that import's CPU time, 0.09 s).  Only docstrings
    (``help(Line2D.set)`` and the ``**kwargs`` lists of plotting methods) come out shorter; the
    artists, their ``set`` signatures and every drawn pixel are the same."""
    import sys

    import matplotlib.artist as artist

    kwdoc = getattr(artist, "kwdoc", None)  # a matplotlib without it imports as it is
    if "matplotlib.figure" not in sys.modules and callable(kwdoc):
        artist.kwdoc = _no_kwdoc
        try:
            import matplotlib.figure  # noqa: F401
        finally:
            artist.kwdoc = kwdoc
    from matplotlib.figure import Figure

    return Figure


def _no_kwdoc(artist) -> str:
    """Stands in for ``matplotlib.artist.kwdoc`` while :func:`_figure_class` imports."""
    return ""


def plot_topology(cluster, ax=None, max_nodes: int = 2):
    """Draw the devices of the first ``max_nodes`` nodes and the switches above them."""
    import networkx as nx

    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 7))
    g = cluster.graph
    keep = [n for n, d in g.nodes(data=True) if d.get("node", -1) < max_nodes]
    sub = g.subgraph(keep).to_undirected()
    level = {
        "nic": 0.0,
        "pcie_switch": -1.0,
        "gpu": -2.0,
        "nvswitch": -2.6,
        "cpu": -3.2,
        "dram": -3.8,
        "server_cpu": 1.2,
        "server_dram": 1.8,
    }
    pos, counts = {}, {}
    for n, d in sorted(sub.nodes(data=True), key=lambda x: (x[1].get("node", -1), x[0])):
        kind = d["kind"]
        y = 0.8 * d["tier"] if kind == "switch" else level[kind]
        key = (kind, y)
        counts[key] = counts.get(key, 0) + 1
        pos[n] = (counts[key], y)
    for key in counts:  # centre each row
        xs = [p for n, p in pos.items() if (sub.nodes[n]["kind"], p[1]) == key]
        shift = -(len(xs) + 1) / 2
        for n in [n for n, p in pos.items() if (sub.nodes[n]["kind"], p[1]) == key]:
            pos[n] = (pos[n][0] + shift, pos[n][1])
    edge_colors = [_EDGE_COLORS.get(d["kind"], "k") for _, _, d in sub.edges(data=True)]
    nx.draw_networkx_edges(sub, pos, ax=ax, edge_color=edge_colors, alpha=0.5)
    nx.draw_networkx_nodes(
        sub,
        pos,
        ax=ax,
        node_size=120,
        node_color=[_COLORS[sub.nodes[n]["kind"]] for n in sub.nodes],
    )
    ax.set_title(
        f"{cluster.spec.name}: first {min(max_nodes, cluster.spec.nodes)} of "
        f"{cluster.spec.nodes} nodes ({cluster.spec.gpus} GPUs)"
    )
    for kind, color in _COLORS.items():
        ax.scatter([], [], c=color, label=kind)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_axis_off()
    return ax


def save(ax, path) -> None:
    """Write the figure of ``ax`` as a PNG."""
    fig = ax.figure
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends and titles outside the axes too
    _pyplot().close(fig)


def plot_breakdown(summary: dict, ax=None):
    """Stacked bar of one run's critical-path breakdown (ms per category); without ``ax``, on a
    figure of its own that pyplot does not manage (``write_run`` renders it to PNG)."""
    import matplotlib

    if ax is None:
        ax = _bare_axes((6, 5))
    bottom = 0.0
    cmap = matplotlib.colormaps["tab20"]
    for i, (cat, sec) in enumerate(summary["breakdown_s"].items()):
        if sec <= 0:
            continue
        ax.bar([0], [sec * 1e3], bottom=[bottom], color=cmap(i % 20), label=cat, width=0.5)
        bottom += sec * 1e3
    ax.set_xticks([0])
    ax.set_xticklabels([f"{summary['workload']}\n{summary['topology']} x {summary['nodes']}"])
    ax.set_ylabel("critical path per iteration (ms)")
    ax.set_title(f"{summary['samples_per_s']:.0f} samples/s")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return ax


def plot_distribution(samples, summary: dict, ax=None):
    """Histogram of iteration times over every realisation (``samples.csv``), with the mean,
    p50, p95 and p99 of ``summary["distribution"]`` marked."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    import numpy as np

    ms = samples["iteration_time_s"].to_numpy() * 1e3
    bins = max(5, min(40, len(ms) // 2))
    try:
        np.histogram_bin_edges(ms, bins)
    except ValueError:  # times equal to rounding (realisations without noise): one bar
        bins = 1
    ax.hist(ms, bins=bins, color="tab:blue", alpha=0.7)
    d = summary["distribution"]["iteration_time_s"]
    for key, style in (("mean", "-"), ("p50", "--"), ("p95", ":"), ("p99", "-.")):
        ax.axvline(d[key] * 1e3, color="k", linestyle=style, label=f"{key} {d[key] * 1e3:.2f} ms")
    lo, hi = d["ci95"]
    ax.axvspan(lo * 1e3, hi * 1e3, color="tab:orange", alpha=0.3, label="95 % CI of the mean")
    n = summary["distribution"]["samples"]
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("iterations")
    ax.set_title(f"{summary['workload']} on {summary['gpus']} GPUs: {n} realisations")
    ax.legend(fontsize=8)
    return ax


def png_bytes(ax) -> bytes:
    """The figure of ``ax`` as PNG bytes (deterministic metadata)."""
    import io

    fig = ax.figure
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    if fig.canvas.manager is not None:  # a pyplot figure: pyplot lets go of it
        _pyplot().close(fig)
    return buf.getvalue()
