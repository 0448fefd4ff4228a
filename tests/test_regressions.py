"""Each test here pins a bug a review found, so it cannot come back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import AllowedOutcome, RequestPermissionResponse

from modefsm import (
    HookError,
    ModeChange,
    ModeEngine,
    ModeSpec,
    SpecError,
    TransitionNotAllowedError,
    preset,
)
from modefsm.protocol._agent import ModeAgent
from modefsm.protocol._switch import propose_switch
from modefsm.replay._replayer import last_points

from .conftest import Recorder, read_log


def spec_with(ids: list[str], **extra: Any) -> ModeSpec:
    return ModeSpec(
        name="t", initial=ids[0], modes=[{"id": i, "name": i.upper() or "X"} for i in ids], **extra
    )


class TestWildcardModeIds:
    """Mode ids that mean something to transitions ('*', '=') are ordinary modes here."""

    async def test_star_is_not_every_mode(self):
        spec = spec_with(
            ["safe", "*", "yolo"], client_changes={"safe": ["*"], "*": ["safe", "yolo"]}
        )
        engine = ModeEngine(spec)
        engine.new_session("s")
        with pytest.raises(TransitionNotAllowedError):
            await engine.set_mode("s", "yolo")
        await engine.set_mode("s", "*")
        assert engine.get("s").state == "*"
        await engine.set_mode("s", "yolo")
        assert engine.get("s").state == "yolo"

    async def test_equals_sign_is_a_real_change(self, make_engine, log_path, recorder):
        engine = make_engine(spec_with(["a", "="]))
        engine.new_session("s")
        change = await engine.set_mode("s", "=")
        assert (change.from_mode, change.to_mode, engine.get("s").state) == ("a", "=", "=")
        assert read_log(log_path)[-1]["to_mode"] == "="
        assert recorder.sent[0]["update"]["currentModeId"] == "="


class TestRestoreAtomicity:
    """A restore whose fallback fails leaves no live session behind."""

    def test_refused_fallback_leaves_the_session_unknown(self, make_engine):
        def refuse(change: ModeChange) -> None:
            raise RuntimeError("no")

        engine = make_engine("permission", before_change=[refuse])
        with pytest.raises(HookError):
            engine.restore_session("s1", "bypassPermissions", 4)
        assert "s1" not in engine

    def test_previous_survives_a_restart(self, make_engine, log_path):
        engine = make_engine("permission")
        engine.new_session("s1")
        engine.change("s1", "acceptEdits", "set_mode")
        engine.change("s1", "plan", "set_mode")
        point = last_points([log_path])["s1"]
        assert (point.mode, point.seq, point.previous) == ("plan", 3, "acceptEdits")
        fresh = make_engine("permission")
        session = fresh.restore_session("s1", point.mode, point.seq, previous=point.previous)
        assert session.previous == "acceptEdits"

    def test_fallback_is_not_a_previous_mode(self, make_engine):
        engine = make_engine("permission")
        session = engine.restore_session("s1", "bypassPermissions", 4, previous="plan")
        assert (session.state, session.previous) == ("default", "plan")


class TestHooksAfterPolicy:
    """before_change hooks see only changes the policy allows."""

    async def test_policy_rejection_never_reaches_the_hook(self, make_engine):
        seen: list[ModeChange] = []
        engine = make_engine("permission", before_change=[seen.append])
        engine.new_session("s")
        await engine.set_mode("s", "plan")
        with pytest.raises(TransitionNotAllowedError):
            await engine.set_mode("s", "bypassPermissions")
        assert [c.to_mode for c in seen] == ["plan"]


class TestOrdering:
    """Notifications keep commit order even when the sink's sends take uneven time."""

    async def test_uneven_sink_keeps_commit_order(self):
        sent: list[str] = []

        async def sink(session_id: str, update: Any) -> None:
            mode = getattr(update, "current_mode_id", None)
            await asyncio.sleep(0.002 if mode == "architect" else 0)
            sent.append(f"{update.session_update}:{mode or update.config_options[0].current_value}")

        engine = ModeEngine(preset("seed"), sink=sink)
        engine.new_session("s")
        await asyncio.gather(engine.set_mode("s", "architect"), engine.set_mode("s", "code"))
        assert sent == [
            "current_mode_update:architect",
            "config_option_update:architect",
            "current_mode_update:code",
            "config_option_update:code",
        ]

    async def test_response_waits_for_its_own_notifications(self):
        order: list[str] = []

        async def sink(session_id: str, update: Any) -> None:
            await asyncio.sleep(0.001)
            order.append(update.session_update)

        engine = ModeEngine(preset("seed"), sink=sink)
        engine.new_session("s")

        async def request(mode: str) -> None:
            await engine.set_mode("s", mode)
            order.append(f"response:{mode}")

        await asyncio.gather(request("architect"), request("code"))
        # Both changes commit before the first flush finishes; that flush drains both, in
        # commit order, and each response leaves after its own notifications.
        assert order == [
            "current_mode_update",
            "config_option_update",
            "current_mode_update",
            "config_option_update",
            "response:architect",
            "response:code",
        ]


