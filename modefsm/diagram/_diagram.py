r"""State diagrams of a :class:`~modefsm.spec.ModeSpec`: Mermaid, DOT, SVG, PNG, Markdown.

A picture is made in two steps. :func:`build_diagram` turns a spec (and, optionally, the
:class:`Traffic` that :func:`read_traffic` finds in a transition log) into a
:class:`Diagram`: nodes, client groups and edges with their labels and styles, and no
syntax. One small renderer per format then writes it: :func:`to_mermaid`, :func:`to_dot`,
:func:`to_svg`, :func:`to_png`, :func:`to_markdown`. :func:`render` does both steps for a
format name.

Every node has a synthetic id (``s0``, ``s1``, ... for the modes in spec order, ``c0``, ...
for permission requests, ``prev`` for "the previous mode", ``start``) and every human text
(mode ids and names, switch titles, option names) is escaped for its format, so any valid
spec renders exactly: hyphens, quotes, ``#``, ``<``/``>``, spaces, newlines, a mode named
``state``, ``a:b`` and non-ASCII text included. A carriage return counts as a line break;
other control characters are drawn as their Unicode control pictures (U+2400 to U+2421).

transitions' own ``GraphMachine`` is not used: its Mermaid breaks on such names, its DOT
reads ``a:b`` as a port, it keeps a graph per model, and it knows nothing of permission
options or restore policy, which live in the spec, not in the machine.

The visual grammar (every picture carries its legend):

- a start dot leads to the initial mode (``session/new``), which has a bold border;
- client changes (``session/set_mode`` or ``session/set_config_option``) are solid arrows
  labelled ``set_mode``; three or more modes between which the client may change every way
  round are drawn as one group (a box in DOT, a note in Mermaid) instead of n² arrows;
- an agent-initiated switch (the ``switch_mode`` tool) is a dashed arrow labelled with the
  switch's title to a diamond, the permission request; from the diamond, one dashed arrow
  per target carries the options leading there with their kinds; reject options lead back
  to the source mode and a ``$previous`` target leads to a "previous mode" node;
- a mode that ``session/load`` or ``session/resume`` does not restore is orange, with a
  dotted arrow to the mode restored instead;
- a note by each permission request lists, for every allow option, the mode it leads to
  (for ``$previous``, the modes it can return to) and the modes it never reaches, from
  :func:`option_reach` (:attr:`Diagram.reach`).

With traffic, each edge shows how often it was taken and each mode how often it was
entered; edges never taken are faded (DOT, SVG, PNG), and one session's steps and current
mode are highlighted.

Building a diagram and writing Mermaid, DOT and Markdown take time linear in the spec
(its modes and list entries) with no recursion, times the source modes of switches with
a ``$previous`` option (each needs a pass over the modes) and, for Markdown, of switches. What cannot be drawn in bounded time
raises :class:`~modefsm.errors.DiagramError`: arrows outside client groups standing for
more than :data:`DRAWN_MAX` client changes (or a Markdown log table of more rows), client
groups needing more than
:data:`GROUP_STEPS_MAX` steps to find, SVG or PNG beyond :data:`RENDERED_NODES_MAX` nodes
or :data:`RENDERED_ARROWS_MAX` arrows, or ``dot`` running past :data:`RENDER_TIMEOUT`.

Example:
    >>> from modefsm.spec._model import preset
    >>> diagram = build_diagram(preset("seed"))
    >>> [(n.id, n.label) for n in diagram.nodes if n.kind == "mode"]
    [('s0', 'Ask'), ('s1', 'Architect'), ('s2', 'Code')]
    >>> [(g.label, g.members) for g in diagram.groups]
    [('set_mode between\nany two of these', ('s0', 's1', 's2'))]
    >>> [(e.source, e.dest, e.label) for e in diagram.edges if e.kind == "reject"]
    [('c0', 's1', 'No, stay in architect mode (reject_once)')]
"""

from __future__ import annotations

import heapq
import html
import re
import subprocess
import unicodedata
from collections import Counter
from functools import cached_property
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

from pydantic import BaseModel, ConfigDict

from modefsm.diagram._formats import Format
from modefsm.errors import DiagramError, LogError
from modefsm.log._records import EVENT_CHANGED, EVENT_CREATED, EVENT_REJECTED, TransitionRecord
from modefsm.replay._replayer import iter_records
from modefsm.spec._model import ModeSpec, PermissionOptionKind, Switch, SwitchOption, preset
from modefsm.spec._presets import preset_names
from modefsm.spec._table import PREVIOUS, TriggerKind

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "DRAWN_MAX",
    "GROUP_STEPS_MAX",
    "RENDERED_ARROWS_MAX",
    "RENDERED_NODES_MAX",
    "RENDER_TIMEOUT",
    "Diagram",
    "DiagramEdge",
    "DiagramGroup",
    "DiagramNode",
    "EdgeKind",
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
]
"""The style a legend line shows a sample of."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_GROUP_MIN = 3
"""The fewest mutually client-reachable modes drawn as one group."""
DRAWN_MAX = 100_000
"""The most client changes a diagram's arrows outside client groups may stand for.

An arrow from or to a whole group stands for one change per member (Mermaid draws each).
A spec beyond it (``DiagramError``) has many modes that cannot change to any mode and are
in no group; so has a log table (Markdown with ``--log``) of more rows.
"""
_FREE_CLASSES_MAX = 700
"""The most classes of modes free to change to any mode, each with different mutual
listed modes, that the group search takes (its graph holds every pair of them)."""
GROUP_STEPS_MAX = 2_000_000
"""The most steps spent finding client groups (``DiagramError`` beyond)."""
RENDERED_NODES_MAX = 500
"""The most nodes an SVG or PNG (drawn by Graphviz) may have (``DiagramError`` beyond)."""
RENDERED_ARROWS_MAX = 1_000
"""The most arrows an SVG or PNG may have (``DiagramError`` beyond)."""
RENDER_TIMEOUT = 60.0
"""How long Graphviz's ``dot`` may take to draw an SVG or PNG, in seconds."""
_TIMES = "\N{MULTIPLICATION SIGN}"


