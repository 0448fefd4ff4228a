"""The output formats of a diagram (a leaf: the command line reads it without drawing)."""

from typing import Literal

__all__ = ["FORMATS", "Format"]

Format = Literal["mermaid", "dot", "svg", "png", "md"]
"""An output format of :func:`~modefsm.diagram.render`."""

FORMATS: tuple[Format, ...] = ("mermaid", "dot", "svg", "png", "md")
"""Every output format, in the order the command line lists them."""
