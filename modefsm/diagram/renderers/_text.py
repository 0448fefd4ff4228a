"""Text shared by the renderers: visible control characters, edge texts, approval notes."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

from modefsm.diagram._model import Diagram, DiagramEdge
from modefsm.spec._table import PREVIOUS

__all__: list[str] = []


_TIMES = "\N{MULTIPLICATION SIGN}"
_C0_END = 0x20
_DEL = 0x7F
_CONTROL_PICTURES = 0x2400


def _visible(text: str) -> str:
    r"""Line breaks as ``\n``; other control characters as their control pictures.

    >>> _visible("a\r\nb\tc\x7f")
    'a\nb␉c␡'
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(
        chr(_CONTROL_PICTURES + ord(ch))
        if ord(ch) < _C0_END and ch != "\n"
        else "\N{SYMBOL FOR DELETE}"
        if ord(ch) == _DEL
        else ch
        for ch in text
    )


def _edge_text(edge: DiagramEdge) -> str:
    text = edge.label
    if edge.count is not None:
        text += f"\n{_TIMES}{edge.count}"
        if edge.steps:
            noun = "step" if len(edge.steps) == 1 else "steps"
            text += f" ({noun} {', '.join(map(str, edge.steps))})"
    return text


_NOTE_NAMES_MAX = 12
"""The most mode names a line of an approval note lists before ``and N more``."""


def _reach_notes(diagram: Diagram) -> dict[str, str]:
    r"""For each choice node with allow options, its note: where each approval leads.

    One line per allow option (``\n`` between them): its name, its target (a mode, or
    ``$previous`` and the modes it can be), and the modes it never reaches, from
    :attr:`Diagram.reach`.
    """
    modes = len(diagram.nodes) - sum(n.mode_id is None for n in diagram.nodes)
    notes: dict[str, list[str]] = {}
    for reach in diagram.reach:
        if reach.target == PREVIOUS:
            can = _listed(map(diagram.mode_name, reach.reaches), len(reach.reaches))
            target = f"$previous, the mode before: {can or 'none, never offered'}"
        else:
            target = diagram.mode_name(reach.target)
        never = _listed(
            map(diagram.mode_name, diagram.never_reached(reach)), modes - len(reach.reaches)
        )
        lines = notes.setdefault(reach.choice, ["Where each approval leads"])
        lines.append(
            f"\N{BULLET} {reach.name} \N{RIGHTWARDS ARROW} {target}; never {never or 'none'}"
        )
    return {choice: "\n".join(lines) for choice, lines in notes.items()}


def _listed(names: Iterable[str], count: int) -> str:
    """The first :data:`_NOTE_NAMES_MAX` of *count* names, and how many more there are."""
    shown = list(islice(names, _NOTE_NAMES_MAX))
    more = f" and {count - len(shown)} more" if count > len(shown) else ""
    return ", ".join(shown) + more