class DiagramNode(BaseModel):
    """A node of a :class:`Diagram`.

    Attributes:
        id: the synthetic id every renderer uses (``s0``, ``c0``, ``prev``, ``start``).
        kind: see :data:`NodeKind`.
        label: the human text: a mode's name, ``previous mode``; ``""`` for the others.
        mode_id: a mode node's ACP ``SessionMode.id``.
        tooltip: a mode's description, or a choice's switch title.
        initial: whether this is the spec's initial mode.
        restore_to: for a mode that is not restorable, the name of the mode restored instead.
        entered: with traffic, how many committed records entered this mode.
        current: with traffic and a session, whether it is that session's current mode.
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
        nodes: the modes (in spec order), then choices, ``prev`` and ``start``.
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


# -- reading logs --------------------------------------------------------------------------


def read_traffic(
    spec: ModeSpec, paths: Iterable[str | Path], *, session_id: str | None = None
) -> Traffic:
    """Count what the sessions of *spec* did, from transition logs.

    Only the records of *spec* (the same ``spec`` name) are read. A session creation, a
    committed change (``modefsm.mode_changed``) and a rejected switch option
    (``modefsm.change_rejected`` with reason ``option_rejected``) are each counted on the
    transition taken; other rejections changed nothing and are not counted.

    Args:
        spec: the spec the picture shows.
        paths: JSON-lines transition logs, read in order.
        session_id: a session whose path and current mode to highlight (ACP ``sessionId``).

    Returns:
        The counts, and the path of *session_id*.

    Raises:
        LogError: a log cannot be read.
        DiagramError: the logs hold records of other specs only, or *session_id* is not
            in them.
    """
    counts: Counter[TransitionKey] = Counter()
    entered: Counter[str] = Counter()
    sessions: set[str] = set()
    other_specs: set[str] = set()
    records = unmatched = 0
    path: list[TransitionKey] = []
    current: str | None = None
    seen = False
    for record in _records(paths):
        if record.spec != spec.name:
            other_specs.add(record.spec)
            continue
        if not _counted(record):
            continue
        records += 1
        sessions.add(record.session_id)
        key = _transition_of(spec, record)
        if key is None:
            unmatched += 1
        else:
            counts[key] += 1
        committed = record.event != EVENT_REJECTED
        if committed and spec.has_mode(record.to_mode):
            entered[record.to_mode or ""] += 1
        if record.session_id == session_id:
            seen = True
            path += [key] if key is not None else []
            current = record.to_mode if committed else current
    if not records and other_specs:
        found = ", ".join(sorted(repr(s) for s in other_specs))
        msg = f"the log has no records of spec {spec.name!r}, only of {found}"
        raise DiagramError(msg)
    if session_id is not None and not seen:
        msg = f"session {session_id!r} is not in the log of spec {spec.name!r}"
        raise DiagramError(msg)
    return Traffic(
        counts=dict(sorted(counts.items())),
        entered={m: entered[m] for m in spec.mode_ids},
        sessions=len(sessions),
        records=records,
        unmatched=unmatched,
        session_id=session_id,
        path=tuple(path),
        current=current if spec.has_mode(current) else None,
    )


def _records(paths: Iterable[str | Path]) -> Iterator[TransitionRecord]:
    for path in paths:
        try:
            yield from iter_records([path])
        except OSError as exc:
            msg = f"cannot read the transition log: {exc.strerror or exc}"
            raise LogError(msg, str(path)) from None


def _counted(record: TransitionRecord) -> bool:
    if record.event in {EVENT_CREATED, EVENT_CHANGED}:
        return True
    return (
        record.event == EVENT_REJECTED
        and record.origin == "switch_mode"
        and record.reason == "option_rejected"
    )


def _transition_of(spec: ModeSpec, record: TransitionRecord) -> TransitionKey | None:
    source, dest = record.from_mode, record.to_mode
    if record.event == EVENT_CREATED:
        return ("start", "", spec.initial) if dest == spec.initial else None
    if record.origin == "switch_mode":
        return _switch_key(spec, record)
    if source is None or dest is None or not spec.has_mode(source):
        return None
    kind: TriggerKind = "restore" if record.origin == "restore" else "client_change"
    return (kind, source, dest) if spec.table.allows(kind, source, dest) else None


def _switch_key(spec: ModeSpec, record: TransitionRecord) -> TransitionKey | None:
    source = record.proposed_in or record.from_mode
    switch = spec.switch_from(source) if source is not None else None
    if source is None or switch is None:
        return None
    for option in switch.options:
        if option.option_id == record.option_id and option.allows == (
            record.event == EVENT_CHANGED
        ):
            return ("switch_mode", source, option.option_id)
    return None


# -- the format-free model -----------------------------------------------------------------


def build_diagram(spec: ModeSpec, traffic: Traffic | None = None) -> Diagram:
    """Turn *spec* (and what logs say about it) into a :class:`Diagram`.

    Args:
        spec: the modes and policy to draw.
        traffic: the log overlay from :func:`read_traffic`, if any.

    Returns:
        The diagram; the same spec and traffic always give an equal diagram.
    """
    ids = {mode_id: f"s{i}" for i, mode_id in enumerate(spec.mode_ids)}
    groups = _groups(spec, ids)
    edges = [
        DiagramEdge(
            kind="start",
            source="start",
            dest=ids[spec.initial],
            label="session/new",
            line="solid",
            transitions=(("start", "", spec.initial),),
        ),
        *_client_edges(spec, ids, groups),
    ]
    choices, switch_edges = _switch_edges(spec, ids)
    edges += switch_edges
    edges += [
        DiagramEdge(
            kind="restore",
            source=ids[mode_id],
            dest=ids[spec.restore_target(mode_id)],
            label="on load/resume",
            line="dotted",
            transitions=(("restore", mode_id, spec.restore_target(mode_id)),),
        )
        for mode_id in spec.mode_ids
        if spec.restore_target(mode_id) != mode_id
    ]
    nodes = [
        DiagramNode(
            id=ids[mode.id],
            kind="mode",
            label=mode.name,
            mode_id=mode.id,
            tooltip=mode.description,
            initial=mode.id == spec.initial,
            restore_to=None if mode.restorable else spec.mode(spec.restore_target(mode.id)).name,
        )
        for mode in spec.modes
    ]
    nodes += choices
    if any(e.dest == "prev" for e in edges):
        nodes.append(DiagramNode(id="prev", kind="previous", label="previous mode"))
    nodes.append(DiagramNode(id="start", kind="start"))
    caption = ""
    if traffic is not None:
        nodes, edges = _overlay(traffic, nodes=nodes, edges=edges, groups=groups, ids=ids)
        caption = _caption(spec, traffic)
    return Diagram(
        spec_name=spec.name,
        spec_hash=spec.content_hash,
        nodes=tuple(nodes),
        groups=tuple(groups),
        edges=tuple(edges),
        legend=_legend(nodes, edges, groups, traffic),
        reach=option_reach(spec),
        traffic=traffic,
        caption=caption,
    )


def option_reach(spec: ModeSpec) -> tuple[OptionReach, ...]:
    """Where each allow option of each switch can lead, in each of the switch's source modes.

    The one statement of the rule the engine applies (its ``offer_switch`` and
    ``apply_switch``), which every renderer draws. A named target is reached alone. A
    ``$previous`` option returns to the mode the session was in before the current one,
    named in the option when the permission request is built; it reaches the modes from
    which a client change or a switch enters the source mode (or enters a non-restorable
    mode that load or resume replaces by the source mode), less the source mode and the
    targets the switch's other allow options name (such an option is not offered: the
    other one is). An approval given after the mode changed meanwhile applies the shown
    mode only if that mode is restorable and a switch may reach it from the new mode.

    Args:
        spec: the spec.

    Returns:
        One item per (switch, source mode, allow option), in spec order; the choice ids
        are those of :func:`build_diagram`.
    """
    reach: list[OptionReach] = []
    fallen: dict[str, list[str]] = {}
    for mode_id in spec.mode_ids:
        target = spec.restore_target(mode_id)
        if target != mode_id:
            fallen.setdefault(target, []).append(mode_id)
    choice = 0
    for switch in spec.switches:
        explicit = {o.target for o in switch.options if o.allows and o.target != PREVIOUS}
        for source in switch.source:
            entered: set[str] | None = None
            for option in switch.options:
                if not option.allows or option.target is None:
                    continue
                if option.target == PREVIOUS:
                    if entered is None:
                        entered = _entered_from(spec, [source, *fallen.get(source, ())])
                    back = entered - explicit - {source}
                    reaches = [m for m in spec.mode_ids if m in back]
                else:
                    reaches = [option.target]
                reach.append(
                    OptionReach(
                        choice=f"c{choice}",
                        source=source,
                        option_id=option.option_id,
                        name=option.name,
                        kind=option.kind,
                        target=option.target,
                        reaches=tuple(reaches),
                        stale=tuple(m for m in reaches if spec.mode(m).restorable),
                    )
                )
            choice += 1
    return tuple(reach)


def _entered_from(spec: ModeSpec, modes: Sequence[str]) -> set[str]:
    """The modes from which a client change or an approved switch enters one of *modes*."""
    return {s for mode in modes for s in spec.table.sources("switch_mode", mode)}


def _groups(spec: ModeSpec, ids: dict[str, str]) -> list[DiagramGroup]:
    """Take out the largest set of mutually client-reachable modes while it has 3 or more.

    Ties go to the set whose modes come first in the spec.

    Every maximal set is found once (:func:`_maximal_cliques`); taking one out leaves each
    other set less the modes taken, and the largest of those is the largest of what
    remains, so the sets are never searched again.

    Raises:
        DiagramError: the search needs more than :data:`GROUP_STEPS_MAX` steps.
    """
    order = {m: i for i, m in enumerate(spec.mode_ids)}
    classes, adjacency = _twin_classes(spec)
    cliques = [set(c) for c in _maximal_cliques(adjacency, spec.name)]
    containing: list[list[int]] = [[] for _ in classes]
    for number, clique in enumerate(cliques):
        for k in clique:
            containing[k].append(number)

    def entry(number: int) -> tuple[int, tuple[int, ...], int, int]:
        indices = tuple(sorted(order[m] for k in cliques[number] for m in classes[k]))
        return (-len(indices), indices, number, versions[number])

    versions = [0] * len(cliques)
    heap = [entry(n) for n in range(len(cliques))]
    heap = [e for e in heap if -e[0] >= _GROUP_MIN]
    heapq.heapify(heap)
    taken = [False] * len(cliques)
    groups: list[DiagramGroup] = []
    while heap:
        _, indices, number, version = heapq.heappop(heap)
        if taken[number] or version != versions[number]:
            continue
        taken[number] = True
        best = [spec.mode_ids[i] for i in indices]
        groups.append(
            DiagramGroup(
                id=f"g{len(groups)}",
                label="set_mode between\nany two of these",
                members=tuple(ids[m] for m in best),
                modes=tuple(best),
            )
        )
        for k in cliques[number]:
            for other in containing[k]:
                if not taken[other]:
                    cliques[other].discard(k)
                    versions[other] += 1
                    update = entry(other)
                    if -update[0] >= _GROUP_MIN:
                        heapq.heappush(heap, update)
    return groups


def _twin_classes(spec: ModeSpec) -> tuple[list[list[str]], list[set[int]]]:
    """The mutual-reachability graph of client changes, with twins as one vertex.

    Two modes are mutual when the client may change from each to the other. Modes with the
    same neighbours (and mutual) are twins: every maximal set of mutual modes has both or
    neither, so one vertex stands for them all. Every mode not listed in
    ``client_changes`` is mutual with every other such mode, so "any to any" among n modes
    is one vertex, not n² pairs.

    Returns:
        The classes (mode ids in spec order, classes in the order of their first mode) and,
        for each class, the classes it is mutual with.
    """
    neighbours: dict[str, frozenset[str]] = {}
    listed_of: dict[str, set[str]] = {}
    for source in spec.client_changes:
        mutual = frozenset(
            d
            for d in spec.client_changes[source]
            if spec.table.allows("client_change", d, source) and d != source
        )
        neighbours[source] = mutual
        for dest in mutual:
            if not spec.client_restricted(dest):
                listed_of.setdefault(dest, set()).add(source)
    keys: dict[tuple[bool, frozenset[str]], int] = {}
    classes: list[list[str]] = []
    class_of: dict[str, int] = {}
    for mode_id in spec.mode_ids:
        if spec.client_restricted(mode_id):
            key = (True, neighbours[mode_id] | {mode_id})
        else:
            key = (False, frozenset(listed_of.get(mode_id, ())))
        number = keys.setdefault(key, len(classes))
        if number == len(classes):
            classes.append([])
        classes[number].append(mode_id)
        class_of[mode_id] = number
    free = [k for (restricted, _), k in keys.items() if not restricted]
    if len(free) > _FREE_CLASSES_MAX:
        _too_many_steps(spec.name)
    adjacency: list[set[int]] = [set() for _ in classes]
    for (restricted, signature), number in keys.items():
        mode_id = classes[number][0]
        if restricted:
            adjacency[number].update(class_of[m] for m in neighbours[mode_id])
        else:
            adjacency[number].update(k for k in free if k != number)
            adjacency[number].update(class_of[m] for m in signature)
        adjacency[number].discard(number)
    return classes, adjacency


def _maximal_cliques(adjacency: Sequence[set[int]], spec_name: str) -> list[list[int]]:
    """Every maximal clique (Bron-Kerbosch with a pivot, with a stack of its own, no recursion).

    Raises:
        DiagramError: past :data:`GROUP_STEPS_MAX` steps.
    """
    degree = [len(a) for a in adjacency]
    steps = 0

    def branches(open_: set[int], closed: set[int]) -> list[int]:
        pivot = max(chain(open_, closed), key=degree.__getitem__)
        return list(open_ - adjacency[pivot])

    found: list[list[int]] = []
    everything = set(range(len(adjacency)))
    if not everything:
        return found
    stack: list[tuple[list[int], set[int], set[int], list[int]]] = [
        ([], everything, set(), branches(everything, set()))
    ]
    while stack:
        chosen, open_, closed, todo = stack[-1]
        if not todo:
            stack.pop()
            continue
        vertex = todo.pop()
        near = adjacency[vertex]
        inner_open, inner_closed = open_ & near, closed & near
        open_.discard(vertex)
        closed.add(vertex)
        steps += len(chosen) + len(inner_open) + len(inner_closed) + 1
        if inner_open:
            todo_inner = branches(inner_open, inner_closed)
            steps += len(inner_open) + len(inner_closed)
            stack.append(([*chosen, vertex], inner_open, inner_closed, todo_inner))
        elif not inner_closed:
            found.append([*chosen, vertex])
        if steps > GROUP_STEPS_MAX:
            _too_many_steps(spec_name)
    return found


def _too_many_steps(spec_name: str) -> NoReturn:
    msg = (
        f"spec {spec_name!r}: finding the groups of modes a client may change between "
        f"takes more than {GROUP_STEPS_MAX} steps (the limit); its client_changes lists "
        "are too intertwined to draw"
    )
    raise DiagramError(msg)


def _client_edges(
    spec: ModeSpec, ids: dict[str, str], groups: Sequence[DiagramGroup]
) -> list[DiagramEdge]:
    """Client arrows: one per pair of units (groups or single modes) where all are allowed.

    What a whole group may reach (or be reached from) is one arrow; the rest are one
    arrow per change.

    Raises:
        DiagramError: the arrows stand for more than :data:`DRAWN_MAX` transitions.
    """
    first = {g.modes[0]: g for g in groups}
    grouped = {m for g in groups for m in g.modes}
    units: list[tuple[str, tuple[str, ...]]] = []
    for mode_id in spec.mode_ids:
        if mode_id in first:
            units.append((first[mode_id].id, first[mode_id].modes))
        elif mode_id not in grouped:
            units.append((ids[mode_id], (mode_id,)))
    unit_of = {m: n for n, (_, modes) in enumerate(units) for m in modes}
    hubs = _hubs(spec, units, unit_of)
    edges = _hub_edges(spec, units, hubs)
    drawn = sum(len(e.transitions) for e in edges)
    covered = Counter(source_unit for source_unit, _ in hubs)
    order = {m: i for i, m in enumerate(spec.mode_ids)}
    uncovered: dict[int, list[str]] = {}  # for a unit: the modes of units it has no hub to
    for source in spec.mode_ids:
        unit = unit_of[source]
        targets: Iterable[str]
        if spec.client_restricted(source):
            targets = spec.table.targets("client_change", source)
        elif covered[unit] == len(units) - 1:
            continue  # every other unit is reached by one arrow, its own group by the box
        else:  # a free mode: an arrow to each mode of each unit with no hub from its own
            if unit not in uncovered:
                uncovered[unit] = _unhubbed(unit, units, hubs, order)
            targets = uncovered[unit]
        for dest in targets:
            if dest == source or unit_of[dest] == unit or (unit, unit_of[dest]) in hubs:
                continue
            drawn += 1
            _check_drawn(spec.name, drawn)
            edges.append(_client_edge(ids[source], ids[dest], "set_mode", [(source, dest)]))
    return edges


def _hub_edges(
    spec: ModeSpec, units: Sequence[tuple[str, tuple[str, ...]]], hubs: set[tuple[int, int]]
) -> list[DiagramEdge]:
    """One arrow per hub, in unit order of source then dest."""
    drawn = 0
    edges: list[DiagramEdge] = []
    for source_unit, dest_unit in sorted(hubs):
        (source_id, sources), (dest_id, dests) = units[source_unit], units[dest_unit]
        drawn += len(sources) * len(dests)
        _check_drawn(spec.name, drawn)
        pairs = [(a, b) for a in sources for b in dests]
        label = "set_mode\n" + _HUB_LABEL[len(sources) > 1, len(dests) > 1]
        edges.append(_client_edge(source_id, dest_id, label, pairs))
    return edges


def _unhubbed(
    unit: int,
    units: Sequence[tuple[str, tuple[str, ...]]],
    hubs: set[tuple[int, int]],
    order: dict[str, int],
) -> list[str]:
    """The modes of the units that *unit* has no hub arrow to, in spec order."""
    return sorted(
        (
            m
            for other, (_, modes) in enumerate(units)
            if other != unit and (unit, other) not in hubs
            for m in modes
        ),
        key=order.__getitem__,
    )


def _hubs(
    spec: ModeSpec, units: Sequence[tuple[str, tuple[str, ...]]], unit_of: dict[str, int]
) -> set[tuple[int, int]]:
    """The pairs of units, one of them a group, where each mode of one may reach each of the other.

    A free mode reaches every mode; a listed one, the units inside its list.
    """
    hubs: set[tuple[int, int]] = set()
    everything = range(len(units))
    for number, (_, modes) in enumerate(units):
        reached: set[int] | None = None
        for mode_id in modes:
            if not spec.client_restricted(mode_id):
                continue
            inside = Counter(unit_of[d] for d in set(spec.client_changes[mode_id]) - {mode_id})
            full = {u for u, count in inside.items() if count == len(units[u][1])}
            reached = full if reached is None else reached & full
        for other in everything if reached is None else reached:
            if other != number and (len(modes) > 1 or len(units[other][1]) > 1):
                hubs.add((number, other))
    return hubs


def _check_drawn(spec_name: str, drawn: int) -> None:
    if drawn > DRAWN_MAX:
        msg = (
            f"spec {spec_name!r}: its diagram's arrows would stand for more than {DRAWN_MAX} "
            "client changes outside client groups (the limit); list fewer modes in "
            "client_changes, or let "
            "more modes change to any mode"
        )
        raise DiagramError(msg)


_HUB_LABEL = {
    (True, True): "from any, to any",
    (True, False): "from any",
    (False, True): "to any",
}


def _client_edge(
    source: str, dest: str, label: str, pairs: Sequence[tuple[str, str]]
) -> DiagramEdge:
    return DiagramEdge(
        kind="client_change",
        source=source,
        dest=dest,
        label=label,
        line="solid",
        transitions=tuple(("client_change", a, b) for a, b in pairs),
    )


def _switch_edges(
    spec: ModeSpec, ids: dict[str, str]
) -> tuple[list[DiagramNode], list[DiagramEdge]]:
    """One choice node per (switch, source mode), with its entry arrow and option arrows."""
    choices: list[DiagramNode] = []
    edges: list[DiagramEdge] = []
    for switch in spec.switches:
        for source in switch.source:
            choice = f"c{len(choices)}"
            choices.append(DiagramNode(id=choice, kind="choice", tooltip=switch.title))
            edges.append(
                DiagramEdge(
                    kind="switch",
                    source=ids[source],
                    dest=choice,
                    label=f"switch_mode: {switch.title}",
                    line="dashed",
                    transitions=tuple(("switch_mode", source, o.option_id) for o in switch.options),
                )
            )
            edges += _option_edges(switch, source, choice, ids)
    return choices, edges


def _option_edges(
    switch: Switch, source: str, choice: str, ids: dict[str, str]
) -> list[DiagramEdge]:
    """One arrow per destination of the options, in option order."""
    by_dest: dict[str, list[SwitchOption]] = {}
    for option in switch.options:
        if not option.allows or option.target is None:
            dest = ids[source]
        elif option.target == PREVIOUS:
            dest = "prev"
        else:
            dest = ids[option.target]
        by_dest.setdefault(dest, []).append(option)
    return [
        DiagramEdge(
            kind="option" if options[0].allows else "reject",
            source=choice,
            dest=dest,
            label="\n".join(f"{o.name} ({o.kind})" for o in options),
            line="dashed",
            transitions=tuple(("switch_mode", source, o.option_id) for o in options),
        )
        for dest, options in by_dest.items()
    ]


def _overlay(
    traffic: Traffic,
    *,
    nodes: Sequence[DiagramNode],
    edges: Sequence[DiagramEdge],
    groups: Sequence[DiagramGroup],
    ids: dict[str, str],
) -> tuple[list[DiagramNode], list[DiagramEdge]]:
    """Counts and steps on every edge; changes taken inside a group become arrows of their own."""
    order = {mode_id: i for i, mode_id in enumerate(ids)}
    explicit = [
        _client_edge(ids[a], ids[b], "set_mode", [(a, b)])
        for group in groups
        for _, a, b in sorted(
            (key for key, count in traffic.counts.items() if count and group.stands_for(key)),
            key=lambda key: (order[key[1]], order[key[2]]),
        )
    ]
    counted = [_counted_edge(edge, traffic) for edge in [*edges, *explicit]]
    marked = [
        node.model_copy(
            update={
                "current": node.mode_id == traffic.current,
                "entered": traffic.entered.get(node.mode_id, 0),
            }
        )
        if node.mode_id is not None
        else node
        for node in nodes
    ]
    return marked, counted


def _counted_edge(edge: DiagramEdge, traffic: Traffic) -> DiagramEdge:
    keys = set(edge.transitions)
    steps_of = traffic.steps_of
    return edge.model_copy(
        update={
            "count": sum(traffic.counts.get(key, 0) for key in keys),
            "steps": tuple(sorted(n for key in keys for n in steps_of.get(key, ()))),
        }
    )


def _caption(spec: ModeSpec, traffic: Traffic) -> str:
    noun = "session" if traffic.sessions == 1 else "sessions"
    caption = f"From the log: {traffic.sessions} {noun} of spec {spec.name}"
    if traffic.unmatched:
        caption += f", {traffic.unmatched} records matching no transition of this spec"
    if traffic.session_id is not None:
        caption += f"; session {traffic.session_id}"
        if traffic.current is not None:
            caption += f" is in {spec.mode(traffic.current).name}"
    return caption


def _legend(
    nodes: Sequence[DiagramNode],
    edges: Sequence[DiagramEdge],
    groups: Sequence[DiagramGroup],
    traffic: Traffic | None,
) -> tuple[LegendEntry, ...]:
    kinds = {e.kind for e in edges}
    shown: dict[LegendKind, bool] = {
        "start": True,
        "client_change": "client_change" in kinds,
        "group": bool(groups),
        "switch": "switch" in kinds,
        "reject": "reject" in kinds,
        "previous": any(n.kind == "previous" for n in nodes),
        "restore": "restore" in kinds,
        "count": traffic is not None,
        "faded": traffic is not None,
        "path": traffic is not None and traffic.session_id is not None,
        "current": traffic is not None and traffic.current is not None,
    }
    session = traffic.session_id if traffic is not None else None
    return tuple(
        LegendEntry(kind=kind, text=_LEGEND_TEXT[kind].format(session=session))
        for kind, show in shown.items()
        if show
    )


_LEGEND_TEXT: dict[LegendKind, str] = {
    "start": "session/new starts in the initial mode (bold border)",
    "client_change": "client change (set_mode or set_config_option)",
    "group": "the client may change between any two modes in a box",
    "switch": "agent switch (switch_mode): the user picks an option (its kind)",
    "reject": "a reject option: the mode stays",
    "previous": "back to the mode the session was in before",
    "restore": "not restorable: load or resume gives the mode it points to",
    "count": "times taken in the log (on a mode: times entered)",
    "faded": "never taken in the log",
    "path": "the steps of session {session}",
    "current": "its current mode",
}


# -- text shared by the renderers ----------------------------------------------------------

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


# -- Mermaid -------------------------------------------------------------------------------

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


# -- DOT -----------------------------------------------------------------------------------

_FONT = "Helvetica,Arial,sans-serif"
_MONO = "Courier New,Courier,monospace"
_INK = "#24292f"
_MUTED = "#57606a"
_AGENT = "#7a3fb0"
_AGENT_FILL = "#f4ecfb"
_REJECT = "#b42318"
_RESTORE = "#c05a00"
_RESTORE_FILL = "#fff4e5"
_PATH = "#1f6feb"
_PATH_FILL = "#d8ecff"
_FADED = "#c9ced4"
_GROUP_FILL = "#f6f8fa"
_GROUP_LINE = "#afb8c1"
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
    picture can be styled or checked. An arrow from or to a whole group is clipped at the
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
        f'    node [fontname="{_FONT}", fontsize=11, color="{_MUTED}", fontcolor="{_INK}"];',
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
            "fillcolor": f'"{_GROUP_FILL}"',
            "color": f'"{_GROUP_LINE}"',
            "fontsize": "10",
            "fontcolor": f'"{_MUTED}"',
            "labelloc": "t",
            "labeljust": "l",
        }
        lines += [f"    subgraph cluster_{group.id} {{", f"        graph {_attrs(cluster)};"]
        lines += [f"        {_dot_node(diagram.node(m))}" for m in group.members]
        if group.id in in_a_row:  # no arrow inside: one row
            lines.append(f"        {{rank=same; {'; '.join(group.members)}}}")
        lines.append("    }")
    lines += [f"    {_dot_node(n)}" for n in diagram.nodes if n.id not in members]
    notes = _reach_notes(diagram)
    lines += [
        f"    {choice}_note {_attrs(_dot_note_attrs(note))};" for choice, note in notes.items()
    ]
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
    lines += [f"    {choice} -> {choice}_note {_attrs(_DOT_NOTE_EDGE)};" for choice in notes]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_note_attrs(note: str) -> dict[str, str]:
    title, _, rest = note.partition("\n")
    return {
        "class": '"reach"',
        "shape": "note",
        "style": "filled",
        "fillcolor": f'"{_AGENT_FILL}"',
        "color": f'"{_AGENT}"',
        "fontsize": "9",
        "margin": '"0.12,0.06"',
        "label": f"<<B>{_html(title)}</B>{_LEFT}{_html(rest, _LEFT)}{_LEFT}>",
    }


_DOT_NOTE_EDGE = {
    "class": '"note"',
    "style": "dotted",
    "arrowhead": "none",
    "color": f'"{_AGENT}"',
}


def _middle(members: Sequence[str]) -> str:
    return members[len(members) // 2]


def _dot_node(node: DiagramNode) -> str:
    attrs = _DOT_PSEUDO_NODES.get(node.kind) or _dot_mode_attrs(node)
    if node.kind == "previous":
        attrs = {**attrs, "label": f"<{_html(node.label)}>"}
    if node.tooltip is not None:
        attrs = {**attrs, "tooltip": _quoted(node.tooltip)}
    return f"{node.id} {_attrs(attrs)};"


_DOT_PSEUDO_NODES: dict[NodeKind, dict[str, str]] = {
    "start": {
        "class": '"start"',
        "shape": "circle",
        "style": "filled",
        "fillcolor": f'"{_INK}"',
        "color": f'"{_INK}"',
        "width": "0.16",
        "fixedsize": "true",
        "label": '""',
    },
    "choice": {
        "class": '"choice"',
        "shape": "diamond",
        "style": "filled",
        "fillcolor": f'"{_AGENT_FILL}"',
        "color": f'"{_AGENT}"',
        "width": "0.3",
        "height": "0.3",
        "fixedsize": "true",
        "label": '""',
    },
    "previous": {
        "class": '"previous"',
        "shape": "box",
        "style": '"rounded,dashed,filled"',
        "fillcolor": f'"{_AGENT_FILL}"',
        "color": f'"{_AGENT}"',
        "fontcolor": f'"{_AGENT}"',
        "fontsize": "10",
    },
}


def _dot_mode_attrs(node: DiagramNode) -> dict[str, str]:
    small = '<BR/><FONT POINT-SIZE="9" COLOR="{}">{}</FONT>'
    label = f"<B>{_html(node.label)}</B>"
    label += f'<BR/><FONT FACE="{_MONO}" POINT-SIZE="9" COLOR="{_MUTED}">'
    label += f"{_html(node.mode_id or '')}</FONT>"
    fill, color, width = "#ffffff", _MUTED, "2" if node.initial else "1"
    classes = ["mode"] + ["initial"] * node.initial
    if node.restore_to is not None:
        label += small.format(_RESTORE, "not restored on load")
        fill, color = _RESTORE_FILL, _RESTORE
        classes.append("unrestorable")
    if node.entered is not None:
        label += small.format(_MUTED, f"entered {_TIMES}{node.entered}")
    if node.current:
        fill, color, width = _PATH_FILL, _PATH, "3"
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


_DOT_EDGE_COLOR: dict[EdgeKind, str] = {
    "start": _INK,
    "client_change": _INK,
    "switch": _AGENT,
    "option": _AGENT,
    "reject": _REJECT,
    "restore": _RESTORE,
}


def _dot_edge_attrs(edge: DiagramEdge) -> dict[str, str]:
    color, width = _DOT_EDGE_COLOR[edge.kind], "1.2"
    if edge.faded:
        color = _FADED
    if edge.on_path:
        color, width = _PATH, "2.5"
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
    rows = "".join(
        f'<TR><TD WIDTH="44">{_DOT_LEGEND_SAMPLE[entry.kind]}</TD>'
        f'<TD ALIGN="LEFT">{_html(entry.text)}</TD><TD WIDTH="6"></TD></TR>'
        for entry in diagram.legend
    )
    if diagram.caption:
        rows = f'<TR><TD COLSPAN="3" ALIGN="LEFT"><I>{_html(diagram.caption)}</I></TD></TR>{rows}'
    return (
        f'<FONT POINT-SIZE="10"><TABLE BORDER="1" STYLE="rounded" COLOR="{_GROUP_LINE}" '
        'CELLBORDER="0" CELLSPACING="1" CELLPADDING="3">'
        f'<TR><TD COLSPAN="3" ALIGN="LEFT"><B>{_html(diagram.spec_name)}</B></TD></TR>'
        f"{rows}</TABLE></FONT>"
    )


def _line_sample(color: str, style: str = "solid") -> str:
    """A short horizontal line, vertically centred: a table whose first row has a bottom border."""
    dash = "" if style == "solid" else f' STYLE="{style}"'
    return (
        '<TABLE BORDER="0" CELLPADDING="0" CELLSPACING="0">'
        f'<TR><TD WIDTH="40" HEIGHT="6" SIDES="B" BORDER="2"{dash} COLOR="{color}"></TD></TR>'
        '<TR><TD HEIGHT="6"></TD></TR></TABLE>'
    )


def _box_sample(fill: str, color: str, style: str, width: int = 1) -> str:
    """A small box, like a node or a group."""
    return (
        f'<TABLE BORDER="{width}" STYLE="{style}" COLOR="{color}" BGCOLOR="{fill}" '
        'CELLPADDING="0" CELLSPACING="0"><TR><TD WIDTH="30" HEIGHT="10"></TD></TR></TABLE>'
    )


_DOT_LEGEND_SAMPLE: dict[LegendKind, str] = {
    "start": f'<FONT COLOR="{_INK}">●</FONT>',
    "client_change": _line_sample(_INK),
    "group": _box_sample(_GROUP_FILL, _GROUP_LINE, "rounded"),
    "switch": _line_sample(_AGENT, "dashed"),
    "reject": _line_sample(_REJECT, "dashed"),
    "previous": _box_sample(_AGENT_FILL, _AGENT, "dashed"),
    "restore": _line_sample(_RESTORE, "dotted"),
    "count": f'<FONT COLOR="{_INK}">{_TIMES}N</FONT>',
    "faded": _line_sample(_FADED),
    "path": _line_sample(_PATH),
    "current": _box_sample(_PATH_FILL, _PATH, "rounded", 2),
}


# -- SVG and PNG (Graphviz) ----------------------------------------------------------------


def _pipe(diagram: Diagram, fmt: Literal["svg", "png"]) -> bytes:
    """Run Graphviz's ``dot`` on *diagram*.

    A missing binary, a picture beyond the caps and a run past :data:`RENDER_TIMEOUT` are
    user errors (``DiagramError``); anything else is a bug.
    """
    nodes, arrows = len(diagram.nodes), len(diagram.edges)
    if nodes > RENDERED_NODES_MAX or arrows > RENDERED_ARROWS_MAX:
        msg = (
            f"spec {diagram.spec_name!r}: {fmt} output draws at most {RENDERED_NODES_MAX} "
            f"nodes and {RENDERED_ARROWS_MAX} arrows (the limits), this diagram has {nodes} "
            f"nodes and {arrows} arrow{'s' * (arrows != 1)}; write mermaid, dot or md instead"
        )
        raise DiagramError(msg)
    text = to_dot(diagram, dpi=144 if fmt == "png" else None)
    try:
        done = subprocess.run(  # noqa: S603 - a fixed program and arguments; the DOT is data
            ["dot", "-Kdot", f"-T{fmt}"],  # noqa: S607 - found on PATH, as Graphviz says
            input=text.encode("utf-8"),
            capture_output=True,
            timeout=RENDER_TIMEOUT,
            check=True,
        )
    except FileNotFoundError:
        msg = f"{fmt} output needs Graphviz's dot program: install the Debian package graphviz"
        raise DiagramError(msg) from None
    except subprocess.TimeoutExpired:
        msg = (
            f"spec {diagram.spec_name!r}: Graphviz's dot did not draw the {fmt} within "
            f"{RENDER_TIMEOUT} s (the limit); write mermaid, dot or md instead"
        )
        raise DiagramError(msg) from None
    return done.stdout


def to_svg(diagram: Diagram) -> str:
    """Render *diagram* as SVG through Graphviz's ``dot``.

    The comment naming Graphviz keeps only its version number (``<!-- Generated by
    graphviz version 2.43.0 -->``, no build stamp), so the same Graphviz and fonts always
    give the same text, and a committed file tells which Graphviz drew it.

    Raises:
        DiagramError: ``dot`` is not installed (Debian package ``graphviz``), the diagram
            has more than :data:`RENDERED_NODES_MAX` nodes or :data:`RENDERED_ARROWS_MAX`
            arrows, or ``dot`` takes longer than :data:`RENDER_TIMEOUT` seconds.
    """
    svg = _pipe(diagram, "svg").decode("utf-8")
    return _GRAPHVIZ_COMMENT.sub(r"<!-- Generated by graphviz version \1 -->\n", svg, count=1)


_GRAPHVIZ_COMMENT = re.compile(r"<!-- Generated by graphviz version (\S+).*?-->\n", re.DOTALL)


def to_png(diagram: Diagram) -> bytes:
    """Render *diagram* as a PNG image at 144 dpi through Graphviz's ``dot``.

    Raises:
        DiagramError: ``dot`` is not installed (Debian package ``graphviz``), the diagram
            has more than :data:`RENDERED_NODES_MAX` nodes or :data:`RENDERED_ARROWS_MAX`
            arrows, or ``dot`` takes longer than :data:`RENDER_TIMEOUT` seconds.
    """
    return _pipe(diagram, "png")


# -- Markdown ------------------------------------------------------------------------------

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
    """Render a review page: the Mermaid diagram, then tables of modes and switches.

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
    out += _markdown_switches(diagram, spec)
    if diagram.traffic is not None:
        out += _markdown_traffic(diagram, spec, diagram.traffic)
    return "\n".join(out) + "\n"


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
    for switch in spec.switches:
        sources = ", ".join(_md(spec.mode(s).name) for s in switch.source)
        out.extend(
            f"| {sources} | {_md(switch.title)} | {_md(option.name)} "
            f"| <code>{_md(option.option_id)}</code> | {_md(option.kind)} "
            f"| {_option_result(spec, option)} |"
            for option in switch.options
        )
    return out + _markdown_option_targets(diagram, spec)


