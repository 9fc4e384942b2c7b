"""Plots for what-if studies: scaling curves, breakdowns, A-vs-B comparisons, links, timelines.

Each function takes a DataFrame — the combined sweep table (``results.parquet``, one row per
point, ``breakdown_s.*`` columns in seconds), a frame of flattened summaries
(:func:`zionsim.sim.results.summary_row`), or a run's ``links``/``events`` table — plus an optional
matplotlib ``ax``, and returns the axes.  matplotlib is imported inside the functions with the
headless Agg backend.  Rows whose ``status`` is not ``ok`` are left out.

>>> import pandas as pd
>>> df = pd.DataFrame({"gpus": [8, 16], "samples_per_s": [1e5, 1.8e5]})
>>> plot_scaling(df).get_xlabel()
'gpus'
"""

from __future__ import annotations

import pandas as pd

from zionsim.sim.results import BREAKDOWN_KEYS

#: one colour per category, the same in every plot (tab20 order)
CATEGORIES = BREAKDOWN_KEYS
BREAKDOWN = "breakdown_s."
_PREFIXES = ("topology.", "workload.")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(ax, size: tuple[float, float]):
    """``ax``, or the axes of a new figure of ``size`` inches."""
    if ax is None:
        _, ax = _pyplot().subplots(figsize=size)
    return ax


def category_color(category: str):
    """The RGBA colour of a category (stable across plots; unknown ones after the known)."""
    cmap = _pyplot().get_cmap("tab20")
    if category in CATEGORIES:
        return cmap(CATEGORIES.index(category))
    return cmap((len(CATEGORIES) + sum(map(ord, category))) % 20)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of successful points (all rows when there is no ``status`` column)."""
    return df[df["status"] == "ok"] if "status" in df.columns else df


def _groups(df: pd.DataFrame, by):
    """``(label, frame)`` per value of ``by`` (a column or list of columns); one group if None."""
    if by is None:
        return [(None, df)]
    return [(_key_label(by, k), g) for k, g in df.groupby(by, sort=True, dropna=False)]


def _key_label(by, key) -> str:
    cols = [by] if isinstance(by, str) else list(by)
    keys = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c.rsplit('.', 1)[-1]}={v}" for c, v in zip(cols, keys, strict=False))


def _log2_if_wide(ax, values) -> None:
    """Log-2 x axis when the positive ``values`` span 4x or more."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    if len(v) == len(values) and len(v) and (v > 0).all() and v.max() >= 4 * v.min():
        ax.set_xscale("log", base=2)


def plot_scaling(df: pd.DataFrame, ax=None, x: str = "gpus", y: str = "samples_per_s", by=None):
    """``y`` against ``x`` (default samples/s against GPUs), one line per value of ``by``."""
    ax = _axes(ax, (6, 4.5))
    rows = _ok(df)
    for name, g in _groups(rows, by):
        g = g.sort_values(x)
        ax.plot(g[x], g[y], marker="o", label=name)
    _log2_if_wide(ax, rows[x])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{y} vs {x}")
    if by is not None:
        ax.legend(fontsize=8)
    return ax


def scaling_efficiency(
    df: pd.DataFrame, x: str = "gpus", y: str = "samples_per_s", by=None
) -> pd.Series:
    """``y`` per unit of ``x`` relative to the group's smallest ``x`` (1.0 = linear scaling).

    >>> scaling_efficiency(pd.DataFrame({"gpus": [8, 16], "samples_per_s": [100.0, 150.0]}))
    0    1.00
    1    0.75
    dtype: float64
    """
    rows = _ok(df)
    per_unit = rows[y] / rows[x]
    out = pd.Series(index=rows.index, dtype=float)
    for _, g in _groups(rows, by):
        ref = per_unit[g[x].idxmin()]
        out[g.index] = per_unit[g.index] / ref
    return out


