"""Hardware: topology specs (``topology``), GPU presets (``gpus``), the device/link graph
(``graph``), routes (``routing``), the built :class:`~zionsim.hardware.cluster.Cluster`, per-GPU
kernel cost models (``compute``) and summary tables of a cluster (``summary``).

Layer 1: may import ``base`` only.
"""
