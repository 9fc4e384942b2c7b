"""Plots for what-if studies: scaling curves, breakdowns, A-vs-B comparisons, links, timelines.

Each function takes a DataFrame — the combined sweep table (``results.parquet``, one row per
point, ``breakdown_s.*`` columns in seconds), a frame of flattened summaries
(:func:`zionsim.sim.results.summary_row`), or a run's ``links``/``events`` table — plus an optional
matplotlib ``ax``, and returns the axes.  matplotlib is imported inside the functions with the
headless Agg backend.  Rows whose ``status`` is not ``ok`` are left out.

>>> import pandas as pd
>>> df = pd.DataFrame({"gpus": [8, 16], "samples_per_s": [1e5, 1.8e5]})
>>> plot_scaling(df).get_xlabel()
'GPUs'
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd

from zionsim.base.errors import InputError
from zionsim.base.units import UNITS, parse_quantity
from zionsim.sim.results import BREAKDOWN_KEYS

#: one colour per category, the same in every plot (tab20 order)
CATEGORIES = BREAKDOWN_KEYS
BREAKDOWN = "breakdown_s."
_PREFIXES = ("topology.", "workload.")
#: axis labels of known columns, and the factor from the column's SI value to the unit shown
AXES = {
    "gpus": ("GPUs", 1.0),
    "a_over_b": ("A / B (samples/s)", 1.0),
    "claim_setup": ("claim", 1.0),
    "nodes": ("nodes", 1.0),
    "trainers": ("trainers (GPUs)", 1.0),
    "gpus_per_node": ("GPUs per node", 1.0),
    "batch_per_gpu": ("batch per GPU (samples)", 1.0),
    "global_batch": ("global batch (samples)", 1.0),
    "samples_per_s": ("throughput (samples/s)", 1.0),
    "iteration_time_s": ("iteration time (ms)", 1e3),
    "exposed_comm_s": ("exposed communication (ms)", 1e3),
    "speedup": ("speed-up (x)", 1.0),
    "sync_gap_mean_iterations": ("mean sync gap (iterations)", 1.0),
    "sync_gap_p95_iterations": ("p95 sync gap (iterations)", 1.0),
    "foreground_slowdown": ("foreground slowdown (%)", 100.0),
    "knob": ("hardware knob", 1.0),
    "topology.scale_out.nic_bw": ("NIC bandwidth", 1.0),
    "topology.scale_up.link_bw": ("NVLink bandwidth per link", 1.0),
    "topology.gpu.hbm": ("HBM per GPU", 1.0),
    "topology.host.dram_bw": ("host DRAM bandwidth per socket", 1.0),
}
#: x axes along which "throughput per unit of x" (scaling efficiency) means something
COUNT_AXES = ("gpus", "nodes", "trainers")
#: columns that are ratios around 1 (a baseline at 1 is drawn)
RATIOS = ("speedup", "scaling_efficiency", "a_over_b")
#: one marker and line style per line, so lines differ without colour
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")


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
    """``(label, frame)`` per value of ``by`` (a column or list of columns), in the order the
    values first appear (a sweep's grid order); one group if None."""
    if by is None:
        return [(None, df)]
    return [(_key_label(by, k), g) for k, g in df.groupby(by, sort=False, dropna=False)]


def _pretty(column: str) -> str:
    """A column name for an axis: known ones by :data:`AXES`, else the path without its prefix."""
    if column in AXES:
        return AXES[column][0]
    name = column.removeprefix("topology.").removeprefix("workload.")
    return name.replace("_", " ")


def axis_values(values: pd.Series, column: str) -> tuple[pd.Series, str]:
    """Numbers to plot for a column and its axis label with the unit.

    Known columns (:data:`AXES`) are scaled to the unit of their label (seconds to ms …); strings
    with units (``"100Gbps"``, as a sweep writes them) become numbers in the unit of the first
    value, named in the label (``NIC bandwidth (Gbps)``); other columns are returned as they are
    (numbers, or categories to place in order).
    """
    if column in AXES:
        label, factor = AXES[column]
        numbers = pd.to_numeric(values, errors="coerce")
        if numbers.notna().all():
            return numbers * factor, label
    numbers = pd.to_numeric(values, errors="coerce")
    if numbers.notna().all():
        if column.endswith("_s") and not column.endswith("_per_s"):
            return numbers * 1e3, f"{_pretty(column.removesuffix('_s'))} (ms)"
        return numbers, _pretty(column)
    unit = _common_unit(values)
    if unit is None:
        return values.astype(str), _pretty(column)
    factor = UNITS[unit][1]
    return values.map(lambda v: parse_quantity(v) / factor), f"{_pretty(column)} ({unit})"


def _common_unit(values: pd.Series) -> str | None:
    """The unit of the first value when every value is a quantity of that unit's dimension."""
    import re

    units = [re.sub(r"^[\s\d.eE+-]*", "", str(v)).strip() for v in values]
    if not units or units[0] not in UNITS:
        return None
    dim = UNITS[units[0]][0]
    if any(u not in UNITS or UNITS[u][0] != dim for u in units):
        return None
    try:
        [parse_quantity(v) for v in values]
    except InputError:
        return None
    return units[0]


def _place(ax, values: pd.Series, column: str, axis: str = "x") -> pd.Series:
    """Positions along ``axis`` for ``values`` of ``column``, with its label: numbers as they
    are, categories at 0, 1, … in first-seen order, named on the ticks."""
    numbers, label = axis_values(values, column)
    getattr(ax, f"set_{axis}label")(label)
    if pd.api.types.is_numeric_dtype(numbers):
        return numbers
    order = list(dict.fromkeys(numbers))
    getattr(ax, f"set_{axis}ticks")(range(len(order)))
    getattr(ax, f"set_{axis}ticklabels")(order, fontsize=8)
    return numbers.map({v: i for i, v in enumerate(order)})


def _log_if_wide(ax, values, axis: str = "x") -> None:
    """A log axis when the positive ``values`` span two decades or more; on x, powers of two
    (GPU counts, doubling grids) get a base-2 axis from a 4x span on.  Values that include
    zeros get a symmetric-log axis, linear below the smallest positive value's decade, so a
    series at or near zero is not drawn flat under one far above it."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    if not (len(v) == len(values) and len(v) and (v >= 0).all()):
        return
    pos = v[v > 0]
    if len(pos) < len(v):
        if len(pos) and pos.max() >= 100 * pos.min():
            linthresh = 10 ** math.floor(math.log10(pos.min()))
            getattr(ax, f"set_{axis}scale")("symlog", linthresh=linthresh)
            getattr(ax, f"set_{axis}lim")(-linthresh / 2, pos.max() * 2)  # zeros drawn clear
        return
    powers = axis == "x" and _doubling(v)
    if v.max() >= (4 if powers else 100) * v.min():
        getattr(ax, f"set_{axis}scale")("log", **({"base": 2} if powers else {}))


def _doubling(values: pd.Series) -> bool:
    """Whether positive ``values`` are the smallest times powers of two (8, 16, 32 GPUs; 100,
    200, 400, 800 Gb/s): a doubling grid, drawn on a base-2 axis."""
    ratios = [math.log2(v / values.min()) for v in values]
    return all(abs(r - round(r)) < 1e-9 for r in ratios)


def _style(i: int) -> dict:
    """Marker and line style of the ``i``-th line."""
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[i % len(LINESTYLES)]}


def _key_label(by, key) -> str:
    cols = [by] if isinstance(by, str) else list(by)
    keys = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c.rsplit('.', 1)[-1]}={v}" for c, v in zip(cols, keys, strict=False))


def plot_scaling(df: pd.DataFrame, ax=None, x: str = "gpus", y: str = "samples_per_s", by=None):
    """``y`` against ``x`` (default throughput against GPUs), one line per value of ``by`` (each
    with its own marker and line style); log axes where the values span two decades."""
    ax = _axes(ax, (6.5, 4.5))
    rows = _ok(df)
    if rows.empty or x not in rows.columns or y not in rows.columns:
        ax.text(0.5, 0.5, "no successful points", ha="center", va="center")
        return ax
    xs = _place(ax, rows[x], x)
    ys = _place(ax, rows[y], y, "y")
    for i, (name, g) in enumerate(_groups(rows, by)):
        order = xs[g.index].sort_values(kind="stable").index
        ax.plot(xs[order], ys[order], label=name, **_style(i))
    if pd.api.types.is_numeric_dtype(xs):
        _log_if_wide(ax, xs)
    _log_if_wide(ax, ys, "y")
    if y in RATIOS:
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="baseline (1x)")
    ax.set_title(f"{_pretty(y)} vs {_pretty(x)}")
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
    """Scaling efficiency (:func:`scaling_efficiency`) against ``x``, the ideal at 1.0 dashed.

    Only for an ``x`` that counts resources (:data:`COUNT_AXES`); along anything else "per unit
    of x" means nothing and a :class:`ValueError` says so."""
    if x not in COUNT_AXES:
        raise ValueError(f"scaling efficiency needs x in {COUNT_AXES}, got {x!r}")
    ax = _axes(ax, (6.5, 4.5))
    rows = _ok(df).assign(_eff=scaling_efficiency(df, x, y, by))
    for i, (name, g) in enumerate(_groups(rows, by)):
        g = g.sort_values(x, kind="stable")
        ax.plot(g[x], g["_eff"], label=name, **_style(i))
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="linear (1.0)")
    _log_if_wide(ax, rows[x])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(_pretty(x))
    ax.set_ylabel(
        f"scaling efficiency ({_pretty(y)} per {_pretty(x).split(' (')[0]}, 1 = smallest)"
    )
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
    if label is not None:
        _set_xlabels(ax, xs, _labels(a, label), label)
    else:  # each bar labelled with its run's name
        ticks = [t for x in xs for t in (x - 0.2, x + 0.2)]
        _set_xlabels(ax, ticks, [n for _ in xs for n in names], None)
    ax.set_ylabel("critical path per iteration (ms)")
    title = f"{names[0]} (left) vs {names[1]} (right, hatched)"
    ax.set_title(textwrap.fill(title, 60), fontsize=10)
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


