"""``python -m zionsim``: the command line."""

import sys

from zionsim.cli.main import main

sys.exit(main())
