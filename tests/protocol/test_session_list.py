"""`session/list`: every process's sessions, a page at a time, across restarts.

Raw v2 frames over stdio to two `modefsm serve` processes sharing one store (the file
log, or PostgreSQL), then the official SDK v1 and v2 clients over stdio, HTTP and
WebSocket. Pages are compared whole: the sessions, their order (newest last record
first, then by id), their ``cwd`` and ``updatedAt`` (the time of their last record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modefsm.protocol._list import LIST_PAGE
from tests.acp_client import serve as serve_v1
from tests.protocol.http_wire import http_server, v1_client
from tests.protocol.raw_wire import Stdio, call, stdio
from tests.protocol.test_http_v2 import v2_client

pytestmark = pytest.mark.e2e


async def new_sessions(peer: Stdio, cwd: str, count: int) -> list[str]:
    """*count* sessions in *cwd*, asked for at once; their ids."""
    for number in range(count):
        await peer.write(call(1000 + number, "session/new", {"cwd": cwd, "mcpServers": []}))
    return [(await peer.read())["result"]["sessionId"] for _ in range(count)]


async def page(peer: Stdio, **params: Any) -> dict[str, Any]:
    await peer.write(call(9, "session/list", params))
    frame = await peer.read()
    assert frame["id"] == 9, frame
    result: dict[str, Any] = frame["result"]
    return result


def expected(log_paths: list[Path], cwd: str | None = None) -> list[dict[str, Any]]:
    """Every session the logs created with a cwd, as ``session/list`` lists it."""
    cwds: dict[str, str] = {}
    last: dict[str, str] = {}
    for path in log_paths:
        for line in path.read_bytes().splitlines():
            record = json.loads(line)
            if record.get("event") == "modefsm.session_created" and "cwd" in record:
                cwds[record["session_id"]] = record["cwd"]
            if record.get("event") in ("modefsm.session_created", "modefsm.mode_changed"):
                stamp = last.get(record["session_id"], "")
                last[record["session_id"]] = max(stamp, record["timestamp"])
    rows = [
        {"sessionId": s, "cwd": c, "updatedAt": last[s]}
        for s, c in cwds.items()
        if cwd is None or c == cwd
    ]
    rows.sort(key=lambda r: r["sessionId"])
    rows.sort(key=lambda r: r["updatedAt"], reverse=True)
    return rows


async def check_paging(logs: list[Path], args: list[list[str]]) -> None:
    """Two processes make sessions; one pages, restarts, and pages on with the cursor."""
    async with stdio(logs[0], *args[0]) as one, stdio(logs[1], *args[1]) as two:
        made = await new_sessions(one, "/p", 60)
        made += await new_sessions(two, "/p", 60)
        made += await new_sessions(two, "/other", 5)
        await one.write(call(8, "session/close", {"sessionId": made[0]}))
        assert (await one.read()) == {"jsonrpc": "2.0", "id": 8, "result": {}}
        first = await page(one)
        assert set(first) == {"sessions", "nextCursor"}
        assert len(first["sessions"]) == LIST_PAGE
        other = await page(two, cwd="/other")
    everything = expected(logs)
    assert [s["sessionId"] for s in everything] != []
    assert {s["sessionId"] for s in everything} == set(made)  # the closed one too
    assert first["sessions"] == everything[:LIST_PAGE]
    assert other == {"sessions": expected(logs, "/other")}
    async with stdio(logs[0], *args[0]) as again:  # a restart: the cursor still follows on
        rest = await page(again, cursor=first["nextCursor"])
        assert rest == {"sessions": everything[LIST_PAGE:]}
        empty = await page(again, cwd="/nowhere")
        assert empty == {"sessions": []}
        await again.write(call(7, "session/list", {"cursor": "not-a-cursor"}))
        refused = await again.read()
        assert refused["error"]["code"] == -32602
        assert refused["error"]["data"]["field"] == "cursor"


class TestStores:
    async def test_the_file_store_lists_both_processes_across_a_restart(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        await check_paging([log, log], [[], []])

    async def test_an_index_of_the_previous_layout_lists_after_its_first_catch_up(self, tmp_path):
        import sqlite3

        log = tmp_path / "modes.jsonl"
        async with stdio(log) as peer:
            made = await new_sessions(peer, "/q", 3)
        index = tmp_path / "modes.jsonl.index"
        with sqlite3.connect(index) as db:  # as an index written before session/list
            db.execute("DROP INDEX sessions_listed")
            db.execute("DROP INDEX sessions_by_cwd")
            db.execute("ALTER TABLE sessions DROP COLUMN cwd")
            db.execute("ALTER TABLE sessions DROP COLUMN updated_at")
        db.close()
        async with stdio(log) as peer:
            listed = await page(peer)
        assert listed == {"sessions": expected([log])}
        assert {s["sessionId"] for s in listed["sessions"]} == set(made)


class TestOfficialClients:
    async def test_v1_client_over_stdio(self, log_path):
        async with serve_v1(log_path) as (conn, _client):
            made = (await conn.new_session(cwd="/v1", mcp_servers=[])).session_id
            answer = await conn.list_sessions(cwd="/v1")
        dumped = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert dumped == {"sessions": expected([log_path], "/v1")}
        assert dumped["sessions"][0]["sessionId"] == made

    @pytest.mark.parametrize("kind", ["http", "ws"])
    async def test_v1_and_v2_clients_over_http_and_websocket(self, tmp_path, kind):
        log = tmp_path / "modes.jsonl"
        with http_server(log) as url:
            async with v2_client(url, kind) as (two, _seen2), v1_client(url, kind) as (one, _seen1):
                a = (await two.new_session(cwd="/h")).session_id
                b = (await one.new_session(cwd="/h", mcp_servers=[])).session_id
                v2_page = await two.list_sessions(cwd="/h")
                v1_page = await one.list_sessions()
        rows = expected([log], "/h")
        assert {r["sessionId"] for r in rows} == {a, b}
        assert v2_page.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            "sessions": rows
        }
        assert v1_page.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            "sessions": rows
        }
