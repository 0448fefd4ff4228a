"""modefsm.diagram: see the README's Architecture section."""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.diagram._formats import FORMATS, Format

if TYPE_CHECKING:
    from modefsm.diagram._diagram import (
        DRAWN_MAX,
        GROUP_STEPS_MAX,
        RENDER_TIMEOUT,
        RENDERED_ARROWS_MAX,
        RENDERED_NODES_MAX,
        Diagram,
        DiagramEdge,
        DiagramGroup,
        DiagramNode,
        EdgeKind,
        LegendEntry,
        LegendKind,
        NodeKind,
        OptionReach,
        Traffic,
        TransitionKey,
        build_diagram,
        option_reach,
        read_traffic,
        render,
        to_dot,
        to_markdown,
        to_mermaid,
        to_png,
        to_svg,
        write_preset_diagrams,
    )

__all__ = [
    "DRAWN_MAX",
    "FORMATS",
    "GROUP_STEPS_MAX",
    "RENDERED_ARROWS_MAX",
    "RENDERED_NODES_MAX",
    "RENDER_TIMEOUT",
    "Diagram",
    "DiagramEdge",
    "DiagramGroup",
    "DiagramNode",
    "EdgeKind",
    "Format",
    "LegendEntry",
    "LegendKind",
    "NodeKind",
    "OptionReach",
    "Traffic",
    "TransitionKey",
    "build_diagram",
    "option_reach",
    "read_traffic",
    "render",
    "to_dot",
    "to_markdown",
    "to_mermaid",
    "to_png",
    "to_svg",
    "write_preset_diagrams",
]

__getattr__ = lazy_exports(
    __name__, dict.fromkeys(set(__all__) - globals().keys(), "modefsm.diagram._diagram")
)
"""Import the drawing module's names on first use of one of them (``FORMATS`` is at hand)."""
