"""A host's veto reaches the client as the host's JSON-RPC error, never as -32603 with a repr.

A real host agent (a script embedding ``ModeAgent`` with a ``before_change`` hook) runs as
a process; the official SDK client talks to it over stdio and the raw frames are compared
whole.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError

from tests.acp_client import TIMEOUT, TestClient, host_command, spawn_v1

HOST = textwrap.dedent(
    """
    import asyncio
    import sys

    from modefsm import ChangeRefused, InvalidParamsError, ModeAgent, ModeChange, preset, run_agent


    def no_code(change: ModeChange) -> None:
        if change.to_mode == "code" and sys.argv[1] == "veto":
            raise ChangeRefused("code mode is off in this workspace")
        if change.to_mode == "code" and sys.argv[1] == "custom":
            raise ChangeRefused("ask your admin", code=-32001, data={"policy": "no-code"})
        if change.to_mode == "code" and sys.argv[1] == "invalid":
            raise InvalidParamsError("modeId", "code", ["ask"], "modeId: not here")
        if change.to_mode == "code":
            raise PermissionError("a bug in the hook")


    asyncio.run(run_agent(ModeAgent(preset("seed"), before_change=[no_code])))
    """
)


async def _set_code_mode(tmp_path: Path, how: str) -> tuple[dict[str, Any], str]:
    """The raw frames a ``session/set_mode`` to ``code`` gets (one error), and the session."""
    script = tmp_path / "host.py"
    script.write_text(HOST, encoding="utf-8")
    client = TestClient()
    async with spawn_v1(client, *host_command(script, how)) as (conn, _process):
        session = await asyncio.wait_for(conn.new_session(cwd=str(tmp_path)), TIMEOUT)
        mark = client.mark()
        with pytest.raises(RequestError):
            await asyncio.wait_for(
                conn.set_session_mode(session_id=session.session_id, mode_id="code"), TIMEOUT
            )
        frames = client.since(mark)
    assert len(frames) == 1, frames  # the error alone: no session/update, nothing changed
    return frames[0], session.session_id


@pytest.mark.sdk_compat
class TestHostVeto:
    """A ``before_change`` veto is answered with the host's code, message and data."""

    async def test_change_refused_is_invalid_params_with_the_hosts_message(self, tmp_path):
        frame, _session_id = await _set_code_mode(tmp_path, "veto")
        assert {
            "id": frame["id"],
            "error": {
                "code": -32602,
                "message": "code mode is off in this workspace",
                "data": {"message": "code mode is off in this workspace"},
            },
        } == frame

    async def test_change_refused_keeps_the_code_and_data_the_host_chose(self, tmp_path):
        frame, _session_id = await _set_code_mode(tmp_path, "custom")
        assert {
            "id": frame["id"],
            "error": {"code": -32001, "message": "ask your admin", "data": {"policy": "no-code"}},
        } == frame

    async def test_invalid_params_from_a_hook_is_answered_as_invalid_params(self, tmp_path):
        frame, _session_id = await _set_code_mode(tmp_path, "invalid")
        assert {
            "id": frame["id"],
            "error": {
                "code": -32602,
                "message": "modeId: not here",
                "data": {
                    "field": "modeId",
                    "value": "code",
                    "valid": ["ask"],
                    "message": "modeId: not here",
                },
            },
        } == frame

    async def test_a_failing_hook_is_an_internal_error(self, tmp_path):
        frame, _session_id = await _set_code_mode(tmp_path, "bug")
        message = (
            "before_change hook no_code refused the change: PermissionError('a bug in the hook')"
        )
        assert {
            "id": frame["id"],
            "error": {"code": -32603, "message": message, "data": {"message": message}},
        } == frame
