"""``python -m gputok``: the same command line as ``gputok``."""

import sys

from .cli import main

sys.exit(main())
