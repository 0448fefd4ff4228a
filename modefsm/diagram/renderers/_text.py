"""What the renderers share: the colours, visible control characters, edge texts, wrapped titles."""

from __future__ import annotations

import textwrap

from modefsm.diagram._model import DiagramEdge, RuleLine, ToolCount

__all__: list[str] = []


class _Colour:
    """The colours of every picture."""

    INK = "#24292f"
    """Text, modes' borders' ink, client arrows."""
    MUTED = "#57606a"
    PAPER = "#ffffff"
    AGENT = "#7a3fb0"
    """Agent switches: the diamond's border, ``switch_mode`` and approval arrows."""
    AGENT_FILL = "#f4ecfb"
    REJECT = "#b42318"
    """Reject options' arrows."""
    RESTORE = "#c05a00"
    """Modes not restored on load, and their arrow to the mode load gives."""
    RESTORE_FILL = "#fff4e5"
    PATH = "#1f6feb"
    """With a log, one session's steps and current mode."""
    PATH_FILL = "#d8ecff"
    FADED = "#c9ced4"
    """With a log, arrows never taken."""
    GROUP_FILL = "#f6f8fa"
    GROUP_LINE = "#afb8c1"
    ALLOW = "#1a7f37"
    """A mode's rules: what it allows."""
    ASK = "#9a6700"
    """A mode's rules: what it asks about."""
    DENY = "#b42318"
    """A mode's rules: what it refuses (the reject colour)."""


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


_WRAP = 18
"""The most characters a line of a diamond's text holds (longer words stay whole)."""


def _wrapped(text: str) -> str:
    r"""*text* with its lines wrapped at :data:`_WRAP` characters, for a diamond.

    >>> _wrapped("Ready for implementation\nnow")
    'Ready for\nimplementation\nnow'
    """
    return "\n".join(
        wrapped
        for line in text.split("\n")
        for wrapped in textwrap.wrap(line, _WRAP, break_long_words=False) or [""]
    )


def _rule_text(line: RuleLine) -> str:
    """One line of a mode's rules: ``allow: read, search, *``."""
    return f"{line.decision}: {', '.join(line.targets)}"


def _tool_text(count: ToolCount) -> str:
    """The tool calls of one kind decided in a mode, on one line.

    ``edit: allow`` and the count, then ``ask`` and the count followed by each answer
    and its count in brackets, then ``deny`` and the count; a decision never taken is
    left out, and an ask without an outcome counts as ``no outcome``.
    """
    parts = [f"allow {_TIMES}{count.allow}"] if count.allow else []
    if count.asked:
        answers = ", ".join(f"{o or 'no outcome'} {n}" for o, n in count.asked)
        parts.append(f"ask {_TIMES}{count.ask} ({answers})")
    parts += [f"deny {_TIMES}{count.deny}"] if count.deny else []
    return f"{count.kind}: " + " \N{MIDDLE DOT} ".join(parts)
