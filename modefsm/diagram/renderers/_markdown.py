"""The Markdown review page: the Mermaid diagram, then tables of modes, rules and switches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from modefsm.diagram._build import DRAWN_MAX, _previous_reach, _shown_name
from modefsm.diagram._model import Diagram, ToolCount, Traffic, TransitionKey
from modefsm.diagram.renderers._mermaid import mermaid_key, to_mermaid
from modefsm.diagram.renderers._text import _visible
from modefsm.errors import DiagramError
from modefsm.spec import PREVIOUS, ModeSpec, SwitchOption

__all__ = ["to_markdown"]


_MD_PLAIN = frozenset(" -.,()'/:;?!%=+@")


def _md(text: str) -> str:
    r"""Escape *text* for Markdown (a table cell or a paragraph): ``\`` before punctuation.

    >>> print(_md("a|b *c*\nd <e>"))
    a\|b \*c\*<br>d \<e\>
    """
    return "".join(
        "<br>"
        if ch == "\n"
        else f"\\{ch}"
        if ch.isascii() and not ch.isalnum() and ch not in _MD_PLAIN
        else ch
        for ch in _visible(text)
    )


def to_markdown(diagram: Diagram, spec: ModeSpec) -> str:
    """Render a review page: the Mermaid diagram and its key, then tables of modes and switches.

    Each mode with rules (see :attr:`DiagramNode.rules <modefsm.diagram.DiagramNode.rules>`)
    has a table of its ``tools`` rules in order, then its ``tools_default``. With traffic,
    the page ends with the transitions taken, the tool calls decided per mode and kind,
    and the highlighted session's steps.

    Args:
        diagram: the picture (from :func:`build_diagram` of *spec*).
        spec: the spec, for the tables.

    Returns:
        GitHub-flavoured Markdown, ending with a newline.
    """
    initial = _md(spec.mode(spec.initial).name)
    out = [
        f"# Modes of {_md(spec.name)}",
        "",
        f"Spec {_md(spec.name)} ({spec.content_hash}); a new session starts in {initial}.",
        "",
        "```mermaid",
        to_mermaid(diagram).rstrip("\n"),
        "```",
        "",
        "How to read it:",
        "",
        *(f"- {_md(line)}" for line in mermaid_key(diagram)),
        "",
        "## Modes",
        "",
        "| Mode | id | Description | On session/load or resume |",
        "|---|---|---|---|",
    ]
    for mode in spec.modes:
        name = _md(mode.name) + (" (initial)" if mode.id == spec.initial else "")
        target = spec.restore_target(mode.id)
        restore = "restored" if target == mode.id else f"gives {_md(spec.mode(target).name)}"
        description = _md(mode.description or "")
        out.append(f"| {name} | <code>{_md(mode.id)}</code> | {description} | {restore} |")
    out += [
        "",
        "## Client changes (session/set\\_mode, session/set\\_config\\_option)",
        "",
        "| From | May change to |",
        "|---|---|",
    ]
    for mode in spec.modes:
        if not spec.client_restricted(mode.id) and len(spec.modes) > 2:  # noqa: PLR2004
            out.append(f"| {_md(mode.name)} | any other mode |")
            continue
        targets = spec.table.targets("client_change", mode.id)
        to = ", ".join(_md(spec.mode(t).name) for t in targets) or "none"
        if len(targets) > 1 and len(targets) == len(spec.modes) - 1:
            to = "any other mode"
        out.append(f"| {_md(mode.name)} | {to} |")
    out += _markdown_rules(diagram, spec)
    out += _markdown_switches(diagram, spec)
    if diagram.traffic is not None:
        out += _markdown_traffic(diagram, spec, diagram.traffic)
    return "\n".join(out) + "\n"


def _markdown_rules(diagram: Diagram, spec: ModeSpec) -> list[str]:
    """A table per mode with rules: its rules in order (first match decides), the default last."""
    shown = [spec.mode(n.mode_id) for n in diagram.nodes if n.rules and n.mode_id is not None]
    if not shown:
        return []
    out = [
        "",
        "## What each mode allows (tools rules)",
        "",
        "A tool call gets the decision of the first rule that matches its kind (ACP `ToolKind`)",
        "and its tool name, else the mode's `tools_default`; decision records name the rule",
        "by its number.",
    ]
    for mode in shown:
        out += [
            "",
            f"### {_md(mode.name)} (<code>{_md(mode.id)}</code>)",
            "",
            "| Rule | Kinds | Tool name | Decision | Reason |",
            "|---|---|---|---|---|",
        ]
        rows = [
            (
                str(i),
                _kinds(rule.kind),
                "any" if rule.name is None else f"<code>{_md(rule.name)}</code>",
                rule.decision,
                _md(rule.reason or ""),
            )
            for i, rule in enumerate(mode.tools)
        ]
        rest = "any other" if mode.tools else "any"
        rows.append(("tools\\_default", rest, "any", mode.tools_default, ""))
        out.extend(_row(row) for row in rows)
    return out


def _row(cells: Iterable[str]) -> str:
    """A table row; an empty cell is one space."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def _kinds(kinds: Sequence[str] | None) -> str:
    return "any" if kinds is None else ", ".join(_md(k) for k in kinds)