def sweep_plots(df: pd.DataFrame, params=None, x: str | None = None) -> dict:
    """The plots that apply to a sweep table, as ``{name: axes}``.

    ``params``: the swept parameter columns (default: the run-option and ``topology.``/
    ``workload.`` columns).  ``x``: the scaling axis, default ``gpus`` when it varies, else the
    first swept parameter that does.  Always ``breakdown`` (one bar per point in grid order,
    labelled by the parameters that vary); ``scaling`` when ``x`` takes 2+ values (one line per
    value of the other varying parameters; ``x`` may hold unit strings such as ``100Gbps``), and
    ``scaling_efficiency`` too when ``x`` counts resources (:data:`COUNT_AXES`); ``compare`` when
    ``topology`` takes exactly 2 values with the same number of points each (Zion vs ZionEX).
    """
    from zionsim.sim.inputs import RUN_OPTIONS

    rows = _ok(df)
    if params is None:
        params = [c for c in df.columns if c in RUN_OPTIONS or c.startswith(_PREFIXES)]
    keys = varying(rows, params)
    out = {}
    if rows.empty:
        return out
    out["breakdown"] = plot_breakdown(rows, label=keys or None)
    if x is None:
        x = next(
            (k for k in ["gpus", *keys] if k in rows and rows[k].astype(str).nunique() > 1), "gpus"
        )
    scale_keys = {x, "nodes", "gpus_per_node", "global_batch"}
    if x not in rows.columns:
        allowed = ", ".join(dict.fromkeys(["gpus", "nodes", *keys]))
        raise InputError(f"no column {x!r} in the sweep table", field="--x", allowed=allowed)
    if rows[x].astype(str).nunique() > 1:
        by = [k for k in keys if k not in scale_keys] or None
        out["scaling"] = plot_scaling(rows, x=x, by=by)
        if x in COUNT_AXES:
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

    For what-if tables such as the speed-up per hardware knob; a dashed baseline marks 1.0 when
    ``y`` is a ratio (:data:`RATIOS`).
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
    if y in RATIOS:
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="baseline (1x)")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([str(v) for v in xs], fontsize=8)
    ax.set_xlabel(_pretty(x))
    ax.set_ylabel(_pretty(y))
    if by is not None or y in RATIOS:
        ax.legend(fontsize=8)
    return ax
