r"""Building a :class:`~modefsm.diagram.Diagram` from a spec, and the approval reach rule.

Building a diagram takes time linear in the spec (its modes and list entries) with no
recursion, times the source modes of switches with a ``$previous`` option (each needs a
pass over the modes). What cannot be drawn in bounded time raises
:class:`~modefsm.errors.DiagramError`: arrows outside client groups standing for more
than :data:`DRAWN_MAX` client changes, or client groups needing more than
:data:`GROUP_STEPS_MAX` steps to find.

Example:
    >>> from modefsm import preset
    >>> diagram = build_diagram(preset("seed"))
    >>> [(n.id, n.label) for n in diagram.nodes if n.kind == "mode"]
    [('s0', 'Ask'), ('s1', 'Architect'), ('s2', 'Code')]
    >>> [(g.label, g.members) for g in diagram.groups]
    [('set_mode between\nany two of these', ('s0', 's1', 's2'))]
    >>> [(e.source, e.dest, e.label) for e in diagram.edges if e.kind == "reject"]
    [('c0', 's1', 'No, stay in architect mode\n(reject_once)')]
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain, islice
from typing import NoReturn

from modefsm.diagram._model import (
    Diagram,
    DiagramEdge,
    DiagramGroup,
    DiagramNode,
    LegendEntry,
    LegendKind,
    OptionReach,
    RuleLine,
    ToolCount,
    Traffic,
)
from modefsm.errors import DiagramError
from modefsm.spec import (
    DECISIONS,
    PREVIOUS,
    TOOL_KINDS,
    Decision,
    Mode,
    ModeSpec,
    Switch,
    SwitchOption,
)

__all__ = ["DRAWN_MAX", "GROUP_STEPS_MAX", "build_diagram", "option_reach", "rule_lines"]


_GROUP_MIN = 3
"""The fewest mutually client-reachable modes drawn as one group."""
DRAWN_MAX = 100_000
"""The most client changes a diagram's arrows outside client groups may stand for.

An arrow from or to a whole group stands for one change per member (its ``transitions``).
A spec beyond it (``DiagramError``) has many modes that cannot change to any mode and are
in no group; so has a log table (Markdown with ``--log``) of more rows.
"""


_FREE_CLASSES_MAX = 700
"""The most classes of modes free to change to any mode, each with different mutual
listed modes, that the group search takes (its graph holds every pair of them)."""
GROUP_STEPS_MAX = 2_000_000
"""The most steps spent finding client groups (``DiagramError`` beyond)."""


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
    reach = option_reach(spec)
    choices, switch_edges = _switch_edges(spec, ids, reach)
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
            rules=rule_lines(spec, mode),
        )
        for mode in spec.modes
    ]
    nodes += choices
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
        reach=reach,
        traffic=traffic,
        caption=caption,
    )


def option_reach(spec: ModeSpec) -> tuple[OptionReach, ...]:
    """Where each allow option of each switch can lead, in each of the switch's source modes.

    The one statement of the rule the engine applies (its ``offer_switch`` and
    ``settle_switch``), which every renderer draws. A named target is reached alone. A
    ``$previous`` option returns to the mode the session was in before the current one,
    named in the option when the permission request is built; it reaches the modes from
    which a client change or a switch enters the source mode (or enters a non-restorable
    mode that load or resume replaces by the source mode), less the source mode and the
    targets the switch's other allow options name (such an option is not offered: the
    other one is). An approval given after the mode changed meanwhile applies the shown
    mode only if that mode is restorable and a switch may reach it from the new mode.

    Args:
        spec: the spec.

    The modes an item does not list are never reached: no sequence of client changes,
    approvals and restarts makes the engine offer the option one of them. The list of a
    ``$previous`` option may be wider than what the engine ever offers when another
    mode's ``$previous`` option is what could enter the source mode (the transition
    table counts such an option as reaching every mode).

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
    for choice, switch in enumerate(spec.switches):
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
    return tuple(reach)