def _markdown_option_targets(diagram: Diagram, spec: ModeSpec) -> list[str]:
    """Where each allow option can lead, and where it never can (the policy safety rule)."""
    out = [
        "",
        "### Where each approval can lead",
        "",
        "Targets are resolved when the permission request is built: a `$previous` option",
        "names the concrete mode it returns to, and an approval given after the mode changed",
        "meanwhile applies exactly that shown mode, and only if it is restorable and a switch",
        "may reach it from the new mode.",
        "",
        "| In | optionId | Resolved target | Never reaches | Approved after the mode changed |",
        "|---|---|---|---|---|",
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
        never = _names(spec, diagram.never_reached(reach))
        out.append(
            f"| {_md(spec.mode(reach.source).name)} | <code>{_md(reach.option_id)}</code> "
            f"| {rule} | {never} | {_stale_rule(spec, reach.stale)} |"
        )
    return out


def _names(spec: ModeSpec, modes: Iterable[str]) -> str:
    return ", ".join(_md(spec.mode(m).name) for m in modes) or "none"


def _stale_rule(spec: ModeSpec, modes: Sequence[str]) -> str:
    if not modes:
        return "refused"
    return f"{_names(spec, modes)}, if a switch may reach it from the new mode; else refused"


def _option_result(spec: ModeSpec, option: SwitchOption) -> str:
    if not option.allows or option.target is None:
        return "stays"
    if option.target == PREVIOUS:
        return "the previous mode"
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


# -- one call per format -------------------------------------------------------------------


def render(
    spec: ModeSpec,
    fmt: Format,
    *,
    logs: Sequence[str | Path] = (),
    session_id: str | None = None,
) -> bytes:
    """Draw *spec* in format *fmt*, with the traffic of *logs* if any.

    Args:
        spec: the spec to draw.
        fmt: one of :data:`FORMATS`.
        logs: transition logs to overlay (none: the policy alone).
        session_id: a session of *logs* whose path to highlight.

    Returns:
        The file's bytes (UTF-8 text for every format but ``png``).

    Raises:
        DiagramError: ``dot`` is missing (``svg``, ``png``); the logs hold only other specs;
            *session_id* is not in them, or is given without logs.
        LogError: a log cannot be read.
    """
    if session_id is not None and not logs:
        msg = "a session to highlight needs a transition log (--log FILE)"
        raise DiagramError(msg)
    traffic = read_traffic(spec, logs, session_id=session_id) if logs else None
    diagram = build_diagram(spec, traffic)
    if fmt == "png":
        return to_png(diagram)
    if fmt == "svg":
        text = to_svg(diagram)
    elif fmt == "dot":
        text = to_dot(diagram)
    elif fmt == "md":
        text = to_markdown(diagram, spec)
    else:
        text = to_mermaid(diagram)
    return text.encode("utf-8")


def write_preset_diagrams(directory: str | Path, *, svg: bool = True) -> tuple[Path, ...]:
    """Write every shipped preset's diagrams, and an index, into *directory*.

    For each preset ``NAME``: ``NAME.mmd``, ``NAME.md`` and (with *svg*) ``NAME.svg``; then
    ``README.md`` listing them. This makes the repository's ``diagrams/`` folder, and a
    test checks that folder against it byte for byte.

    Args:
        directory: an existing directory.
        svg: also render the SVGs (this needs ``dot``).

    Returns:
        The files written, sorted.

    Raises:
        DiagramError: *svg* is true and ``dot`` is missing.
    """
    directory = Path(directory)
    files: dict[str, str] = {}
    index = [
        "# Diagrams of the shipped presets",
        "",
        "Generated from `modefsm/spec/presets/` by `modefsm.diagram.write_preset_diagrams`; a test",
        "fails when a file here differs from what the presets give. After changing a preset",
        "or the diagram code, regenerate them (the SVGs need Graphviz, and its version and",
        "fonts shape them: each SVG names the Graphviz that drew it, and the test compares",
        "SVGs only where `dot -V` shows that version):",
        "",
        "```sh",
        "python -c \"from modefsm.diagram import write_preset_diagrams; write_preset_diagrams('diagrams')\"",  # noqa: E501
        "```",
        "",
        "| Preset | Modes | Mermaid | Review page | Picture |",
        "|---|---|---|---|---|",
    ]
    for name in preset_names():
        spec = preset(name)
        diagram = build_diagram(spec)
        files[f"{name}.mmd"] = to_mermaid(diagram)
        files[f"{name}.md"] = to_markdown(diagram, spec)
        if svg:
            files[f"{name}.svg"] = to_svg(diagram)
        modes = ", ".join(_md(m.name) for m in spec.modes)
        index.append(
            f"| {name} | {modes} | [{name}.mmd]({name}.mmd) | [{name}.md]({name}.md) "
            f"| [{name}.svg]({name}.svg) |"
        )
    index += [
        line for name in preset_names() for line in ("", f"## {name}", "", f"![{name}]({name}.svg)")
    ]
    files["README.md"] = "\n".join(index) + "\n"
    written = []
    for file_name, text in files.items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)
    return tuple(sorted(written))
