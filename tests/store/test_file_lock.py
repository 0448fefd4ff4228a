"""The embedded store's lock: a short spin before the thread wait, one watching descriptor.

A real ``flock`` process holds the file's lock. A taken lock is tried again for a bounded
time (yielding the processor) before a waiter blocks in a thread; the thread watches the
lock through one descriptor of its own per file (opened again only after a rotation,
closed with the store). Also: what a store reads of the last line others wrote (parsed
once, for its session's head and for the chain head).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from modefsm.log import EVENT_CHANGED, EVENT_REPAIRED
from modefsm.replay import replay
from modefsm.store import FileStore, RestorePoint, SessionMoved
from modefsm.store._restore import RestoreIndex
from tests.reliability.test_lock_waits import locked
from tests.store.test_file_sharing import MODES, Writer, lines, record, seqs


def descriptors(path: Path) -> int:
    """How many of this process's descriptors name the file at *path* (its inode)."""
    inode = path.stat().st_ino
    count = 0
    for entry in Path("/proc/self/fd").iterdir():
        try:
            count += entry.stat().st_ino == inode
        except OSError:
            continue  # the listing's own descriptor, closed since
    return count


def until(condition: object, seconds: float = 5.0) -> bool:
    """Whether *condition* (a callable) holds within *seconds* (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return bool(condition())  # type: ignore[operator]


def test_a_taken_lock_is_tried_again_until_freed_within_the_spin(tmp_path: Path) -> None:
    """Held by another process: no spin fails at once; a spin shorter than the hold gives
    up after it; a spin longer than the hold takes the lock as soon as it is freed."""
    path = tmp_path / "modes.jsonl"
    path.touch(mode=0o600)
    fd = os.open(path, os.O_RDONLY)
    try:
        with locked(path) as holder:
            started = time.monotonic()
            assert FileStore._try_lock(fd) is False
            assert FileStore._try_lock(fd, 0.2) is False
            took = time.monotonic() - started
            assert 0.2 <= took < 2.0, took
            assert holder.stdin is not None
            freed = threading.Timer(0.3, holder.stdin.close)
            started = time.monotonic()
            freed.start()
            assert FileStore._try_lock(fd, 20.0, yielding=True) is True
            took = time.monotonic() - started
            freed.join()
        assert 0.3 <= took < 5.0, took
    finally:
        os.close(fd)


async def test_waits_watch_through_one_descriptor_that_follows_a_rotation(
    tmp_path: Path,
) -> None:
    """Two waits for a lock another process holds open the file once for the watch (one
    descriptor more than the store's own); after a rename the old file's is closed and
    the next wait opens the new file; closing the store closes every one."""
    path = tmp_path / "modes.jsonl"
    store = FileStore(path, lock_timeout=10.0)
    writer = Writer(store)
    writer.create("s")
    own = descriptors(path)  # the store's (its lock) and its log's (its writes)
    try:
        for _ in range(2):
            await changed_while_held(writer, path)
            assert descriptors(path) == own + 1
        old = tmp_path / "modes.jsonl.1"
        path.rename(old)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        await changed_while_held(writer, path)  # the new file's lock: another process's
        assert await asyncio.to_thread(until, lambda: descriptors(old) == 0)
        assert descriptors(path) == own
        await changed_while_held(writer, path)
        assert descriptors(path) == own + 1
    finally:
        store.close()
    assert await asyncio.to_thread(until, lambda: descriptors(path) == 0)
    assert seqs(old, "s") == [1, 2, 3]
    assert seqs(path, "s") == [4, 5]
    assert replay([old, path], verify=True).violations == ()


async def changed_while_held(writer: Writer, path: Path) -> None:
    """One change of session ``s`` awaited while another process holds *path*'s lock for
    0.3 s: it waits (the loop runs), then is written."""
    head = writer.heads["s"]
    dest = MODES[(MODES.index(head.mode) + 1) % len(MODES)]
    fields = record("s", head.seq + 1, head.mode, dest)
    with locked(path):
        waiting = asyncio.ensure_future(writer.store.append_async(EVENT_CHANGED, fields, head))
        await asyncio.sleep(0.3)
        assert not waiting.done()
    digest = await asyncio.wait_for(waiting, 10)
    writer.heads["s"] = RestorePoint("s", dest, head.seq + 1, head.mode, digest)


@pytest.mark.parametrize("after", ["nothing", "a diagnostic"])
def test_the_held_sessions_record_as_the_last_line_others_wrote(tmp_path: Path, after: str) -> None:
    """The held session's record is the last record another store wrote (then nothing,
    or a line that is no record): the stale append is refused with that record's head,
    and the next record chains to it."""
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        stale = first.create("held")
        second.heads["held"] = stale
        second.create("other")
        moved = second.change("held")
        if after == "a diagnostic":
            second.store.note(EVENT_REPAIRED, {"reason": "a test line", "bytes": 0})
        with pytest.raises(SessionMoved) as refused:
            first.change("held")
        assert refused.value.current == moved
        first.heads["held"] = refused.value.current
        assert first.change("held").seq == 3
    finally:
        first.store.close()
        second.store.close()
    records = [row for row in lines(path) if "digest" in row]
    assert [(row.get("session_id"), row.get("seq")) for row in records] == [
        ("held", 1),
        ("other", 1),
        ("held", 2),
        ("held", 3),
    ]
    assert records[-1]["prev"] == records[-2]["digest"] == moved.digest
    assert replay([path], verify=True).violations == ()


def test_two_stores_taking_turns_keep_the_index_position_moving(tmp_path: Path) -> None:
    """Two stores taking turns, one record each: each tells the index of the other's line
    it read (the only one, right after its own), so the committed log position follows
    the file (less than one commit's worth of lines behind) with no catch-up; restores in
    a third store then give every session's head."""
    path = tmp_path / "modes.jsonl"
    first, second = Writer(FileStore(path)), Writer(FileStore(path))
    try:
        for name in ("a", "b"):
            first.create(f"{name}1")
            second.create(f"{name}2")
        for turn in range(300):
            first.change("a1" if turn % 2 else "b1")
            second.change("a2" if turn % 2 else "b2")
        written = path.stat().st_size
        longest = max(len(line) + 1 for line in path.read_bytes().splitlines())
        index = RestoreIndex(tmp_path / "modes.jsonl.index")
        try:
            lag = index.lag(path)
        finally:
            index.close()
        assert lag is not None
        assert lag <= 256 * longest < written // 2, (lag, written)
        heads = {**first.heads, **second.heads}
    finally:
        first.store.close()
        second.store.close()
    third = FileStore(path)
    try:
        assert {sid: third.restore_point(sid) for sid in heads} == heads
    finally:
        third.close()
