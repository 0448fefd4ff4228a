"""modefsm.diagram: see the README's Architecture section."""

from typing import TYPE_CHECKING, Any

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
        Traffic,
        TransitionKey,
        build_diagram,
        read_traffic,
        render,
        to_dot,
        to_markdown,
        to_mermaid,
        to_png,
        to_svg,
        write_preset_diagrams,
    )


def __getattr__(name: str) -> Any:
    """Import the diagram module on first use of one of its names.

    The command line needs only :data:`FORMATS` until it draws.
    """
    if name not in __all__:
        msg = f"module 'modefsm.diagram' has no attribute {name!r}"
        raise AttributeError(msg)
    from modefsm.diagram import _diagram  # noqa: PLC0415 - the point: on first use

    value = getattr(_diagram, name)
    globals()[name] = value
    return value


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
    "Traffic",
    "TransitionKey",
    "build_diagram",
    "read_traffic",
    "render",
    "to_dot",
    "to_markdown",
    "to_mermaid",
    "to_png",
    "to_svg",
    "write_preset_diagrams",
]
