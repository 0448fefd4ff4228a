"""Specs of many modes: the fast tables give what the exhaustive definitions give, and
nothing recurses as deep as a spec is large."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from modefsm import ModeSpec, SpecError
from modefsm.diagram import (
    DRAWN_MAX,
    GROUP_STEPS_MAX,
    build_diagram,
    render,
    to_dot,
    to_markdown,
    to_mermaid,
)
from modefsm.engine import _machine as machine_module
from modefsm.engine._engine import ModeEngine
from modefsm.engine._machine import ModeMachine, state_name
from modefsm.errors import DiagramError

# -- the exhaustive definitions, as modefsm had them before they were made linear ----------


def reference_allows(data: dict[str, Any], kind: str, source: str, dest: str) -> bool:
    """Which transitions exist, read straight from the spec's data."""
    modes = {m["id"]: m for m in data["modes"]}
    changes = data.get("client_changes", {})
    if source == dest:
        return False
    client = source not in changes or dest in changes[source]
    if kind == "client_change":
        return client
    if kind == "switch_mode":
        for switch in data.get("switches", []):
            if source in switch["source"]:
                targets = {o.get("target") for o in switch["options"] if o["kind"] != "reject_once"}
                return client or "$previous" in targets or dest in targets
        return client
    mode = modes[source]
    restored = source if mode.get("restorable", True) else mode.get("fallback", data["initial"])
    return restored == dest


def reference_reached(data: dict[str, Any]) -> set[str]:
    """Modes reached from the initial one by client changes and explicit switch targets."""
    ids = [m["id"] for m in data["modes"]]
    reached, frontier = {data["initial"]}, [data["initial"]]
    while frontier:
        source = frontier.pop()
        for dest in ids:
            explicit = any(
                source in sw["source"] and dest in {o.get("target") for o in sw["options"]}
                for sw in data.get("switches", [])
            )
            if (reference_allows(data, "client_change", source, dest) or explicit) and (
                dest not in reached
            ):
                reached.add(dest)
                frontier.append(dest)
    return reached


def reference_groups(spec: ModeSpec) -> list[tuple[str, ...]]:
    """Repeatedly the largest maximal clique of mutual client changes (ties: spec order)."""
    order = {m: i for i, m in enumerate(spec.mode_ids)}
    allowed = {(s, d) for s in spec.mode_ids for d in spec.client_targets(s)}
    mutual = {
        m: {o for o in spec.mode_ids if (m, o) in allowed and (o, m) in allowed}
        for m in spec.mode_ids
    }

    def cliques(chosen: set[str], open_: set[str], closed: set[str]) -> Iterator[set[str]]:
        if not open_ and not closed:
            yield chosen
            return
        for mode in sorted(open_):
            yield from cliques(chosen | {mode}, open_ & mutual[mode], closed & mutual[mode])
            open_ = open_ - {mode}
            closed = closed | {mode}

    remaining = set(spec.mode_ids)
    groups: list[tuple[str, ...]] = []
    while True:
        found = [sorted(c, key=order.__getitem__) for c in cliques(set(), set(remaining), set())]
        best = min(found, key=lambda c: (-len(c), [order[m] for m in c]), default=[])
        if len(best) < 3:
            return groups
        remaining -= set(best)
        groups.append(tuple(best))


def reference_client_arrows(
    spec: ModeSpec, groups: list[tuple[str, ...]]
) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]]:
    """Hub arrows between units where every pair is allowed, then the other changes."""
    allowed = {(s, d) for s in spec.mode_ids for d in spec.client_targets(s)}
    first = {g[0]: g for g in groups}
    grouped = {m for g in groups for m in g}
    units = [first.get(m, (m,)) for m in spec.mode_ids if m in first or m not in grouped]
    done = {(a, b) for g in groups for a in g for b in g if a != b}
    arrows = []
    for sources in units:
        for dests in units:
            pairs = tuple((a, b) for a in sources for b in dests)
            if sources != dests and len(pairs) > 1 and allowed.issuperset(pairs):
                arrows.append((sources, dests, pairs))
                done.update(pairs)
    arrows += [
        ((s,), (d,), ((s, d),))
        for s in spec.mode_ids
        for d in spec.client_targets(s)
        if (s, d) not in done
    ]
    return arrows


# -- random small specs --------------------------------------------------------------------


@st.composite
def spec_data(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 7))
    ids = [f"m{i}" for i in range(count)]
    changes = {}
    for mode_id in ids:
        if draw(st.booleans()):
            changes[mode_id] = draw(st.lists(st.sampled_from(ids), max_size=count + 1))
    data: dict[str, Any] = {
        "name": "random",
        "initial": draw(st.sampled_from(ids)),
        "modes": [{"id": m, "name": m.upper()} for m in ids],
        "client_changes": changes,
    }
    if count > 1 and draw(st.booleans()):
        source = draw(st.sampled_from(ids))
        target = draw(st.sampled_from([*[m for m in ids if m != source], "$previous"]))
        data["switches"] = [
            {
                "source": [source],
                "title": "Switch?",
                "options": [
                    {"optionId": "go", "name": "Go", "kind": "allow_once", "target": target},
                    {"optionId": "no", "name": "No", "kind": "reject_once"},
                ],
            }
        ]
    return data


