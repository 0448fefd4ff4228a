"""The renderers of a :class:`~modefsm.diagram.Diagram`: one small module per format.

Each reads the format-free model only (``modefsm.diagram._model``), never the spec's
rules: :func:`to_mermaid`, :func:`to_dot`, :func:`to_svg` and :func:`to_png` (Graphviz),
:func:`to_markdown` (the review page, which embeds the Mermaid text).

Exports: those five functions and the bounds of a rendering (``RENDERED_NODES_MAX``,
``RENDERED_ARROWS_MAX``, ``RENDER_TIMEOUT``).

May import: ``errors``, ``spec`` (the review page's table), ``diagram`` (its model).
"""

from modefsm.diagram.renderers._dot import to_dot
from modefsm.diagram.renderers._graphviz import (
    RENDER_TIMEOUT,
    RENDERED_ARROWS_MAX,
    RENDERED_NODES_MAX,
    to_png,
    to_svg,
)
from modefsm.diagram.renderers._markdown import to_markdown
from modefsm.diagram.renderers._mermaid import to_mermaid

__all__ = [
    "RENDERED_ARROWS_MAX",
    "RENDERED_NODES_MAX",
    "RENDER_TIMEOUT",
    "to_dot",
    "to_markdown",
    "to_mermaid",
    "to_png",
    "to_svg",
]
