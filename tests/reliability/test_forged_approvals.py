"""Forged and stale approvals: answers to ``session/request_permission`` that must change nothing.

Raw frames let the client do what the SDK client cannot: select an option that was not
offered, answer with the wrong shape or types, answer another tool call's request, answer
twice, answer after ``session/cancel`` or ``session/close``, answer an id never issued.
Each case checks that the mode is unchanged, the turn ends, and the log says why
(``modefsm.change_rejected`` with a reason), and that no ``modefsm.mode_changed`` record
names the tool call.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LOCKED_TOML

from .harness import RawPeer, raw_serve, read_log

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

PLAN = "## Plan"


def selected(option_id: Any) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


async def pending_switch(peer: RawPeer, mode: str = "architect") -> tuple[str, int, dict[str, Any]]:
    """A session in *mode* whose prompt waits on a permission request: (sid, prompt id, request)."""
    sid = await peer.new_session()
    if mode != "ask":
        assert "result" in await peer.set_mode(sid, mode)
    prompt_id = await send_prompt(peer, sid)
    request = await peer.next_agent_request()
    assert request["method"] == "session/request_permission"
    assert request["params"]["sessionId"] == sid
    return sid, prompt_id, request


async def send_prompt(peer: RawPeer, sid: str) -> int:
    peer.next_id += 1
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": PLAN}]}
    await peer.send(
        {"jsonrpc": "2.0", "id": peer.next_id, "method": "session/prompt", "params": params}
    )
    return peer.next_id


async def rejected_then_answered_again(
    peer: RawPeer, between: Callable[[RawPeer, str], Awaitable[None]] | None = None
) -> dict[str, Any]:
    """A switch's request answered ``reject``, then (after *between*) ``code``: the request.

    The mode stays ``architect``.
    """
    sid, prompt_id, request = await pending_switch(peer)
    await peer.answer(request, selected("reject"))
    assert (await peer.response(prompt_id))["result"]["stopReason"] == "end_turn"
    if between is not None:
        await between(peer, sid)
    await peer.answer(request, selected("code"))  # the same request id, again
    assert await peer.current_mode(sid) == "architect"
    return request


REJECTED_THEN_DUPLICATE = [
    ("modefsm.change_rejected", "option_rejected", "reject"),
    ("modefsm.change_rejected", "duplicate_answer", "code"),
]
"""The records of :func:`rejected_then_answered_again`'s tool call."""


def tool_call_id(request: dict[str, Any]) -> str:
    value: str = request["params"]["toolCall"]["toolCallId"]
    return value


def records_of(log: Path, call: str) -> list[tuple[str, str | None, str | None]]:
    return [
        (r["event"], r.get("reason"), r.get("option_id"))
        for r in read_log(log).records
        if r.get("tool_call_id") == call
    ]


def final_status(peer: RawPeer, call: str) -> str | None:
    statuses = [
        n["params"]["update"].get("status")
        for n in peer.notifications
        if n["params"]["update"].get("toolCallId") == call
    ]
    return statuses[-1] if statuses else None


def switch(source: str, allow: str, target: str, reject: str) -> str:
    """A spec's switch from *source*: option *allow* moves to *target*, *reject* stays."""
    return (
        f'[[switches]]\nsource = ["{source}"]\ntitle = "{source} to {target}"\n'
        f'[[switches.options]]\noption_id = "{allow}"\nname = "Yes"\nkind = "allow_once"\n'
        f'target = "{target}"\n'
        f'[[switches.options]]\noption_id = "{reject}"\nname = "No"\nkind = "reject_once"\n'
    )


BAD_ANSWERS = {
    "not offered": (selected("nope"), "option_not_offered"),
    "empty option": (selected(""), "option_not_offered"),
    "wrong case": (selected("CODE"), "option_not_offered"),
    "trailing space": (selected("code "), "option_not_offered"),
    "another mode id": (selected("architect"), "option_not_offered"),
    "number option": (selected(5), "invalid_answer"),
    "null option": (selected(None), "invalid_answer"),
    "no option": ({"outcome": {"outcome": "selected"}}, "invalid_answer"),
    "unknown outcome": ({"outcome": {"outcome": "approved", "optionId": "code"}}, "invalid_answer"),
    "no outcome": ({}, "invalid_answer"),
    "outcome as text": ({"outcome": "code"}, "invalid_answer"),
    "result null": (None, "invalid_answer"),
    "result list": (["code"], "invalid_answer"),
}


