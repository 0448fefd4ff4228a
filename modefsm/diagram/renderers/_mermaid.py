"""The Mermaid ``flowchart`` renderer."""

from __future__ import annotations

import unicodedata

from modefsm.diagram._model import Diagram, DiagramEdge, DiagramNode, EdgeKind, LegendKind
from modefsm.diagram.renderers._text import (
    _TIMES,
    _Colour,
    _edge_text,
    _rule_text,
    _tool_text,
    _visible,
    _wrapped,
)

__all__ = ["to_mermaid"]


_MERMAID_PLAIN = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .,()'!?/+=@^~-"
)


_FADED_TEXT = "#8c959f"

_CLASSES = (
    ("mode", f"fill:{_Colour.PAPER},stroke:{_Colour.MUTED},color:{_Colour.INK}"),
    ("initial", "stroke-width:3px"),
    ("unrestorable", f"fill:{_Colour.RESTORE_FILL},stroke:{_Colour.RESTORE},stroke-dasharray:5 3"),
    ("current", f"fill:{_Colour.PATH_FILL},stroke:{_Colour.PATH},stroke-width:3px"),
    ("choice", f"fill:{_Colour.AGENT_FILL},stroke:{_Colour.AGENT},color:{_Colour.INK}"),
    (
        "previous",
        (
            f"fill:{_Colour.AGENT_FILL},stroke:{_Colour.AGENT},stroke-dasharray:5 3,"
            f"color:{_Colour.AGENT}"
        ),
    ),
    ("start", f"fill:{_Colour.INK},stroke:{_Colour.INK}"),
    ("group", f"fill:{_Colour.GROUP_FILL},stroke:{_Colour.GROUP_LINE},color:{_Colour.MUTED}"),
    (
        "caption",
        f"fill:{_Colour.PAPER},stroke:{_Colour.PAPER},color:{_Colour.MUTED},font-style:italic",
    ),
)
"""Mermaid ``classDef`` styles, in the order they are applied (a later one wins)."""

_LINKS: dict[EdgeKind, tuple[str, str]] = {
    "start": (_Colour.INK, ""),
    "client_change": (_Colour.INK, ""),
    "switch": (_Colour.AGENT, "6 4"),
    "option": (_Colour.AGENT, "6 4"),
    "reject": (_Colour.REJECT, "6 4"),
    "restore": (_Colour.RESTORE, "2 4"),
}
"""Each kind of arrow's colour and dashes (``stroke-dasharray``; none: solid)."""

_KEY: dict[LegendKind, str] = {
    "start": "● to the mode with a bold border: session/new starts there",
    "client_change": "black arrow: set_mode by the client (or set_config_option)",
    "group": "rounded hub, two-way arrows: set_mode between any two of its modes",
    "switch": (
        "purple dashed arrows through a diamond: switch_mode, the agent asks and the user "
        "picks an option (its kind in brackets)"
    ),
    "reject": "red dashed arrow: a reject option, the mode stays",
    "previous": "purple dashed box: the mode the session was in before, one of those named",
    "restore": (
        "orange box and dotted arrow: not restored, load or resume gives the mode it points to"
    ),
    "count": f"{_TIMES}N: times taken in the log (on a mode: times entered)",
    "faded": "grey arrow: never taken in the log",
    "path": "blue arrow: the steps of session {session}",
    "current": "blue box: its current mode",
    "rules": (
        "allow: / ask: / deny: in a mode, what its tool calls of those kinds get (a quoted "
        "pattern: tools so named, decided first; *: every other kind)"
    ),
    "tools": (
        f"kind: allow {_TIMES}N \N{MIDDLE DOT} ask {_TIMES}N (each answer and its count) "
        f"\N{MIDDLE DOT} deny {_TIMES}N: the tool calls of that kind decided in the mode, "
        "in the log"
    ),
}
"""What each style of the Mermaid picture means, for the Markdown page under it."""


def mermaid_key(diagram: Diagram) -> list[str]:
    """The key of :func:`to_mermaid`'s picture: one line per style it draws."""
    session = diagram.traffic.session_id if diagram.traffic is not None else None
    return [_KEY[entry.kind].format(session=session) for entry in diagram.legend]


def _mermaid_text(text: str) -> str:
    r"""Escape *text* for a Mermaid label: entity codes, and ``<br>`` for line breaks.

    Letters of every script stay as they are. ASCII punctuation that Mermaid or HTML might
    read (``"#;:<>&%$`{}[]|``), and control, format and separator characters, become
    ``#NNN;`` entity codes, which Mermaid turns back into characters as it draws the label
    (a flowchart's quoted labels are HTML, not Markdown). A space that HTML would collapse
    (leading, trailing or repeated) becomes a no-break space, and a word joiner (U+2060)
    splits ``$$`` so that it is not read as KaTeX math, and ``\n`` so that a label holding
    HTML does not break the line there.

    >>> _mermaid_text('say "hi" #1 <b> set_mode _x_ $$')
    'say #34;hi#34; #35;1 #60;b#62; set_mode #95;x#95; #36;#8288;#36;'
    """
    text = _visible(text)
    out: list[str] = []
    for i, ch in enumerate(text):
        before = text[i - 1] if i else "\n"
        after = text[i + 1] if i + 1 < len(text) else "\n"
        if ch == "\n":
            out.append("<br>")
        elif ch == " ":
            out.append("#160;" if " " in before or "\n" in (before, after) else " ")
        elif _mermaid_plain(ch, before, after):
            out.append(ch)
        else:
            joined = ch == before == "$"
            out.append(f"#{_WORD_JOINER};" * joined + f"#{ord(ch)};")
            out.append(f"#{_WORD_JOINER};" * (ch == "\\" and after == "n"))
    return "".join(out)


