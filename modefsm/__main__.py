"""``python -m modefsm``: the command line."""

import sys

from modefsm.cli._main import main

sys.exit(main())
