"""``python -m modefsm``: the command line."""

import sys

from modefsm.cli import main

sys.exit(main())
