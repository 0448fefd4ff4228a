"""modefsm.cli: the ``modefsm`` command.

Where it sits among the stages: the documentation's Architecture page.
"""

from modefsm.cli._main import main

__all__ = ["main"]
