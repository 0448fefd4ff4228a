"""Stores sharing one file: what a store keeps of the lines other stores append.

A store parses only the lines of the sessions it holds (and the spec headers, and the last
chained line, the file's chain head); it passes over the others by a look at their bytes.
The restore index learns each store's own records from their writer and the others' lines
at the next catch-up, a bounded stretch behind the file. Two stores in one process hold
two open file descriptions, so their ``flock`` locks exclude each other as two processes'
do; one test runs the other store in a real process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from modefsm import preset
from modefsm.log import EVENT_CHANGED, EVENT_CREATED, TransitionLog
from modefsm.replay import replay
from modefsm.store import FileStore, RestorePoint, SessionMoved
from modefsm.store._restore import RestoreIndex

SPEC = preset("seed")
MODES = ("ask", "architect", "code")


def record(session_id: str, seq: int, source: str | None, dest: str) -> dict[str, Any]:
    return {
        "timestamp": "2026-12-01T00:00:00.000000Z",
        "session_id": session_id,
        "seq": seq,
        "from_mode": source,
        "to_mode": dest,
        "origin": "new" if source is None else "set_mode",
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
    }


class Writer:
    """One store's sessions and their heads, as the engine keeps them."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.heads: dict[str, RestorePoint] = {}

    def create(self, session_id: str) -> RestorePoint:
        digest = self.store.append(EVENT_CREATED, record(session_id, 1, None, "ask"), None)
        self.heads[session_id] = RestorePoint(session_id, "ask", 1, None, digest)
        return self.heads[session_id]

    def change(self, session_id: str) -> RestorePoint:
        head = self.heads[session_id]
        dest = MODES[(MODES.index(head.mode) + 1) % len(MODES)]
        fields = record(session_id, head.seq + 1, head.mode, dest)
        digest = self.store.append(EVENT_CHANGED, fields, head)
        self.heads[session_id] = RestorePoint(session_id, dest, head.seq + 1, head.mode, digest)
        return self.heads[session_id]


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def seqs(path: Path, session_id: str) -> list[int]:
    return [row["seq"] for row in lines(path) if row.get("session_id") == session_id]


# Held ids next to ids that share their bytes: a prefix, an escaped quote, a backslash, a
# non-ASCII letter, and one that names the key itself.
HELD = ["s", 'q"uote', "back\\slash", "café", '"session_id":"s"']
OTHERS = ["s1", "ss", 'q"uote2', "back\\slash\\", "cafe", "x"]
PLAIN = ["s1", "ss", "cafe", "x"]  # lines a store passes over a whole block at a time


@pytest.mark.parametrize("others", [OTHERS, PLAIN], ids=["escaped", "plain"])
@pytest.mark.parametrize("held", HELD)
def test_a_store_passing_over_others_lines_still_refuses_a_stale_head(
    tmp_path: Path, held: str, others: list[str]
) -> None:
    """The held session's line among many others' is read: the stale append is refused."""
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        stale = first.create(held)
        second.heads[held] = stale
        for other in others:
            second.create(other)
        for _ in range(200):  # others' lines before and after the held session's
            second.change(others[_ % len(others)])
        moved = second.change(held)
        for _ in range(200):
            second.change(others[_ % len(others)])
        with pytest.raises(SessionMoved) as refused:
            first.change(held)
        assert refused.value.current == moved
        first.heads[held] = refused.value.current  # the engine adopts the head it was told
        assert first.change(held).seq == 3
    finally:
        first.store.close()
        second.store.close()
    assert seqs(path, held) == [1, 2, 3]
    report = replay([path], verify=True)
    assert report.violations == ()


def test_restore_after_another_stores_writes_reads_them(tmp_path: Path) -> None:
    """A session another store moved, never held here, restores at its last record."""
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        first.create("mine")
        second.create("theirs")
        for _ in range(5):
            second.change("theirs")
            first.change("mine")
        assert first.store.restore_point("theirs") == second.heads["theirs"]
        first.heads["theirs"] = second.heads["theirs"]
        first.change("theirs")
        with pytest.raises(SessionMoved):
            second.change("theirs")
    finally:
        first.store.close()
        second.store.close()
    assert seqs(path, "theirs") == [1, 2, 3, 4, 5, 6, 7]


