"""A host's config options in the engine: declared once, checked, vetoed, recorded, restored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modefsm import (
    ChangeRefused,
    HostOption,
    InvalidValueError,
    MemoryStore,
    ModeEngine,
    OptionChange,
    UnknownConfigOptionError,
    preset,
    replay,
)
from tests.conftest import mode_option, read_log

SEED = preset("seed")
SPEC = {"spec": "seed", "spec_hash": SEED.content_hash}


def model_option(**extra: Any) -> HostOption:
    return HostOption(
        id="model",
        name="Model",
        category="model",
        choices=[("fast", "Fast"), ("smart", "Smart")],
        default="fast",
        **extra,
    )


def model(current: str) -> dict[str, Any]:
    return {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current,
        "options": [{"value": "fast", "name": "Fast"}, {"value": "smart", "name": "Smart"}],
    }


def options_update(session_id: str, *options: dict[str, Any]) -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "update": {"sessionUpdate": "config_option_update", "configOptions": list(options)},
    }


class TestSet:
    """set_config_option on a host option: the complete list, one notification, one record."""

    async def test_value_is_answered_announced_and_recorded(self, make_engine, recorder, log_path):
        engine = make_engine(config_options=[model_option()])
        engine.new_session("s1")
        answer = await engine.set_config_option("s1", "model", "smart")
        again = await engine.set_config_option("s1", "model", "smart")  # changes nothing
        await engine.set_mode("s1", "code")
        assert [(o.id, o.current_value) for o in answer] == [("mode", "ask"), ("model", "smart")]
        assert answer == again
        assert recorder.sent == [
            options_update("s1", mode_option(SEED, "ask"), model("smart")),
            {
                "sessionId": "s1",
                "update": {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
            },
            options_update("s1", mode_option(SEED, "code"), model("smart")),
        ]
        assert [(r["event"], r["seq"], r.get("config")) for r in read_log(log_path)] == [
            ("modefsm.session_created", 1, None),
            ("modefsm.config_changed", 2, {"model": "smart"}),
            ("modefsm.mode_changed", 3, {"model": "smart"}),
        ]

    async def test_unknown_config_id_lists_exactly_the_options_handled(self, make_engine):
        engine = make_engine(config_options=[model_option()])
        engine.new_session("s1")
        with pytest.raises(UnknownConfigOptionError) as info:
            await engine.set_config_option("s1", "effort", "high")
        assert str(info.value) == (
            "configId: unknown config option 'effort'; config options: 'mode', 'model'"
        )

    async def test_invalid_value_changes_nothing_and_is_logged(
        self, make_engine, recorder, log_path
    ):
        engine = make_engine(config_options=[model_option()])
        engine.new_session("s1")
        with pytest.raises(InvalidValueError) as info:
            await engine.set_config_option("s1", "model", value=True)
        assert info.value.to_data()["valid"] == ["fast", "smart"]
        assert [(o.id, o.current_value) for o in engine.config_options("s1")] == [
            ("mode", "ask"),
            ("model", "fast"),
        ]
        assert recorder.sent == []
        assert read_log(log_path)[1] == {
            "session_id": "s1",
            "seq": None,
            "from_mode": "ask",
            "to_mode": None,
            "origin": "set_config_option",
            "config_id": "model",
            "value": True,
            **SPEC,
            "reason": "invalid_value",
            "event": "modefsm.change_rejected",
            "level": "warning",
        }

    async def test_on_change_veto_reaches_the_caller_and_changes_nothing(
        self, make_engine, recorder, log_path
    ):
        seen: list[OptionChange] = []

        def only_fast_in_ask(change: OptionChange) -> None:
            seen.append(change)
            if change.mode_id == "ask":
                raise ChangeRefused("the smart model needs code mode", code=-32001)

        engine = make_engine(config_options=[model_option(on_change=only_fast_in_ask)])
        engine.new_session("s1")
        with pytest.raises(ChangeRefused) as info:
            await engine.set_config_option("s1", "model", "smart", request_id=7)
        await engine.set_mode("s1", "code")
        await engine.set_config_option("s1", "model", "smart")
        assert (info.value.code, str(info.value)) == (-32001, "the smart model needs code mode")
        assert seen == [
            OptionChange("s1", 2, "model", "smart", "fast", "ask", 7),
            OptionChange("s1", 3, "model", "smart", "fast", "code", None),
        ]
        assert [(r["event"], r.get("reason"), r.get("config")) for r in read_log(log_path)] == [
            ("modefsm.session_created", None, None),
            ("modefsm.change_rejected", "hook_failed", None),
            ("modefsm.mode_changed", None, None),
            ("modefsm.config_changed", None, {"model": "smart"}),
        ]
        assert recorder.sent[-1] == options_update("s1", mode_option(SEED, "code"), model("smart"))

    async def test_a_config_change_keeps_the_previous_mode(self, make_engine):
        engine = make_engine(config_options=[model_option()])
        session = engine.new_session("s1")
        await engine.set_mode("s1", "architect")
        await engine.set_config_option("s1", "model", "smart")
        assert (session.previous, session.seq) == ("ask", 3)
        offer = await engine.offer_switch("s1")
        assert offer.targets == {"code": "code", "ask": "ask", "reject": None}


class TestDeclaration:
    """A declaration that cannot work is refused when it is made."""

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"default": "huge"}, "host option 'model': default 'huge' is not one of"),
            ({"choices": []}, "host option 'model' has no choices"),
            ({"choices": [("a", "A"), ("a", "B")], "default": "a"}, "repeats a value"),
        ],
        ids=["default", "empty", "repeat"],
    )
    def test_bad_option(self, kwargs: dict[str, Any], message: str):
        fields: dict[str, Any] = {
            "id": "model",
            "name": "Model",
            "choices": [("fast", "Fast")],
            "default": "fast",
            **kwargs,
        }
        with pytest.raises(ValueError, match=message):
            HostOption(**fields)

    def test_an_option_may_not_take_the_mode_options_id(self):
        with pytest.raises(ValueError, match="host option id 'mode' is the mode option's"):
            ModeEngine(SEED, config_options=[HostOption("mode", "M", [("a", "A")], "a")])


class TestRestore:
    """The value last set comes back with the session, from the store's last record."""

    async def test_a_new_engine_on_the_store_restores_the_value(self):
        store = MemoryStore()
        first = ModeEngine(SEED, store=store, config_options=[model_option()])
        await first.new_session_async("s1")
        await first.set_config_option("s1", "model", "smart")
        await first.set_mode("s1", "architect")
        point = store.restore_point("s1")
        assert point is not None
        assert (point.mode, point.seq, point.previous, point.config) == (
            "architect",
            3,
            "ask",
            {"model": "smart"},
        )
        second = ModeEngine(SEED, store=store, config_options=[model_option()])
        await second.restore_session_async(
            "s1", point.mode, point.seq, previous=point.previous, config=point.config
        )
        assert [(o.id, o.current_value) for o in second.config_options("s1")] == [
            ("mode", "architect"),
            ("model", "smart"),
        ]

    def test_a_value_no_longer_offered_falls_back_to_the_default(self):
        narrower = HostOption("model", "Model", [("fast", "Fast")], "fast")
        engine = ModeEngine(SEED, config_options=[narrower])
        session = engine.restore_session("s1", "ask", 2, config={"model": "smart", "gone": "x"})
        assert session.config is None
        assert [o.current_value for o in engine.config_options("s1")] == ["ask", "fast"]


def test_replay_summarises_the_values(make_engine, log_path: Path):
    engine = make_engine(config_options=[model_option()])
    engine.new_session("s1")
    engine.set_config_value("s1", "model", "smart")
    engine.set_config_value("s1", "mode", "code")
    report = replay([str(log_path)], verify=True)
    session = report.session("s1")
    assert session is not None
    assert (report.violations, session.mode, session.config, session.config_changes) == (
        (),
        "code",
        {"model": "smart"},
        1,
    )
