"""Validation: simulate published measurements and report the error (``zionsim validate``).

A case (``validation/cases.yaml``) pairs a setup the simulator is configured for with a public
measurement and its source.  :func:`load_cases` reads and checks the file (the one function here
that touches the disk); :func:`run_cases` simulates every case and returns one row per case;
:func:`summarize` gives the geometric mean of |error| per family, calibrated and held-out cases
apart.  Nothing here prints or writes.

Assumptions:

1. ``error_pct = 100 * (simulated - measured) / measured``, both in the measured unit.
2. The geometric mean of |error| is taken over cases with a non-zero error (a zero error would
   make it zero whatever the others are); ``n`` counts every case of the group.
3. A case is *calibrated* when its very point was used to fit or set a model parameter, so its
   error measures the fit, not a prediction; held-out cases are the validation proper.
4. Split by generation and scale before fitting (issue 25): an end-to-end case may be calibrated
   only when its measured system is A100- or H100-class (``FIT_GPUS``) on at most
   ``FIT_MAX_NODES`` nodes; every H200, Blackwell and larger-scale run stays held out, and
   :func:`split_end_to_end` reports the held-out cases per GPU and per scale apart.  The
   measured system (its GPU and node count) is the case's ``system`` mapping, or else what its
   simulated topology says.
5. A *what-if* (``whatif:`` in the cases file) is the ratio of two cases' values, simulated
   against measured: ``error_pct = 100 * (sim_b / sim_a) / (meas_b / meas_a) - 100``; it tests
   what a user asks the simulator (another GPU, more nodes, another batch), free of the errors
   the two runs share.  It is calibrated only when both its cases are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from zionsim.base.config import Fields, builtin_dir, load_yaml
from zionsim.base.errors import InputError
from zionsim.base.units import parse_quantity

FAMILIES = ("collectives", "kernels", "end_to_end")
CASE_KEYS = {
    "id",
    "family",
    "calibrated",
    "fast",
    "source",
    "curve",
    "note",
    "simulate",
    "measured",
    "system",
}
#: GPU families an end-to-end case may be calibrated on, and the most nodes (assumption 4)
FIT_GPUS = ("A100", "H100")
FIT_MAX_NODES = 8
#: GPU family labels, longest first where one contains another (GB200 before B200)
GPU_LABELS = ("GB200", "GH200", "B200", "H200", "H100", "H800", "H20", "A100", "A800", "V100")
WHATIF_KINDS = ("scale_out", "gpu_swap", "batch")
WHATIF_KEYS = {"id", "kind", "base", "other", "note"}
#: measured unit -> (dimension, factor to SI)
UNITS = {
    "GB/s": ("bandwidth", 1e9),
    "TFLOP/s": ("flops", 1e12),
    "ms": ("time", 1e-3),
    "us": ("time", 1e-6),
    "s": ("time", 1.0),
    "samples/s": ("rate", 1.0),
}
#: metric -> dimension of its SI value
METRICS = {
    "busbw": "bandwidth",
    "algbw": "bandwidth",
    "time": "time",
    "throughput": "flops",
    "bandwidth": "bandwidth",
    "iteration_time": "time",
    "samples_per_s": "rate",
}
#: kind -> (required keys, optional keys, metrics allowed)
KIND_KEYS = {
    "collective": (
        {"topology", "nodes", "op", "size"},
        {"gpus_per_node", "set", "metric", "algorithm", "protocol", "gpus_per_process"},
        ("busbw", "algbw", "time"),
    ),
    "gemm": ({"topology", "m", "n", "k", "dtype"}, {"metric", "set"}, ("throughput",)),
    "memory": ({"topology", "bytes"}, {"metric", "set"}, ("bandwidth",)),
    "gather": ({"topology", "bytes"}, {"metric", "set"}, ("bandwidth",)),
    "run": ({"options"}, {"metric"}, ("iteration_time", "samples_per_s")),
}


@dataclass(frozen=True)
class Case:
    """One validation case: what to simulate, what was measured, and where it was published."""

    id: str
    family: str
    calibrated: bool
    fast: bool
    source: str
    citation: str
    kind: str
    metric: str
    params: dict
    measured: float
    unit: str
    curve: str = ""
    note: str = ""
    file: str = ""
    #: the measured system: GPU family label (``GPU_LABELS``) and node count (assumption 4)
    gpu: str = ""
    nodes: int = 0


@dataclass(frozen=True)
class WhatIf:
    """The ratio of two cases (``other`` over ``base``), simulated against measured."""

    id: str
    kind: str
    base: str
    other: str
    note: str = ""


def default_cases_file() -> Path:
    """``validation/cases.yaml`` in the source tree, or its copy inside an installed wheel."""
    return builtin_dir("validation") / "cases.yaml"


def load_cases(path: str | Path | None = None, fast_only: bool = False) -> list[Case]:
    """The cases of ``path`` (default: the built-in suite), checked; errors name file and field."""
    data, file = load_yaml(path or default_cases_file(), "validation")
    top = Fields(data, file)
    top.check_keys({"sources", "cases", "whatif"})
    sources = top.raw("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise top.error("sources", "expected a mapping of key to citation text")
    raw = top.raw("cases")
    if not isinstance(raw, list) or not raw:
        raise top.error("cases", "expected a non-empty list of cases")
    cases = [_case(Fields(c, file, f"cases[{i}]"), sources) for i, c in enumerate(raw)]
    seen: set[str] = set()
    for i, c in enumerate(cases):
        if c.id in seen:
            raise InputError(f"duplicate case id {c.id!r}", file=file, field=f"cases[{i}].id")
        seen.add(c.id)
        _check_fit_split(c, file, i)
    return [c for c in cases if c.fast or not fast_only]


def load_whatifs(path: str | Path | None = None) -> list[WhatIf]:
    """The ``whatif:`` pairs of ``path`` (default: the built-in suite), each naming two cases."""
    data, file = load_yaml(path or default_cases_file(), "validation")
    raw = data.get("whatif", []) if isinstance(data, dict) else []
    if not isinstance(raw, list):
        raise InputError("expected a list of what-if pairs", file=file, field="whatif")
    ids = {str(c.get("id")) for c in data.get("cases", []) if isinstance(c, dict)}
    out, seen = [], set(ids)
    for i, w in enumerate(raw):
        f = Fields(w, file, f"whatif[{i}]")
        f.check_keys(WHATIF_KEYS)
        wid = str(f.raw("id"))
        if wid in seen:
            raise f.error("id", f"duplicate id {wid!r} (what-ifs and cases share one namespace)")
        seen.add(wid)
        pair = []
        for key in ("base", "other"):
            name = str(f.raw(key))
            if name not in ids:
                raise f.error(key, f"no case {name!r} in this file")
            pair.append(name)
        if pair[0] == pair[1]:
            raise f.error("other", "a what-if compares two different cases")
        kind = f.choice("kind", WHATIF_KINDS)
        out.append(WhatIf(wid, kind, pair[0], pair[1], " ".join(str(f.raw("note", "")).split())))
    return out


def _check_fit_split(c: Case, file: str, i: int) -> None:
    """Assumption 4: only A100/H100-class runs on up to FIT_MAX_NODES nodes may be calibrated.

    A collective that sets a constant is held to the same scale (a measurement on more nodes
    stays held out); kernel cases are one GPU's microbenchmarks, where the part's own
    STREAM-like figure is a hardware fact of that part (docs/validation.md).
    """
    if not c.calibrated:
        return
    if c.family == "collectives" and c.nodes > FIT_MAX_NODES:
        raise InputError(
            f"case {c.id!r} on {c.nodes} nodes cannot be calibrated: collective constants are "
            f"set from measurements on up to {FIT_MAX_NODES} nodes; larger ones stay held out",
            file=file,
            field=f"cases[{i}].calibrated",
        )
    if c.family != "end_to_end":
        return
    if c.gpu not in FIT_GPUS or c.nodes > FIT_MAX_NODES:
        raise InputError(
            f"case {c.id!r} on {c.nodes} node(s) of {c.gpu or 'an unknown GPU'} cannot be "
            "calibrated: end-to-end fits use only A100/H100 runs on up to "
            f"{FIT_MAX_NODES} nodes; H200, Blackwell and larger runs stay held out",
            file=file,
            field=f"cases[{i}].calibrated",
        )


def _case(f: Fields, sources: dict[str, str]) -> Case:
    f.check_keys(CASE_KEYS)
    source = f.choice("source", sorted(sources))
    sim = f.sub("simulate")
    kind = sim.choice("kind", sorted(KIND_KEYS))
    required, optional, metrics = KIND_KEYS[kind]
    sim.check_keys(required | optional | {"kind"})
    for key in sorted(required):
        sim.raw(key)
    metric = sim.choice("metric", metrics, metrics[0])
    meas = f.sub("measured")
    meas.check_keys({"value", "unit"})
    unit = meas.choice("unit", sorted(UNITS))
    if UNITS[unit][0] != METRICS[metric]:
        raise meas.error("unit", f"{unit!r} does not measure {metric}", _units_of(metric))
    value = meas.raw("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise meas.error("value", f"expected a positive number, got {value!r}")
    params = {k: v for k, v in sim.data.items() if k not in ("kind", "metric")}
    _check_params(sim, kind, params)
    gpu, nodes = _system(f, kind, params)
    return Case(
        id=str(f.raw("id")),
        family=f.choice("family", FAMILIES),
        calibrated=f.flag("calibrated"),
        fast=f.flag("fast"),
        source=source,
        citation=" ".join(sources[source].split()),
        kind=kind,
        metric=metric,
        params=params,
        measured=float(value),
        unit=unit,
        curve=str(f.raw("curve", "")),
        note=" ".join(str(f.raw("note", "")).split()),
        file=f.file,
        gpu=gpu,
        nodes=nodes,
    )


def gpu_label(model: str) -> str:
    """The GPU family label named in a GPU model string (``GPU_LABELS``), or the model itself."""
    up = model.upper()
    hits = [(up.find(lab), -len(lab), lab) for lab in GPU_LABELS if lab in up]
    return min(hits)[2] if hits else model


def _system(f: Fields, kind: str, params: dict) -> tuple[str, int]:
    """The measured system's GPU label and node count: the case's ``system`` mapping where it
    gives them, else the simulated topology's (with the case's overrides)."""
    given = f.sub("system").data if "system" in f.data else {}
    if given:
        f.sub("system").check_keys({"gpu", "nodes"})
    if "gpu" in given and "nodes" in given:
        return gpu_label(str(given["gpu"])), int(given["nodes"])
    if kind == "run":
        o = params["options"]
        pre = "topology."
        sets = tuple(f"{k[len(pre) :]}={v}" for k, v in o.items() if k.startswith(pre))
        topo, nodes, gpn = o.get("topology", "zionex"), o.get("nodes"), o.get("gpus_per_node")
    elif kind == "collective":
        topo, nodes, gpn = params["topology"], params["nodes"], params.get("gpus_per_node")
        sets = tuple(params.get("set", ()))
    else:
        topo, nodes, gpn, sets = params["topology"], 1, None, tuple(params.get("set", ()))
    try:
        spec = _spec(str(topo), nodes if nodes is None else int(nodes), gpn, sets)
    except (InputError, TypeError, ValueError):
        spec = ("", 0)  # the case fails when simulated, with its id and field named
    return (
        gpu_label(str(given.get("gpu", spec[0]))),
        int(given.get("nodes", spec[1])),
    )


@lru_cache(maxsize=64)
def _spec(topology: str, nodes, gpus_per_node, sets: tuple[str, ...]) -> tuple[str, int]:
    from zionsim.hardware.topology import load_topology

    spec = load_topology(topology, nodes=nodes, gpus_per_node=gpus_per_node, overrides=list(sets))
    return spec.gpu.model, spec.nodes


def _check_params(sim: Fields, kind: str, params: dict) -> None:
    """Parse the quantities now, so a bad size fails at load with its field named."""
    if "set" in params and not isinstance(params["set"], list):
        raise sim.error("set", "expected a list of PATH=VALUE strings")
    if kind == "collective":
        sim.quantity("size", "bytes", unit=False)
        sim.integer("nodes")
    elif kind == "gemm":
        for key in ("m", "n", "k"):
            sim.integer(key)
    elif kind in ("memory", "gather"):
        sim.quantity("bytes", "bytes", unit=False)
    elif not isinstance(params["options"], dict):
        raise sim.error("options", "expected a mapping of run options")


def _units_of(metric: str) -> str:
    return ", ".join(u for u, (d, _) in UNITS.items() if d == METRICS[metric])


def simulate_case(case: Case) -> float:
    """The simulated value of ``case`` in its measured unit."""
    si = SIMULATORS[case.kind](case.params, case.metric)
    return si / UNITS[case.unit][1]


def _collective(p: dict, metric: str) -> float:
    from zionsim.network.simulate import simulate_collective

    cluster = _cluster(p["topology"], p["nodes"], p.get("gpus_per_node"), tuple(p.get("set", ())))
    size = int(parse_quantity(p["size"], "bytes", field="simulate.size"))
    r = simulate_collective(
        cluster,
        p["op"],
        size,
        algorithm=p.get("algorithm"),
        protocol=p.get("protocol"),
        launch_gpus=int(p.get("gpus_per_process", 1)),
    )
    return {"busbw": r.busbw_GBps * 1e9, "algbw": r.algbw_GBps * 1e9, "time": r.time_s}[metric]


def _gemm(p: dict, metric: str) -> float:
    from zionsim.hardware import compute

    gpu = _gpu(p["topology"], tuple(p.get("set", ())))
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    return compute.gemm_flops(m, n, k) / compute.gemm_time_s(gpu, m, n, k, p["dtype"])


def _memory(p: dict, metric: str) -> float:
    from zionsim.hardware import compute

    nbytes = parse_quantity(p["bytes"], "bytes", field="simulate.bytes")
    return nbytes / compute.memory_time_s(_gpu(p["topology"], tuple(p.get("set", ()))), nbytes)


def _gather(p: dict, metric: str) -> float:
    """A random-row gather's bandwidth (``compute.gather_bandwidth_Bps``): the kernel's own
    time, as the published gather benchmarks time it (no launch; ``bytes`` is checked but
    does not change the rate)."""
    from zionsim.hardware import compute

    return compute.gather_bandwidth_Bps(_gpu(p["topology"], tuple(p.get("set", ()))))


def _run(p: dict, metric: str) -> float:
    from zionsim.sim.run import run_point

    s = run_point(dict(p["options"])).summary
    return s["iteration_time_s"] if metric == "iteration_time" else s["samples_per_s"]


SIMULATORS = {
    "collective": _collective,
    "gemm": _gemm,
    "memory": _memory,
    "gather": _gather,
    "run": _run,
}


@lru_cache(maxsize=16)
def _cluster(topology: str, nodes: int, gpus_per_node: int | None, overrides: tuple[str, ...]):
    from zionsim.hardware.cluster import Cluster

    return Cluster.load(
        topology, nodes=int(nodes), gpus_per_node=gpus_per_node, overrides=list(overrides)
    )


def _gpu(topology: str, sets: tuple[str, ...] = ()):
    from zionsim.hardware.topology import load_topology

    return load_topology(topology, nodes=1, overrides=list(sets)).gpu


def run_cases(cases: list[Case], on_case=None) -> pd.DataFrame:
    """One row per case: measured, simulated, error and provenance, in the file's order;
    ``on_case(id)`` is told each case as it finishes (a progress bar)."""
    rows = []
    for c in cases:
        try:
            sim = simulate_case(c)
        except InputError as exc:
            raise InputError(
                exc.problem,
                file=exc.file or c.file,
                field=f"case {c.id}: simulate" + (f" ({exc.field})" if exc.field else ""),
                allowed=exc.allowed,
            ) from None
        rows.append(
            {
                "case": c.id,
                "family": c.family,
                "calibrated": c.calibrated,
                "measured": c.measured,
                "simulated": sim,
                "unit": c.unit,
                "error_pct": 100.0 * (sim - c.measured) / c.measured,
                "source": c.source,
                "curve": c.curve,
                "citation": c.citation,
                "gpu": c.gpu,
                "nodes": c.nodes,
            }
        )
        if on_case is not None:
            on_case(c.id)
    return pd.DataFrame(rows, columns=_COLUMNS)


_COLUMNS = [
    "case",
    "family",
    "calibrated",
    "measured",
    "simulated",
    "unit",
    "error_pct",
    "source",
    "curve",
    "citation",
    "gpu",
    "nodes",
]


def run_whatifs(table: pd.DataFrame, whatifs: list[WhatIf]) -> pd.DataFrame:
    """One row per what-if whose two cases are in ``table`` (family ``what_if``, unit ratio):
    measured and simulated ``other / base`` and the error of the simulated ratio (assumption 5)."""
    by_id = table.set_index("case")
    rows = []
    for w in whatifs:
        if w.base not in by_id.index or w.other not in by_id.index:
            continue  # a --fast run leaves out one of its cases
        a, b = by_id.loc[w.base], by_id.loc[w.other]
        meas, sim = b["measured"] / a["measured"], b["simulated"] / a["simulated"]
        rows.append(
            {
                "case": w.id,
                "family": "what_if",
                "calibrated": bool(a["calibrated"] and b["calibrated"]),
                "measured": meas,
                "simulated": sim,
                "unit": "ratio",
                "error_pct": 100.0 * (sim / meas - 1.0),
                "source": a["source"]
                if a["source"] == b["source"]
                else f"{a['source']}+{b['source']}",
                "curve": w.kind,
                "citation": f"{w.kind}: {w.other} / {w.base}",
                "gpu": a["gpu"] if a["gpu"] == b["gpu"] else f"{a['gpu']}->{b['gpu']}",
                "nodes": int(b["nodes"]),
            }
        )
    return pd.DataFrame(rows, columns=_COLUMNS)


def scale_label(nodes: int) -> str:
    """The scale group of a measured system: 1 node, 2-8 nodes or more than 8."""
    return "1 node" if nodes <= 1 else ("2-8 nodes" if nodes <= FIT_MAX_NODES else "> 8 nodes")


def split_end_to_end(table: pd.DataFrame) -> pd.DataFrame:
    """End-to-end and what-if errors split as issue 25 asks: calibrated, then held out within
    the fit's reach (A100/H100 on up to 8 nodes) and beyond it (H200, Blackwell, more nodes),
    then held out per GPU and per scale; each with n, geomean |error| and mean signed error."""
    e2e = table[table["family"] == "end_to_end"]
    held = e2e[~e2e["calibrated"]]
    inside = held["gpu"].isin(FIT_GPUS) & (held["nodes"] <= FIT_MAX_NODES)
    groups: list[tuple[str, str, pd.DataFrame]] = [
        ("end_to_end", "calibrated", e2e[e2e["calibrated"]]),
        ("end_to_end", "held out", held),
        ("end_to_end", "held out, A100/H100 <= 8 nodes", held[inside]),
        ("end_to_end", "held out, beyond the fit", held[~inside]),
    ]
    for gpu in sorted(set(held["gpu"]), key=_gpu_order):
        groups.append(("end_to_end", f"held out, {gpu}", held[held["gpu"] == gpu]))
    scales = held["nodes"].map(scale_label)
    for sc in ("1 node", "2-8 nodes", "> 8 nodes"):
        if (scales == sc).any():
            groups.append(("end_to_end", f"held out, {sc}", held[scales == sc]))
    wi = table[(table["family"] == "what_if") & ~table["calibrated"]]
    if len(wi):
        groups.append(("what_if", "held out", wi))
        for kind in WHATIF_KINDS:
            sub = wi[wi["curve"] == kind]
            if len(sub):
                groups.append(("what_if", f"held out, {kind}", sub))
    return pd.DataFrame(
        [
            {
                "family": fam,
                "group": name,
                "n": int(len(sub)),
                "geomean_abs_error_pct": geomean_abs_error(sub["error_pct"]),
                "mean_error_pct": float(sub["error_pct"].mean()) if len(sub) else math.nan,
            }
            for fam, name, sub in groups
        ]
    )


def _gpu_order(label: str) -> tuple[int, str]:
    order = ("V100", "A100", "A800", "H100", "H800", "H20", "H200", "GH200", "B200", "GB200")
    return (order.index(label) if label in order else len(order), label)


def geomean_abs_error(errors_pct) -> float:
    """Geometric mean of |error| in percent over the non-zero errors (nan when there are none)."""
    vals = [abs(float(e)) for e in errors_pct if float(e) != 0.0]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per family (and ``all``): case count and geomean |error| of calibrated and held-out cases."""
    rows: list[dict[str, Any]] = []
    present = set(table["family"])
    families = [f for f in (*FAMILIES, "what_if") if f in present] + ["all"]
    for fam in families:
        # `all` pools the single measurements; what-if ratios reuse them, so they stay apart
        sub = table[table["family"] != "what_if"] if fam == "all" else table[table["family"] == fam]
        cal, held = sub[sub["calibrated"]], sub[~sub["calibrated"]]
        rows.append(
            {
                "family": fam,
                "n_calibrated": int(len(cal)),
                "geomean_abs_error_calibrated_pct": geomean_abs_error(cal["error_pct"]),
                "n_held_out": int(len(held)),
                "geomean_abs_error_held_out_pct": geomean_abs_error(held["error_pct"]),
            }
        )
    return pd.DataFrame(rows)


