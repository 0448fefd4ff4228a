"""The Graphviz DOT renderer (text only; :mod:`._graphviz` runs ``dot`` on it)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from modefsm.diagram._model import Diagram, DiagramEdge, DiagramNode, EdgeKind, LegendKind, NodeKind
from modefsm.diagram.renderers._text import (
    _TIMES,
    _Colour,
    _edge_text,
    _tool_text,
    _visible,
    _wrapped,
)
from modefsm.spec import Decision

__all__ = ["to_dot"]


_FONT = "Helvetica,Arial,sans-serif"
_MONO = "Courier New,Courier,monospace"
_LEFT = '<BR ALIGN="LEFT"/>'


def _html(text: str, br: str = "<BR/>") -> str:
    r"""Escape *text* for a Graphviz HTML-like label; line breaks become *br*.

    Graphviz expands ``\N`` and friends in HTML-like labels too, so backslashes are doubled.

    >>> print(_html('a<b> & "c"\n\\N'))
    a&lt;b&gt; &amp; &quot;c&quot;<BR/>\\N
    """
    return br.join(
        html.escape(line, quote=True).replace("\\", "\\\\") for line in _visible(text).split("\n")
    )


def _quoted(text: str) -> str:
    r"""Quote *text* as a DOT escString, so that ``\N`` and friends stay literal.

    >>> print(_quoted('say "\\N"'))
    "say \"\\N\""
    """
    escaped = _visible(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _attrs(attrs: dict[str, str]) -> str:
    return "[" + ", ".join(f"{key}={value}" for key, value in attrs.items()) + "]"


def to_dot(diagram: Diagram, *, dpi: int | None = None) -> str:
    """Render *diagram* as Graphviz DOT text (no binary needed).

    Every node and cluster carries an SVG ``class`` (``mode``, ``choice``, ``previous``,
    ``start``; ``client_group``) and every edge its :data:`EdgeKind`, so the rendered
    picture can be styled or checked. A permission request is a diamond holding the
    switch's title. An arrow from or to a whole group is clipped at the
    group's box (``ltail``/``lhead``).

    Args:
        diagram: the picture.
        dpi: the resolution of bitmap output (Graphviz ``dpi``); ``None`` leaves it out.

    Returns:
        The text, ending with a newline.
    """
    graph = {
        "compound": "true",
        "rankdir": "TB",
        "newrank": "true",
        "nodesep": "0.35",
        "ranksep": "0.5",
        "fontname": f'"{_FONT}"',
        "labelloc": "b",
        "labeljust": "l",
        "label": f"<{_dot_legend(diagram)}>",
    }
    if dpi is not None:
        graph["dpi"] = str(dpi)
    lines = [
        "digraph modefsm {",
        f"    graph {_attrs(graph)};",
        (
            f'    node [fontname="{_FONT}", fontsize=11, color="{_Colour.MUTED}", '
            f'fontcolor="{_Colour.INK}"];'
        ),
        f'    edge [fontname="{_FONT}", fontsize=9, arrowsize=0.7];',
    ]
    members = {m for g in diagram.groups for m in g.members}
    group_of = {m: g.id for g in diagram.groups for m in g.members}
    in_a_row = {g.id for g in diagram.groups} - {
        group_of[edge.source]
        for edge in diagram.edges
        if edge.kind != "restore" and group_of.get(edge.source, "") == group_of.get(edge.dest)
    }
    for group in diagram.groups:
        cluster = {
            "class": '"client_group"',
            "label": f"<{_html(group.label, _LEFT)}{_LEFT}>",
            "style": '"rounded,filled"',
            "fillcolor": f'"{_Colour.GROUP_FILL}"',
            "color": f'"{_Colour.GROUP_LINE}"',
            "fontsize": "10",
            "fontcolor": f'"{_Colour.MUTED}"',
            "labelloc": "t",
            "labeljust": "l",
        }
        lines += [f"    subgraph cluster_{group.id} {{", f"        graph {_attrs(cluster)};"]
        lines += [f"        {_dot_node(diagram.node(m))}" for m in group.members]
        if group.id in in_a_row:  # no arrow inside: one row
            lines.append(f"        {{rank=same; {'; '.join(group.members)}}}")
        lines.append("    }")
    lines += [f"    {_dot_node(n)}" for n in diagram.nodes if n.id not in members]
    groups = {g.id: g for g in diagram.groups}
    for edge in diagram.edges:
        attrs = _dot_edge_attrs(edge)
        source, dest = edge.source, edge.dest
        if source in groups:
            attrs["ltail"] = f"cluster_{source}"
            source = _middle(groups[source].members)
        if dest in groups:
            attrs["lhead"] = f"cluster_{dest}"
            dest = _middle(groups[dest].members)
        lines.append(f"    {source} -> {dest} {_attrs(attrs)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _middle(members: Sequence[str]) -> str:
    return members[len(members) // 2]


def _dot_node(node: DiagramNode) -> str:
    attrs = _DOT_PSEUDO_NODES.get(node.kind) or _dot_mode_attrs(node)
    if node.kind in {"previous", "choice"}:
        attrs = {**attrs, "label": f"<{_html(_wrapped(node.label))}>"}
    if node.tooltip is not None:
        attrs = {**attrs, "tooltip": _quoted(node.tooltip)}
    return f"{node.id} {_attrs(attrs)};"


_DOT_PSEUDO_NODES: dict[NodeKind, dict[str, str]] = {
    "start": {
        "class": '"start"',
        "shape": "circle",
        "style": "filled",
        "fillcolor": f'"{_Colour.INK}"',
        "color": f'"{_Colour.INK}"',
        "width": "0.16",
        "fixedsize": "true",
        "label": '""',
    },
    "choice": {
        "class": '"choice"',
        "shape": "diamond",
        "style": "filled",
        "fillcolor": f'"{_Colour.AGENT_FILL}"',
        "color": f'"{_Colour.AGENT}"',
        "fontsize": "10",
        "margin": '"0.02,0.02"',
    },
    "previous": {
        "class": '"previous"',
        "shape": "box",
        "style": '"rounded,dashed,filled"',
        "fillcolor": f'"{_Colour.AGENT_FILL}"',
        "color": f'"{_Colour.AGENT}"',
        "fontcolor": f'"{_Colour.AGENT}"',
        "fontsize": "10",
    },
}


def _dot_mode_attrs(node: DiagramNode) -> dict[str, str]:
    small = '<BR/><FONT POINT-SIZE="9" COLOR="{}">{}</FONT>'
    label = f"<B>{_html(node.label)}</B>"
    label += f'<BR/><FONT FACE="{_MONO}" POINT-SIZE="9" COLOR="{_Colour.MUTED}">'
    label += f"{_html(node.mode_id or '')}</FONT>"
    fill, color, width = _Colour.PAPER, _Colour.MUTED, "2" if node.initial else "1"
    classes = ["mode"] + ["initial"] * node.initial
    if node.restore_to is not None:
        label += small.format(_Colour.RESTORE, "not restored on load")
        fill, color = _Colour.RESTORE_FILL, _Colour.RESTORE
        classes.append("unrestorable")
    for line in node.rules:
        label += (
            f'<BR/><FONT POINT-SIZE="9"><FONT COLOR="{_DECISION_COLOR[line.decision]}">'
            f"<B>{line.decision}</B></FONT>: {_html(', '.join(line.targets))}</FONT>"
        )
    if node.entered is not None:
        label += small.format(_Colour.MUTED, f"entered {_TIMES}{node.entered}")
    for count in node.tools:
        text = _html(_tool_text(count))
        label += f'<BR/><FONT POINT-SIZE="9" COLOR="{_Colour.INK}"><I>{text}</I></FONT>'
    if node.current:
        fill, color, width = _Colour.PATH_FILL, _Colour.PATH, "3"
        classes.append("current")
    return {
        "class": f'"{" ".join(classes)}"',
        "shape": "box",
        "style": '"rounded,filled"',
        "fillcolor": f'"{fill}"',
        "color": f'"{color}"',
        "penwidth": width,
        "margin": '"0.14,0.08"',
        "label": f"<{label}>",
    }


_DECISION_COLOR: dict[Decision, str] = {
    "allow": _Colour.ALLOW,
    "ask": _Colour.ASK,
    "deny": _Colour.DENY,
}


_DOT_EDGE_COLOR: dict[EdgeKind, str] = {
    "start": _Colour.INK,
    "client_change": _Colour.INK,
    "switch": _Colour.AGENT,
    "option": _Colour.AGENT,
    "reject": _Colour.REJECT,
    "restore": _Colour.RESTORE,
}


def _dot_edge_attrs(edge: DiagramEdge) -> dict[str, str]:
    color, width = _DOT_EDGE_COLOR[edge.kind], "1.2"
    if edge.faded:
        color = _Colour.FADED
    if edge.on_path:
        color, width = _Colour.PATH, "2.5"
    text = _edge_text(edge)
    if edge.kind == "start":  # the start dot needs no words, only a count
        text = text.removeprefix(edge.label).removeprefix("\n")
    label = _html(text, _LEFT) + _LEFT if text else ""
    attrs = {
        "class": f'"{edge.kind}"',
        "label": f"<{label}>",
        "color": f'"{color}"',
        "fontcolor": f'"{color}"',
        "penwidth": width,
    }
    if edge.line != "solid":
        attrs["style"] = edge.line
    return attrs


def _dot_legend(diagram: Diagram) -> str:
    """The key: the spec's name, the caption, then two entries a row (a sample and its text)."""
    cells = [
        f'<TD WIDTH="34">{_DOT_LEGEND_SAMPLE[entry.kind]}</TD>'
        f'<TD ALIGN="LEFT">{_html(entry.text)}</TD><TD WIDTH="8"></TD>'
        for entry in diagram.legend
    ]
    cells += ['<TD COLSPAN="3"></TD>'] * (len(cells) % 2)
    rows = "".join(f"<TR>{a}{b}</TR>" for a, b in zip(cells[::2], cells[1::2], strict=True))
    if diagram.caption:
        rows = f'<TR><TD COLSPAN="6" ALIGN="LEFT"><I>{_html(diagram.caption)}</I></TD></TR>{rows}'
    return (
        f'<FONT POINT-SIZE="9"><TABLE BORDER="1" STYLE="rounded" COLOR="{_Colour.GROUP_LINE}" '
        'CELLBORDER="0" CELLSPACING="0" CELLPADDING="2">'
        f'<TR><TD COLSPAN="6" ALIGN="LEFT"><B>{_html(diagram.spec_name)}</B></TD></TR>'
        f"{rows}</TABLE></FONT>"
    )