def build(data: dict[str, Any]) -> ModeSpec:
    try:
        return ModeSpec.from_data(data)
    except SpecError:
        assume(False)  # noqa: FBT003 - hypothesis API
        raise


def _ignore(*_: object) -> None:
    pass


class TestSameAsTheDefinitions:
    """The linear tables agree with the exhaustive definitions on random small specs."""

    @settings(max_examples=100, deadline=None)
    @given(spec_data())
    def test_unreachable_modes_are_those_no_path_reaches(self, data):
        ids = [m["id"] for m in data["modes"]]
        reached = reference_reached(data)
        expected = [
            f"modes[{i}]: mode {m!r} is unreachable from the initial mode"
            for i, m in enumerate(ids)
            if m not in reached
        ]

        try:
            ModeSpec.from_data(data)
            found = []
        except SpecError as exc:
            found = [str(p) for p in exc.problems]

        assert found == expected

    @settings(max_examples=100, deadline=None)
    @given(spec_data())
    def test_machine_allows_exactly_the_spec_transitions(self, data):
        spec = build(data)
        machine = ModeMachine(spec, before=_ignore, after=_ignore)
        expected = [
            (kind, s, d)
            for d in spec.mode_ids
            for kind in ("client_change", "switch_mode", "restore")
            for s in spec.mode_ids
            if reference_allows(data, kind, s, d)
        ]

        assert machine.edges() == expected

    @settings(max_examples=100, deadline=None)
    @given(spec_data())
    def test_groups_and_client_arrows_are_the_exhaustive_ones(self, data):
        spec = build(data)
        groups = reference_groups(spec)
        diagram = build_diagram(spec)
        node = {m: f"s{i}" for i, m in enumerate(spec.mode_ids)}
        unit_id = {g: f"g{i}" for i, g in enumerate(groups)}
        expected = [
            (unit_id.get(s, node[s[0]]), unit_id.get(d, node[d[0]]), pairs)
            for s, d, pairs in reference_client_arrows(spec, groups)
        ]

        assert [g.modes for g in diagram.groups] == groups
        assert [g.members for g in diagram.groups] == [tuple(node[m] for m in g) for g in groups]
        assert [
            (e.source, e.dest, tuple((a, b) for _, a, b in e.transitions))
            for e in diagram.edges
            if e.kind == "client_change"
        ] == expected

    @settings(max_examples=100, deadline=None)
    @given(spec_data())
    def test_a_group_stands_for_every_ordered_pair_of_its_modes(self, data):
        spec = build(data)
        for group in build_diagram(spec).groups:
            pairs = [("client_change", a, b) for a in group.modes for b in group.modes if a != b]
            assert group.transitions == tuple(pairs)
            assert all(group.stands_for(p) for p in pairs)
            assert not group.stands_for(("client_change", group.modes[0], group.modes[0]))
            assert not group.stands_for(("restore", group.modes[0], group.modes[1]))


# -- many modes ----------------------------------------------------------------------------


def many_modes(count: int, **extra: Any) -> ModeSpec:
    modes = [{"id": f"m{i}", "name": f"Mode {i}"} for i in range(count)]
    return ModeSpec.from_data({"name": "many", "initial": "m0", "modes": modes, **extra})


def chain(count: int) -> dict[str, list[str]]:
    return {f"m{i}": [f"m{(i + 1) % count}"] for i in range(count)}


