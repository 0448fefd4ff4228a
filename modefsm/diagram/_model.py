r"""The format-free diagram model: nodes, client groups, edges, legend, approval reach.

A picture of a :class:`~modefsm.spec.ModeSpec` is made in two steps.
:func:`~modefsm.diagram.build_diagram` turns a spec (and, optionally, the :class:`Traffic`
that :func:`~modefsm.diagram.read_traffic` finds in a transition log) into a
:class:`Diagram`: nodes, client groups and edges with their labels and styles, and no
syntax. One small renderer per format (``modefsm.diagram.renderers``) then writes it:
:func:`~modefsm.diagram.to_mermaid`, :func:`~modefsm.diagram.to_dot`,
:func:`~modefsm.diagram.to_svg`, :func:`~modefsm.diagram.to_png`,
:func:`~modefsm.diagram.to_markdown`. :func:`~modefsm.diagram.render` does both steps for
a format name, and :func:`~modefsm.diagram.write_preset_diagrams` writes the files of
the shipped presets. The data flows one way: this model, then the building of it, then
the renderers, then the files.

Every node has a synthetic id (``s0``, ``s1``, ... for the modes in spec order, ``c0``, ...
for permission requests, ``p0``, ... for "the previous mode", ``start``) and every human text
(mode ids and names, switch titles, option names) is escaped for its format, so any valid
spec renders exactly: hyphens, quotes, ``#``, ``<``/``>``, spaces, newlines, a mode named
``state``, ``a:b`` and non-ASCII text included. A carriage return counts as a line break;
other control characters are drawn as their Unicode control pictures (U+2400 to U+2421).

transitions' own ``GraphMachine`` is not used: its Mermaid breaks on such names, its DOT
reads ``a:b`` as a port, it keeps a graph per model, and it knows nothing of permission
options or restore policy, which live in the spec, not in the machine.

The visual grammar (every picture carries its key, Mermaid's on the Markdown page):

- a start dot leads to the initial mode (``session/new``), which has a bold border;
- client changes (``session/set_mode`` or ``session/set_config_option``) are solid arrows
  labelled ``set_mode``; three or more modes between which the client may change every way
  round are drawn as one group (a box in DOT, a hub with two-way arrows in Mermaid)
  instead of n² arrows;
- an agent-initiated switch (the ``switch_mode`` tool) is one diamond per switch, the
  permission request, holding the switch's title, with a dashed ``switch_mode`` arrow from
  each source mode; from the diamond, one dashed arrow per destination carries the options
  leading there (the names the user sees) with their kinds; a reject option leads back to
  each source mode; a ``$previous`` option leads to the one mode it can return to, or to a
  ``previous`` node naming the modes it can be, from
  :func:`~modefsm.diagram.option_reach` (:attr:`Diagram.reach`);
- a mode that ``session/load`` or ``session/resume`` does not restore is orange, with a
  dotted arrow to the mode restored instead.

A mode with ``tools`` rules (or a ``tools_default`` other than ``ask``) shows what they
say, one line per decision (:class:`RuleLine`): the kinds that decision gets, the tool-name
patterns that decide first, and ``*`` for every kind no line lists (the default's line,
last). The Markdown page has each mode's rules in order, as a table.

With traffic, each edge shows how often it was taken and each mode how often it was
entered; edges never taken are faded (DOT, SVG, PNG), and one session's steps and current
mode are highlighted. Each mode also shows the tool calls decided in it, per kind
(:class:`ToolCount`): how many were allowed, asked (by the answer) and denied.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict

from modefsm.log import Outcome
from modefsm.spec import Decision, PermissionOptionKind, ToolKind

__all__ = [
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
]


NodeKind = Literal["start", "mode", "choice", "previous"]
"""``start`` (the start dot), ``mode``, ``choice`` (a permission request), ``previous``."""


EdgeKind = Literal["start", "client_change", "switch", "option", "reject", "restore"]
"""What an edge stands for.

``start``: ``session/new`` to the initial mode; ``client_change``: ``set_mode`` (or
``set_config_option``); ``switch``: the agent proposes a ``switch_mode`` (mode to choice);
``option``: allow options of that request (choice to target); ``reject``: reject options
(choice back to the source); ``restore``: ``session/load`` or ``session/resume`` of a mode
that is not restorable (mode to the mode restored instead).
"""


TransitionKey = tuple[str, str, str]
"""One countable transition of a spec, whatever edge draws it:

- ``("start", "", initial)``: a session was created;
- ``("client_change", source, dest)``: a client change;
- ``("switch_mode", source, option_id)``: the user picked *option_id* of the switch
  proposed in *source* (an allow option that was applied, or a reject option);