def _line_sample(color: str, style: str = "solid") -> str:
    """A short horizontal line, vertically centred: a table whose first row has a bottom border."""
    dash = "" if style == "solid" else f' STYLE="{style}"'
    return (
        '<TABLE BORDER="0" CELLPADDING="0" CELLSPACING="0">'
        f'<TR><TD WIDTH="30" HEIGHT="5" SIDES="B" BORDER="2"{dash} COLOR="{color}"></TD></TR>'
        '<TR><TD HEIGHT="5"></TD></TR></TABLE>'
    )


def _box_sample(fill: str, color: str, style: str, width: int = 1) -> str:
    """A small box, like a node or a group."""
    return (
        f'<TABLE BORDER="{width}" STYLE="{style}" COLOR="{color}" BGCOLOR="{fill}" '
        'CELLPADDING="0" CELLSPACING="0"><TR><TD WIDTH="24" HEIGHT="8"></TD></TR></TABLE>'
    )


_DOT_LEGEND_SAMPLE: dict[LegendKind, str] = {
    "start": f'<FONT COLOR="{_Colour.INK}">●</FONT>',
    "client_change": _line_sample(_Colour.INK),
    "group": _box_sample(_Colour.GROUP_FILL, _Colour.GROUP_LINE, "rounded"),
    "switch": _line_sample(_Colour.AGENT, "dashed"),
    "reject": _line_sample(_Colour.REJECT, "dashed"),
    "previous": _box_sample(_Colour.AGENT_FILL, _Colour.AGENT, "dashed"),
    "restore": _line_sample(_Colour.RESTORE, "dotted"),
    "count": f'<FONT COLOR="{_Colour.INK}">{_TIMES}N</FONT>',
    "faded": _line_sample(_Colour.FADED),
    "path": _line_sample(_Colour.PATH),
    "current": _box_sample(_Colour.PATH_FILL, _Colour.PATH, "rounded", 2),
    "rules": f'<FONT COLOR="{_Colour.ALLOW}"><B>allow</B></FONT>',
    "tools": f'<FONT COLOR="{_Colour.INK}"><I>kind:</I></FONT>',
}