@pytest.fixture
def shallow_stack() -> Iterator[None]:
    """A recursion limit far below the spec sizes used: only size-independent depth fits."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(250)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


class TestManyModes:
    """Thousands of modes compile, run and draw, with no recursion as deep as the spec."""

    @pytest.mark.parametrize("shape", ["any_to_any", "chain"])
    def test_compile_engine_and_every_text_format_with_a_shallow_stack(self, shape, shallow_stack):
        extra = {"client_changes": chain(3000)} if shape == "chain" else {}
        spec = many_modes(3000, **extra)

        engine = ModeEngine(spec)
        diagram = build_diagram(spec)
        texts = [to_mermaid(diagram), to_dot(diagram), to_markdown(diagram, spec)]

        assert len(engine.views) == 3000
        assert [len(g.modes) for g in diagram.groups] == ([3000] if shape == "any_to_any" else [])
        assert all(text.count("Mode 2999") >= 1 for text in texts)

    def test_a_problem_lists_at_most_20_mode_ids(self):
        modes = [{"id": f"m{i}", "name": f"Mode {i}"} for i in range(25)]

        with pytest.raises(SpecError) as caught:
            ModeSpec.from_data({"name": "many", "initial": "zz", "modes": modes})

        listed = ", ".join(f"m{i}" for i in range(20))
        assert [str(p) for p in caught.value.problems] == [
            f'initial: mode "zz" is not in modes ({listed}, ... (5 more))'
        ]

    def test_any_to_any_is_one_group_and_its_changes_are_not_listed(self):
        diagram = build_diagram(many_modes(2000))

        assert [(g.id, len(g.members)) for g in diagram.groups] == [("g0", 2000)]
        assert [e.kind for e in diagram.edges] == ["start"]
        assert diagram.groups[0].stands_for(("client_change", "m1999", "m0"))

    def test_a_group_with_a_restricted_member_draws_one_arrow_per_change_it_cannot_hub(self):
        # m1 may change to every mode but m2, so it joins the group of the others, and the
        # group has no arrow to m2 as a whole: each free member gets one
        ids = [f"m{i}" for i in range(5000)]
        changes = {"m1": [m for m in ids if m not in ("m1", "m2")], "m2": ["m0"]}

        diagram = build_diagram(many_modes(5000, client_changes=changes))

        arrows = [(e.source, e.dest) for e in diagram.edges if e.kind == "client_change"]
        assert [len(g.modes) for g in diagram.groups] == [4999]
        assert arrows == [("s0", "s2"), ("s2", "s0")] + [(f"s{i}", "s2") for i in range(3, 5000)]

    def test_a_machine_keeps_at_most_its_cap_of_transitions(self, monkeypatch):
        monkeypatch.setattr(machine_module, "MATERIALIZED_MAX", 50)
        spec = many_modes(20)
        taken: list[tuple[str, str]] = []
        machine = ModeMachine(spec, before=_ignore, after=lambda _, s, d, __: taken.append((s, d)))
        session = type("Session", (), {})()
        pairs = [(s, d) for s in spec.mode_ids for d in spec.mode_ids if s != d]
        pairs.append(pairs[0])  # made first, dropped long since: made again

        held = []
        for source, dest in pairs:
            session.fsm_state = state_name(source)
            assert machine.fire(session, "client_change", dest, None)
            assert session.fsm_state == state_name(dest)
            events = machine._machine.events.values()
            held.append(sum(len(t) for e in events for t in e.transitions.values()))

        assert taken == pairs
        assert max(held) == 50
        assert held[:50] == list(range(1, 51))

    def test_tangled_client_changes_are_refused_with_the_step_limit(self):
        # 60 modes, each may change to every other but its partner: 2^30 maximal cliques
        count = 60
        partner = {f"m{i}": f"m{i ^ 1}" for i in range(count)}
        ids = [f"m{i}" for i in range(count)]
        changes = {m: [o for o in ids if o not in (m, partner[m])] for m in ids}

        with pytest.raises(DiagramError) as caught:
            build_diagram(many_modes(count, client_changes=changes))

        assert str(caught.value) == (
            f"spec 'many': finding the groups of modes a client may change between takes "
            f"more than {GROUP_STEPS_MAX} steps (the limit); its client_changes lists are "
            "too intertwined to draw"
        )

    def test_too_many_kinds_of_free_modes_are_refused_with_the_step_limit(self):
        # 701 free modes, each the only mode its own listed mode may change to
        modes = [{"id": f"f{i}", "name": f"F{i}"} for i in range(701)]
        modes += [{"id": f"l{i}", "name": f"L{i}"} for i in range(701)]
        changes = {f"l{i}": [f"f{i}"] for i in range(701)}
        spec = ModeSpec.from_data(
            {"name": "many", "initial": "f0", "modes": modes, "client_changes": changes}
        )

        with pytest.raises(DiagramError) as caught:
            build_diagram(spec)

        assert str(caught.value).startswith("spec 'many': finding the groups of modes a client")

    def test_arrows_past_the_cap_are_refused(self):
        # half the modes free (one group), half listed with only m0: each free mode reaches
        # each listed one, and no listed mode can join the group
        count = 2 * int(DRAWN_MAX**0.5) + 4
        listed = {f"m{i}": ["m0"] for i in range(count // 2, count)}
        # m0 is free and lists nobody: every listed mode is one arrow from each free mode
        spec = many_modes(count, client_changes=listed)

        with pytest.raises(DiagramError) as caught:
            build_diagram(spec)

        assert str(caught.value) == (
            f"spec 'many': its diagram's arrows would stand for more than {DRAWN_MAX} client "
            "changes outside client groups (the limit); list fewer modes in client_changes, "
            "or let more modes change to any mode"
        )

    def test_svg_of_more_nodes_than_graphviz_is_given_is_refused(self):
        with pytest.raises(DiagramError) as caught:
            render(many_modes(600), "svg")

        assert str(caught.value) == (
            "spec 'many': svg output draws at most 500 nodes and 1000 arrows (the limits), "
            "this diagram has 601 nodes and 1 arrow; write mermaid, dot or md instead"
        )
