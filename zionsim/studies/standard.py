"""The standard what-if studies: their sweeps, their tidy tables, and the command that regenerates
``results/``.

    zionsim studies                           # all studies → results/<study>/*.csv, *.png
    zionsim studies scaling --workers 4

Each study is a few named sweeps ("parts", :data:`STUDIES`); the notebooks in ``notebooks/`` run
the same sweeps through :func:`study_sweeps`, so a notebook and ``results/`` show the same numbers.
Points land in ``results/runs/studies/<study>/<part>/`` (git-ignored, resumable: a second run, or
a notebook after this command, reuses every finished point).  With ``fast=True`` (what the test
suite uses through ``ZIONSIM_NOTEBOOK_FAST=1``) every study shrinks to the ``tiny`` workload on one
or two nodes and runs in seconds.

Choices:

1. Two iterations (one warm-up) per point unless sync gaps need more.
2. What-if hardware is one factor at a time: each knob at 1x, 2x and 4x of ZionEX's value with
   everything else at ZionEX's; speed-up is relative to the 1x point of the same workload.
3. ShadowSync: a trainer is one GPU (``sync_trainer`` is not a sweepable run option yet), EASGD
   uses one central sync server; all-reduce syncs every iteration (gap 1 by definition).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from zionsim.studies.jobs import placement, placement_table
from zionsim.studies.seeds import seeds_sweeps, seeds_table

FAST_ENV = "ZIONSIM_NOTEBOOK_FAST"
TWO = {"iterations": 2, "warmup": 1}

#: what-if knobs: dotted topology path → ZionEX values at 1x, 2x, 4x
KNOBS = {
    "NIC speed": ("topology.scale_out.nic_bw", ["200Gbps", "400Gbps", "800Gbps"]),
    "NVLink bandwidth": ("topology.scale_up.link_bw", ["25GB/s", "50GB/s", "100GB/s"]),
    "HBM size": ("topology.gpu.hbm", ["40GB", "80GB", "160GB"]),
    "host-DRAM bandwidth": ("topology.host.dram_bw", ["153.6GB/s", "307.2GB/s", "614.4GB/s"]),
}


def is_fast() -> bool:
    """True when ``ZIONSIM_NOTEBOOK_FAST=1``: studies shrink to seconds."""
    return os.environ.get(FAST_ENV, "") == "1"


def _scaling(fast: bool) -> dict:
    if fast:
        base = {"topology": "zionex", "workload": "tiny", **TWO}
        return {
            "plans": {"base": base, "grid": {"nodes": [1, 2], "plan": ["auto", "round_robin"]}},
            "sync": {
                "base": {**base, "iterations": 5, "sync_every": 4},
                "grid": {"nodes": [1, 2], "sync": ["allreduce", "foreground-ma", "shadow-ma"]},
            },
        }
    return {
        "plans": {
            "base": {"topology": "zionex", **TWO},
            "grid": {
                "workload": ["neo_model_a", "neo_model_i", "neo_model_f"],
                "nodes": [1, 2, 4, 8, 16, 32, 64, 128],
                "plan": ["auto", "round_robin"],
            },
        },
        "sync": {
            "base": {
                "topology": "zionex",
                "workload": "neo_model_i",
                "iterations": 5,
                "warmup": 1,
                "sync_every": 4,
            },
            "grid": {
                "nodes": [1, 2, 8, 32, 128],
                "sync": ["allreduce", "foreground-ma", "shadow-ma"],
            },
        },
    }


def _zion_vs_zionex(fast: bool) -> dict:
    workloads = ["tiny"] if fast else ["mlperf_dlrm", "mlperf_dlrm_dcnv2", "neo_model_i"]
    workloads += [] if fast else ["neo_model_a"]
    return {
        "models": {
            "base": {"nodes": 1 if fast else 16, **TWO},
            "grid": {"workload": workloads, "topology": ["zion", "zionex"]},
        }
    }


def _whatif(fast: bool) -> dict:
    base = {"topology": "zionex", "nodes": 1 if fast else 16, **TWO}
    base["workload.precision.dense"] = "tf32"
    workloads = ["tiny"] if fast else ["neo_model_a", "neo_model_f"]
    return {
        key: {"base": base, "grid": {"workload": workloads, path: values[:2] if fast else values}}
        for key, (path, values) in zip(_slugs(KNOBS), KNOBS.values(), strict=True)
    }


def _slugs(names) -> list[str]:
    return [n.lower().replace(" ", "_").replace("-", "_") for n in names]


def _shadowsync(fast: bool) -> dict:
    modes = ["allreduce", "foreground-ma", "shadow-ma", "foreground-easgd", "shadow-easgd"]
    return {
        "trainers": {
            "base": {
                "topology": "zionex",
                "workload": "tiny" if fast else "mlperf_dlrm_dcnv2",
                "iterations": 5 if fast else 9,
                "warmup": 1,
                "sync_every": 4,
            },
            "grid": {"nodes": [1, 2] if fast else [1, 2, 4, 8, 16], "sync": modes},
        }
    }


STUDIES = {
    "scaling": _scaling,
    "zion_vs_zionex": _zion_vs_zionex,
    "whatif_hardware": _whatif,
    "shadowsync": _shadowsync,
    "seeds": seeds_sweeps,
    "placement": placement,
}


def study_sweeps(name: str, fast: bool | None = None) -> dict:
    """``{part: Sweep}`` of a standard study (:data:`STUDIES`); ``fast`` defaults to the env."""
    from zionsim.base.errors import InputError
    from zionsim.studies.sweep import sweep_from_dict

    if name not in STUDIES:
        raise InputError(f"unknown study {name!r}", field="study", allowed=", ".join(STUDIES))
    fast = is_fast() if fast is None else fast
    return {k: sweep_from_dict(v, f"<{name}.{k}>") for k, v in STUDIES[name](fast).items()}


def run_study(name: str, runs_dir, workers: int = 1, fast=None, progress=False) -> dict:
    """Run every part of a study into ``runs_dir/<name>/<part>/``; ``{part: table}``."""
    from zionsim.studies.sweep import run_sweep

    out = Path(runs_dir) / name
    return {
        part: run_sweep(s, out / part, workers=workers, progress=progress and f"{name}: {part}")
        for part, s in study_sweeps(name, fast).items()
    }


def whatif_speedups(tables: dict) -> pd.DataFrame:
    """Tidy what-if table: per knob, workload and factor (1, 2, 4): iteration time and speed-up."""
    rows = []
    for (knob, (path, values)), part in zip(KNOBS.items(), _slugs(KNOBS), strict=True):
        t = tables.get(part)
        if t is None:
            continue
        for _, r in t.iterrows():
            rows.append(
                {
                    "knob": knob,
                    "workload": r["workload"],
                    "value": r[path],
                    "factor": 2 ** values.index(r[path]),
                    "status": r["status"],
                    "iteration_time_s": r.get("iteration_time_s"),
                    "samples_per_s": r.get("samples_per_s"),
                }
            )
    df = pd.DataFrame(rows)
    ref = df[df["factor"] == 1].set_index(["knob", "workload"])["iteration_time_s"]
    keys = zip(df["knob"], df["workload"], df["iteration_time_s"], strict=True)
    df["speedup"] = [ref.get((k, w), float("nan")) / t for k, w, t in keys]
    return df.sort_values(["workload", "knob", "factor"], ignore_index=True)


def sync_table(table: pd.DataFrame) -> pd.DataFrame:
    """ShadowSync view: trainers, mode, samples/s, sync gap (all-reduce = 1), slowdown."""
    ok = table[table["status"] == "ok"]
    out = pd.DataFrame(
        {
            "trainers": ok["gpus"],
            "sync": ok["sync"],
            "samples_per_s": ok["samples_per_s"],
            "iteration_time_s": ok["iteration_time_s"],
            "sync_gap_mean_iterations": ok.get("sync.sync_gap_iterations.mean"),
            "sync_gap_p95_iterations": ok.get("sync.sync_gap_iterations.p95"),
            "sync_rounds_per_trainer": ok.get("sync.rounds_per_trainer"),
            "foreground_slowdown": ok.get("sync.foreground_slowdown"),
        }
    )
    allreduce = out["sync"] == "allreduce"
    for col in ("sync_gap_mean_iterations", "sync_gap_p95_iterations"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
        out.loc[allreduce, col] = 1.0
    out["foreground_slowdown"] = pd.to_numeric(out["foreground_slowdown"]).fillna(0.0)
    return out.sort_values(["sync", "trainers"], ignore_index=True)


# ------------------------------------------------------------------- results/ (files, plots)
KEEP = ("point_id", "gpus", "iteration_time_s", "samples_per_s", "exposed_comm_s", "status")


def _slim(table: pd.DataFrame, params) -> pd.DataFrame:
    """Parameters that vary, headline figures, the breakdown, sync figures; no wall-clock."""
    cols = [c for c in params if table[c].astype(str).nunique() > 1]
    cols += [c for c in KEEP if c in table.columns]
    cols += [c for c in table.columns if c.startswith(("breakdown_s.", "sync.")) and c not in cols]
    cols += ["error"]
    return table[cols]


def figures(name: str, tables: dict) -> dict:
    """``{file stem: axes}`` of a study's standard plots."""
    from zionsim.io import plots_study as ps

    if name == "scaling":
        plans = tables["plans"]
        auto = plans[plans["plan"] == "auto"]
        return {
            "samples_per_s": ps.plot_scaling(auto, by="workload"),
            "efficiency": ps.plot_scaling_efficiency(auto, by="workload"),
            "plans": ps.plot_scaling(plans, by=["workload", "plan"]),
            "sync_modes": ps.plot_scaling(tables["sync"], by="sync"),
        }
    if name == "zion_vs_zionex":
        return {"breakdown": ps.plot_compare(tables["models"], by="topology", label="workload")}
    if name == "whatif_hardware":
        sp = whatif_speedups(tables)
        return {
            "speedup": ps.plot_bars(
                sp[sp["factor"] > 1], x="knob", y="speedup", by=["workload", "factor"]
            )
        }
    if name == "placement":
        pt = placement_table(tables["placement"]).assign(status="ok")
        return {
            "slowdown": ps.plot_scaling(pt, x="jobs", y="slowdown_mean", by="placement"),
            "samples_per_s": ps.plot_scaling(pt, x="jobs", y="samples_per_s", by="placement"),
        }
    if name == "seeds":
        st = seeds_table(tables)
        labels = zip(st["claim"], st["workload"], st["plan"], strict=True)
        st["claim_setup"] = [f"{c}\n{w}, {p}" for c, w, p in labels]
        st["status"] = "ok"
        return {"claims": ps.plot_bars(st, x="claim_setup", y="a_over_b")}
    st = sync_table(tables["trainers"])
    return {
        "throughput": ps.plot_scaling(st, x="trainers", by="sync"),
        "sync_gap": ps.plot_scaling(st, x="trainers", y="sync_gap_mean_iterations", by="sync"),
        "slowdown": ps.plot_scaling(st, x="trainers", y="foreground_slowdown", by="sync"),
    }


def result_files(name: str, tables: dict) -> dict:
    """What a study commits to ``results/<name>/``: file name → DataFrame (CSV) or axes (PNG)."""
    from zionsim.studies.sweep import points

    files: dict = {}
    for part, sweep in study_sweeps(name).items():
        params = [k for k in next(iter(points(sweep))) if k != "point_id"]
        files[f"{part}.csv"] = _slim(tables[part], params)
    if name == "whatif_hardware":
        files["speedup.csv"] = whatif_speedups(tables)
    if name == "shadowsync":
        files["sync.csv"] = sync_table(tables["trainers"])
    if name == "seeds":
        files["seeds.csv"] = seeds_table(tables)
    if name == "placement":
        files["placement_summary.csv"] = placement_table(tables["placement"])
    files.update({f"{stem}.png": ax for stem, ax in figures(name, tables).items()})
    return files


def write_results(name: str, tables: dict, results_dir) -> list[Path]:
    """Small CSVs (one per part, plus the study's tidy table) and PNGs in ``results_dir/name``."""
    from zionsim.io.files import write_tables_and_figures

    return write_tables_and_figures(Path(results_dir) / name, result_files(name, tables))
