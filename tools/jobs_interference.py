"""Concurrent NCCL communicators on shared links: zionsim's max-min sharing against a published
measurement (docs/jobs.md, "Validation").

    python tools/jobs_interference.py

Measurement (NVIDIA/nccl issue #204, "Concurrent NCCL calls and bidirectional PCI-e
bandwidth", 2019): two V100s on one PCIe switch, P2P enabled; ``broadcast_perf`` between them
alone reaches 12+ GB/s (p2pBandwidthLatencyTest: ~13 GB/s one way, ~25 GB/s both ways); two
``broadcast_perf`` runs started together, one with root 0 and one with root 1 (opposite
directions), each got half, their total equal to one broadcast alone (12 GB/s).

What runs here: the same two GPUs on one PCIe switch (ZionEX's host with 2 GPUs, no NVLink),
the PCIe links' achieved rate set to the 12 GB/s measured alone (the one number taken from the
measurement: the alone case is calibrated, the concurrent cases are predictions), a 512 MB
transfer per communicator (broadcast between two ranks is one transfer root → peer), alone, two
in opposite directions at once, and two in the same direction at once, on one flow network with
each communicator a job of weight 1 (``sim/jobs.py``).
"""

from __future__ import annotations

import numpy as np

#: NVIDIA/nccl#204: broadcast between two V100s on one PCIe switch, GB/s per communicator
MEASURED_ALONE_GBPS = 12.0
MEASURED_OPPOSITE_GBPS = 6.0  # "their individual BW got halved", total = 12 GB/s
SIZE = 512 * 2**20


def per_communicator_gbps(directions: list[tuple[int, int]]) -> list[float]:
    """Bandwidth (GB/s) each concurrent transfer of ``SIZE`` bytes gets, GPU a → GPU b each."""
    from zionsim.hardware.cluster import Cluster
    from zionsim.network.flows import FlowNetwork
    from zionsim.network.simulate import CountingEnvironment
    from zionsim.sim.jobs import JobNetwork

    cluster = Cluster.load(
        "zionex", nodes=1, gpus_per_node=2,
        overrides={"scale_up": {"kind": "none"}, "pcie.switches": 1,
                   "pcie.bw": f"{MEASURED_ALONE_GBPS} GB/s", "links.pcie.efficiency": 1.0},
    )  # fmt: skip
    r, g = cluster.router, cluster.gpus
    env = CountingEnvironment()
    net = FlowNetwork(env, r.capacity_Bps, router=r)
    ends = []
    for i, (a, b) in enumerate(directions):
        routes = r.routes(np.array([g[a]]), np.array([g[b]]))
        door = JobNetwork(net, i)
        ends.append(door.transfer(routes, np.array([float(SIZE)]), np.zeros(1)))
    env.run()
    return [SIZE / ev.value / 1e9 for ev in ends]


def main() -> None:
    alone = per_communicator_gbps([(0, 1)])[0]
    opposite = per_communicator_gbps([(0, 1), (1, 0)])
    same = per_communicator_gbps([(0, 1), (0, 1)])
    err = opposite[0] / MEASURED_OPPOSITE_GBPS - 1
    print(f"alone (calibrated): model {alone:.2f} GB/s, measured {MEASURED_ALONE_GBPS:.1f} GB/s")
    print(
        f"two, opposite directions: model {opposite[0]:.2f} + {opposite[1]:.2f} GB/s, "
        f"measured {MEASURED_OPPOSITE_GBPS:.1f} + {MEASURED_OPPOSITE_GBPS:.1f} GB/s, "
        f"error {100 * err:+.0f} %"
    )
    print(f"two, same direction (no measurement): model {same[0]:.2f} + {same[1]:.2f} GB/s")


if __name__ == "__main__":
    main()
