"""MAX_IN_FLIGHT over streamable HTTP and WebSocket: requests past it are held, as on stdio.

A host whose prompts are slow counts how many it handles at once; the SDK's client sends
200 prompts on one connection at once. Every prompt is answered, and never more than
MAX_IN_FLIGHT are handled at the same time: the others wait, read but not started,
until one ends.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from acp.schema import PromptResponse

from modefsm import preset
from modefsm.protocol import MAX_IN_FLIGHT, ModeAgent
from tests.acp_client import text_block
from tests.protocol.http_wire import v1_client
from tests.protocol.test_http_open_limit import raw_socket, request
from tests.protocol.test_http_transport import in_process

pytestmark = pytest.mark.e2e

SEED = preset("seed")
PROMPTS = 200
TIMEOUT = 60.0


class Gauge:
    """How many prompts the host handles now, and the most at once."""

    def __init__(self, *, opens: bool = True) -> None:
        self.now = 0
        self.most = 0
        self.started = 0
        self.done = 0
        self.opens = opens  # whether the prompts go on once MAX_IN_FLIGHT are handled
        self.full = asyncio.Event()  # MAX_IN_FLIGHT handled at once, once
        self.go = asyncio.Event()  # the prompts may end


class SlowHost(ModeAgent):
    """A host whose prompt takes a while: it waits until MAX_IN_FLIGHT are handled at once
    (or every prompt has come), then a little more, counting as it goes."""

    gauge: Gauge

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> PromptResponse:
        gauge = self.gauge
        gauge.now += 1
        gauge.started += 1
        gauge.most = max(gauge.most, gauge.now)
        try:
            if gauge.now >= MAX_IN_FLIGHT:
                gauge.full.set()
                if gauge.opens:
                    gauge.go.set()
            await gauge.go.wait()
            await asyncio.sleep(0.02)  # slow: the prompts left arrive meanwhile
        finally:
            gauge.now -= 1
            gauge.done += 1
        return PromptResponse(stop_reason="end_turn")


def serving(gauge: Gauge) -> Any:
    """`serve_http` of a :class:`SlowHost` counting on *gauge*, in this process."""
    return in_process(type("Host", (SlowHost,), {"gauge": gauge}))


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_prompts_past_max_in_flight_are_held_and_all_answered(kind: str) -> None:
    gauge = Gauge()
    async with serving(gauge) as url, v1_client(url, kind) as (conn, _client):
        session_id = (await conn.new_session(cwd=".")).session_id
        turns = [
            conn.prompt(session_id=session_id, prompt=[text_block(f"go {n}")])
            for n in range(PROMPTS)
        ]
        answers = await asyncio.wait_for(asyncio.gather(*turns), TIMEOUT)
    assert [answer.stop_reason for answer in answers] == ["end_turn"] * PROMPTS
    assert (gauge.done, gauge.most, gauge.now) == (PROMPTS, MAX_IN_FLIGHT, 0)


async def test_a_cancel_of_a_held_request_is_answered_at_once_and_it_never_starts() -> None:
    """Over a WebSocket: MAX_IN_FLIGHT prompts handled and one more held; a
    ``$/cancel_request`` of the held one is answered ``-32800`` at once, it never starts,
    and the others are answered once they may end."""
    gauge = Gauge(opens=False)
    async with serving(gauge) as url, raw_socket(url) as raw:
        await raw.call(0, "initialize", {"protocolVersion": 1})
        new = await raw.call(1, "session/new", {"cwd": ".", "mcpServers": []})
        params = {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "go"}]}
        ids = [f"p{n}" for n in range(MAX_IN_FLIGHT + 1)]
        for request_id in ids:
            await raw.socket.send(request(request_id, "session/prompt", params))
        await asyncio.wait_for(gauge.full.wait(), TIMEOUT)
        cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": ids[-1]}}
        await raw.socket.send(json.dumps(cancel))
        held = json.dumps(ids[-1])
        await raw.until(lambda: held in raw.answers, "the held prompt's answer")
        assert raw.answers[held] == {
            "jsonrpc": "2.0",
            "id": ids[-1],
            "error": {"code": -32800, "message": "Request cancelled", "data": None},
        }
        assert (gauge.started, gauge.now) == (MAX_IN_FLIGHT, MAX_IN_FLIGHT)
        gauge.go.set()
        keys = [json.dumps(i) for i in ids[:-1]]
        await raw.until(lambda: all(k in raw.answers for k in keys), "every prompt answered")
        assert [raw.answers[k] for k in keys] == [
            {"jsonrpc": "2.0", "id": i, "result": {"stopReason": "end_turn"}} for i in ids[:-1]
        ]
    assert (gauge.started, gauge.done, gauge.most) == (MAX_IN_FLIGHT, MAX_IN_FLIGHT, MAX_IN_FLIGHT)
