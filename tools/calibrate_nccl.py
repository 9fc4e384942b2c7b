"""Refit the NCCL protocol parameters in zionsim/data/nccl_model.yaml from the reference curve.

    python tools/calibrate_nccl.py          # prints the fit, rewrites the `fitted:` block

Reference: zionsim/data/reference/nccl_allreduce_8xa100.csv (8x A100-SXM4-80GB, NVSwitch,
NCCL 2.18; Azure AI-benchmarking-guide ND_A100_v4). The cluster is `dgx_a100` with one node:
8 A100s on NVSwitch gen 2, NVLink3 at 25 GB/s x 12 links per GPU, 80 % achieved (nccl-tests
issue 149), which is the measured machine. Only sizes of 1 KiB and up are used.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

REFERENCE_TOPOLOGY = "dgx_a100"  # one node: the measured machine
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zionsim import nccl  # noqa: E402
from zionsim.hardware.cluster import Cluster  # noqa: E402
from zionsim.measure.fitting import fit_protocols  # noqa: E402


def main() -> None:
    ref = pd.read_csv(ROOT / "zionsim/data/reference/nccl_allreduce_8xa100.csv")
    cluster = Cluster.load(REFERENCE_TOPOLOGY, nodes=1)
    fit = fit_protocols(
        cluster, "all_reduce", ref.size_bytes, ref.busbw_GBps, nccl.load_model(), algorithm="ring"
    )
    for s, m, p, e, proto in zip(
        fit.sizes, fit.measured_GBps, fit.simulated_GBps, fit.error_pct, fit.protocols, strict=True
    ):
        print(f"{int(s):>12d}  measured {m:8.2f}  model {p:8.2f}  {e:+6.1f} %  {proto}")
    over = {k: round(v * 1e6, 2) for k, v in fit.model.overhead_s.items()}
    eff = {k: round(v, 4) for k, v in fit.model.efficiency.items()}
    block = (
        "fitted:\n"
        f"  overhead_us: {{LL: {over['LL']}, LL128: {over['LL128']}, Simple: {over['Simple']}}}\n"
        f"  efficiency: {{LL: {eff['LL']}, LL128: {eff['LL128']}, Simple: {eff['Simple']}}}\n"
    )
    path = ROOT / "zionsim/data/nccl_model.yaml"
    text = re.sub(r"fitted:\n(  .*\n)+", block, path.read_text())
    path.write_text(text)
    print(block)


if __name__ == "__main__":
    main()