def test_restore_after_a_copytruncate_keeps_what_this_store_read(tmp_path: Path) -> None:
    """Lines this store passed over, then copied away and cut: their sessions restore.

    The other store stays open and commits nothing (fewer records than its index commits
    at); this store read their lines before the cut, so its index has them.
    """
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        first.create("mine")
        assert first.store.restore_point("nobody") is None  # its index follows the file
        second.create("theirs")
        for _ in range(4):
            second.change("theirs")
        first.change("mine")  # reads their lines, passing over them
        shutil.copyfile(path, tmp_path / "modes.jsonl.1")
        with path.open("r+b") as file:  # copytruncate: copied, then cut in place
            file.truncate(0)
        first.change("mine")  # notices the cut
        assert first.store.restore_point("theirs") == second.heads["theirs"]
    finally:
        first.store.close()
        second.store.close()
    third = FileStore(path)
    try:
        assert third.restore_point("theirs") == second.heads["theirs"]
    finally:
        third.close()


def test_restore_after_a_rename_reads_the_old_files_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        first.create("mine")
        second.create("theirs")
        for _ in range(3):
            second.change("theirs")
        path.rename(tmp_path / "modes.jsonl.1")
        first.change("mine")  # moves to the new file
        assert first.store.restore_point("theirs") == second.heads["theirs"]
        first.heads["theirs"] = second.heads["theirs"]
        first.change("theirs")
    finally:
        first.store.close()
        second.store.close()
    assert seqs(path, "theirs") == [5]
    assert seqs(tmp_path / "modes.jsonl.1", "theirs") == [1, 2, 3, 4]


def test_the_index_follows_a_file_others_write_a_bounded_stretch_behind(tmp_path: Path) -> None:
    """Over a megabyte of another store's lines: this store's appends catch the index up."""
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        first.create("mine")
        assert first.store.restore_point("nobody") is None  # its index follows the file
        for i in range(50):
            second.create(f"theirs-{i}")
        while path.stat().st_size < 3 << 20:
            for i in range(50):
                second.change(f"theirs-{i}")
            first.change("mine")
        size = path.stat().st_size
        index = RestoreIndex(tmp_path / "modes.jsonl.index")
        try:
            behind = index.lag(path)
            assert behind is not None
            assert behind < 1 << 20
            assert index.lookup("theirs-7") is not None
        finally:
            index.close()
    finally:
        first.store.close()
        second.store.close()
    assert size > 3 << 20


WRITER = """
import sys
from modefsm.log import EVENT_CHANGED, EVENT_CREATED, TransitionLog
from modefsm.store import FileStore, RestorePoint
sys.path.insert(0, sys.argv[2])
from test_file_sharing import record
store = FileStore(sys.argv[1])
digest = store.append(EVENT_CREATED, record("theirs", 1, None, "ask"), None)
head = RestorePoint("theirs", "ask", 1, None, digest)
for seq, (source, dest) in enumerate([("ask", "code"), ("code", "architect")], start=2):
    digest = store.append(EVENT_CHANGED, record("theirs", seq, source, dest), head)
    head = RestorePoint("theirs", dest, seq, source, digest)
    print(seq, digest, flush=True)
sys.stdin.read()  # stays open (its index commits nothing yet) until told to end
store.close()
"""


