"""A spec as a state diagram: Mermaid, DOT, SVG, PNG, a Markdown review page.

The data flows one way: the model (``_model``), built from a spec (``_build``) and the
logs (``_traffic``), then one renderer per format (``renderers``), then the files
(``_files``).

Exports: the format-free model (``Diagram``, ``DiagramNode``, ``DiagramEdge``,
``DiagramGroup``, ``Traffic``, ...), its builders (``build_diagram``, ``option_reach``,
``read_traffic``), the renderers (``to_mermaid``, ``to_dot``, ``to_svg``, ``to_png``,
``to_markdown``), the files (``render``, ``write_preset_diagrams``), ``FORMATS`` and the
bounds on what is drawn. Only ``FORMATS`` and ``Format`` load with the package; the rest
on first use.

May import: ``errors``, ``spec``, ``log``, ``replay`` (the logs' traffic), and
``modefsm._lazy``.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports
from modefsm.diagram._formats import FORMATS, Format

if TYPE_CHECKING:
    from modefsm.diagram._build import (
        DRAWN_MAX,
        GROUP_STEPS_MAX,
        build_diagram,
        option_reach,
        rule_lines,
    )
    from modefsm.diagram._files import render, write_preset_diagrams
    from modefsm.diagram._model import (
        Diagram,
        DiagramEdge,
        DiagramGroup,
        DiagramNode,
        EdgeKind,
        LegendEntry,
        LegendKind,
        NodeKind,
        OptionReach,
        RuleLine,
        ToolCount,
        Traffic,
        TransitionKey,
    )
    from modefsm.diagram._traffic import read_traffic
    from modefsm.diagram.renderers import (
        RENDER_TIMEOUT,
        RENDERED_ARROWS_MAX,
        RENDERED_NODES_MAX,
        to_dot,
        to_markdown,
        to_mermaid,
        to_png,
        to_svg,
    )

_MODULES = {
    "modefsm.diagram._build": (
        "DRAWN_MAX",
        "GROUP_STEPS_MAX",
        "build_diagram",
        "option_reach",
        "rule_lines",
    ),
    "modefsm.diagram._files": ("render", "write_preset_diagrams"),
    "modefsm.diagram._model": (
        "Diagram",
        "DiagramEdge",
        "DiagramGroup",
        "DiagramNode",
        "EdgeKind",
        "LegendEntry",
        "LegendKind",
        "NodeKind",
        "OptionReach",
        "RuleLine",
        "ToolCount",
        "Traffic",
        "TransitionKey",
    ),
    "modefsm.diagram._traffic": ("read_traffic",),
    "modefsm.diagram.renderers": (
        "RENDERED_ARROWS_MAX",
        "RENDERED_NODES_MAX",
        "RENDER_TIMEOUT",
        "to_dot",
        "to_markdown",
        "to_mermaid",
        "to_png",
        "to_svg",
    ),
}

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
    "RuleLine",
    "ToolCount",
    "Traffic",
    "TransitionKey",
    "build_diagram",
    "option_reach",
    "read_traffic",
    "render",
    "rule_lines",
    "to_dot",
    "to_markdown",
    "to_mermaid",
    "to_png",
    "to_svg",
    "write_preset_diagrams",
]

__getattr__ = lazy_exports(
    __name__, {name: module for module, names in _MODULES.items() for name in names}
)
"""Import each name from its module on first use (``FORMATS`` is at hand)."""