def plot_scaling_efficiency(
    df: pd.DataFrame, ax=None, x: str = "gpus", y: str = "samples_per_s", by=None
):
    """Scaling efficiency (:func:`scaling_efficiency`) against ``x``, the ideal at 1.0 dashed."""
    ax = _axes(ax, (6, 4.5))
    rows = _ok(df).assign(_eff=scaling_efficiency(df, x, y, by))
    for name, g in _groups(rows, by):
        g = g.sort_values(x)
        ax.plot(g[x], g["_eff"], marker="o", label=name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="linear")
    _log2_if_wide(ax, rows[x])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(x)
    ax.set_ylabel(f"{y} per {x}, relative to smallest")
    ax.set_title("scaling efficiency")
    ax.legend(fontsize=8)
    return ax


def _labels(df: pd.DataFrame, label) -> list[str]:
    """Bar labels: a column, a list of columns (``c=v`` joined), or point_id / the index."""
    if label is None:
        return [str(v) for v in (df["point_id"] if "point_id" in df.columns else df.index)]
    if isinstance(label, str):
        return [str(v) for v in df[label]]
    return ["\n".join(f"{c.rsplit('.', 1)[-1]}={r[c]}" for c in label) for _, r in df.iterrows()]


def _set_xlabels(ax, xs, labels: list[str], label) -> None:
    """Tick labels at ``xs``, slanted when long or many; the column name as axis label."""
    slant = len(labels) > 4 or any(len(t) > 12 for t in labels)
    ax.set_xticks(xs)
    ax.set_xticklabels(
        labels, fontsize=8, rotation=30 if slant else 0, ha="right" if slant else "center"
    )
    if isinstance(label, str):
        ax.set_xlabel(label)


def _categories(*frames: pd.DataFrame) -> list[str]:
    """Breakdown categories with a non-zero value in any frame, in :data:`CATEGORIES` order."""
    cols = {c for f in frames for c in f.columns if c.startswith(BREAKDOWN)}
    used = [c for c in cols if any(c in f and (f[c].fillna(0) > 0).any() for f in frames)]
    cats = [c[len(BREAKDOWN) :] for c in used]
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(cats, key=lambda c: (order.get(c, len(order)), c))


def _stack(ax, df: pd.DataFrame, xs, cats, width: float, **bar_kw) -> list[float]:
    """Stacked bars (ms) of ``df``'s breakdown at positions ``xs``; returns the bar tops."""
    bottom = [0.0] * len(df)
    for cat in cats:
        ms = (df.get(BREAKDOWN + cat, pd.Series(0.0, index=df.index)).fillna(0) * 1e3).tolist()
        ax.bar(xs, ms, width, bottom=bottom, color=category_color(cat), **bar_kw)
        bottom = [b + m for b, m in zip(bottom, ms, strict=True)]
    return bottom


def _category_legend(ax, cats, extra=()) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=category_color(c), label=c) for c in cats] + list(extra)
    ax.legend(handles=handles, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))


def plot_breakdown(df: pd.DataFrame, ax=None, label=None):
    """One stacked bar per row of its critical-path breakdown (ms, ``breakdown_s.*`` columns).

    ``label``: the column (or list of columns) naming each bar; default ``point_id``.
    """
    rows = _ok(df)
    ax = _axes(ax, (max(5.0, 0.7 * len(rows) + 3), 5))
    cats = _categories(rows)
    xs = list(range(len(rows)))
    _stack(ax, rows, xs, cats, 0.6)
    _set_xlabels(ax, xs, _labels(rows, label), label)
    ax.set_ylabel("critical path per iteration (ms)")
    ax.set_title("iteration breakdown")
    _category_legend(ax, cats)
    return ax


def _split(a: pd.DataFrame, by: str, label) -> tuple[pd.DataFrame, pd.DataFrame, tuple]:
    """Split one table into its two ``by`` groups, rows aligned by ``label`` columns."""
    values = list(dict.fromkeys(a[by]))
    if len(values) != 2:
        raise ValueError(f"plot_compare: column {by!r} must have 2 values, got {values}")
    parts = [a[a[by] == v] for v in values]
    if label is not None:
        parts = [p.sort_values(label) for p in parts]
    return parts[0], parts[1], tuple(str(v) for v in values)