- ``("restore", source, dest)``: a load or resume moved a session out of *source*.
"""


LegendKind = Literal[
    "start",
    "client_change",
    "group",
    "switch",
    "reject",
    "previous",
    "restore",
    "count",
    "faded",
    "path",
    "current",
    "rules",
    "tools",
]
"""The style a legend line shows a sample of."""
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class RuleLine(BaseModel):
    """One line of what a mode's ``tools`` rules say: a decision and the tool calls it gets.

    Attributes:
        decision: ``allow``, ``ask`` or ``deny``.
        targets: what gets it, in ACP ``ToolKind`` order then rule order: a kind; a
            name pattern of a rule that decides before the kind's own decision, quoted
            after the kinds it applies to (``edit "*_plan"``; the pattern alone when the
            rule names no kind); ``*`` for every kind no other line lists (the
            ``tools_default`` line, which is the last).
    """

    model_config = _FROZEN

    decision: Decision
    targets: tuple[str, ...]


class ToolCount(BaseModel):
    """The tool calls of one kind decided in one mode, from a log's decision records.

    Attributes:
        mode: the mode they were decided in (ACP ``SessionMode.id``).
        kind: ACP ``ToolKind``.
        allow: calls the rules allowed.
        asked: calls the rules asked about, by how the ask ended (the answer's
            :data:`~modefsm.log.Outcome`; ``None``: the record has none), in that order.
        deny: calls the rules refused.
    """

    model_config = _FROZEN

    mode: str
    kind: ToolKind
    allow: int = 0
    asked: tuple[tuple[Outcome | None, int], ...] = ()
    deny: int = 0

    @property
    def ask(self) -> int:
        """The calls asked about, whatever the answer."""
        return sum(n for _, n in self.asked)


class DiagramNode(BaseModel):
    """A node of a :class:`Diagram`.

    Attributes:
        id: the synthetic id every renderer uses (``s0``, ``c0``, ``p0``, ``start``).
        kind: see :data:`NodeKind`.
        label: the human text: a mode's name, a choice's switch title, the modes a
            ``previous`` node can be; ``""`` for the start.
        mode_id: a mode node's ACP ``SessionMode.id``.
        tooltip: a mode's description.
        initial: whether this is the spec's initial mode.
        restore_to: for a mode that is not restorable, the name of the mode restored instead.
        entered: with traffic, how many committed records entered this mode.
        current: with traffic and a session, whether it is that session's current mode.
        rules: a mode's ``tools`` rules, one line per decision (none: the mode has no
            rules and asks about every call, the default).
        tools: with traffic, the tool calls decided in this mode, one item per kind in
            ACP ``ToolKind`` order (only the kinds the log shows).
    """

    model_config = _FROZEN

    id: str
    kind: NodeKind
    label: str = ""
    mode_id: str | None = None
    tooltip: str | None = None
    initial: bool = False
    restore_to: str | None = None
    entered: int | None = None
    current: bool = False
    rules: tuple[RuleLine, ...] = ()
    tools: tuple[ToolCount, ...] = ()


class DiagramGroup(BaseModel):
    """Modes the client may change between freely, drawn once instead of n² arrows.

    Attributes:
        id: the synthetic id (``g0``, ...).
        label: the group's title.
        members: the node ids inside, in spec order.
        modes: the members' mode ids (ACP ``SessionMode.id``), in the same order.
    """

    model_config = _FROZEN

    id: str
    label: str
    members: tuple[str, ...]
    modes: tuple[str, ...]

    @property
    def transitions(self) -> tuple[TransitionKey, ...]:
        """The client changes the group stands for: every ordered pair of members (n² items)."""
        return tuple(("client_change", a, b) for a in self.modes for b in self.modes if a != b)

    def stands_for(self, key: TransitionKey) -> bool:
        """Whether *key* is one of :attr:`transitions` (in constant time)."""
        kind, source, dest = key
        return kind == "client_change" and source != dest and {source, dest} <= self._mode_set

    @cached_property
    def _mode_set(self) -> frozenset[str]:
        return frozenset(self.modes)


class DiagramEdge(BaseModel):
    r"""An arrow of a :class:`Diagram`.

    Attributes:
        kind: see :data:`EdgeKind`.
        source: a node id, or a group id for an arrow from every member of a group.
        dest: a node id, or a group id for an arrow to every member of a group.
        label: the human text; ``\n`` separates lines.
        line: ``solid``, ``dashed`` or ``dotted``.
        transitions: the spec transitions the arrow stands for.
        count: with traffic, how often they were taken (``None`` without traffic).
        steps: with a session, the 1-based numbers of its steps along the arrow.
    """

    model_config = _FROZEN

    kind: EdgeKind
    source: str
    dest: str
    label: str
    line: Literal["solid", "dashed", "dotted"]
    transitions: tuple[TransitionKey, ...]
    count: int | None = None
    steps: tuple[int, ...] = ()

    @property
    def faded(self) -> bool:
        """Whether the log shows it was never taken."""
        return self.count == 0

    @property
    def on_path(self) -> bool:
        """Whether the highlighted session took it."""
        return bool(self.steps)


class LegendEntry(BaseModel):
    """One line of a legend: a sample of a style and what it means.

    Attributes:
        kind: the style shown.
        text: what it means.
    """

    model_config = _FROZEN

    kind: LegendKind
    text: str


class Traffic(BaseModel):
    """What transition logs say about one spec's sessions (see :func:`read_traffic`).

    Attributes:
        counts: how often each transition was taken.
        entered: how often each mode was entered (by a creation or a committed change).
        sessions: how many sessions the logs show.
        records: how many of the spec's records were counted (creations, committed changes,
            rejected switch options).
        unmatched: how many of those match no transition of the spec (a log written under
            an older version of the spec, for instance).
        tools: the tool calls decided (``modefsm.tool_decided`` records of the spec), per
            mode and kind, modes in spec order and kinds in ACP ``ToolKind`` order.
        decisions: how many decision records of the spec were counted.
        unmatched_decisions: how many of those were decided in a mode the spec does not
            have (not in :attr:`tools`).
        session_id: the session whose path is highlighted, if one was asked for.
        path: that session's transitions, in log order.
        current: that session's current mode id (the last mode it committed).
    """

    model_config = _FROZEN

    counts: dict[TransitionKey, int]
    entered: dict[str, int]
    sessions: int
    records: int
    unmatched: int = 0
    tools: tuple[ToolCount, ...] = ()
    decisions: int = 0
    unmatched_decisions: int = 0
    session_id: str | None = None
    path: tuple[TransitionKey, ...] = ()
    current: str | None = None

    @cached_property
    def steps_of(self) -> dict[TransitionKey, list[int]]:
        """The 1-based numbers of the steps of :attr:`path` along each transition."""
        steps: dict[TransitionKey, list[int]] = {}
        for n, key in enumerate(self.path, start=1):
            steps.setdefault(key, []).append(n)
        return steps


class OptionReach(BaseModel):
    """Where one allow option of a switch can lead, proposed in one mode (see :func:`option_reach`).

    The policy safety rule, as every renderer shows it: an approval lands only on the
    target the option names, resolved when the permission request is built, and never on
    any other mode.

    Attributes:
        choice: the node id of the permission request (``c0``, ...).
        source: the mode the switch is proposed in (ACP ``SessionMode.id``).
        option_id: ACP ``optionId``.
        name: the option's name as the spec writes it.
        kind: ACP ``PermissionOption.kind``.
        target: the spec's target: a mode id, or ``$previous`` (the mode the session was
            in before).
        reaches: the modes an approval can move a session to, in spec order: the target,
            or, for ``$previous``, every mode a session in *source* can have come from that
            no other allow option of the switch names (none: the option is never offered).
        stale: the modes among *reaches* that an approval given after the mode changed
            meanwhile may still apply (the restorable ones, and only where a switch may
            reach them from the new mode).
    """

    model_config = _FROZEN

    choice: str
    source: str
    option_id: str
    name: str
    kind: PermissionOptionKind
    target: str
    reaches: tuple[str, ...]
    stale: tuple[str, ...]


class Diagram(BaseModel):
    """A spec's picture, independent of any format (see :func:`build_diagram`).

    Attributes:
        spec_name: the spec's name.
        spec_hash: its :attr:`~modefsm.spec.ModeSpec.content_hash`.
        nodes: the modes (in spec order), then each choice followed by its ``previous``
            node if it has one, then ``start``.
        groups: the client groups.
        edges: the arrows, in a stable order.
        legend: the legend's lines, only for what the picture shows.
        reach: for every allow option of every switch, in each of its source modes, where
            an approval can lead (see :func:`option_reach`), in spec order.
        traffic: the log overlay, if any.
        caption: one line describing the overlay (``""`` without traffic).
    """

    model_config = _FROZEN

    spec_name: str
    spec_hash: str
    nodes: tuple[DiagramNode, ...]
    groups: tuple[DiagramGroup, ...]
    edges: tuple[DiagramEdge, ...]
    legend: tuple[LegendEntry, ...]
    reach: tuple[OptionReach, ...] = ()
    traffic: Traffic | None = None
    caption: str = ""

    def node(self, node_id: str) -> DiagramNode:
        """The node *node_id*.

        Raises:
            KeyError: there is none.
        """
        return self._nodes_by_id[node_id]

    @cached_property
    def _nodes_by_id(self) -> dict[str, DiagramNode]:
        return {node.id: node for node in reversed(self.nodes)}

    @property
    def initial(self) -> DiagramNode:
        """The initial mode's node."""
        return next(n for n in self.nodes if n.initial)

    def mode_name(self, mode_id: str) -> str:
        """The display name of mode *mode_id*.

        Raises:
            KeyError: the diagram has no such mode.
        """
        return self._names_by_mode[mode_id]

    def never_reached(self, reach: OptionReach) -> Iterator[str]:
        """The modes an approval of *reach* can never move a session to, in spec order."""
        reached = set(reach.reaches)
        return (m for m in self._names_by_mode if m not in reached)

    @cached_property
    def _names_by_mode(self) -> dict[str, str]:
        return {n.mode_id: n.label for n in self.nodes if n.mode_id is not None}