class FakeClient:
    """Answers request_permission from a script; enough to drive propose_switch in-process."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[list[str]] = []

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any]) -> Any:
        self.requests.append([o.option_id for o in options])
        return await self.answer()


class TestSwitchFailures:
    """Every way a switch can fail ends its tool call and is logged."""

    async def test_client_error_ends_the_tool_call(self, make_engine, recorder, log_path):
        async def answer():
            raise acp.RequestError(-32603, "UI crashed")

        engine = make_engine()
        engine.new_session("s")
        await engine.set_mode("s", "architect")
        result = await propose_switch(engine, FakeClient(answer), "s", plan="p")
        assert (result.reason, result.change) == ("invalid_answer", None)
        assert recorder.sent[-1]["update"]["status"] == "failed"
        assert read_log(log_path)[-1]["reason"] == "invalid_answer"

    async def test_hook_refusing_the_switch_ends_the_tool_call(self, make_engine, recorder):
        def refuse(change: ModeChange) -> None:
            if change.origin == "switch_mode":
                raise RuntimeError("policy")

        async def answer():
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id="code")
            )

        engine = make_engine(before_change=[refuse])
        engine.new_session("s")
        await engine.set_mode("s", "architect")
        result = await propose_switch(engine, FakeClient(answer), "s", plan="p")
        assert (result.reason, engine.get("s").state) == ("hook_failed", "architect")
        assert recorder.sent[-1]["update"]["status"] == "failed"

    async def test_previous_only_switch_without_history_asks_nothing(self, make_engine, log_path):
        spec = spec_with(
            ["a", "b"],
            switches=[
                {
                    "source": ["b"],
                    "title": "back",
                    "options": [
                        {
                            "option_id": "back",
                            "name": "Back",
                            "kind": "allow_once",
                            "target": "$previous",
                        },
                        {"option_id": "no", "name": "No", "kind": "reject_once"},
                    ],
                }
            ],
        )
        engine = make_engine(spec)
        engine.restore_session("s", "b", 3)  # in b with no history

        async def answer():
            raise AssertionError("must not be asked")

        client = FakeClient(answer)
        result = await propose_switch(engine, client, "s", plan="p")
        assert (result.reason, client.requests) == ("no_previous_mode", [])
        assert read_log(log_path)[-1]["reason"] == "no_previous_mode"

    async def test_cancel_before_the_proposal_asks_nothing(self, make_engine):
        engine = make_engine()
        engine.new_session("s")
        await engine.set_mode("s", "architect")
        cancelled = asyncio.Event()
        cancelled.set()

        async def answer():
            raise AssertionError("must not be asked")

        client = FakeClient(answer)
        result = await propose_switch(engine, client, "s", plan="p", cancelled=cancelled)
        assert (result.reason, client.requests) == ("cancelled", [])

    async def test_agent_cancel_without_begin_turn(self, tmp_path: Path):
        agent = ModeAgent(preset("seed"))
        pending = asyncio.Event()

        class Conn:
            async def session_update(self, session_id: str, update: Any) -> None:
                return None

            async def request_permission(self, **kwargs: Any) -> Any:
                pending.set()
                await asyncio.sleep(3600)

        agent.on_connect(Conn())
        session_id = (await agent.new_session(cwd=".")).session_id
        await agent.set_session_mode(session_id, "architect")
        proposal = asyncio.create_task(agent.propose_switch(session_id, plan="p"))
        await pending.wait()
        await agent.cancel(session_id)
        result = await asyncio.wait_for(proposal, 5)
        assert result.reason == "cancelled"
        assert agent._cancels == {}


class TestSpecHoles:
    """Specs that validated but could not work are now refused."""

    def test_previous_does_not_make_a_mode_reachable(self):
        with pytest.raises(SpecError) as info:
            spec_with(
                ["a", "b", "c"],
                client_changes={"a": ["b"], "b": ["a"], "c": ["a"]},
                switches=[
                    {
                        "source": ["b"],
                        "title": "t",
                        "options": [
                            {
                                "option_id": "p",
                                "name": "P",
                                "kind": "allow_once",
                                "target": "$previous",
                            }
                        ],
                    }
                ],
            )
        assert [str(p) for p in info.value.problems] == [
            "modes[2]: mode 'c' is unreachable from the initial mode"
        ]

    def test_option_id_naming_another_mode(self):
        with pytest.raises(SpecError) as info:
            spec_with(
                ["a", "b", "c"],
                switches=[
                    {
                        "source": ["a"],
                        "title": "t",
                        "options": [
                            {"option_id": "b", "name": "B", "kind": "allow_once", "target": "c"}
                        ],
                    }
                ],
            )
        expected = (
            "switches[0].options[0].option_id: 'b' is a mode id but targets 'c': "
            "clients that read option ids as modes would disagree"
        )
        assert [str(p) for p in info.value.problems] == [expected]


def test_recorder_records_exact_wire_dicts():
    recorder = Recorder()
    asyncio.run(
        recorder(
            "s", preset("seed") and ModeEngine(preset("seed")).views["ask"].current_mode_update
        )
    )
    assert recorder.sent == [
        {
            "sessionId": "s",
            "update": {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
        }
    ]


def test_host_logger_that_drops_info_is_refused():
    import logging

    import structlog

    from modefsm import LogError, TransitionLog

    logger = structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
    )
    with pytest.raises(LogError, match="drops INFO events"):
        TransitionLog(logger)
