"""The capabilities `initialize` advertises are exactly the session methods served.

Every ``session/*`` request method the SDK knows for the version is sent to `modefsm serve`
over stdio: served means answered with anything but ``-32601``. The advertised set (the
version's baseline plus each sub-capability's method) must equal the served set. The
official SDK clients then read the same ``initialize`` answer over HTTP and WebSocket.
"""

from __future__ import annotations

from typing import Any

import pytest
from acp.experimental.v2.meta import AGENT_METHODS as V2_METHODS
from acp.meta import AGENT_METHODS as V1_METHODS

from tests.protocol.http_wire import http_server, v1_client
from tests.protocol.raw_wire import call, stdio
from tests.protocol.test_http_v2 import v2_client

pytestmark = pytest.mark.e2e

NOTIFICATIONS = {"session/cancel"}
"""Client notifications: never answered, so not probed."""

V1_INITIALIZE = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": True,
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
    },
}
V2_CAPABILITIES: dict[str, Any] = {"session": {}}

V1_BASELINE = {"session/new", "session/prompt", "session/set_mode", "session/set_config_option"}
V2_BASELINE = {
    "session/new",
    "session/list",
    "session/resume",
    "session/close",
    "session/prompt",
    "session/set_config_option",
}
"""v2: ``capabilities.session: {}`` advertises new, list, resume, close, prompt, cancel and
update (the TypeScript SDK 2.4's v2 schema); ``set_config_option`` needs no capability."""


def v1_advertised(result: dict[str, Any]) -> set[str]:
    capabilities = result["agentCapabilities"]
    methods = set(V1_BASELINE)
    if capabilities.get("loadSession"):
        methods.add("session/load")
    methods |= {f"session/{name}" for name in capabilities.get("sessionCapabilities") or {}}
    return methods


def v2_advertised(result: dict[str, Any]) -> set[str]:
    session = result["capabilities"].get("session")
    if session is None:
        return set()
    gated = {"delete": "session/delete", "fork": "session/fork"}
    return V2_BASELINE | {gated[name] for name in session if name in gated}


PROBE = {"sessionId": "sess_probe", "cwd": "/", "mcpServers": [], "prompt": [], "modeId": "x"}


async def served(log_path: Any, version: int) -> tuple[dict[str, Any], set[str]]:
    """The ``initialize`` result and the ``session/*`` requests answered otherwise than -32601."""
    known = V1_METHODS if version == 1 else V2_METHODS
    methods = sorted(m for m in known.values() if m.startswith("session/"))
    answered = set()
    async with stdio(log_path, version=None) as peer:
        params: dict[str, Any] = (
            {"protocolVersion": 1}
            if version == 1
            else {"protocolVersion": 2, "info": {"name": "probe", "version": "0"}}
        )
        await peer.write(call(0, "initialize", params))
        result = (await peer.read())["result"]
        for number, method in enumerate(m for m in methods if m not in NOTIFICATIONS):
            params = dict(PROBE)
            if method == "session/set_config_option":
                params.update(configId="mode", value="x", type="id")
            await peer.write(call(number + 1, method, params))
            frame = await peer.read()
            assert frame["id"] == number + 1, frame
            if frame.get("error", {}).get("code") != -32601:
                answered.add(method)
    return result, answered


class TestStdio:
    async def test_v1_advertises_exactly_what_it_serves(self, log_path):
        result, answered = await served(log_path, 1)
        assert {k: result[k] for k in V1_INITIALIZE} == V1_INITIALIZE
        assert v1_advertised(result) == answered
        assert answered == {
            "session/new",
            "session/load",
            "session/resume",
            "session/close",
            "session/list",
            "session/prompt",
            "session/set_mode",
            "session/set_config_option",
        }

    async def test_v2_advertises_exactly_what_it_serves(self, log_path):
        result, answered = await served(log_path, 2)
        assert result["capabilities"] == V2_CAPABILITIES
        assert v2_advertised(result) == answered == V2_BASELINE


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_the_sdk_clients_read_the_same_capabilities_over_http_and_websocket(tmp_path, kind):
    with http_server(tmp_path / "modes.jsonl") as url:
        async with v1_client(url, kind) as (_one, seen):
            init = next(m for d, m in seen.frames if d == "incoming" and "result" in m)
            assert {k: init["result"][k] for k in V1_INITIALIZE} == V1_INITIALIZE
        async with v2_client(url, kind) as (_two, seen2):
            init = next(m for d, m in seen2.frames if d == "incoming" and "result" in m)
            assert init["result"]["capabilities"] == V2_CAPABILITIES
