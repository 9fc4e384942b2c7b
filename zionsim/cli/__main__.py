"""``python -m zionsim.cli``: the command line."""

import sys

from zionsim.cli.main import main

sys.exit(main())
