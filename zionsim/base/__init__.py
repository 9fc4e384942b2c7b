"""Foundation: user-facing errors (``errors``), the one unit parser (``units``) and YAML loading
with ``--set`` overrides (``config``).

Layer 0: imports nothing else from zionsim; every other layer may import it.
"""
