"""Measurements: validation against published figures (``validate``), fits of model parameters
to nccl-tests logs and kernel times (``fitting``, ``nccl_logs``, ``nccl_fit``, ``kernel_times``,
``calibration``), and PyTorch profiler (Kineto) trace import (``kineto``).

Layer 6 (beside ``studies``): may import every lower layer, ``io`` included; not ``studies``.
"""
