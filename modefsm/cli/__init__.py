"""modefsm.cli: see the documentation's Architecture page (docs/architecture.md)."""

from modefsm.cli._main import main

__all__ = ["main"]