def _markdown_switches(diagram: Diagram, spec: ModeSpec) -> list[str]:
    if not spec.switches:
        return []
    out = [
        "",
        "## Agent switches (switch\\_mode, asking the user)",
        "",
        "| In | Title | Option | optionId | Kind | Leads to |",
        "|---|---|---|---|---|---|",
    ]
    for number, switch in enumerate(spec.switches):
        sources = ", ".join(_md(spec.mode(s).name) for s in switch.source)
        back = _previous_reach([r for r in diagram.reach if r.choice == f"c{number}"])
        out.extend(
            f"| {sources} | {_md(switch.title)} | {_md(_shown_name(spec, option, back))} "
            f"| <code>{_md(option.option_id)}</code> | {_md(option.kind)} "
            f"| {_option_result(spec, option, back)} |"
            for option in switch.options
        )
    return out + _markdown_option_targets(diagram, spec)


def _markdown_option_targets(diagram: Diagram, spec: ModeSpec) -> list[str]:
    """Where each allow option can lead, and nowhere else (the policy safety rule)."""
    out = [
        "",
        "### Where each approval can lead",
        "",
        "An approval leads to the mode in *Leads to* and never to another. Targets are",
        "resolved when the permission request is built: a `$previous` option names the",
        "concrete mode it returns to, and an approval given after the mode changed meanwhile",
        "applies exactly that shown mode, and only if it is restorable and a switch may reach",
        "it from the new mode.",
        "",
        "| In | optionId | Leads to | Approved after the mode changed |",
        "|---|---|---|---|",
    ]
    for reach in diagram.reach:
        if reach.target == PREVIOUS:
            rule = (
                f"the mode before this one ({_names(spec, reach.reaches)}), named in the option "
                "when asked; not offered if another option leads there or there is none (a "
                "non-restorable mode is not remembered across a restart)"
            )
        else:
            rule = _md(spec.mode(reach.target).name)
        out.append(
            f"| {_md(spec.mode(reach.source).name)} | <code>{_md(reach.option_id)}</code> "
            f"| {rule} | {_stale_rule(spec, reach.stale)} |"
        )
    return out


def _names(spec: ModeSpec, modes: Iterable[str]) -> str:
    return ", ".join(_md(spec.mode(m).name) for m in modes) or "none"


def _stale_rule(spec: ModeSpec, modes: Sequence[str]) -> str:
    if not modes:
        return "refused"
    return f"{_names(spec, modes)}, if a switch may reach it from the new mode; else refused"


def _option_result(spec: ModeSpec, option: SwitchOption, back: str | None) -> str:
    if not option.allows or option.target is None:
        return "stays"
    if option.target == PREVIOUS:
        return "the previous mode" if back is None else _md(spec.mode(back).name)
    return _md(spec.mode(option.target).name)


def _markdown_traffic(diagram: Diagram, spec: ModeSpec, traffic: Traffic) -> list[str]:
    out = ["", "## From the log", "", _md(diagram.caption), "", "| Transition | Taken |"]
    out.append("|---|---|")
    rows = sum(len(e.transitions) for e in diagram.edges)
    rows += sum(len(g.modes) * (len(g.modes) - 1) for g in diagram.groups)
    if rows > DRAWN_MAX:
        msg = (
            f"spec {spec.name!r}: the table of transitions taken would have more than "
            f"{DRAWN_MAX} rows (the limit); draw it as mermaid or dot instead"
        )
        raise DiagramError(msg)
    keys = [key for edge in diagram.edges for key in edge.transitions]
    keys += [key for group in diagram.groups for key in group.transitions]
    out.extend(
        f"| {_md(_describe(spec, key))} | {traffic.counts.get(key, 0)} |"
        for key in dict.fromkeys(keys)
    )
    out += _markdown_tools(spec, traffic.tools)
    if traffic.session_id is not None:
        out += ["", f"### Steps of session {_md(traffic.session_id)}", ""]
        out += [f"{n}. {_md(_describe(spec, key))}" for n, key in enumerate(traffic.path, 1)]
    return out


def _describe(spec: ModeSpec, key: TransitionKey) -> str:
    kind, source, dest = key
    if kind == "start":
        return f"session/new: {spec.mode(dest).name}"
    if kind == "switch_mode":
        switch = spec.switch_from(source)
        option = next(o for o in switch.options if o.option_id == dest) if switch else None
        picked = f"{option.name} ({option.kind})" if option else dest
        return f"{spec.mode(source).name}: switch_mode, {picked}"
    via = "set_mode" if kind == "client_change" else "load/resume"
    return f"{spec.mode(source).name} to {spec.mode(dest).name} ({via})"


def _markdown_tools(spec: ModeSpec, tools: Sequence[ToolCount]) -> list[str]:
    """The tool calls decided, per mode and kind: allowed, asked (by the answer), denied."""
    if not tools:
        return []
    out = [
        "",
        "### Tool calls decided",
        "",
        "| Mode | Kind | allow | ask: answer | deny |",
        "|---|---|---|---|---|",
    ]
    for count in tools:
        asked = ", ".join(f"{_md(o or 'no outcome')} {n}" for o, n in count.asked)
        out.append(
            f"| {_md(spec.mode(count.mode).name)} | {count.kind} | {count.allow} "
            f"| {count.ask}{f' ({asked})' if asked else ''} | {count.deny} |"
        )
    return out
