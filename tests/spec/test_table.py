"""The one transition table (modefsm.spec.TransitionTable) and who reads it."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest
from hypothesis import given, settings

from modefsm.diagram import build_diagram
from modefsm.engine import ModeMachine
from modefsm.errors import SpecError
from modefsm.replay import Replayer
from modefsm.spec import (
    ORIGIN_KINDS,
    PREVIOUS,
    TRIGGER_KINDS,
    ModeSpec,
    PermissionOptionKind,
    TransitionTable,
    preset,
    preset_names,
)
from modefsm.spec._model import _unreachable
from tests.spec.test_scale import build, reference_allows, reference_reached, spec_data


def _ignore(*_: object) -> None:
    pass


class TestTable:
    """Every question the table answers agrees with the spec's data, read directly."""

    @settings(max_examples=60, deadline=None)
    @given(spec_data())
    def test_allows_sources_targets_edges_match_the_definitions(self, data):
        spec = build(data)
        table = spec.table
        ids = spec.mode_ids
        for kind in TRIGGER_KINDS:
            for mode in ids:
                assert table.targets(kind, mode) == tuple(
                    d for d in ids if reference_allows(data, kind, mode, d)
                )
                assert table.sources(kind, mode) == tuple(
                    s for s in ids if reference_allows(data, kind, s, mode)
                )
        assert table.edges() == [
            (kind, s, d)
            for d in ids
            for kind in TRIGGER_KINDS
            for s in ids
            if reference_allows(data, kind, s, d)
        ]

    @settings(max_examples=60, deadline=None)
    @given(spec_data())
    def test_reachable_is_the_search_over_client_changes_and_explicit_targets(self, data):
        spec = build(data)
        assert spec.table.reachable() == frozenset(reference_reached(data))

    def test_modes_outside_the_spec_have_no_transitions(self):
        table = preset("seed").table
        for kind in TRIGGER_KINDS:
            assert table.targets(kind, "nope") == ()
            assert table.sources(kind, "nope") == ()
            assert not table.allows(kind, "ask", "nope")
            assert not table.allows(kind, "nope", "ask")
            assert not table.allows(kind, "ask", "ask")

    def test_kind_of_every_origin(self):
        assert {o: TransitionTable.kind_of(o) for o in ("new", *ORIGIN_KINDS, None, 3)} == {
            "new": None,
            "set_mode": "client_change",
            "set_config_option": "client_change",
            "switch_mode": "switch_mode",
            "restore": "restore",
            None: None,
            3: None,
        }
        assert TransitionTable.kind_of(["set_mode"]) is None

    def test_a_previous_option_reaches_every_other_mode_but_adds_nothing_reachable(self):
        back = {"optionId": "back", "name": "Back", "kind": "allow_once", "target": PREVIOUS}
        data: dict[str, typing.Any] = {
            "name": "p",
            "initial": "a",
            "modes": [{"id": m, "name": m} for m in "abc"],
            "client_changes": {"a": ["b"], "b": ["a"], "c": []},
            "switches": [{"source": ["a"], "title": "t", "options": [back]}],
        }
        with pytest.raises(SpecError) as caught:
            ModeSpec.from_data(data)
        assert [str(p) for p in caught.value.problems] == [
            "modes[2]: mode 'c' is unreachable from the initial mode"
        ]
        data["client_changes"]["b"] = ["a", "c"]
        table = ModeSpec.from_data(data).table
        assert table.targets("switch_mode", "a") == ("b", "c")
        assert table.targets("client_change", "a") == ("b",)
        assert table.reachable() == {"a", "b", "c"}

    def test_the_table_is_built_once_per_spec(self):
        spec = preset("permission")
        assert spec.table is spec.table
        assert isinstance(spec.table, TransitionTable)
        assert _unreachable(spec) == []


class TestReaders:
    """The machine, replay and the diagram read the spec's own table."""

    @pytest.mark.parametrize("name", preset_names())
    def test_machine_and_replay_hold_the_spec_table(self, name):
        spec = preset(name)
        machine = ModeMachine(spec, before=_ignore, after=_ignore)
        assert machine.table is spec.table
        assert machine.edges() == spec.table.edges()
        replayer = Replayer([spec])
        assert replayer._specs[spec.content_hash][1] is spec.table

    @pytest.mark.parametrize("name", preset_names())
    def test_diagram_restore_arrows_are_the_table_restore_edges(self, name):
        spec = preset(name)
        drawn = {t for e in build_diagram(spec).edges for t in e.transitions if t[0] == "restore"}
        assert drawn == {e for e in spec.table.edges() if e[0] == "restore"}

    def test_replay_and_diagram_import_neither_the_engine_nor_transitions(self):
        code = (
            "import sys, modefsm.replay, modefsm.diagram\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('acp', 'transitions')"
            " or m.startswith('modefsm.engine') or m.startswith('modefsm.protocol'))\n"
            "print(bad)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert out == "[]\n"


def test_permission_option_kind_is_the_sdks():
    from acp.schema import PermissionOptionKind as SdkKind

    assert typing.get_args(PermissionOptionKind) == typing.get_args(SdkKind)
