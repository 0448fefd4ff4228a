"""modefsm.cli: see the README's Architecture section."""

from modefsm.cli._main import main

__all__ = ["main"]
