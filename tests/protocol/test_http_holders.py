"""One holder model on HTTP and WebSocket: a connection acts only on the sessions it holds.

Two connections of one `modefsm serve --http`: A creates a session and runs a turn in it;
B, which never created, loaded or resumed it, sends every session method naming it. Each
request is answered as for an unknown session (v1 ``-32002 {uri}``, v2 ``-32002
{sessionId}``; v2's ``session/close`` succeeds, as for an unknown session), B's
``session/cancel`` ends nothing, and the log holds only A's changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.protocol.http_wire import chain, post, shared_server
from tests.reliability.test_echo_bounds import HttpWire, Wire, http_wire, initialize, ws_wire

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with shared_server(tmp_path_factory, "holders") as served:
        yield served


def wire_to(url: str, kind: str) -> Any:
    return ws_wire(url) if kind == "ws" else http_wire(url)


def not_found(version: int, session_id: str) -> dict[str, Any]:
    if version == 1:
        message = f"sessionId: unknown sessionId {session_id!r}"
        return {"code": -32002, "message": message, "data": {"uri": session_id}}
    data = {"sessionId": session_id}
    return {"code": -32002, "message": f"sessionId: {session_id}", "data": data}


def to_mode(version: int, session_id: str, mode: str) -> tuple[str, dict[str, Any]]:
    if version == 1:
        return "session/set_mode", {"sessionId": session_id, "modeId": mode}
    params = {"sessionId": session_id, "configId": "mode", "type": "id", "value": mode}
    return "session/set_config_option", params


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def allow(request: dict[str, Any]) -> dict[str, Any]:
    """A's answer to the switch's permission request: the option to ``code``."""
    [chosen] = [o["optionId"] for o in request["params"]["options"] if o["optionId"] == "code"]
    outcome = {"outcome": "selected", "optionId": chosen}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}}


async def read_until(wire: Wire, test: Any) -> list[dict[str, Any]]:
    frames = [(await wire.read())[0]]
    while not test(frames[-1]):
        frames.append((await wire.read())[0])
    return frames


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", ["ws", "http"])
async def test_a_connection_that_does_not_hold_a_session_changes_nothing_in_it(
    server, kind, version
):
    url, log = server
    async with wire_to(url, kind) as a, wire_to(url, kind) as b:
        held = await initialize(a, version)
        await initialize(b, version)  # B has a session of its own (HTTP: its header)
        a.next_id += 1
        method, params = to_mode(version, held, "architect")
        await a.send({"jsonrpc": "2.0", "id": a.next_id, "method": method, "params": params})
        assert "result" in (await a.until(a.next_id))[-1]

        # A's turn proposes the switch; its permission request waits for A's answer
        a.next_id += 1
        turn_id = a.next_id
        request = {"jsonrpc": "2.0", "id": turn_id, "method": "session/prompt"}
        await a.send({**request, "params": prompt(held, "plan")})
        [*_before, asked] = await read_until(
            a, lambda f: f.get("method") == "session/request_permission"
        )

        answers = {
            "set": await b.call(*to_mode(version, held, "code")),
            "prompt": await b.call("session/prompt", prompt(held, "hijack")),
        }
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": held}}
        assert await b.send(cancel) is None
        if version == 1:
            answers["config"] = await b.call(
                "session/set_config_option", {"sessionId": held, "configId": "mode", "value": "ask"}
            )
        answers["close"] = await b.call("session/close", {"sessionId": held})

        assert await a.send(allow(asked)) is None
        frames = await a.until(turn_id)

    refused = {"jsonrpc": "2.0", "error": not_found(version, held)}
    # B's ids: 1 initialize, 2 session/new, then one per call
    if version == 1:
        assert answers == {
            "set": {**refused, "id": 3},
            "prompt": {**refused, "id": 4},
            "config": {**refused, "id": 5},
            "close": {**refused, "id": 6},
        }
        ended = frames[-1]["result"]["stopReason"]
    else:
        assert answers == {
            "set": {**refused, "id": 3},
            "prompt": {**refused, "id": 4},
            "close": {"jsonrpc": "2.0", "id": 5, "result": {}},
        }
        [idle] = [
            f["params"]["update"]
            for f in frames
            if f.get("method") == "session/update" and f["params"]["update"].get("state") == "idle"
        ]
        ended = idle["stopReason"]
    assert ended == "end_turn"  # B's cancel ended nothing: A's turn ran to its end
    assert chain(log, held) == [
        ("session_created", 1, "ask"),
        ("mode_changed", 2, "architect"),
        ("mode_changed", 3, "code"),
    ]


async def test_over_http_a_session_header_the_connection_has_not_attached_is_404(server):
    url, _log = server
    async with http_wire(url) as a, http_wire(url) as b:
        held = await initialize(a, 1)
        await initialize(b, 1)
        assert isinstance(b, HttpWire)
        frame = b'{"jsonrpc":"2.0","id":9,"method":"session/set_mode","params":{}}'
        headers = {"Acp-Connection-Id": b.connection_id, "Acp-Session-Id": held}
        status = await asyncio.to_thread(post, url, frame, headers)
    assert status == (404, {"error": "Unknown session id"})
