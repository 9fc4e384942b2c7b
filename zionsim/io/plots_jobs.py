"""Figures of ``zionsim jobs``: each job's slowdown, and link utilisation by job."""

from __future__ import annotations

import numpy as np

from zionsim.io.plots import _pyplot


def plot_jobs(data: dict, links, top: int = 20):
    """Two panels: each job's slowdown against running alone (bars, %), and a heat map of the
    ``top`` most used shared links' utilisation split by job (``links``: the per-link table of
    ``sim.jobs.JobsResult``; all links when none is shared).  Returns the first axes."""
    plt = _pyplot()
    jobs = data["jobs"]
    names = [j["name"] for j in jobs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 1.4]})
    slow = [100.0 * (j.get("slowdown") or 0.0) for j in jobs]
    a.bar(range(len(jobs)), slow, color=["tab:blue" if j["kind"] == "train" else "tab:gray"
                                         for j in jobs])  # fmt: skip
    a.set_xticks(range(len(jobs)))
    a.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    a.set_ylabel("slowdown vs alone (%)")
    a.set_title("per-job slowdown (gray: traffic bursts)")
    a.axhline(0, color="black", lw=0.5)
    cols = [f"bytes:{n}" for n in names]
    shared = links[(links[cols] > 0).sum(axis=1) > 1] if len(names) > 1 else links
    if shared.empty:
        shared = links
    rows = shared.sort_values("utilisation", ascending=False, kind="stable").head(top)
    grid = np.array([[r[f"utilisation:{n}"] * 100.0 for n in names] for _, r in rows.iterrows()])
    if grid.size:
        im = b.imshow(grid, aspect="auto", cmap="viridis", vmin=0.0)
        fig.colorbar(im, ax=b, label="utilisation (%)")
        b.set_yticks(range(len(rows)))
        b.set_yticklabels([f"{s}->{d}" for s, d in zip(rows["src"], rows["dst"], strict=True)],
                          fontsize=7)  # fmt: skip
    b.set_xticks(range(len(names)))
    b.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    b.set_title("link utilisation by job (most used shared links)")
    return a
