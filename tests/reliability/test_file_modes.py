"""The files that hold sessions and prompts are private: created 0600 whatever the umask,
and refused at start when other users may write them."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from modefsm import (
    ConversationStore,
    FileStore,
    LogError,
    LogStore,
    RestoreIndex,
    TransitionLog,
    preset,
)
from modefsm.engine import ModeEngine
from tests.acp_client import text_block
from tests.protocol.http_wire import http_server, v1_client

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SIDE = ("", ".conversation", ".index", ".index-wal", ".index-shm")
"""The files of a log ``LOG``: ``LOG`` + each of these."""


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(log: Path) -> dict[str, int]:
    """The permission bits of each of *log*'s files that exists."""
    found = {}
    for suffix in SIDE:
        path = log.with_name(log.name + suffix)
        if path.exists():
            found[suffix or "log"] = stat.S_IMODE(path.stat().st_mode)
    return found


class TestCreated0600:
    async def test_serve_creates_every_file_0600_under_umask_0(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        with contextlib.ExitStack() as stack:
            with umask(0):  # the server's, set when it starts
                url = stack.enter_context(http_server(log))
            async with v1_client(url, "http") as (conn, _client):
                session_id = (await conn.new_session(cwd=".")).session_id
                await conn.prompt(session_id=session_id, prompt=[text_block("a secret")])
            async with v1_client(url, "ws") as (conn, _client):
                await conn.load_session(cwd=".", session_id=session_id)  # the index in use
                live = modes(log)  # SQLite removes -wal and -shm when the server ends
        assert live == {
            "log": 0o600,
            ".conversation": 0o600,
            ".index": 0o600,
            ".index-wal": 0o600,
            ".index-shm": 0o600,
        }

    def test_the_library_creates_its_files_0600_under_umask_0(self, tmp_path):
        with umask(0):
            log = TransitionLog.to_file(tmp_path / "a.jsonl")
            log.close()
            ConversationStore(tmp_path / "b.conversation").close()
            index = RestoreIndex(tmp_path / "c.index")
            index.close()
            store = FileStore(tmp_path / "d.jsonl")
            ModeEngine(preset("seed"), store=store).new_session()
            store.close()
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in sorted(tmp_path.iterdir())} == {
            "a.jsonl": 0o600,
            "b.conversation": 0o600,
            "c.index": 0o600,
            "d.jsonl": 0o600,
            "d.jsonl.index": 0o600,
        }

    def test_a_rebuilt_index_is_0600_under_umask_0(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        writer = TransitionLog.to_file(log)
        engine = ModeEngine(preset("seed"), store=LogStore(writer))
        engine.new_session()
        writer.close()
        index = tmp_path / "rebuilt.index"
        subprocess.run(
            [sys.executable, "-m", "modefsm", "replay", str(log), "--rebuild-index", str(index)],
            check=True,
            capture_output=True,
            timeout=60,
            preexec_fn=lambda: os.umask(0),
        )
        assert stat.S_IMODE(index.stat().st_mode) == 0o600

    def test_an_existing_file_keeps_its_mode(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        log.touch(mode=0o640)
        log.chmod(0o640)  # the owner's choice: group may read, nobody else may write
        TransitionLog.to_file(log).close()
        assert stat.S_IMODE(log.stat().st_mode) == 0o640


def serve_stdio(log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modefsm", "serve", "--log", str(log)],
        input="",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


class TestOthersMayWrite:
    @pytest.mark.parametrize(
        ("suffix", "what", "mode"),
        [
            ("", "the transition log", 0o666),
            ("", "the transition log", 0o620),
            (".conversation", "the conversation journal", 0o602),
            (".index", "the restore index", 0o660),
            (".index-wal", "the restore index", 0o646),
        ],
    )
    @pytest.mark.parametrize("transport", ["stdio", "http"])
    def test_serve_refuses_to_start_with_one_line(self, tmp_path, suffix, what, mode, transport):
        log = tmp_path / "modes.jsonl"
        path = log.with_name(log.name + suffix)
        path.touch()
        path.chmod(mode)
        if transport == "stdio":
            result = serve_stdio(log)
        else:
            result = subprocess.run(
                [
                    *(sys.executable, "-m", "modefsm", "serve"),
                    "--http",
                    "127.0.0.1:0",
                    "--log",
                    str(log),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        expected = (
            f"modefsm serve: {path}: other users may write {what} (mode {mode:04o}): not "
            "used; remove their write permission (chmod go-w)\n"
        )
        assert (result.returncode, result.stderr) == (2, expected)
        assert stat.S_IMODE(path.stat().st_mode) == mode  # left as it was
        assert path.read_bytes() == b""

    @pytest.mark.parametrize(
        "opener",
        [TransitionLog.to_file, ConversationStore, RestoreIndex, FileStore],
        ids=["log", "journal", "index", "store"],
    )
    def test_the_library_refuses_them_too(self, tmp_path, opener):
        path = tmp_path / "shared"
        path.touch()
        path.chmod(0o666)
        with pytest.raises(LogError, match=r"other users may write .* \(mode 0666\): not used"):
            opener(path)
        assert path.read_bytes() == b""
