"""The Mermaid ``stateDiagram-v2`` renderer."""

from __future__ import annotations

import unicodedata

from modefsm.diagram._build import _client_edge, _counted_edge
from modefsm.diagram._model import Diagram, DiagramEdge, DiagramNode, LegendKind
from modefsm.diagram.renderers._text import _TIMES, _edge_text, _reach_notes, _visible

__all__ = ["to_mermaid"]


_MERMAID_PLAIN = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .,()'!?/+=@^~-"
)


_MERMAID_CLASSES = (
    ("initial", "stroke-width:3px"),
    ("unrestorable", "fill:#fff4e5,stroke:#c05a00,stroke-dasharray:5 3"),
    ("previous", "fill:#f4ecfb,stroke:#7a3fb0,stroke-dasharray:5 3"),
    ("current", "fill:#d8ecff,stroke:#1f6feb,stroke-width:3px"),
)


_MERMAID_LEGEND: dict[LegendKind, str] = {
    "start": "● to the initial mode (bold border): session/new",
    "client_change": "set_mode: a client change (set_mode or set_config_option)",
    "group": "a set_mode note: the client may change between any two of its modes",
    "switch": "switch_mode to ◇: the agent asks, the user picks an option (its kind)",
    "reject": "◇ back to the mode: a reject option, the mode stays",
    "previous": "previous mode: the mode the session was in before",
    "restore": "orange, dashed: not restorable; load/resume gives the mode it points to",
    "count": f"{_TIMES}N: times taken in the log",
    "faded": f"{_TIMES}0: never taken in the log",
    "path": "steps: the steps of session {session}",
    "current": "blue: its current mode",
}


def _mermaid_text(text: str) -> str:
    r"""Escape *text* for a Mermaid label: entity codes, and ``<br>`` for line breaks.

    Letters of every script stay as they are. ASCII punctuation that Mermaid or HTML might
    read (``"#;:<>&%$`{}[]|``), and control, format and separator characters, become
    ``#NNN;`` entity codes, which Mermaid turns back into characters as it draws the label.
    Mermaid then reads the label as Markdown, so ``*``, ``\`` and ``_`` (unless inside a
    word) also get a Markdown backslash. A space that HTML would collapse (leading, trailing
    or repeated) becomes a no-break space, and a word joiner (U+2060) splits ``$$`` so that
    it is not read as KaTeX math.

    >>> _mermaid_text('say "hi" #1 <b> set_mode _x_ $$')
    'say #34;hi#34; #35;1 #60;b#62; set_mode #92;#95;x#92;#95; #36;#8288;#36;'
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
        elif ch in _MERMAID_MARKDOWN:  # Mermaid reads labels as Markdown: escape it there too
            out.append(f"#92;#{ord(ch)};")
        else:
            out.append(f"#{_WORD_JOINER};" * (ch == before == "$") + f"#{ord(ch)};")
    return "".join(out)


def _mermaid_plain(ch: str, before: str, after: str) -> bool:
    if ch.isascii():
        return ch in _MERMAID_PLAIN or (ch == "_" and before.isalnum() and after.isalnum())
    return unicodedata.category(ch)[0] not in "CZ"  # not control, format or separator


_WORD_JOINER = 0x2060
_MERMAID_MARKDOWN = frozenset("*_\\")


def to_mermaid(diagram: Diagram) -> str:
    """Render *diagram* as Mermaid ``stateDiagram-v2`` text (GitHub renders it).

    Mermaid draws every transition alike and lays composite states out poorly, so this
    renderer adapts the picture: a client group is a note listing its modes (arrows from or
    to a whole group are drawn once per mode), agent switches are told apart by their
    ``switch_mode`` labels and the choice diamond, and the legend is a note on the initial
    mode. With traffic, counts are in the labels and the session's current mode is blue;
    fading the edges never taken needs DOT, SVG or PNG.

    Returns:
        The text, ending with a newline.
    """
    lines = ["stateDiagram-v2", "    direction LR"]
    lines += [f"    classDef {name} {style}" for name, style in _MERMAID_CLASSES]
    lines += [line for node in diagram.nodes for line in _mermaid_node(node)]
    node_of = {n.mode_id: n.id for n in diagram.nodes if n.mode_id is not None}
    groups = {g.id for g in diagram.groups}
    for edge in diagram.edges:
        for part in _per_mode(diagram, edge, node_of, groups):
            source = "[*]" if part.kind == "start" else part.source
            lines.append(f"    {source} --> {part.dest} : {_mermaid_text(_edge_text(part))}")
    for group in diagram.groups:
        names = ", ".join(diagram.node(m).label for m in group.members)
        text = _mermaid_text(f"{group.label}:\n{names}")
        lines.append(f"    note right of {group.members[0]} : {text}")
    lines += [
        f"    note right of {choice} : {_mermaid_text(note)}"
        for choice, note in _reach_notes(diagram).items()
    ]
    legend = [f"Legend of {diagram.spec_name}"]
    legend += [diagram.caption] if diagram.caption else []
    session = diagram.traffic.session_id if diagram.traffic is not None else None
    legend += [_MERMAID_LEGEND[e.kind].format(session=session) for e in diagram.legend]
    lines.append(f"    note left of {diagram.initial.id} : {_mermaid_text(chr(10).join(legend))}")
    for name, _ in _MERMAID_CLASSES:
        ids = [n.id for n in diagram.nodes if _mermaid_has_class(n, name)]
        lines += [f"    class {','.join(ids)} {name}"] if ids else []
    return "\n".join(lines) + "\n"


def _mermaid_node(node: DiagramNode) -> list[str]:
    if node.kind == "start":
        return []
    if node.kind == "choice":
        return [f"    state {node.id} <<choice>>"]
    label = node.label
    if node.mode_id is not None:
        label += f"\n{node.mode_id}"
    if node.restore_to is not None:
        label += f"\nnot restored, load gives {node.restore_to}"
    if node.entered is not None:
        label += f"\nentered {_TIMES}{node.entered}"
    return [f'    state "{_mermaid_text(label)}" as {node.id}']


def _mermaid_has_class(node: DiagramNode, name: str) -> bool:
    return {
        "initial": node.initial,
        "unrestorable": node.restore_to is not None,
        "previous": node.kind == "previous",
        "current": node.current,
    }[name]


def _per_mode(
    diagram: Diagram,
    edge: DiagramEdge,
    node_of: dict[str, str] | None = None,
    groups: set[str] | None = None,
) -> list[DiagramEdge]:
    """*edge* itself, or one edge per client change when it leaves or reaches a group.

    *node_of* (node id by mode id) and *groups* (group ids) are the diagram's; a caller
    drawing every edge passes them once.
    """
    groups = {g.id for g in diagram.groups} if groups is None else groups
    if edge.source not in groups and edge.dest not in groups:
        return [edge]
    if node_of is None:
        node_of = {n.mode_id: n.id for n in diagram.nodes if n.mode_id is not None}
    parts = []
    for key in edge.transitions:
        part = _client_edge(node_of[key[1]], node_of[key[2]], "set_mode", [(key[1], key[2])])
        if diagram.traffic is not None:
            part = _counted_edge(part, diagram.traffic)
        parts.append(part)
    return parts
