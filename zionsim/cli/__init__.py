"""Command line (layer 7, the top): ``main`` holds ``zionsim run|trace|plan|topology|collective``
and the dispatcher, ``studies`` ``sweep|compare|plot|studies``, ``measure``
``validate|calibrate``, ``common`` the options they share.  Parses, calls, prints and writes.
"""

from zionsim.cli.main import main

__all__ = ["main"]
