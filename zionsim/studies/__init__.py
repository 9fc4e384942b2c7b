"""What-if studies: sweeps over run options run in parallel with per-point files (``sweep``), A-vs-B
attribution of two runs (``compare``) and the standard studies committed in ``results/``
(``standard``).

Layer 6: may import every lower layer, ``io`` included.
"""
