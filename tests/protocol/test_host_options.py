"""A host's own config option, declared once: set, refused, logged, restored, replayed.

``examples/host_config_option.py`` (a ``model`` option beside the mode option, a file
store) is driven over real stdio by the official SDK clients, v1 and v2; each test
restarts it on the same store and replays the log it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import acp
import orjson
import pytest
from acp.experimental import v2
from acp.experimental.v2 import schema as s2

from modefsm import preset
from tests.acp_client import TestClient, end_agent, start_host
from tests.conftest import mode_option, read_log

pytestmark = pytest.mark.e2e

SEED = preset("seed")
SPEC = {"spec": "seed", "spec_hash": SEED.content_hash}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "host_config_option.py"
TIMEOUT = 30


def model(current: str, *, v2_shape: bool = False) -> dict[str, Any]:
    """The ``model`` option as the wire carries it."""
    key = "configId" if v2_shape else "id"
    return {
        key: "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current,
        "options": [{"value": "fast", "name": "Fast"}, {"value": "smart", "name": "Smart"}],
    }


def mode(current: str, *, v2_shape: bool = False) -> dict[str, Any]:
    option = mode_option(SEED, current)
    if v2_shape:
        option["configId"] = option.pop("id")
    return option


def dumped(model_: Any) -> Any:
    return model_.model_dump(mode="json", by_alias=True, exclude_none=True)


@contextlib.asynccontextmanager
async def example(store: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """The example agent on *store*, stopped (stdin closed) at the end."""
    process = await start_host(EXAMPLE, store)
    try:
        yield process
    finally:
        await end_agent(process)
    assert process.returncode == 0


class V2Client:
    """The SDK's v2 client side: keeps every frame the agent sent."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def observe(self, event: Any) -> None:
        if event.direction.value == "incoming":
            self.frames.append({k: v for k, v in event.message.items() if k != "jsonrpc"})

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, **kwargs: Any) -> Any:  # pragma: no cover - not asked
        return s2.RequestPermissionResponse(outcome=s2.CancelledPermissionOutcome())


@contextlib.asynccontextmanager
async def connected(store: Path, version: int) -> AsyncIterator[tuple[Any, Any]]:
    """The official SDK client of ACP *version* (1 or 2), initialized, on the example agent."""
    client: Any = TestClient() if version == 1 else V2Client()
    async with example(store) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        if version == 1:
            conn: Any = acp.connect_to_agent(
                client, process.stdin, process.stdout, observers=[client.observe]
            )
            init = conn.initialize(protocol_version=1)
        else:
            conn = v2.connect_to_agent(
                client, process.stdin, process.stdout, observers=[client.observe]
            )
            info = s2.Implementation(name="host-options", version="0")
            init = conn.initialize(protocol_version=2, info=info)
        await asyncio.wait_for(init, TIMEOUT)
        try:
            yield conn, client
        finally:
            await conn.close()


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def records(store: Path, session_id: str, protocol: int | None = None) -> list[dict[str, Any]]:
    """What the example must have written: created, model set, a refusal, mode set."""
    proto = {} if protocol is None else {"protocol": protocol}
    base = {"session_id": session_id, **proto}
    return [
        {
            **base,
            "seq": 1,
            "from_mode": None,
            "to_mode": "ask",
            "origin": "new",
            "cwd": "/",
            **SPEC,
            "event": "modefsm.session_created",
            "level": "info",
            "session_prev": None,
        },
        {
            **base,
            "seq": 2,
            "from_mode": "ask",
            "to_mode": "ask",
            "origin": "set_config_option",
            "config_id": "model",
            "value": "smart",
            **SPEC,
            "config": {"model": "smart"},
            "event": "modefsm.config_changed",
            "level": "info",
            "session_prev": records_digest(store, 0),
        },
        {
            "session_id": session_id,
            "seq": None,
            "from_mode": "ask",
            "to_mode": None,
            "origin": "set_config_option",
            "config_id": "model",
            "value": "huge",
            **proto,
            **SPEC,
            "reason": "invalid_value",
            "event": "modefsm.change_rejected",
            "level": "warning",
        },
        {
            **base,
            "seq": 3,
            "from_mode": "ask",
            "to_mode": "code",
            "origin": "set_config_option",
            **SPEC,
            "config": {"model": "smart"},
            "event": "modefsm.mode_changed",
            "level": "info",
            "session_prev": records_digest(store, 1),
        },
    ]


def records_digest(store: Path, index: int) -> str:
    """The digest of the *index*-th record of *store* (its ``modefsm.spec`` header skipped)."""
    lines = [orjson.loads(line) for line in store.read_bytes().splitlines()]
    digest: str = [line for line in lines if line["event"] != "modefsm.spec"][index]["digest"]
    return digest


