"""Write (and optionally execute) the study notebooks from the cells below.

    python notebooks/build.py             # write the seven .ipynb, without outputs
    python notebooks/build.py --execute   # write and execute them full size, outputs saved
    python notebooks/build.py --execute seeds   # only the named notebooks

Run ``zionsim studies`` first: the notebooks run the same sweeps into the same
``results/runs/studies/`` folders, so they then resume instantly instead of simulating again.
Every notebook reads ``ZIONSIM_NOTEBOOK_FAST=1`` (the test suite sets it) and shrinks to seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

SETUP = '''\
import io
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Image, display

import zionsim as zs

FAST = os.environ.get("ZIONSIM_NOTEBOOK_FAST") == "1"  # the test suite shrinks the study
RUNS = Path(tempfile.mkdtemp()) if FAST else Path("../results/runs/studies")
WORKERS = 1 if FAST else (os.cpu_count() or 1)
pd.set_option("display.precision", 4)
pd.set_option("display.width", 120)


def show(ax):
    """Embed the figure of a zionsim plot as a small PNG."""
    buf = io.BytesIO()
    ax.figure.savefig(buf, format="png", dpi=70, bbox_inches="tight")
    plt.close(ax.figure)
    display(Image(buf.getvalue()))'''

ZION = [
    "# Zion vs ZionEX: the same models on both platforms\n\n"
    "Zion (OCP 2019) put 8 accelerators next to 8 CPU sockets with a large host DRAM; its "
    "scale-out goes through a few **host** NICs shared by all eight GPUs. ZionEX (Neo, ISCA'22) "
    "gives every A100 its own 200 Gb/s RoCE NIC behind a PCIe switch and an NVSwitch "
    "baseboard inside the node. This notebook runs four DLRMs on 16 nodes (128 GPUs) of each "
    "platform and asks where the time goes and why ZionEX is faster. It uses only the public "
    "API (`import zionsim as zs`); the same sweep regenerates `results/zion_vs_zionex/`.",
    SETUP,
    'tables = zs.run_study("zion_vs_zionex", RUNS, WORKERS)\n'
    't = tables["models"]\n'
    'cols = ["workload", "topology", "gpus", "iteration_time_s", "samples_per_s",\n'
    '        "exposed_comm_s", "status"]\n'
    't[cols].sort_values(["workload", "topology"])',
    "## Where the time goes\n\n"
    "Each pair of bars is one model: Zion on the left, ZionEX hatched on the right, each split "
    "along the critical path of one iteration (the categories sum to the iteration time); the "
    "label over ZionEX's bar is its speed-up.",
    'show(zs.plot_compare(t, by="topology", label="workload"))',
    "## Attribution of the difference\n\n"
    "`zs.compare_attribution(a, b)` splits each iteration into balanced compute per kind, "
    "**exposed** communication per collective (time on the critical path that compute did not "
    "hide) and imbalance (critical-path compute beyond the rank average, plus idle gaps), so "
    "the differences sum to the change in iteration time. `zionsim compare RUN_A RUN_B` prints "
    "the same table for two run folders.",
    "rows = []\n"
    "for w, g in t[t.status == 'ok'].groupby('workload'):\n"
    "    zion, zionex = (g[g.topology == k].iloc[0] for k in ('zion', 'zionex'))\n"
    "    att = zs.compare_attribution(zion, zionex).set_index('component')['delta_s'] * 1e3\n"
    "    rows.append({'workload': w, 'zion_ms': zion.iteration_time_s * 1e3,\n"
    "                 'zionex_ms': zionex.iteration_time_s * 1e3,\n"
    "                 'speedup': zion.iteration_time_s / zionex.iteration_time_s,\n"
    "                 **{f'{k}_delta_ms': att[k] for k in ('embedding', 'gemm', 'all_to_all',\n"
    "                    'all_reduce', 'host_transfer', 'exposed_communication',\n"
    "                    'imbalance')}})\n"
    "pd.DataFrame(rows).round(2)",
    "## Why\n\n"
    "* **Communication is the difference.** On Zion every byte that leaves a node squeezes "
    "through host NICs shared by eight GPUs and the CPU sockets' PCIe root, so the pooled-"
    "embedding and gradient all-to-alls sit on the critical path. ZionEX's one 200 Gb/s NIC "
    "per GPU (rail-aligned, PXN) gives each GPU its own scale-out bandwidth: "
    "`all_to_all_delta_ms` and `exposed_communication_delta_ms` carry most of the gain for "
    "every model (the all-to-all on Neo model A's critical path falls from ~195 ms to ~37 ms).\n"
    "* **Neo model A also gains from tensor cores.** Its 3,994-wide MLPs run in TF32; Zion's "
    "V100-class accelerators have no TF32 units, so they run them at the FP32 rate (GEMMs "
    "~42 ms against ~6 ms). Its FP16 rows fit in HBM on both platforms (no host transfers).\n"
    "* **Compute changes less for the MLPerf models**, which train in FP32 on both: GEMMs go "
    "from V100-class to A100 FP32 and embedding lookups from 900 GB/s to 1555 GB/s HBM.\n"
    "* **DLRM-DCNv2's cross network** (`interaction`) is FP32 GEMM work on both platforms and "
    "shrinks least; it is the largest part of ZionEX's DCNv2 iteration.",
]

SCALING = [
    "# Scaling the Neo models from 8 to 1,024 GPUs\n\n"
    "Weak scaling on ZionEX (512 samples per GPU, global batch grows with the cluster) for "
    "Meta's public Neo-scale presets: model A (4,096 tables, ~800 B parameters, large TF32 "
    "MLPs), model I (512 tables, deep narrow MLPs) and model F (~12 T parameters: most rows "
    "live in host DRAM behind an HBM cache, UVM). Two planners (the cost-based greedy planner, "
    "`auto`, and round-robin table-wise) and three ways of syncing the dense parameters. "
    "Points that do not fit in memory are kept, with their error, in the table.",
    SETUP,
    'tables = zs.run_study("scaling", RUNS, WORKERS)\n'
    'plans, sync = tables["plans"], tables["sync"]\n'
    'auto = plans[plans.plan == "auto"]\n'
    'auto.pivot_table(index="gpus", columns="workload", values="samples_per_s").round(0)',
    "## Throughput and scaling efficiency\n\n"
    "Samples/s against GPUs (log-2 axis), then samples/s per GPU relative to each model's "
    "smallest cluster that runs it (1.0 = linear).",
    "fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))\n"
    'zs.plot_scaling(auto, ax=a1, by="workload")\n'
    'zs.plot_scaling_efficiency(auto, ax=a2, by="workload")\n'
    "show(a1)",
    "Efficiency far above 1 at small sizes is real and comes from memory, not links: on 8 "
    "to 32 GPUs model A's (and on 8 to 16, model I's) tables do not fit in HBM, so the "
    "planner keeps most rows in host DRAM and the iteration is spent reading them over PCIe "
    "(`host_transfer`, 0.81 s of model A's 0.87 s on one node). Once the tables fit (64 GPUs "
    "for A, 32 for I), weak scaling is close to linear up to 1,024 GPUs: each GPU's lookups "
    "shrink a little as tables spread thinner while the all-to-all grows a little with the "
    "number of peers and switch tiers.\n\n"
    "## Where the time goes at each size (greedy plan)",
    'big = auto[auto.status == "ok"].sort_values(["workload", "gpus"])\n'
    'show(zs.plot_breakdown(big, label=["workload", "gpus"]))',
    "## Plans: greedy vs round-robin\n\n"
    "Same models, same clusters; the greedy planner chooses a sharding per table (TW, RW, "
    "TWRW, CW) and balances estimated cost. Model A's 4,096 identical tables leave it nothing "
    "to balance, so the two plans tie; model I's greedy plan pulls ahead at 1,024 GPUs; model "
    "F needs the greedy planner's UVM placement and at least 16 nodes of host DRAM (below "
    "that, a node's share of the 12 T parameters does not fit), and round-robin never fits "
    "it. Model F's super-linear jump between 256 and 512 GPUs is its HBM cache: once enough "
    "of the hot rows fit in aggregate HBM, host transfers collapse; from 512 to 1,024 GPUs its "
    "efficiency falls back as the all-to-all doubles. Failed points are listed below the plot.",
    'show(zs.plot_scaling(plans, by=["workload", "plan"]))\n'
    'failed = plans[plans.status != "ok"]\n'
    'failed[["workload", "nodes", "plan", "error"]]'
    ".assign(error=failed.error.str.slice(0, 90))",
    "## Sync modes at scale (model I)\n\n"
    "`allreduce` all-reduces dense gradients every iteration, overlapped with backward; "
    "`foreground-ma` trains locally and stops every 4 iterations to average parameters; "
    "`shadow-ma` (ShadowSync) averages in a background process that never blocks training. "
    "See `shadowsync.ipynb` for the sync gap.",
    'show(zs.plot_scaling(sync, by="sync"))\n'
    'sync.pivot_table(index="gpus", columns="sync", values="samples_per_s").round(0)',
    "Model I's dense parameters are small next to its embedding traffic and NVLink/RoCE "
    "all-reduce them quickly, so the three modes stay within about 2 % at every size: foreground "
    "rounds cost a little every 4th iteration, shadow rounds share links with the all-to-alls "
    "but block nothing and remove the per-iteration gradient all-reduce.",
]

WHATIF = [
    "# What-if hardware: which upgrade buys the most?\n\n"
    "One knob at a time on a 16-node ZionEX (128 A100s), each at 1x, 2x and 4x its ZionEX "
    "value: **NIC speed** (200 Gb/s per GPU), **NVLink bandwidth** (25 GB/s per link, 12 "
    "links per GPU), **HBM size** (40 GB) and **host-DRAM bandwidth** (153.6 GB/s per "
    "socket). Two models with opposite bottlenecks: Neo model A with its MLPs in TF32 (as its "
    "preset trains them) and Neo model F, whose ~12 T parameters live mostly in host DRAM "
    "behind an HBM cache.",
    SETUP,
    'tables = zs.run_study("whatif_hardware", RUNS, WORKERS)\n'
    "sp = zs.whatif_speedups(tables)\n"
    'sp.pivot_table(index=["workload", "knob"], columns="factor", values="speedup").round(3)',
    "## Speed-up per knob\n\nBars are iteration-time speed-ups over the 1x point.",
    'show(zs.plot_bars(sp[sp.factor > 1], x="knob", y="speedup", by=["workload", "factor"]))',
    "## Why: the baseline breakdowns",
    'base = pd.concat([g[g["topology.scale_out.nic_bw"] == "200Gbps"]\n'
    '                  for _, g in tables["nic_speed"].groupby("workload")])\n'
    'show(zs.plot_breakdown(base, label="workload"))',
    "* **Model A (TF32)** is bound by its embedding lookups (HBM bandwidth) and its pooled-"
    "embedding all-to-all, a third and a half of the critical path (23 and 37 of 72 ms). Yet "
    "2x or 4x the NIC speed buys only 2.8 %: each NIC sits behind a PCIe Gen4 switch that already "
    "carries 200 Gb/s, and the all-to-all's intra-node PXN hop shares that switch, so a faster "
    "NIC moves the bottleneck to PCIe. NVLink, HBM size and host-DRAM bandwidth buy nothing: "
    "NVLink carries only the intra-node hop and the all-reduce that backward hides, and the "
    "model fits in HBM. The NIC is not oversized either: going *down* to 100 Gb/s costs 61 % "
    "(`zionsim run --set scale_out.nic_bw=100Gbps`: 118 ms against 73 ms).\n"
    "* **Model F** is bound by host transfers: rows that miss the HBM cache come from host "
    "DRAM over PCIe. A larger HBM caches more of the Zipf-hot rows, so the miss traffic falls "
    "faster than linearly, but at 512 samples per GPU TorchRec's host thread (8.7 ms a step "
    "preparing batches and launching kernels, fitted on TorchRec's p4d runs) sets the pace: 80 GB "
    "buys nothing and only 160 GB (1.09x) gets the misses below the host's time. Host-DRAM "
    "bandwidth buys nothing because PCIe, not DRAM, is the narrow part of that path; NIC speed "
    "and NVLink buy nothing behind the host.\n"
    "* So the answer depends on the model: an HBM-resident, compute-bound model needs faster "
    "compute or HBM bandwidth (not in this list); a UVM-resident model needs HBM capacity.",
]

SHADOW = [
    "# ShadowSync: throughput and sync gap vs number of trainers\n\n"
    "ShadowSync (Zheng et al., 2020) moves the synchronisation of dense parameters into a "
    "background process per trainer, so training never stops for it; the price is the "
    "**sync gap**, the number of iterations a trainer runs between two of its syncs. This "
    "notebook reproduces its key comparison on ZionEX with MLPerf DLRM-DCNv2: throughput and "
    "sync gap against the number of trainers (one GPU each, 8 to 128) for\n\n"
    "* `allreduce` — synchronous gradient all-reduce every iteration (gap 1 by definition);\n"
    "* `foreground-ma|easgd` — training stops every 4 iterations for a round of model "
    "averaging (all-reduce of the parameters) or EASGD (push/pull with one central sync "
    "server);\n"
    "* `shadow-ma|easgd` — the same rounds in the background, paced by a sync thread (one per 4 "
    "trainer iterations here, `sync_every`).",
    SETUP,
    'tables = zs.run_study("shadowsync", RUNS, WORKERS)\n'
    'st = zs.sync_table(tables["trainers"])\n'
    'st.pivot_table(index="trainers", columns="sync", values="samples_per_s").round(0)',
    "## Throughput",
    'show(zs.plot_scaling(st, x="trainers", by="sync"))',
    "## Sync gap (iterations between a trainer's syncs)",
    'show(zs.plot_scaling(st, x="trainers", y="sync_gap_mean_iterations", by="sync"))\n'
    'st.pivot_table(index="trainers", columns="sync", values="sync_gap_mean_iterations")'
    ".round(2)",
    "## Foreground slowdown caused by sync traffic",
    'show(zs.plot_scaling(st, x="trainers", y="foreground_slowdown", by="sync"))\n'
    'st.pivot_table(index="trainers", columns="sync", values="foreground_slowdown").round(3)',
    "## What it shows\n\n"
    "* **Shadow model averaging** keeps (slightly beats) all-reduce's throughput at every "
    "size: its rounds are GPU all-reduces over NVLink and rail-aligned RoCE, paced one per 4 "
    "trainer iterations like the foreground's, and they overlap training instead of stopping "
    "it; the per-iteration gradient all-reduce is gone.\n"
    "* **Foreground model averaging** every 4 iterations loses well under 1 %; its gap is 4 "
    "by construction.\n"
    "* **EASGD with one central sync server** is where the trade-off appears. The server is a "
    "CPU service host of its own on the front-end network, as ShadowSync ran it: every "
    "trainer pushes and pulls all dense parameters through that one host's NIC. Foreground "
    "EASGD stalls everybody for a round that grows with the number of trainers (the "
    "slowdown column). Shadow EASGD never stalls training — its traffic crosses PCIe and the "
    "front end, not the training fabric — and pays in the sync gap instead: from 16 trainers "
    "on, one round outlasts the 8 measured iterations (the gap is censored at 9). More sync "
    "servers shorten it: `zionsim run --sync shadow-easgd --sync-servers N`.\n"
    "* Gaps are measured over 8 iterations, so long gaps are censored; raise `iterations` in "
    '`zs.study_sweeps("shadowsync")` for a longer window.',
]

SEEDS = [
    "# The seed papers' own studies\n\n"
    "zionsim exists for the studies of three papers: Zion (Acun et al., HPCA'21), Neo on ZionEX "
    "(Mudigere et al., ISCA'22) and ShadowSync (Zheng et al., 2020). This notebook runs each "
    "paper's comparison with a fixed plan where the plan is not what is compared, and shows "
    "whether the simulation comes out the way the paper reports. The same sweep regenerates "
    "`results/seeds/` (`zionsim studies seeds`).",
    SETUP,
    'tables = zs.run_study("seeds", RUNS, WORKERS)\n'
    "claims = zs.seeds_table(tables)\n"
    'claims[["claim", "workload", "gpus", "plan", "a", "b", "a_over_b", "expected", "holds"]]',
    "## A / B per claim (1 = no difference)",
    'claims["claim_setup"] = claims["claim"] + " (" + claims["workload"] + ")"\n'
    'claims["status"] = "ok"\n'
    'show(zs.plot_bars(claims, x="claim_setup", y="a_over_b"))',
    "## What it shows\n\n"
    "* **ShadowSync**: with the sync servers on service hosts of their own (as the paper ran "
    "them) the background rounds never stall training, so every shadow mode trains at least as "
    "fast as its foreground counterpart every 4 iterations; foreground EASGD pays a whole "
    "round through one server every 4 iterations.\n"
    "* **Parameter servers** are slower than tables in HBM on both platforms: every lookup's "
    "pooled rows and every gradient cross the hosts' front-end NICs. Zion's four NICs make the "
    "gap much smaller than Big Basin's one.\n"
    "* **FP16 communication** and **fused embeddings** are compared on the same plan; see the "
    "table for the current figures and `docs/seeds.md` for what each claim needs.\n"
    "* **More NIC bandwidth** never slows a run; at 2048 samples per GPU it buys a few percent "
    "once the host's work hides behind the GPU.",
]

VARIABILITY = [
    "# Variability: stragglers, noise and goodput\n\n"
    "Every other study gives one number per configuration. Real clusters have jittery kernels, "
    "slow ranks and failing parts. This notebook runs MLPerf DLRM on ZionEX at 128 and 1,024 "
    "GPUs with a fraction of the ranks straggling (drawn per seeded realisation) and a little "
    "kernel noise, and asks how the 95th-percentile step time grows; then how much of the wall "
    "time a 1,024-GPU job keeps for training once failures (Llama 3's component failure rates), "
    "checkpoints and restarts are paid for. The same sweeps regenerate `results/variability/` "
    "(`zionsim studies variability`); `docs/variability.md` describes the model.",
    SETUP,
    'tables = zs.run_study("variability", RUNS, WORKERS)\n'
    "st = zs.straggler_table(tables['stragglers'])\n"
    "st.round(4)",
    "## p95 step time against the straggler factor\n\n"
    "One line per GPU count and straggler fraction, relative to the same GPU count and fraction "
    "with factor 1 (no straggler): the p95 of every measured step of four realisations.",
    'show(zs.plot_scaling(st, x="straggler_factor", y="p95_slowdown",\n'
    '                     by=["gpus", "straggler_fraction"]))',
    "## Goodput against the checkpoint interval",
    "gt = zs.goodput_table(tables['goodput'])\n"
    "show(zs.plot_scaling(gt, x='checkpoint_interval_min', y='useful_fraction', by='recovery'))\n"
    "gt.round(4)",
    "## What it shows\n\n"
    "* **A synchronous step waits for its slowest rank.** One rank at twice its kernel time "
    "stretches every step by its extra compute: the all-to-alls and the all-reduce cannot start "
    "before it arrives, so the straggler's delay is paid once per step whatever the other ranks "
    "do, and `straggler_wait_s` shows the others idling at the collectives.\n"
    "* **The same delay weighs less at 1,024 GPUs.** Under weak scaling each rank's compute is "
    "the same at both sizes, so a 2x straggler adds about the same 6-8 ms; the 1,024-GPU step "
    "is longer (its all-to-alls cross more of the fabric), so its p95 grows ~13 % where the "
    "128-GPU step's grows ~43 %.\n"
    "* **More stragglers barely add to one.** With 1 % or 10 % of ranks slow the p95 is set by "
    "the slowest rank: ten times the stragglers add a few percent more, not ten times more.\n"
    "* **Checkpoint interval**: too short pays for writes, too long for lost work; the "
    "numerical optimum (about 14 minutes here: a 1.6 s checkpoint, and the Llama 3 failure "
    "rates give the 1,024-GPU job a failure every ~2.5 days) matches Daly's formula and "
    "Young's within 1 % (`tests/sim/test_goodput.py`) and keeps 99.3 % of the wall time. "
    "CPR-style partial recovery avoids rolling back the surviving nodes: 0.3 % overhead "
    "against 0.7 % (CPR reports 8.2-8.5 % falling to 0.53-0.68 % on its emulated failure "
    "pattern). The storage bandwidth and relaunch time are this study's assumptions.",
]

PLACEMENT = [
    "# Several jobs on one fabric: packed vs spread placement\n\n"
    "A shared cluster runs several training jobs at once, and their all-to-alls meet on the "
    "leaf uplinks and spines. This notebook places 2, 4 and 8 jobs of Neo's model A, 8 ZionEX "
    "nodes (64 A100s) each, on a 64-node fabric oversubscribed 2:1 (48-port leaves with 32 "
    "ports down, 4 nodes a leaf), either **packed** (each job on the fewest leaves) or "
    "**spread** (round-robin over the leaves), runs all jobs in one simulation (flows of "
    "different jobs share links max-min fairly) and each job alone on the same nodes, and "
    "reports each job's slowdown. The same sweep regenerates `results/placement/` "
    "(`zionsim studies placement`); `docs/jobs.md` explains the model.",
    SETUP,
    'tables = zs.run_study("placement", RUNS, WORKERS)\n'
    't = zs.placement_table(tables["placement"])\n'
    "t",
    "## Slowdown against running alone\n\n"
    "Mean over the jobs of (iteration time together / alone on the same nodes) - 1.",
    'show(zs.plot_scaling(t.assign(status="ok"), x="jobs", y="slowdown_mean", by="placement"))',
    "## One scenario in detail: 8 jobs spread\n\n"
    "Each job's figures, then its slowdown and the utilisation of the most used shared links "
    "split by job (the plot `zionsim jobs --out DIR` writes as `jobs.png`).",
    'sets = {"jobs.repeat": 8, "jobs.placement": "spread"}\n'
    "if FAST:\n"
    '    sets.update({"cluster.nodes": 16, "jobs.workload": "tiny", "jobs.count": 2})\n'
    'res = zs.simulate_jobs(zs.load_scenario("placement", sets))\n'
    "data = res.to_dict()\n"
    'cols = ["name", "nodes", "iteration_time_s", "alone_iteration_time_s", "slowdown",\n'
    '        "makespan_slowdown", "exposed_comm_s", "alone_exposed_comm_s"]\n'
    'pd.DataFrame(data["jobs"])[cols]',
    "show(zs.plot_jobs(data, res.links))",
    "## What it shows\n\n"
    "* **Packed** jobs own their leaves (two full leaves per 8-node job): their traffic leaves "
    "them on uplinks no other job uses, so packed jobs never slow each other, at any count. "
    "Alone, a packed job is slower than a spread one (4 nodes share a leaf's 16 uplinks).\n"
    "* **Spread** jobs are faster alone (one node per leaf has a leaf's uplinks nearly to "
    "itself) and stay so while the leaves hold at most 2 nodes (16 NICs on 16 uplinks: up to 4 "
    "jobs). From 6 jobs on, 3 and then 4 nodes of different jobs share each 2:1 oversubscribed "
    "leaf: every job slows by about a quarter, then by three fifths, and 8 spread jobs train a "
    "third fewer samples per second in all than 8 packed ones (2.26 M against 3.39 M).\n"
    "* The slowdown is bounded by the max-min share: jobs of equal weight each keep at least "
    "their fair share of every shared link (`tests/sim/test_jobs.py`).",
]

NOTEBOOKS = {
    "seeds": SEEDS,
    "zion_vs_zionex": ZION,
    "scaling": SCALING,
    "whatif_hardware": WHATIF,
    "shadowsync": SHADOW,
    "variability": VARIABILITY,
    "placement": PLACEMENT,
}


def build(name: str, cells: list[str]) -> nbformat.NotebookNode:
    """A notebook from cells (see :func:`_is_markdown`)."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for src in cells:
        nb.cells.append(new_markdown_cell(src) if _is_markdown(src) else new_code_cell(src))
    return nb


def _is_markdown(src: str) -> bool:
    """Markdown cells start with a heading, a bullet or a capital letter; code cells do not."""
    return src[0] in "#*" or src[0].isupper()


def main() -> None:
    execute = "--execute" in sys.argv
    only = [a for a in sys.argv[1:] if not a.startswith("--")]  # notebook names, default all
    for name, cells in NOTEBOOKS.items():
        if only and name not in only:
            continue
        nb = build(name, cells)
        path = HERE / f"{name}.ipynb"
        if execute:
            from nbclient import NotebookClient

            NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, path)
        print(path)


if __name__ == "__main__":
    main()
