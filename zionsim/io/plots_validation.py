"""Plots of the validation table (``zionsim.measure.validate.run_cases``): curves and a parity plot.

Each function takes the table plus an optional matplotlib ``ax`` and returns the axes; matplotlib
is imported inside (headless), as in ``plots.py``.
"""

from __future__ import annotations

import pandas as pd

from zionsim.base.units import parse_quantity
from zionsim.io.plots import _pyplot

_FAMILY_STYLE = {"collectives": ("o", "C0"), "kernels": ("s", "C1"), "end_to_end": ("^", "C2")}


def plot_validation_curves(table: pd.DataFrame, cases: list, ax=None):
    """Measured (markers) and simulated (lines) bus bandwidth vs size, one colour per curve.

    ``cases`` are the :class:`~zionsim.measure.validate.Case` objects behind ``table`` (for the
    sizes).
    """
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    size = {
        c.id: parse_quantity(c.params["size"], "bytes") for c in cases if c.kind == "collective"
    }
    curves = table[(table["curve"] != "") & table["case"].isin(size)]
    for i, (name, grp) in enumerate(curves.groupby("curve", sort=True)):
        grp = grp.assign(size=grp["case"].map(size)).sort_values("size")
        color = f"C{i}"
        ax.plot(grp["size"], grp["measured"], "o", color=color, label=f"{name}: measured")
        ax.plot(grp["size"], grp["simulated"], "-", color=color, label=f"{name}: simulated")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("nccl-tests all_reduce: simulated vs measured")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_parity(table: pd.DataFrame, ax=None):
    """Simulated / measured ratio of every case, by family; calibrated cases hollow."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.28 * len(table) + 1.5))
    ratio = table["simulated"] / table["measured"]
    y = range(len(table))[::-1]
    for (fam, cal), grp in table.assign(ratio=ratio, y=list(y)).groupby(["family", "calibrated"]):
        marker, color = _FAMILY_STYLE.get(fam, ("o", "C3"))
        ax.scatter(
            grp["ratio"],
            grp["y"],
            marker=marker,
            facecolors="none" if cal else color,
            edgecolors=color,
            label=f"{fam} ({'calibrated' if cal else 'held out'})",
        )
    ax.axvline(1.0, color="k", lw=0.8)
    for r in (0.8, 1.25):
        ax.axvline(r, color="k", lw=0.5, ls=":")
    ax.set_xscale("log", base=2)
    ticks = [0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
    lo, hi = min(ratio.min(), 0.8) / 1.1, max(ratio.max(), 1.25) * 1.1
    ax.set_xticks([t for t in ticks if lo <= t <= hi])
    ax.set_xticklabels([f"{t:g}" for t in ticks if lo <= t <= hi])
    ax.set_xlim(lo, hi)
    ax.set_yticks(list(y))
    ax.set_yticklabels(table["case"], fontsize=7)
    ax.set_xlabel("simulated / measured (dotted: -20 % and +25 %)")
    ax.set_title("zionsim validate: every case")
    ax.legend(fontsize=7, loc="upper left")
    return ax