def rule_lines(spec: ModeSpec, mode: Mode) -> tuple[RuleLine, ...]:
    """What *mode*'s ``tools`` rules say, one :class:`RuleLine` per decision.

    Each kind gets the decision the rules give a call of that kind without a name (the
    engine's :meth:`RuleTable.scan <modefsm.spec.RuleTable.scan>`); a rule with a name
    pattern that comes before that decision in the rules is listed with the kinds it may
    decide, unless it and every later such rule say the same as the kind's decision. A
    kind whose decision is ``tools_default`` is ``*``, on the default's line, which is
    last; the other lines are in the order ``allow``, ``ask``, ``deny``. Each line lists
    at most :data:`NAMES_MAX` targets, then how many more.

    Args:
        spec: the spec *mode* is a mode of.
        mode: the mode.

    Returns:
        The lines; none for a mode with no rules and ``tools_default = "ask"`` (the
        default: every call is asked about).
    """
    if not mode.tools and mode.tools_default == "ask":
        return ()
    default = mode.tools_default
    kinds: dict[Decision, list[str]] = {d: [] for d in DECISIONS}
    patterns: dict[int, list[str]] = {}  # a rule's index: the kinds it may decide
    rest = False
    for kind in TOOL_KINDS:
        verdict = spec.rules.scan(mode.id, kind)
        end = len(mode.tools) if verdict.rule_index is None else verdict.rule_index
        first = [
            i
            for i, rule in enumerate(mode.tools[:end])
            if rule.name is not None and (rule.kind is None or kind in rule.kind)
        ]
        while first and mode.tools[first[-1]].decision == verdict.decision:
            first.pop()
        for i in first:
            patterns.setdefault(i, []).append(kind)
        if verdict.decision == default:
            rest = True
        else:
            kinds[verdict.decision].append(kind)
    targets: dict[Decision, list[str]] = {d: list(k) for d, k in kinds.items()}
    for i, decided in sorted(patterns.items()):
        rule = mode.tools[i]
        named = TOOL_KINDS if rule.kind is None else rule.kind
        pattern = f'"{rule.name}"'
        shown = pattern if set(decided) == set(named) and rule.kind is None else None
        targets[rule.decision].append(shown or f"{'/'.join(decided)} {pattern}")
    order = [d for d in DECISIONS if d != default] + [default]
    lines = {d: _capped(targets[d]) + ("*",) * (rest and d == default) for d in order}
    return tuple(RuleLine(decision=d, targets=lines[d]) for d in order if lines[d])


def _capped(targets: Sequence[str]) -> tuple[str, ...]:
    """The first :data:`NAMES_MAX` of *targets*, and how many more there are."""
    more = len(targets) - NAMES_MAX
    return tuple(targets[:NAMES_MAX]) + ((f"and {more} more",) if more > 0 else ())


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
    spec: ModeSpec, ids: dict[str, str], reach: Sequence[OptionReach]
) -> tuple[list[DiagramNode], list[DiagramEdge]]:
    """One choice node per switch, its entry arrows and its option arrows (see :func:`_options`).

    Every source mode of a switch has a ``switch`` arrow to the one choice node; a reject
    option has an arrow back to each source.
    """
    nodes: list[DiagramNode] = []
    edges: list[DiagramEdge] = []
    reach_of: dict[str, list[OptionReach]] = {}
    for item in reach:
        reach_of.setdefault(item.choice, []).append(item)
    for number, switch in enumerate(spec.switches):
        choice = f"c{number}"
        nodes.append(DiagramNode(id=choice, kind="choice", label=switch.title))
        edges += [
            DiagramEdge(
                kind="switch",
                source=ids[source],
                dest=choice,
                label="switch_mode",
                line="dashed",
                transitions=tuple(("switch_mode", source, o.option_id) for o in switch.options),
            )
            for source in switch.source
        ]
        previous, option_edges = _options(spec, switch, choice, ids, reach_of.get(choice, []))
        nodes += previous
        edges += option_edges
    return nodes, edges


def _options(
    spec: ModeSpec,
    switch: Switch,
    choice: str,
    ids: dict[str, str],
    reach: Sequence[OptionReach],
) -> tuple[list[DiagramNode], list[DiagramEdge]]:
    """The arrows from a choice node: one per destination, its options in option order.

    An allow option with a named target leads to that mode. A ``$previous`` option leads to
    the one mode it can return to from every source (:func:`option_reach`), or else to a
    ``previous`` node (``p`` and the choice's number) naming the modes it can be. A reject
    option leads back to each source. An option's name is shown as the user sees it:
    ``{mode}`` filled in (see :func:`_shown_name`).
    """
    back = _previous_reach(reach)
    previous: list[DiagramNode] = []
    by_dest: dict[tuple[str, bool], list[tuple[str, SwitchOption]]] = {}
    for option in switch.options:
        if not option.allows or option.target is None:
            for source in switch.source:
                by_dest.setdefault((ids[source], False), []).append((source, option))
            continue
        if option.target != PREVIOUS:
            dest = ids[option.target]
        elif back is not None:
            dest = ids[back]
        else:
            dest = f"p{choice[1:]}"
            previous.append(
                DiagramNode(id=dest, kind="previous", label=_previous_label(spec, reach))
            )
        by_dest.setdefault((dest, True), []).extend((s, option) for s in switch.source)
    edges = []
    for (dest, allows), picked in by_dest.items():
        options = list(dict.fromkeys(option for _, option in picked))
        edges.append(
            DiagramEdge(
                kind="option" if allows else "reject",
                source=choice,
                dest=dest,
                label="\n".join(f"{_shown_name(spec, o, back)}\n({o.kind})" for o in options),
                line="dashed",
                transitions=tuple(("switch_mode", s, o.option_id) for s, o in picked),
            )
        )
    return previous, edges


