"""A second local user gets nothing: not the files, not the server, not the lock for long.

The other user is ``nobody``, reached with ``setpriv --reuid=nobody --regid=nogroup
--clear-groups`` (util-linux; switching users needs root, which is how these tests run).
The files sit in a directory every user may enter and list, so that only their own modes
keep them private. ``nobody`` runs the system's ``python3`` with the standard library only.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import acp
import pytest

from tests.acp_client import TIMEOUT, spawn, text_block
from tests.protocol.http_wire import chain, http_server, v1_client

SETPRIV = shutil.which("setpriv")
SYSTEM_PYTHON = shutil.which("python3", path=os.defpath)

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.e2e,
    pytest.mark.skipif(SETPRIV is None, reason="setpriv is not installed (util-linux)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root"),
]


def as_nobody(*command: str) -> list[str]:
    assert SETPRIV is not None
    return [SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]


async def run_as_nobody(*command: str) -> subprocess.CompletedProcess[str]:
    """*command* run as ``nobody`` (from ``/``), its output captured."""
    return await asyncio.to_thread(
        subprocess.run,
        as_nobody(*command),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd="/",
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter and list (the files' own modes must do the rest)."""
    folder = Path(tempfile.mkdtemp(prefix="modefsm-shared-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


# What nobody tries against the server: only the standard library, no token (it cannot
# read one), a guessed one, a WebSocket, and a request naming a session it learned.
ATTACK = r"""
import base64, http.client, json, os, sys
host, port, session_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def status(method, headers, body=None):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request(method, "/acp", body, headers)
    r = c.getresponse()
    r.read()
    return r.status
init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
move = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/set_mode",
                   "params": {"sessionId": session_id, "modeId": "code"}}).encode()
json_type = {"Content-Type": "application/json"}
ws = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
      "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()}
print(json.dumps({
    "initialize": status("POST", json_type, init),
    "guessed token": status("POST", {**json_type, "Authorization": "Bearer " + "A" * 43}, init),
    "set_mode": status("POST", {**json_type, "Acp-Connection-Id": "0" * 32,
                                "Acp-Session-Id": session_id}, move),
    "websocket": status("GET", ws),
}))
"""


async def test_another_user_reads_no_file_and_moves_no_session(shared_dir):
    assert SYSTEM_PYTHON is not None
    log = shared_dir / "modes.jsonl"
    with http_server(log) as url:
        async with v1_client(url, "http") as (conn, _client):
            session_id = (await conn.new_session(cwd=".")).session_id
            await conn.prompt(session_id=session_id, prompt=[text_block("the secret plan")])
            await conn.set_session_mode(session_id=session_id, mode_id="architect")
            async with v1_client(url, "ws") as (other, _):  # the index and its side files
                await other.load_session(cwd=".", session_id=session_id)
                assert url.token_file is not None
                files = [
                    *(log.with_name(log.name + s) for s in ("", ".conversation", ".index")),
                    *(log.with_name(log.name + s) for s in (".index-wal", ".index-shm")),
                    url.token_file,
                ]
                assert all(f.exists() for f in files)
                listed = await run_as_nobody("ls", str(shared_dir))
                reads = {f.name: await run_as_nobody("cat", str(f)) for f in files}
                host, port = url.removeprefix("http://").removesuffix("/acp").rsplit(":", 1)
                attack = await run_as_nobody(SYSTEM_PYTHON, "-c", ATTACK, host, port, session_id)
        before = chain(log, session_id)
    assert sorted(listed.stdout.split()) == sorted(f.name for f in files[:-1])
    assert {
        name: (r.returncode, r.stdout, "Permission denied" in r.stderr) for name, r in reads.items()
    } == {f.name: (1, "", True) for f in files}
    assert (attack.returncode, attack.stderr) == (0, "")
    assert json.loads(attack.stdout) == {
        "initialize": 401,
        "guessed token": 401,
        "set_mode": 401,
        "websocket": 401,
    }
    assert before == [("session_created", 1, "ask"), ("mode_changed", 2, "architect")]


LOCKER = ("flock", "--exclusive")


async def test_another_users_lock_stalls_a_change_1_s_at_most_and_is_named(shared_dir):
    log = shared_dir / "modes.jsonl"
    async with spawn(log) as (conn, _process, _client):
        session_id = (await conn.new_session(cwd=".")).session_id
        # 0600: nobody cannot even open the log to lock it
        denied = await run_as_nobody(*LOCKER, "--nonblock", str(log), "true")
        assert (denied.returncode, "Permission denied" in denied.stderr) == (66, True)
        # a log someone made readable to all (0644): a read-only descriptor can lock it
        log.chmod(0o644)
        holder = await asyncio.create_subprocess_exec(
            *as_nobody(*LOCKER, str(log), "sh", "-c", "echo locked; cat >/dev/null"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert holder.stdin is not None
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), TIMEOUT) == b"locked\n"
        began = time.monotonic()
        with pytest.raises(acp.RequestError) as failed:
            await conn.set_session_mode(session_id=session_id, mode_id="code")
        waited = time.monotonic() - began
        holder.stdin.close()  # the holder ends, and its lock with it
        assert await asyncio.wait_for(holder.wait(), TIMEOUT) == 0
        await conn.set_session_mode(session_id=session_id, mode_id="code")  # served again
    message = (
        f"{log}: the transition log is locked by another process (pid {holder.pid}, flock, "
        "user nobody) for over 1 s; nothing was written"
    )
    assert (failed.value.code, failed.value.data) == (-32603, {"message": message})
    assert 0.9 < waited < 3.5
    assert stat.S_IMODE(log.stat().st_mode) == 0o644
    assert chain(log, session_id) == [("session_created", 1, "ask"), ("mode_changed", 2, "code")]
