"""The switch flow (``propose_switch``): each way a switch can fail ends its tool call, logged."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import AllowedOutcome, RequestPermissionResponse

from modefsm import ModeChange, preset
from modefsm.protocol.v1._agent import ModeAgent
from modefsm.protocol.v1._switch import propose_switch
from tests.conftest import read_log, spec_with

pytestmark = pytest.mark.sdk_compat


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