def test_a_session_another_process_moved_is_refused_then_restored(tmp_path: Path) -> None:
    """A real second process moves a session this store holds, then stays open."""
    path = tmp_path / "modes.jsonl"
    first = Writer(FileStore(path))
    try:
        first.create("mine")
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(Path(__file__).parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert child.stdin is not None
            printed = [child.stdout.readline().split() for _ in range(2)]
            first.heads["theirs"] = RestorePoint("theirs", "ask", 1)
            with pytest.raises(SessionMoved) as refused:
                first.change("theirs")
            moved = RestorePoint("theirs", "architect", 3, "code", printed[1][1])
            assert refused.value.current == moved
            assert first.store.restore_point("theirs") == moved
            child.stdin.close()
            assert child.wait(timeout=30) == 0
    finally:
        first.store.close()
    assert seqs(path, "theirs") == [1, 2, 3]
    assert [row[0] for row in printed] == ["2", "3"]


def test_a_late_commit_never_moves_the_shared_position_back(tmp_path: Path) -> None:
    """An index told of a record in order commits after another caught up further."""
    path, index_path = tmp_path / "modes.jsonl", tmp_path / "modes.jsonl.index"
    log = TransitionLog.to_file(path)
    log.write(EVENT_CREATED, record("s", 1, None, "ask"))
    first = RestoreIndex(index_path, commit_every=1000, commit_seconds=3600)
    second = RestoreIndex(index_path, commit_every=1000, commit_seconds=3600)
    try:
        assert first.catch_up(path) == 1
        log.write(EVENT_CHANGED, record("s", 2, "ask", "code"))
        told = path.stat().st_size
        first.update("s", "code", 2, told, log.head, ("ask", False))  # in order, kept
        for seq in range(3, 6):
            source, dest = ("code", "ask") if seq % 2 else ("ask", "code")
            log.write(EVENT_CHANGED, record("s", seq, source, dest))
        assert second.catch_up(path) == 4
        first.commit()
    finally:
        first.close()
        second.close()
        log.close()
    third = RestoreIndex(index_path)
    try:
        assert third.lag(path) == 0
        assert third.offset == path.stat().st_size > told
    finally:
        third.close()


TRACED = """
import asyncio, fcntl, os, sys
from modefsm.log import EVENT_CHANGED, EVENT_CREATED
from modefsm.store import FileStore, RestorePoint
sys.path.insert(0, sys.argv[2])
from test_file_sharing import record
path = sys.argv[1]
first, second = FileStore(path), FileStore(path)
digest = first.append(EVENT_CREATED, record("mine", 1, None, "ask"), None)
head = RestorePoint("mine", "ask", 1, None, digest)
second.append(EVENT_CREATED, record("theirs", 1, None, "ask"), None)
print(first._fd, first._log._file.fd, flush=True)
os.path.exists(path + ".begin-others")
digest = first.append(EVENT_CHANGED, record("mine", 2, "ask", "code"), head)
head = RestorePoint("mine", "code", 2, "ask", digest)
os.path.exists(path + ".begin-alone")
digest = first.append(EVENT_CHANGED, record("mine", 3, "code", "ask"), head)
head = RestorePoint("mine", "ask", 3, "code", digest)
os.path.exists(path + ".waits")


async def batch():
    fcntl.flock(second._fd, fcntl.LOCK_EX)  # another store holds the lock: both calls wait
    waits = asyncio.gather(
        first.append_async(EVENT_CHANGED, record("mine", 4, "ask", "code"), head),
        first.append_async(EVENT_CREATED, record("new", 1, None, "ask"), None),
    )
    await asyncio.sleep(0.5)
    os.path.exists(path + ".begin-batch")
    fcntl.flock(second._fd, fcntl.LOCK_UN)
    await waits


asyncio.run(batch())
os.path.exists(path + ".end")
first.close()
second.close()
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")
def test_an_append_reads_others_lines_with_one_read(tmp_path: Path) -> None:
    """The system calls of an append on the log: one read takes the others' lines.

    The look for a rotation (the path's ``stat``, under the lock) gives the file's size;
    when another store appended, one ``pread`` takes the bytes that mark what was read
    before and the new lines together; when none did, nothing is read; the records of
    calls that waited together are written in one hold with nothing read between them.
    """
    path = tmp_path / "modes.jsonl"
    trace = tmp_path / "trace"
    done = subprocess.run(
        ["strace", "-qq", "-o", str(trace),
         "-e", "trace=flock,pread64,read,lseek,write,newfstatat,stat,statx,fstat",
         sys.executable, "-c", TRACED, str(path), str(Path(__file__).parent)],
        capture_output=True, check=True, text=True, timeout=60,
    )  # fmt: skip
    fd, log_fd = done.stdout.split()
    calls: dict[str, list[str]] = {}
    part: list[str] = []
    for line in trace.read_text().splitlines():
        name, _, rest = line.partition("(")
        if rest.startswith(f'AT_FDCWD, "{path}.end"'):
            break
        if rest.startswith(f'AT_FDCWD, "{path}.waits"'):  # tries while another holds it
            part = []
        for mark in ("begin-others", "begin-alone", "begin-batch"):
            if rest.startswith(f'AT_FDCWD, "{path}.{mark}"'):
                part = calls.setdefault(mark, [])
                break
        else:
            if rest.startswith((f"{fd},", f"{log_fd},", f'AT_FDCWD, "{path}"', f'"{path}"')):
                part.append("stat" if "stat" in name else name)
    assert calls == {
        "begin-others": ["flock", "stat", "pread64", "write", "lseek", "flock"],
        "begin-alone": ["flock", "stat", "write", "lseek", "flock"],
        "begin-batch": ["flock", "stat", "write", "lseek", "write", "lseek", "flock"],
    }  # fmt: skip