def plot_compare(
    a: pd.DataFrame,
    b: pd.DataFrame | None = None,
    ax=None,
    names: tuple[str, str] | None = None,
    label=None,
    by: str = "topology",
):
    """A vs B side by side (default Zion vs ZionEX): two stacked breakdown bars per row pair.

    Rows of ``a`` and ``b`` are paired in order; with ``b`` omitted, ``a`` is split in two by
    its ``by`` column (rows sorted by ``label``).  B's bars are hatched and carry A's time
    over B's (speed-up of B).
    """
    from matplotlib.patches import Patch

    a, b = _ok(a), None if b is None else _ok(b)
    if b is None:
        a, b, split_names = _split(a, by, label)
        names = names or split_names
    names = names or ("Zion", "ZionEX")
    if len(a) != len(b):
        raise ValueError(f"plot_compare: {len(a)} rows of {names[0]}, {len(b)} of {names[1]}")
    ax = _axes(ax, (max(5.0, 1.2 * len(a) + 3), 5))
    cats = _categories(a, b)
    xs = list(range(len(a)))
    tops_a = _stack(ax, a, [x - 0.2 for x in xs], cats, 0.38, edgecolor="white")
    tops_b = _stack(ax, b, [x + 0.2 for x in xs], cats, 0.38, hatch="//", edgecolor="white")
    for x, ta, tb in zip(xs, tops_a, tops_b, strict=True):
        if tb > 0:
            ax.annotate(f"x{ta / tb:.2f}", (x + 0.2, tb), ha="center", va="bottom", fontsize=8)
    _set_xlabels(ax, xs, _labels(a, label) if label is not None else [""] * len(xs), label)
    ax.set_ylabel("critical path per iteration (ms)")
    ax.set_title(f"{names[0]} (left) vs {names[1]} (right, hatched)")
    extra = [
        Patch(facecolor="white", edgecolor="black", label=names[0]),
        Patch(facecolor="white", edgecolor="black", hatch="//", label=names[1]),
    ]
    _category_legend(ax, cats, extra)
    return ax


def plot_link_utilisation(links_df: pd.DataFrame, ax=None):
    """Mean utilisation (%) per link kind as bars, the busiest link of each kind as a marker."""
    ax = _axes(ax, (6, 4))
    stats = links_df.groupby("kind")["utilisation"].agg(["mean", "max"]) * 100
    xs = list(range(len(stats)))
    ax.bar(xs, stats["mean"], 0.6, color="#1f77b4", label="mean")
    ax.scatter(xs, stats["max"], marker="_", s=400, color="black", label="max", zorder=3)
    ax.set_xticks(xs)
    ax.set_xticklabels(stats.index)
    ax.set_ylabel("link utilisation (%)")
    ax.set_title("utilisation by link kind")
    ax.legend(fontsize=8)
    return ax


def _timeline_rows(ev: pd.DataFrame) -> list[tuple[int, str]]:
    """(rank, stream) rows, by rank, compute stream first."""
    pairs = ev[["rank", "stream"]].drop_duplicates().itertuples(index=False)
    return sorted(((int(r), s) for r, s in pairs), key=lambda p: (p[0], p[1] != "compute", p[1]))


def plot_timeline(events_df: pd.DataFrame, ax=None, iteration=None, max_ranks: int = 8):
    """One row per (rank, stream) of one iteration (default the last), spans by category (ms).

    Network batches (rank -1) are left out; only the first ``max_ranks`` ranks are drawn.
    """
    ev = events_df[events_df["rank"] >= 0]
    iteration = int(ev["iteration"].max()) if iteration is None else iteration
    ev = ev[ev["iteration"] == iteration]
    ranks = sorted(ev["rank"].unique())[:max_ranks]
    ev = ev[ev["rank"].isin(ranks)]
    rows = _timeline_rows(ev)
    ax = _axes(ax, (10, 0.35 * len(rows) + 1.8))
    t0 = ev["start_s"].min() if len(ev) else 0.0
    y = {row: i for i, row in enumerate(rows)}
    for (rank, stream, cat), g in ev.groupby(["rank", "stream", "category"]):
        spans = list(zip((g["start_s"] - t0) * 1e3, g["duration_s"] * 1e3, strict=True))
        ax.broken_barh(spans, (y[(int(rank), stream)] - 0.4, 0.8), color=category_color(cat))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {r} {s}" for r, s in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time in iteration (ms)")
    ax.set_title(f"iteration {iteration}")
    cats = [c for c in CATEGORIES if c in set(ev["category"])]
    cats += sorted(set(ev["category"]) - set(cats))
    _category_legend(ax, cats)
    return ax


