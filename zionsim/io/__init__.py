"""Files and figures: terminal formatting and atomic result files (``files``), and plots of a
topology, a run, a sweep or the validation table (``plots``, ``plots_study``,
``plots_validation``).  With ``cli``, the only modules that touch the disk or draw.

Layer 5: may import every lower layer (``base`` … ``sim``).
"""