def check_replay(store: Path, session_id: str) -> None:
    """``modefsm replay --verify`` is clean and shows the value; a tampered one is caught."""
    clean = replay("--verify", "--summary", str(store))
    assert (clean.returncode, clean.stderr) == (0, "")
    assert (
        f"  {session_id}  code  (seq 3, spec seed, 3 records, 1 rejected, model = smart)"
        in clean.stdout.splitlines()
    )
    tampered = store.with_name("tampered.jsonl")
    lines = store.read_bytes().splitlines(keepends=True)
    assert [orjson.loads(line)["event"] for line in lines] == [
        "modefsm.spec",
        "modefsm.session_created",
        "modefsm.config_changed",
        "modefsm.change_rejected",
        "modefsm.mode_changed",
    ]
    assert b'"value":"smart"' in lines[2]
    lines[2] = lines[2].replace(b'"value":"smart"', b'"value":"fast"')
    tampered.write_bytes(b"".join(lines))
    caught = replay("--verify", "--summary", str(tampered))
    assert caught.returncode == 1
    violations = [line.strip() for line in caught.stdout.splitlines() if ":3: session" in line]
    assert violations == [
        (
            f"{tampered}:3: session {session_id!r} seq 2: tampered: the record was changed "
            "after it was written: its digest does not match"
        ),
        (
            f"{tampered}:3: session {session_id!r} seq 2: config: config {{'model': 'smart'}}, "
            "but setting 'model' to 'fast' from the session's {} gives {'model': 'fast'}"
        ),
    ]


async def test_v1_client_sets_the_model_and_a_restart_restores_it(tmp_path: Path):
    store = tmp_path / "modes.jsonl"
    async with connected(store, 1) as (conn, client):
        created = await conn.new_session(cwd="/")
        session_id = created.session_id
        set_model = await conn.set_config_option(
            config_id="model", session_id=session_id, value="smart"
        )
        with pytest.raises(acp.RequestError) as refused:
            await conn.set_config_option(config_id="model", session_id=session_id, value="huge")
        set_mode = await conn.set_config_option(
            config_id="mode", session_id=session_id, value="code"
        )
        frames = client.received()
    assert list(map(dumped, created.config_options)) == [mode("ask"), model("fast")]
    assert dumped(set_model) == {"configOptions": [mode("ask"), model("smart")]}
    assert dumped(set_mode) == {"configOptions": [mode("code"), model("smart")]}
    assert (refused.value.code, refused.value.data) == (
        -32602,
        {
            "field": "value",
            "value": "huge",
            "valid": ["fast", "smart"],
            "message": "value: expected a value of config option 'model', got 'huge'; "
            "valid values: 'fast', 'smart'",
        },
    )
    assert [f for f in frames if f.get("method") == "session/update"] == [
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "config_option_update",
                    "configOptions": [mode("ask"), model("smart")],
                },
            },
        },
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
            },
        },
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "config_option_update",
                    "configOptions": [mode("code"), model("smart")],
                },
            },
        },
    ]
    async with connected(store, 1) as (conn, _):
        loaded = await conn.load_session(cwd="/", session_id=session_id)
    assert dumped(loaded)["configOptions"] == [mode("code"), model("smart")]
    assert read_log(store) == records(store, session_id)
    check_replay(store, session_id)


async def test_v2_client_sets_the_model_and_a_restart_resumes_it(tmp_path: Path):
    store = tmp_path / "modes.jsonl"
    async with connected(store, 2) as (conn, client):
        created = await conn.new_session(cwd="/")
        session_id = created.session_id
        set_model = await conn.set_config_option(
            config_id="model", session_id=session_id, value="smart", type="id"
        )
        with pytest.raises(acp.RequestError) as refused:
            await conn.set_config_option(
                config_id="model", session_id=session_id, value="huge", type="id"
            )
        set_mode = await conn.set_config_option(
            config_id="mode", session_id=session_id, value="code", type="id"
        )
        frames = client.frames
    assert [dumped(o) for o in created.config_options] == [
        mode("ask", v2_shape=True),
        model("fast", v2_shape=True),
    ]
    assert dumped(set_model) == {
        "configOptions": [mode("ask", v2_shape=True), model("smart", v2_shape=True)]
    }
    assert dumped(set_mode) == {
        "configOptions": [mode("code", v2_shape=True), model("smart", v2_shape=True)]
    }
    assert (refused.value.code, refused.value.data["field"], refused.value.data["valid"]) == (
        -32602,
        "value",
        ["fast", "smart"],
    )
    assert [f for f in frames if f.get("method") == "session/update"] == [
        {
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "config_option_update",
                    "configOptions": [mode(m, v2_shape=True), model("smart", v2_shape=True)],
                },
            },
        }
        for m in ("ask", "code")
    ]
    async with connected(store, 2) as (conn, _):
        resumed = await conn.resume_session(session_id=session_id, cwd="/")
    assert dumped(resumed)["configOptions"] == [
        mode("code", v2_shape=True),
        model("smart", v2_shape=True),
    ]
    assert read_log(store) == records(store, session_id, protocol=2)
    check_replay(store, session_id)