def report(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    cases_file: str,
    fast: bool,
    split: pd.DataFrame | None = None,
) -> dict:
    """The plain mapping behind ``summary.json``: per-family geomeans, the end-to-end split by
    GPU and scale, and every case's error."""

    def plain(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    split = split_end_to_end(table) if split is None else split
    return {
        "cases_file": cases_file,
        "fast_only": fast,
        "n_cases": int(len(table)),
        "summary": [{k: plain(v) for k, v in r.items()} for r in summary.to_dict("records")],
        "end_to_end_split": [{k: plain(v) for k, v in r.items()} for r in split.to_dict("records")],
        "cases": table.drop(columns=["curve"]).to_dict("records"),
    }


def display_rows(table: pd.DataFrame) -> list[dict]:
    """Rows for the terminal: the table's main columns, error rounded to 0.1 %."""
    t = table.drop(columns=["curve", "citation"]).copy()
    t["error_pct"] = t["error_pct"].round(1)
    return t.to_dict("records")


def display_summary(summary: pd.DataFrame) -> list[dict]:
    """Summary rows for the terminal: geomeans rounded to 0.1 %, ``-`` where a group is empty."""
    out = []
    for r in summary.to_dict("records"):
        out.append(
            {k: "-" if isinstance(v, float) and math.isnan(v) else _round(v) for k, v in r.items()}
        )
    return out


def _round(v):
    return round(v, 1) if isinstance(v, float) else v
