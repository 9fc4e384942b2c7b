"""Network and collectives: flows on routed paths with max-min sharing (``flows``), collective
algorithms as phases of flows (``collectives``), NCCL's protocols, latencies and tuner
(``nccl``), and one collective simulated on its own (``simulate``).

Layer 2: may import ``base`` and ``hardware``.
"""
