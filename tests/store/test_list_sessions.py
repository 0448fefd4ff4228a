"""`session/list` over PostgreSQL: two `modefsm serve --store postgresql://...` workers."""

from __future__ import annotations

import base64
import json

import pytest

from tests.protocol.raw_wire import call, stdio
from tests.protocol.test_session_list import check_paging

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

pytestmark = pytest.mark.e2e


async def test_postgresql_lists_both_workers_across_a_restart(tmp_path, postgres_url):
    logs = [tmp_path / "w1.jsonl", tmp_path / "w2.jsonl"]
    await check_paging(logs, [["--store", postgres_url], ["--store", postgres_url]])


def forged(*items: str) -> str:
    """A cursor made by hand (the agent's layout: base64url of a JSON array)."""
    return base64.urlsafe_b64encode(json.dumps(list(items)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("params", "answer"),
    [
        ({"cwd": "/p\u0000q"}, {"sessions": []}),
        ({"cursor": forged("l1", "\u0000", "x")}, "cursor"),
        ({"cursor": forged("l1", "2999-01-01", "\u0000")}, "cursor"),
    ],
    ids=["nul-cwd", "nul-updated-at", "nul-session-id"],
)
async def test_a_nul_in_the_cwd_filter_or_a_forged_cursor_changes_nothing(
    tmp_path, postgres_url, params, answer
):
    """PostgreSQL text holds no NUL: the filter matches nothing (as on the file store), a
    cursor holding one is not a cursor of this agent; neither is an internal error."""
    async with stdio(tmp_path / "w.jsonl", "--store", postgres_url) as peer:
        await peer.write(call(1, "session/new", {"cwd": "/p", "mcpServers": []}))
        assert "result" in await peer.read()
        await peer.write(call(7, "session/list", params))
        got = await peer.read()
    if answer == "cursor":
        assert (got["error"]["code"], got["error"]["data"]["field"]) == (-32602, "cursor")
    else:
        assert got == {"jsonrpc": "2.0", "id": 7, "result": answer}


@pytest.mark.parametrize("store", ["file", "postgresql"])
async def test_a_cwd_holding_a_nul_is_invalid_params(tmp_path, postgres_url, store):
    """No path holds a NUL (and PostgreSQL could not keep one): ``-32602`` naming ``cwd``,
    nothing created, on every store alike."""
    log = tmp_path / "w.jsonl"
    args = ("--store", postgres_url) if store == "postgresql" else ()
    async with stdio(log, *args) as peer:
        await peer.write(call(1, "session/new", {"cwd": "/p\u0000q", "mcpServers": []}))
        got = await peer.read()
        await peer.write(call(2, "session/list", {}))
        listed = await peer.read()
    error = {"code": -32602, "message": "cwd: a path holds no NUL character"}
    data = {"field": "cwd", "message": "cwd: a path holds no NUL character"}
    assert got == {"jsonrpc": "2.0", "id": 1, "error": {**error, "data": data}}
    assert listed == {"jsonrpc": "2.0", "id": 2, "result": {"sessions": []}}
