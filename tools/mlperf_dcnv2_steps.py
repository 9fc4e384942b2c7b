"""Step times of MLPerf Training DLRM-DCNv2 submissions, read from their result logs.

Usage: python tools/mlperf_dcnv2_steps.py ROUND_DIR [ROUND_DIR ...] > steps.csv

ROUND_DIR is a checkout (or an extract) of one mlcommons/training_results_vX.Y repository,
named after its round (``v4.1``...). For every ``<submitter>/results/<system>/dlrm_dcnv2``
folder it reads the ``result_*.txt`` MLLOG files and the system's ``systems/<system>.json``:

    step time = global_batch_size / train-only throughput,
    train-only throughput = samples trained / (run_stop - run_start - the eval intervals),
    samples trained = epoch_num of the last eval_stop x 4,195,197,692 (Criteo 1TB's train set),

the median over the runs that stopped with status "success". This is the derivation of the
``mlperf_dcnv2`` source in validation/cases.yaml; the rows it printed are kept, each with its
URL, in zionsim/data/reference/mlperf_dcnv2_steps.csv.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

TRAIN_SAMPLES = 4_195_197_692  # Criteo 1TB days 0-22 (the MLPerf DLRM-DCNv2 train set)
_MLLOG = re.compile(r":::MLLOG (\{.*\})")


def run_step_ms(path: Path) -> tuple[float, int] | None:
    """(step ms, global batch) of one result log, or None if it did not succeed."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        m = _MLLOG.search(line)
        if m:
            try:
                events.append(json.loads(m.group(1)))
            except json.JSONDecodeError:
                continue
    keyed: dict[str, list[dict]] = {}
    for e in events:
        keyed.setdefault(e.get("key", ""), []).append(e)
    stop = keyed.get("run_stop", [])
    if not stop or stop[-1].get("metadata", {}).get("status") != "success":
        return None
    batch = int(keyed["global_batch_size"][-1]["value"])
    t0 = keyed["run_start"][-1]["time_ms"]
    t1 = stop[-1]["time_ms"]
    starts = [e["time_ms"] for e in keyed.get("eval_start", [])]
    stops = keyed.get("eval_stop", [])
    eval_ms = sum(b["time_ms"] - a for a, b in zip(starts, stops, strict=False))
    epochs = stops[-1]["metadata"]["epoch_num"]
    samples = epochs * TRAIN_SAMPLES
    return batch / (samples / (t1 - t0 - eval_ms)), batch


def main(roots: list[str]) -> int:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(
        [
            "round",
            "submitter",
            "system",
            "nodes",
            "gpus",
            "accelerator",
            "interconnect",
            "global_batch",
            "step_ms_median",
            "step_ms_min",
            "step_ms_max",
            "runs",
            "url",
        ]
    )
    for root in map(Path, roots):
        for folder in sorted(root.glob("*/results/*/dlrm_dcnv2")):
            submitter, system = folder.parts[-4], folder.parts[-2]
            runs = [r for r in map(run_step_ms, sorted(folder.glob("result_*.txt"))) if r]
            if not runs:
                continue
            steps = [s for s, _ in runs]
            sysfile = root / submitter / "systems" / f"{system}.json"
            info = json.loads(sysfile.read_text()) if sysfile.exists() else {}
            nodes = int(info.get("number_of_nodes", 0) or 0)
            per_node = int(info.get("accelerators_per_node", 0) or 0)
            out.writerow(
                [
                    root.name,
                    submitter,
                    system,
                    nodes,
                    nodes * per_node,
                    info.get("accelerator_model_name", ""),
                    " ".join(
                        (
                            str(info.get("accelerator_interconnect", ""))
                            + " | "
                            + str(info.get("host_networking", ""))
                            + " "
                            + str(info.get("host_network_card_count", ""))
                        ).split()
                    ),
                    runs[0][1],
                    f"{statistics.median(steps):.4f}",
                    f"{min(steps):.4f}",
                    f"{max(steps):.4f}",
                    len(steps),
                    f"https://github.com/mlcommons/training_results_{root.name}/tree/main/"
                    f"{submitter}/results/{system}/dlrm_dcnv2",
                ]
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
