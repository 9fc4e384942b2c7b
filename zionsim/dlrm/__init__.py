"""The DLRM workload and what is derived from it: workload specs (``workload``), sharding plans
and memory (``plan``, ``sharding``, ``cache``), the planner (``planner``), dense sync modes
(``sync``), software-stack profiles (``stack``), and the per-rank trace of one iteration
(``trace``; its file schema ``trace_file``; ``retarget``).

Layer 3: may import ``base``, ``hardware`` and ``network``.
"""