def _mermaid_plain(ch: str, before: str, after: str) -> bool:
    if ch.isascii():
        return ch in _MERMAID_PLAIN or (ch == "_" and before.isalnum() and after.isalnum())
    return unicodedata.category(ch)[0] not in "CZ"  # not control, format or separator


_WORD_JOINER = 0x2060


def to_mermaid(diagram: Diagram) -> str:
    """Render *diagram* as a Mermaid ``flowchart``, top to bottom (GitHub renders it).

    A flowchart, not a ``stateDiagram-v2``: Mermaid styles the arrows of a flowchart
    (``linkStyle``: colour, dashes) and draws every state transition alike. Modes are
    rounded boxes (the initial one with a bold border); a permission request is a diamond
    holding the switch's title; each kind of arrow has its colour and dashes (a reject
    option red). A client group is a hub, a stadium-shaped node with a two-way arrow to each
    of its modes, and an arrow from or to the whole group leaves or enters the hub (in a
    ``subgraph`` box, Mermaid's layout stacks the labels of the arrows entering it). The
    key is on the Markdown page (:func:`to_markdown`), and the labels name what each arrow
    does. The start arrow spans two ranks, so that its label stays clear of the labels
    of the other arrows into the initial mode. A mode's rules and, with traffic, its tool
    calls decided are lines of its box. With traffic, the caption is a borderless node,
    counts are in the labels, arrows never taken are grey, and the session's steps and
    current mode are blue.

    Returns:
        The text, ending with a newline.
    """
    lines = [f"%% modes of spec {_comment(diagram.spec_name)}", "flowchart TB"]
    lines += [f"    classDef {name} {style}" for name, style in _CLASSES]
    if diagram.caption:
        lines.append(f'    caption["{_mermaid_text(diagram.caption)}"]')
    lines += [f"    {_mermaid_node(n)}" for n in diagram.nodes]
    lines += [f'    {g.id}(["{_mermaid_text(g.label)}"])' for g in diagram.groups]
    styles: dict[str, list[int]] = {}
    spokes = [(g.id, m) for g in diagram.groups for m in g.members]
    lines += [f"    {hub} <--> {member}" for hub, member in spokes]
    styles[_link_style(None)] = list(range(len(spokes)))
    for number, edge in enumerate(diagram.edges, start=len(spokes)):
        arrow = "-->" if edge.line == "solid" else "-.->"
        if edge.kind == "start":
            arrow = "--->"
        text = _mermaid_text(_edge_text(edge))
        lines.append(f'    {edge.source} {arrow}|"{text}"| {edge.dest}')
        styles.setdefault(_link_style(edge), []).append(number)
    for name, _ in _CLASSES:
        ids = [n.id for n in diagram.nodes if _mermaid_has_class(n, name)]
        ids += [g.id for g in diagram.groups] if name == "group" else []
        ids += ["caption"] if name == "caption" and diagram.caption else []
        lines += [f"    class {','.join(ids)} {name}"] if ids else []
    lines += [f"    linkStyle {','.join(map(str, n))} {style}" for style, n in styles.items() if n]
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    """*text* on one line, for a ``%%`` comment."""
    return _visible(text).replace("\n", " ")


def _link_style(edge: DiagramEdge | None) -> str:
    """The ``linkStyle`` of *edge* (``None``: a group's spoke).

    Its kind's colour and dashes; grey if never taken, blue on the session's path.
    """
    if edge is None:
        return f"stroke:{_Colour.INK},stroke-width:1.5px"
    color, dashes = _LINKS[edge.kind]
    stroke, width = color, "1.5px"
    if edge.faded:
        stroke, color = _Colour.FADED, _FADED_TEXT
    if edge.on_path:
        stroke, color, width = _Colour.PATH, _Colour.PATH, "3px"
    style = f"stroke:{stroke},color:{color},stroke-width:{width}"
    return style + f",stroke-dasharray:{dashes}" * bool(dashes)


def _mermaid_node(node: DiagramNode) -> str:
    text = _mermaid_text(node.label)
    if node.kind == "start":
        return f'{node.id}(("#160;"))'
    if node.kind == "choice":
        return f'{node.id}{{"{_mermaid_text(_wrapped(node.label))}"}}'
    if node.kind == "previous":
        return f'{node.id}("{text}")'
    label = f"{node.mode_id}"
    if node.restore_to is not None:
        label += f"\nnot restored, load gives {node.restore_to}"
    for line in node.rules:
        label += f"\n{_rule_text(line)}"
    if node.entered is not None:
        label += f"\nentered {_TIMES}{node.entered}"
    for count in node.tools:
        label += f"\n{_tool_text(count)}"
    return f'{node.id}("<b>{text}</b><br>{_mermaid_text(label)}")'


def _mermaid_has_class(node: DiagramNode, name: str) -> bool:
    return {
        "mode": node.kind == "mode",
        "initial": node.initial,
        "unrestorable": node.restore_to is not None,
        "current": node.current,
        "choice": node.kind == "choice",
        "previous": node.kind == "previous",
        "start": node.kind == "start",
        "group": False,
        "caption": False,
    }[name]
