"""The histogram of a run's realisations (``io/plots.plot_distribution``)."""

from __future__ import annotations

import pandas as pd

from zionsim.io.plots import plot_distribution, png_bytes


def test_realisations_equal_to_rounding_give_one_bar():
    """Iteration times a few ulps apart (realisations without noise) are drawn, not refused by
    numpy's bin edges."""
    t = 0.008875
    times = [t, t, t + 2**-60, t, t - 2**-60, t]
    samples = pd.DataFrame({"iteration_time_s": times})
    d = {"mean": t, "p50": t, "p95": t, "p99": t, "ci95": [t, t]}
    summary = {
        "distribution": {"iteration_time_s": d, "samples": 3},
        "workload": "tiny",
        "gpus": 16,
    }
    ax = plot_distribution(samples, summary)
    assert len(ax.patches) >= 1
    assert png_bytes(ax).startswith(b"\x89PNG")
