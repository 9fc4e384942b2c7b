"""Command line (layer 7, the top): ``main`` holds ``zionsim run|trace|plan|topology|collective``
and the dispatcher, ``studies`` ``sweep|compare|plot|studies``, ``measure``
``validate|calibrate``, ``common`` the options they share.  Parses, calls, prints and writes.
"""

import os

# A command-line run is one simulation per process and uses no BLAS-sized linear algebra, but
# OpenBLAS starts a thread per core when numpy loads (a third of a small command's start-up on
# 2 cores); one thread unless the user asked for more.  Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from zionsim.cli.main import main  # noqa: E402 - after the environment above

__all__ = ["main"]