class TestForgedAnswers:
    """An answer that does not select an offered allow option changes nothing, and is logged."""

    @pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
    async def test_bad_answer_changes_nothing(self, tmp_path: Path, case: str):
        answer, reason = BAD_ANSWERS[case]
        log = tmp_path / "log.jsonl"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            await peer.answer(request, answer)
            response = await peer.response(prompt_id)
            assert response["result"]["stopReason"] == "end_turn"
            assert await peer.current_mode(sid) == "architect"
            call = tool_call_id(request)
            assert final_status(peer, call) == "failed"
        assert records_of(log, call)[-1][:2] == ("modefsm.change_rejected", reason)
        assert [r for r in records_of(log, call) if r[0] == "modefsm.mode_changed"] == []

    @pytest.mark.parametrize(
        ("code", "reason"),
        [(-32800, "cancelled"), (-32603, "invalid_answer"), (-1, "invalid_answer")],
    )
    async def test_an_error_answer_changes_nothing(self, tmp_path: Path, code: int, reason: str):
        log = tmp_path / "log.jsonl"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            error = {"code": code, "message": "no"}
            await peer.send({"jsonrpc": "2.0", "id": request["id"], "error": error})
            assert (await peer.response(prompt_id))["result"]["stopReason"] == "end_turn"
            assert await peer.current_mode(sid) == "architect"
        assert records_of(log, tool_call_id(request))[-1][:2] == ("modefsm.change_rejected", reason)

    async def test_an_answer_for_another_tool_call_is_not_offered_here(self, tmp_path: Path):
        spec = tmp_path / "two.toml"
        spec.write_text(
            'name = "two"\ninitial = "a"\n'
            + "".join(f'[[modes]]\nid = "{m}"\nname = "{m.upper()}"\n' for m in "abcd")
            + switch("a", "go_b", "b", "stay_a")
            + switch("c", "go_d", "d", "stay_c")
        )
        log = tmp_path / "log.jsonl"
        async with raw_serve(log, "--spec", str(spec)) as peer:
            first, first_prompt, first_request = await pending_switch(peer, "a")
            second, second_prompt, second_request = await pending_switch(peer, "c")
            # each request answered with the other one's allow option
            await peer.answer(first_request, selected("go_d"))
            await peer.answer(second_request, selected("go_b"))
            for prompt in (first_prompt, second_prompt):
                assert (await peer.response(prompt))["result"]["stopReason"] == "end_turn"
            assert (await peer.current_mode(first), await peer.current_mode(second)) == ("a", "c")
        assert records_of(log, tool_call_id(first_request)) == [
            ("modefsm.change_rejected", "option_not_offered", "go_d")
        ]
        assert records_of(log, tool_call_id(second_request)) == [
            ("modefsm.change_rejected", "option_not_offered", "go_b")
        ]

    async def test_an_answer_to_an_id_never_issued_is_ignored(self, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            for forged_id in (request["id"] + 1, 10**9, str(request["id"]), -1, None, 1.5):
                await peer.send({"jsonrpc": "2.0", "id": forged_id, "result": selected("code")})
            await asyncio.sleep(0.2)
            assert peer.process.returncode is None
            assert prompt_id not in {m.get("id") for m in peer.received}  # still waiting
            await peer.answer(request, selected("reject"))
            assert (await peer.response(prompt_id))["result"]["stopReason"] == "end_turn"
            assert await peer.current_mode(sid) == "architect"
        assert records_of(log, tool_call_id(request)) == [
            ("modefsm.change_rejected", "option_rejected", "reject")
        ]


class TestStaleAnswers:
    """Answers that come too late or twice change nothing, and are logged."""

    @pytest.mark.parametrize("first", ["reject", "code"])
    async def test_a_second_answer_changes_nothing(self, tmp_path: Path, first: str):
        log = tmp_path / "log.jsonl"
        second = "ask" if first == "code" else "code"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            await peer.answer(request, selected(first))
            assert (await peer.response(prompt_id))["result"]["stopReason"] == "end_turn"
            await peer.answer(request, selected(second))  # the same request id, again
            await peer.answer(request, {"outcome": {"outcome": "cancelled"}})
            expected = "code" if first == "code" else "architect"
            assert await peer.current_mode(sid) == expected
        call = tool_call_id(request)
        first_record = (
            ("modefsm.mode_changed", None, "code")
            if first == "code"
            else ("modefsm.change_rejected", "option_rejected", "reject")
        )
        assert records_of(log, call) == [
            first_record,
            ("modefsm.change_rejected", "duplicate_answer", second),
            ("modefsm.change_rejected", "duplicate_answer", None),
        ]

    @pytest.mark.parametrize("ender", ["session/cancel", "session/close"])
    async def test_an_answer_after_the_wait_ended_changes_nothing(self, tmp_path: Path, ender: str):
        log = tmp_path / "log.jsonl"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            if ender == "session/cancel":
                await peer.notify(ender, {"sessionId": sid})
            else:
                assert "result" in await peer.request(ender, {"sessionId": sid})
            response = await peer.response(prompt_id)
            assert response["result"]["stopReason"] == "cancelled"
            await peer.answer(request, selected("code"))  # the allow, too late
            await asyncio.sleep(0.1)
            await peer.answer(request, selected("ask"))  # and once more
            assert await peer.current_mode(sid) == "architect"  # load restores a closed one
        # a close cancels the turn as session/cancel does: the switch ends the same way
        assert records_of(log, tool_call_id(request)) == [
            ("modefsm.change_rejected", "cancelled", None),
            ("modefsm.change_rejected", "late_answer", "code"),
            ("modefsm.change_rejected", "duplicate_answer", "ask"),
        ]

    async def test_a_second_answer_after_many_unanswered_requests_is_the_switchs(
        self, tmp_path: Path
    ):
        # the transport remembers the last 1,024 requests *answered*: requests sent later and
        # never answered (cancelled turns) must not make a switch's answer a stranger's
        log = tmp_path / "log.jsonl"

        async def unanswered(peer: RawPeer, sid: str) -> None:
            for _ in range(1_024):
                later = await send_prompt(peer, sid)
                assert (await peer.next_agent_request())["method"] == "session/request_permission"
                await peer.notify("session/cancel", {"sessionId": sid})
                assert (await peer.response(later))["result"]["stopReason"] == "cancelled"

        async with raw_serve(log) as peer:
            request = await rejected_then_answered_again(peer, unanswered)
        assert records_of(log, tool_call_id(request)) == REJECTED_THEN_DUPLICATE

    async def test_a_cancelled_answer_after_cancel_is_not_noise(self, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        async with raw_serve(log) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            await peer.notify("session/cancel", {"sessionId": sid})
            await peer.response(prompt_id)
            await peer.answer(request, {"outcome": {"outcome": "cancelled"}})  # as ACP requires
            assert await peer.current_mode(sid) == "architect"
        assert records_of(log, tool_call_id(request)) == [
            ("modefsm.change_rejected", "cancelled", None)
        ]

    async def test_an_allow_the_spec_no_longer_allows_changes_nothing(self, tmp_path: Path):
        spec = tmp_path / "locked.toml"
        spec.write_text(LOCKED_TOML)
        log = tmp_path / "log.jsonl"
        async with raw_serve(log, "--spec", str(spec)) as peer:
            sid, prompt_id, request = await pending_switch(peer, "a")
            assert "result" in await peer.set_mode(sid, "b")  # b cannot reach c
            await peer.answer(request, selected("c"))
            assert (await peer.response(prompt_id))["result"]["stopReason"] == "end_turn"
            assert await peer.current_mode(sid) == "b"
        assert records_of(log, tool_call_id(request)) == [
            ("modefsm.change_rejected", "stale_option", "c")
        ]


MODULE_HOST = textwrap.dedent(
    """
    import asyncio
    import sys

    from acp.schema import PromptResponse

    from modefsm import FileStore, ModeAgent, preset, serve_negotiated
    from modefsm.protocol import propose_switch


    class Host(ModeAgent):
        async def prompt(self, prompt, session_id, **kwargs):
            turn = self.begin_turn(session_id)
            try:
                result = await propose_switch(
                    self.engine, self.conn, session_id, plan="## Plan", cancelled=turn
                )
            finally:
                self.end_turn(session_id, turn)
            cancelled = result.reason == "cancelled"
            return PromptResponse(stop_reason="cancelled" if cancelled else "end_turn")


    asyncio.run(serve_negotiated(Host(preset("seed"), store=FileStore(sys.argv[1]))))
    """
)


class TestModuleLevelSwitch:
    """A switch a host proposes through ``modefsm.protocol.propose_switch`` (not the agent's
    method): its late and second answers are logged as a switch's, as the agent's are."""

    async def test_a_second_answer_is_a_switchs(self, tmp_path: Path):
        host, log = tmp_path / "host.py", tmp_path / "log.jsonl"
        host.write_text(MODULE_HOST, encoding="utf-8")
        async with raw_serve(log, host=host) as peer:
            request = await rejected_then_answered_again(peer)
        assert records_of(log, tool_call_id(request)) == REJECTED_THEN_DUPLICATE

    async def test_a_late_answer_is_a_switchs(self, tmp_path: Path):
        host, log = tmp_path / "host.py", tmp_path / "log.jsonl"
        host.write_text(MODULE_HOST, encoding="utf-8")
        async with raw_serve(log, host=host) as peer:
            sid, prompt_id, request = await pending_switch(peer)
            await peer.notify("session/cancel", {"sessionId": sid})
            assert (await peer.response(prompt_id))["result"]["stopReason"] == "cancelled"
            await peer.answer(request, selected("code"))  # the allow, too late
            await peer.answer(request, selected("ask"))  # and once more
            assert await peer.current_mode(sid) == "architect"
        assert records_of(log, tool_call_id(request)) == [
            ("modefsm.change_rejected", "cancelled", None),
            ("modefsm.change_rejected", "late_answer", "code"),
            ("modefsm.change_rejected", "duplicate_answer", "ask"),
        ]
