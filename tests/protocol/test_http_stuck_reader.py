"""One HTTP client that never reads its event stream holds no one else up.

A real ``modefsm serve --http``: a raw HTTP client loads the session another client works
on and never opens (so never reads) an event stream; the SDK's buffers for it fill, and it
keeps loading the session again (holding it again) while the other client, the official
SDK client, makes 200 changes to that session, each followed by a change to a session of
its own that nobody else holds (the baseline, measured in the same moments). The promise:
no change waits for the stuck client, so the changes to the shared session take no longer
than the baseline's (a change that waited would take ``SEND_WAIT``, 1 s, or ``FULL_WAIT``,
0.1 s, per update more; they stalled 10 s and more before); none takes ``STALL``. Its
notifications arrive whole and in order, the stuck client is let go
(``modefsm.notify_failed``), and the log verifies clean.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from modefsm.protocol import FULL_WAIT
from tests.protocol.http_wire import auth, http_server, mode_updates, v1_client, verify

pytestmark = pytest.mark.e2e

ROUND_TRIPS = 200
FILL_MAX = 3_000  # changes made before measuring, at most, to fill the stuck client's stream
STALL = 5.0  # seconds: no round trip may take longer (a stalled one took 10 s and more)


def let_go(log: Path) -> bool:
    """Whether the log says a connection was let go (``modefsm.notify_failed``)."""
    return b'"modefsm.notify_failed"' in log.read_bytes()


def announced(frame: dict[str, Any]) -> str | None:
    """The mode a ``current_mode_update`` or ``config_option_update`` frame announces."""
    if "method" not in frame:
        return None
    update = frame["params"]["update"]
    if update["sessionUpdate"] == "current_mode_update":
        return str(update["currentModeId"])
    return str(update["configOptions"][0]["currentValue"])


class StuckClient:
    """Raw HTTP: ``initialize``, then requests whose answers it never reads (no GET)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port, parts.path
        self.auth = auth(url)
        status, headers, _body = self.post({"id": 0, "method": "initialize",
                                            "params": {"protocolVersion": 1}})  # fmt: skip
        assert status == 200
        self.connection_id = headers["acp-connection-id"]
        self.next_id = 1

    def post(self, frame: dict[str, Any], session_id: str | None = None) -> tuple[int, Any, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self.auth}
        if getattr(self, "connection_id", None):
            headers["Acp-Connection-Id"] = self.connection_id
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            body = json.dumps({"jsonrpc": "2.0", **frame}).encode()
            connection.request("POST", self.path, body, headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

    def request(self, method: str, params: dict[str, Any], session_id: str | None = None) -> int:
        self.next_id += 1
        status, _headers, _body = self.post(
            {"id": self.next_id, "method": method, "params": params}, session_id
        )
        return status


async def test_a_client_that_never_reads_its_stream_stalls_no_one(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    with http_server(log) as url:
        async with v1_client(url, "http") as (conn, client):
            session_id = (await conn.new_session(cwd=".")).session_id
            own = (await conn.new_session(cwd=".")).session_id  # the baseline's session
            stuck = StuckClient(url)
            load = {"cwd": ".", "sessionId": session_id, "mcpServers": []}
            assert await asyncio.to_thread(stuck.request, "session/load", load) == 202
            filled = 0
            while not let_go(log):  # fill the stuck client's stream until it is let go
                assert filled < FILL_MAX, "the stuck client was never let go"
                mode = "code" if filled % 2 == 0 else "ask"
                await asyncio.wait_for(
                    conn.set_session_mode(session_id=session_id, mode_id=mode), STALL
                )
                filled += 1
            modes = ["code" if n % 2 == 0 else "ask" for n in range(filled, filled + ROUND_TRIPS)]
            stop = threading.Event()

            def hold_again() -> None:  # what the client did: hold, change, repeat
                while not stop.is_set():
                    stuck.request("session/load", load)
                    stuck.request(
                        "session/set_mode", {"sessionId": session_id, "modeId": "architect"},
                        session_id,
                    )  # fmt: skip
                    stop.wait(0.05)

            holder = threading.Thread(target=hold_again, daemon=True)
            holder.start()
            mark = client.mark()
            took: dict[str, list[float]] = {session_id: [], own: []}
            try:
                for n, mode in enumerate(modes):
                    for changed, target in ((session_id, mode), (own, OWN_MODES[n % 2])):
                        started = time.monotonic()
                        await asyncio.wait_for(
                            conn.set_session_mode(session_id=changed, mode_id=target), STALL
                        )
                        took[changed].append(time.monotonic() - started)
            finally:
                stop.set()
                holder.join(30)
            frames = client.since(mark)
    shared, baseline = percentile(took[session_id], 0.9), percentile(took[own], 0.9)
    assert shared < 2 * baseline + FULL_WAIT, (
        f"p90 {shared * 1000:.0f} ms with the stuck client, {baseline * 1000:.0f} ms without"
    )
    # the measured client's own changes reached it whole, each before its answer; the
    # stuck client's changes (to architect) came between them, in commit order too
    mine = [f for f in frames if announced(f) != "architect"]
    expected = []
    for n, mode in enumerate(modes):
        expected += [*mode_updates(session_id, mode), {"result": {}}]
        expected += [*mode_updates(own, OWN_MODES[n % 2]), {"result": {}}]
    assert [{k: v for k, v in f.items() if k not in ("jsonrpc", "id")} for f in mine] == expected
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    failed = [r for r in records if r["event"] == "modefsm.notify_failed"]
    assert {r["error"] for r in failed} <= {"TimeoutError()"} | {
        "ConnectionError('1024 updates queued and not taken by its transport')"
    }
    assert verify(log) == "RESULT  clean"


OWN_MODES = ("code", "ask")
"""The baseline session's modes, in turn (it starts in ``ask``)."""


def percentile(values: list[float], share: float) -> float:
    """The value *share* of *values* are at most (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, round(len(ordered) * share) - 1)]