def varying(df: pd.DataFrame, columns) -> list[str]:
    """Those of ``columns`` present in ``df`` that take two or more values (file order kept)."""
    return [c for c in columns if c in df.columns and df[c].astype(str).nunique() > 1]


def sweep_plots(df: pd.DataFrame, params=None, x: str = "gpus") -> dict:
    """The plots that apply to a sweep table, as ``{name: axes}``.

    ``params``: the swept parameter columns (default: the run-option and ``topology.``/
    ``workload.`` columns).  Always ``breakdown`` (one bar per point, labelled by the parameters
    that vary); ``scaling`` and ``scaling_efficiency`` when ``x`` takes 2+ values (one line per
    value of the other varying parameters); ``compare`` when ``topology`` takes exactly 2 values
    with the same number of points each (Zion vs ZionEX style).
    """
    from zionsim.sim.run import RUN_OPTIONS

    rows = _ok(df)
    if params is None:
        params = [c for c in df.columns if c in RUN_OPTIONS or c.startswith(_PREFIXES)]
    keys = varying(rows, params)
    out = {}
    if rows.empty:
        return out
    out["breakdown"] = plot_breakdown(rows, label=keys or None)
    scale_keys = {x, "nodes", "gpus_per_node", "global_batch"}
    if x in rows.columns and rows[x].nunique() > 1:
        by = [k for k in keys if k not in scale_keys] or None
        out["scaling"] = plot_scaling(rows, x=x, by=by)
        out["scaling_efficiency"] = plot_scaling_efficiency(rows, x=x, by=by)
    if "topology" in keys and rows["topology"].nunique() == 2:
        sizes = rows.groupby("topology").size()
        if sizes.nunique() == 1:
            label = [k for k in keys if k != "topology"] or None
            out["compare"] = plot_compare(rows, by="topology", label=label)
    return out


def run_plots(summary: dict, links: pd.DataFrame | None = None, events=None) -> dict:
    """The plots of one run, as ``{name: axes}``: ``breakdown``, ``links``, ``timeline``.

    ``summary`` is the ``summary.json`` mapping; ``links``/``events`` the run's tables (skipped
    when None).
    """
    from zionsim.sim.results import summary_row

    row = pd.DataFrame([summary_row(summary)])
    row["run"] = f"{summary.get('workload')}\n{summary.get('topology')} x {summary.get('nodes')}"
    out = {"breakdown": plot_breakdown(row, label="run")}
    if links is not None and len(links):
        out["links"] = plot_link_utilisation(links)
    if events is not None and len(events):
        out["timeline"] = plot_timeline(events)
    return out


def plot_bars(df: pd.DataFrame, ax=None, x: str = "knob", y: str = "speedup", by=None):
    """Grouped bars: one group per value of ``x`` (first-seen order), one bar per ``by`` value.

    For what-if tables such as the speed-up per hardware knob; a dashed line marks 1.0 when
    ``y`` is a ratio around it.
    """
    rows = _ok(df)
    groups = _groups(rows, by)
    xs = list(dict.fromkeys(rows[x]))
    ax = _axes(ax, (max(6.0, 1.3 * len(xs) + 3), 4.5))
    width = 0.8 / max(1, len(groups))
    for i, (name, g) in enumerate(groups):
        vals = g.groupby(x, sort=False)[y].mean()
        pos = [j + (i - (len(groups) - 1) / 2) * width for j in range(len(xs))]
        ax.bar(pos, [vals.get(v, float("nan")) for v in xs], width, label=name)
    if rows[y].between(0.2, 5).all():
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([str(v) for v in xs], fontsize=8)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if by is not None:
        ax.legend(fontsize=8)
    return ax
