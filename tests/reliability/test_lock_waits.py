"""Another process holding the log's lock never stalls the event loop of ``modefsm serve``.

A real ``flock`` process holds the lock (of the log, or of the new file after a rename)
while the server gets ``SIGHUP``s, changes and rejected requests; meanwhile the server
answers what needs no lock (``initialize``) at once, and what waited for the lock fails
within ``lock_timeout`` or goes on once the lock is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modefsm import ModeEngine, StoreBusy, UnknownModeError, preset
from modefsm.store import FileStore
from tests.protocol.http_wire import http_process, post, v1_client
from tests.reliability.harness import raw_serve

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SEED = preset("seed")
LOCK_TIMEOUT = 1.0  # seconds: `modefsm serve`'s wait for the log's lock
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'


@contextlib.contextmanager
def locked(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``flock --exclusive PATH`` in another process, held until the block ends."""
    holder = subprocess.Popen(
        ["flock", "--exclusive", str(path), "sh", "-c", "echo locked; exec cat >/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert holder.stdin is not None
    try:
        assert holder.stdout.readline() == b"locked\n"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(30)
        holder.stdout.close()


@pytest.mark.parametrize("rotation", ["none", "renamed"])
async def test_sighup_while_another_process_holds_the_lock_leaves_the_server_answering(
    tmp_path: Path, rotation: str
):
    """Three ``SIGHUP``s while the lock is held (of the log, or of the new file after a
    rename): ``initialize`` is answered at once, not after three waits of 1 s; once the
    lock is free the server writes to the file at the path."""
    log = tmp_path / "modes.jsonl"
    with http_process(log) as (url, process):
        assert (await asyncio.to_thread(post, url, INITIALIZE))[0] == 200
        if rotation == "renamed":
            log.rename(tmp_path / "modes.jsonl.1")
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with locked(log):
            for _ in range(3):
                process.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.1)
            started = time.monotonic()
            status, _answer = await asyncio.to_thread(post, url, INITIALIZE)
            took = time.monotonic() - started
            assert (status, took < LOCK_TIMEOUT / 2) == (200, True), took
        async with v1_client(url, "http") as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
        assert process.poll() is None
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [(r["event"], r.get("session_id")) for r in records] == [
        ("modefsm.spec", None),
        ("modefsm.session_created", session_id),
    ]


async def test_a_rejection_waiting_for_the_lock_leaves_the_loop_serving(tmp_path: Path):
    """A rejected request's line waits for the lock awaited, as a change does: the loop
    runs meanwhile; the line is written once the lock is free."""
    log = tmp_path / "modes.jsonl"
    store = FileStore(log, lock_timeout=5.0)
    try:
        engine = ModeEngine(SEED, store=store)
        one = (await engine.new_session_async("one")).session_id
        with locked(log):
            waiting = asyncio.ensure_future(engine.set_mode(one, "nope"))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # it waits for the lock, and the loop runs this test
        with pytest.raises(UnknownModeError):
            await asyncio.wait_for(waiting, 10)
    finally:
        store.close()
    lines = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [(r["event"], r.get("to_mode"), r.get("reason")) for r in lines] == [
        ("modefsm.spec", None, None),
        ("modefsm.session_created", "ask", None),
        ("modefsm.change_rejected", "nope", "unknown_mode"),
    ]


async def test_a_rename_whose_new_file_is_locked_leaves_the_loop_serving(tmp_path: Path):
    """After a rename, the new file's lock held by another process: the change waits
    awaited (the loop runs), then fails within ``lock_timeout`` with the holder named, and
    nothing was written; once the lock is free the change goes to the new file."""
    log = tmp_path / "modes.jsonl"
    store = FileStore(log, lock_timeout=1.0)
    try:
        engine = ModeEngine(SEED, store=store)
        one = (await engine.new_session_async("one")).session_id
        log.rename(tmp_path / "modes.jsonl.1")
        os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with locked(log) as holder:
            waiting = asyncio.ensure_future(engine.set_mode(one, "code"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            with pytest.raises(StoreBusy) as busy:
                await asyncio.wait_for(waiting, 10)
        assert f"pid {holder.pid}" in str(busy.value)
        assert engine.get(one).state == "ask"
        await engine.set_mode(one, "code")
    finally:
        store.close()
    _, *old = map(json.loads, (tmp_path / "modes.jsonl.1").read_bytes().splitlines())
    header, *new = map(json.loads, log.read_bytes().splitlines())  # each file: its header
    assert [(r["seq"], r["to_mode"]) for r in old] == [(1, "ask")]
    assert [(r["seq"], r["to_mode"]) for r in new] == [(2, "code")]
    assert (header["event"], header["prev"]) == ("modefsm.spec", old[-1]["digest"])


async def test_late_and_duplicate_answers_wait_for_the_lock_off_the_loop(tmp_path: Path):
    """An answer after ``session/cancel`` (``late_answer``) and a second one
    (``duplicate_answer``) arrive while another process holds the log's lock: another
    session's request is answered at once meanwhile, the input ends, and once the lock
    is free both lines are written before the server exits."""
    log = tmp_path / "modes.jsonl"
    async with raw_serve(log) as peer:
        other = await peer.new_session()
        sid = await peer.new_session()
        assert "result" in await peer.set_mode(sid, "architect")
        peer.next_id += 1
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "## Plan"}]}
        await peer.send(
            {"jsonrpc": "2.0", "id": peer.next_id, "method": "session/prompt", "params": prompt}
        )
        prompt_id = peer.next_id
        request = await peer.next_agent_request()
        call = request["params"]["toolCall"]["toolCallId"]
        await peer.notify("session/cancel", {"sessionId": sid})
        assert (await peer.response(prompt_id))["result"]["stopReason"] == "cancelled"
        with locked(log):
            await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "code"}})
            await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "ask"}})
            started = time.monotonic()
            mode = await peer.current_mode(other)
            took = time.monotonic() - started
            assert (mode, took < LOCK_TIMEOUT / 2) == ("ask", True), took
            assert peer.process.stdin is not None
            peer.process.stdin.close()  # the end of input, the lines still waiting
            with contextlib.suppress(TimeoutError):  # it must not exit before they are written
                await asyncio.wait_for(peer.process.wait(), LOCK_TIMEOUT / 2)
            assert peer.process.returncode is None
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    rejected = {
        "event": "modefsm.change_rejected",
        "level": "warning",
        "session_id": sid,
        "seq": None,
        "from_mode": "architect",
        "to_mode": None,
        "origin": "switch_mode",
        "tool_call_id": call,
        "spec": "seed",
        "spec_hash": SEED.content_hash,
    }
    assert [
        {k: v for k, v in r.items() if k not in {"timestamp", "digest", "prev"}}
        for r in records
        if r.get("tool_call_id") == call
    ] == [
        {**rejected, "proposed_in": "architect", "reason": "cancelled"},
        {**rejected, "option_id": "code", "request_id": request["id"], "reason": "late_answer"},
        {**rejected, "option_id": "ask", "request_id": request["id"], "reason": "duplicate_answer"},
    ]