def _previous_reach(reach: Sequence[OptionReach]) -> str | None:
    """The mode a ``$previous`` option of one switch returns to, if it is one from every source."""
    modes = {m for r in reach if r.target == PREVIOUS for m in r.reaches}
    return next(iter(modes)) if len(modes) == 1 else None


def _previous_label(spec: ModeSpec, reach: Sequence[OptionReach]) -> str:
    r"""The text of a ``previous`` node: the modes its option can return to.

    One line per source mode where they differ (``in Plan: A, B``); at most
    :data:`NAMES_MAX` names a line, then how many more.
    """
    by_source = {r.source: r.reaches for r in reach if r.target == PREVIOUS}
    lists = set(by_source.values())
    if len(lists) == 1:
        [reaches] = lists
        return f"the mode before:\n{_names(spec, reaches)}"
    lines = ["the mode before"]
    lines += [f"in {spec.mode(s).name}: {_names(spec, r)}" for s, r in by_source.items()]
    return "\n".join(lines)


NAMES_MAX = 12
"""The most mode names a label lists before ``and N more``."""


def _names(spec: ModeSpec, modes: Sequence[str]) -> str:
    """The names of the first :data:`NAMES_MAX` of *modes*, and how many more there are."""
    if not modes:
        return "none, never offered"
    names = ", ".join(spec.mode(m).name for m in islice(modes, NAMES_MAX))
    more = len(modes) - NAMES_MAX
    return names + (f" and {more} more" if more > 0 else "")


def _shown_name(spec: ModeSpec, option: SwitchOption, target: str | None) -> str:
    """An option's name as the permission request shows it (``ModeEngine.offer_switch``).

    ``{mode}`` is the target's name. A ``$previous`` option names its one possible mode
    (*target*) the way the engine does, or, where it can be several, says ``the previous
    mode`` for ``{mode}``.
    """
    if option.target == PREVIOUS:
        if target is None:
            return option.name.replace("{mode}", "the previous mode")
        name = spec.mode(target).name
        if "{mode}" in option.name:
            return option.name.replace("{mode}", name)
        return f"{option.name} ({name})"
    if option.target is None:
        return option.name
    return option.name.replace("{mode}", spec.mode(option.target).name)


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
    tools: dict[str, list[ToolCount]] = {}
    for count in traffic.tools:
        tools.setdefault(count.mode, []).append(count)
    marked = [
        node.model_copy(
            update={
                "current": node.mode_id == traffic.current,
                "entered": traffic.entered.get(node.mode_id, 0),
                "tools": tuple(tools.get(node.mode_id, ())),
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
        noun = "record" if traffic.unmatched == 1 else "records"
        caption += f", {traffic.unmatched} {noun} matching no transition of this spec"
    if traffic.decisions:
        noun = "tool call" if traffic.decisions == 1 else "tool calls"
        caption += f", {traffic.decisions} {noun} decided"
        if traffic.unmatched_decisions:
            caption += f" ({traffic.unmatched_decisions} in modes this spec does not have)"
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
        "rules": any(n.rules for n in nodes),
        "tools": any(n.tools for n in nodes),
    }
    session = traffic.session_id if traffic is not None else None
    return tuple(
        LegendEntry(kind=kind, text=_LEGEND_TEXT[kind].format(session=session))
        for kind, show in shown.items()
        if show
    )


_LEGEND_TEXT: dict[LegendKind, str] = {
    "start": "session/new: the initial mode (bold)",
    "client_change": "set_mode by the client",
    "group": "set_mode between any two in a box",
    "switch": "switch_mode: the user picks an option",
    "reject": "a reject option: the mode stays",
    "previous": "the mode the session was in before",
    "restore": "not restored: load gives the mode it points to",
    "count": "times taken (on a mode: times entered)",
    "faded": "never taken in the log",
    "path": "the steps of session {session}",
    "current": "its current mode",
    "rules": "tool calls of these kinds get allow, ask or deny (* the rest)",
    "tools": "tool calls decided in the log, per kind (ask: by the answer)",
}
