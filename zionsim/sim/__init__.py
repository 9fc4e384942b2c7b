"""Simulation of a training run: the simpy engine (``engine``), the analysis of its records into
iteration time, critical path and tables (``results``), and one run end to end (``run``).

Layer 4: may import ``base``, ``hardware``, ``network`` and ``dlrm``.  Pure: no files, no printing.
"""
