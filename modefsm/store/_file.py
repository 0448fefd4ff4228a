"""The embedded session store: one JSON-lines file shared by every process of a machine.

Every process appends to the same file (the ``--log`` path). An append takes an exclusive
``flock`` on the file with a bounded wait (:class:`~modefsm.store.StoreBusy` when it runs
out), reads the complete lines other processes appended since it last looked (they move
the file's chain head and the heads of the sessions this process holds), checks that the
record's ``seq`` is the session's next (:class:`~modefsm.store.SessionMoved` otherwise),
writes the line with one ``O_APPEND`` write (whole or not at all) and releases the lock.
The line is the commit point, as for :class:`~modefsm.log.TransitionLog`: the file stays
one ``prev`` chain over every process's records, so ``modefsm replay --verify`` checks it
as before, and each committed record also names the digest of its session's previous
record (``session_prev``).

A torn last line (a writer killed inside its write) is ended under the lock before the
next record, with a ``modefsm.log_repaired`` line.

The restore index beside the file (``<path>.index``, SQLite in WAL mode) is a shared
cache of the file: :meth:`FileStore.restore_point` catches it up from where this process
last read, under the file's lock, and commits at once; no process keeps a write
transaction open, and opening the store never touches the index. An index that is not a
restore index is refused for restores only (with the command that rebuilds it); the store
still writes.

Only for local filesystems: ``flock`` and ``O_APPEND`` are not reliable over NFS.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from modefsm.errors import LogError
from modefsm.log._files import lock_holders, open_private
from modefsm.log._reader import LogEntry, read_log
from modefsm.log._records import EVENT_CHANGED, EVENT_CREATED, RECORD_EVENTS, TransitionRecord
from modefsm.log._writer import TransitionLog, _check_regular, _end_torn_line
from modefsm.restore import ListAfter, ListedSession, RestoreIndex, RestorePoint, is_index
from modefsm.store._interface import SessionMoved, StoreBusy

__all__ = ["FileStore"]

_CHUNK = 1 << 20
_SPIN = 64


class FileStore:
    """The embedded :class:`~modefsm.store.SessionStore` over the JSON-lines file *path*.

    Args:
        path: the transition log; created if missing, never truncated; must be a regular
            file on a local filesystem.
        fsync: sync each record to disk before :meth:`append` returns.
        lock_timeout: the longest wait for another process's lock, in seconds.
        index: the restore index file (default: *path* plus ``.index``).

    Raises:
        LogError: the file cannot be opened or read, or is not a regular file.
        StoreBusy: another process held the file's lock for over *lock_timeout* seconds.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fsync: bool = False,
        lock_timeout: float = 1.0,
        index: str | Path | None = None,
    ) -> None:
        """Open the file, ending a torn last line under the lock."""
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self.index_path = Path(index) if index is not None else _index_path(self.path)
        try:
            _check_regular(self.path.stat().st_mode, self.path)  # a FIFO would block open
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise LogError(f"cannot open the transition log: {exc.strerror}", str(path)) from None
        try:
            self._fd = open_private(
                self.path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK, "the transition log"
            )
        except OSError as exc:
            raise LogError(f"cannot open the transition log: {exc.strerror}", str(path)) from None
        self._heads: dict[str, RestorePoint] = {}  # sessions this process holds
        self._index: RestoreIndex | None = None
        self._index_problem: str | None = None
        try:
            _check_regular(os.fstat(self._fd).st_mode, self.path)
            self._lock()
            try:  # the writer ends a torn line and finds the chain head: under the lock
                self._log = TransitionLog.to_file(self.path, fsync=fsync)
                self._seen = os.lseek(self._fd, 0, os.SEEK_END)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(self._fd)
            raise
        with contextlib.suppress(LogError):  # opened now (while there is room), used later
            self._open_index()

    @property
    def timeout(self) -> float:
        """The longest wait for the file's lock, in seconds (:attr:`lock_timeout`)."""
        return self.lock_timeout

    # -- the lock ------------------------------------------------------------------------

    def _lock(self) -> None:
        """``flock(LOCK_EX)`` with a bounded wait: a few yields, then short sleeps."""
        for pause in self._lock_waits(self.lock_timeout):
            time.sleep(pause)

    async def _lock_async(self, deadline: float | None) -> None:
        """:meth:`_lock`, the sleeps awaited (the event loop serves others meanwhile).

        The wait ends by *deadline* (the event loop's ``time()``) if that comes first.
        """
        limit = self.lock_timeout
        if deadline is not None:
            limit = min(limit, deadline - asyncio.get_running_loop().time())
        for pause in self._lock_waits(limit):
            await asyncio.sleep(pause)

    def _lock_waits(self, limit: float) -> Iterator[float]:
        """Try the lock; yield each pause to sleep before the next try, until it is taken.

        Raises:
            StoreBusy: the lock was not taken within *limit* seconds.
        """
        fd = self._fd
        for _ in range(_SPIN):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.sched_yield()
                continue
            return
        deadline = time.monotonic() + limit
        pause = 50e-6
        while True:
            yield pause
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holders = lock_holders(fd)
                    who = f" ({holders})" if holders else ""
                    msg = (
                        f"the transition log is locked by another process{who} for over "
                        f"{max(limit, 0):g} s; nothing was written"
                    )
                    raise StoreBusy(msg, str(self.path)) from None
                pause = min(pause * 2, 2e-3)
            else:
                return

    def _sync_tail(self) -> None:
        """Read what other processes appended since :attr:`_seen` (the lock is held)."""
        fd = self._fd
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == self._seen:
            return  # nobody else wrote: the hot path
        if os.pread(fd, 1, size - 1) != b"\n":  # a writer died inside its write
            size += _end_torn_line(fd, size)
        heads = self._heads
        chain = self._log.head
        position = self._seen
        rest = b""
        while position < size:
            chunk = rest + os.pread(fd, min(_CHUNK, size - position), position)
            position += len(chunk) - len(rest)
            end = chunk.rfind(b"\n") + 1
            rest = chunk[end:]
            for line in chunk[:end].split(b"\n")[:-1]:
                if b'"modefsm.' not in line:
                    continue
                try:
                    data = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(data, dict) or data.get("event") not in RECORD_EVENTS:
                    continue
                chain = data.get("digest")
                held = heads.get(data.get("session_id"))  # type: ignore[arg-type]
                seq = data.get("seq")
                if held is not None and isinstance(seq, int) and seq > held.seq:
                    heads[held.session_id] = _after(held, data)
        self._log.follow(chain if isinstance(chain, str) else None)
        self._seen = size

    # -- the interface -------------------------------------------------------------------

    def append(self, event: str, fields: dict[str, Any], head: RestorePoint | None) -> str:
        """Write-ahead one committed record; see :meth:`SessionStore.append`.

        *fields* gets ``session_prev`` (and, written, ``prev`` and ``digest``).
        """
        session_id = fields["session_id"]
        if fields["seq"] != 1 and session_id not in self._heads:
            self._adopt(session_id, head, self.restore_point(session_id))
        self._lock()
        return self._append_locked(event, fields)

    async def append_async(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        deadline: float | None = None,
    ) -> str:
        """:meth:`append`, with the wait for the lock awaited; the write itself is local."""
        session_id = fields["session_id"]
        if fields["seq"] != 1 and session_id not in self._heads:
            point = await self.restore_point_async(session_id, deadline=deadline)
            self._adopt(session_id, head, point)
        await self._lock_async(deadline)
        return self._append_locked(event, fields)

    def _append_locked(self, event: str, fields: dict[str, Any]) -> str:
        """The rest of :meth:`append`, the lock held (released here)."""
        session_id = fields["session_id"]
        seq = fields["seq"]
        try:
            self._sync_tail()
            held = self._heads.get(session_id)
            if seq != (held.seq if held is not None else 0) + 1:
                if held is None:  # pragma: no cover - a seq-1 record always fits
                    held = RestorePoint(session_id, fields["to_mode"], seq - 1)
                raise SessionMoved(held)
            fields["session_prev"] = held.digest if held is not None else None
            self._log.write(event, fields)
            self._seen = os.lseek(self._fd, 0, os.SEEK_END)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        digest = self._log.head
        assert digest is not None  # noqa: S101 - a record was just written
        fields["digest"] = digest
        self._heads[session_id] = _after(held, fields)
        return digest

    def _adopt(
        self, session_id: str, head: RestorePoint | None, point: RestorePoint | None
    ) -> None:
        """Hold a session this process did not create or restore (*point*: the index's)."""
        if point is None and head is not None:
            self._heads[session_id] = head

    def note(self, event: str, fields: dict[str, Any], head: RestorePoint | None = None) -> None:
        """Write a rejection or a diagnostic line (chained when a record; not sequenced).

        Raises:
            SessionMoved: *head* is given and the session, held here, has moved past it
                (the line is not written): see :meth:`SessionStore.note`.
            StoreBusy, LogError: the lock or the write failed.
        """
        self._lock()
        try:
            self._sync_tail()
            if head is not None:
                held = self._heads.get(head.session_id)
                if held is not None and held.seq > head.seq:
                    raise SessionMoved(held)
            self._log.write(event, fields)
            self._seen = os.lseek(self._fd, 0, os.SEEK_END)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's latest point: the index caught up with the file first.

        The session is then held: its later records in the file keep its head current.

        Raises:
            StoreBusy: the file's lock was held too long.
            LogError: the index cannot be used (the message says how to rebuild it).
        """
        with self._caught_up() as index:
            point = index.lookup(session_id)
        return self._hold(session_id, point)

    async def restore_point_async(
        self, session_id: str, *, deadline: float | None = None
    ) -> RestorePoint | None:
        """The latest point of *session_id*, for a catch-up before acting on it.

        A session held here is current as long as no other process appended since this
        one last read the file: then the answer costs one ``lseek`` and no lock. Else the
        lines appended since are read under the lock (awaited); a session not held is
        looked up as by :meth:`restore_point`.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`.
        """
        held = self._heads.get(session_id)
        if held is not None and os.lseek(self._fd, 0, os.SEEK_END) == self._seen:
            return held
        await self._lock_async(deadline)
        try:
            self._sync_tail()
            held = self._heads.get(session_id)
            point = held if held is not None else self._index_caught_up().lookup(session_id)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return self._hold(session_id, point)

    def _hold(self, session_id: str, point: RestorePoint | None) -> RestorePoint | None:
        """Follow *session_id* from *point* on, unless a later head is held; return *point*."""
        if point is not None:
            held = self._heads.get(session_id)
            if held is None or held.seq <= point.seq:
                self._heads[session_id] = point
        return point

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """One page of the file's sessions (see :meth:`SessionStore.list_sessions`).

        The index is caught up with the file under its lock first, so the sessions other
        processes created are listed too; the page is then read from the index (SQLite,
        the ``cwd`` filter and the order done there).

        Raises:
            StoreBusy: the file's lock was held too long.
            LogError: the index cannot be used (the message says how to rebuild it).
        """
        with self._caught_up() as index:
            return index.list_sessions(cwd, after, limit)

    async def list_sessions_async(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """:meth:`list_sessions`, with the wait for the lock awaited."""
        await self._lock_async(None)
        try:
            self._sync_tail()
            return self._index_caught_up().list_sessions(cwd, after, limit)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _caught_up(self) -> Iterator[RestoreIndex]:
        """The index caught up with the file, while the file's lock is held.

        Raises:
            StoreBusy: the file's lock was held too long.
            LogError: the index cannot be used (the message says how to rebuild it).
        """
        self._lock()
        try:
            self._sync_tail()
            yield self._index_caught_up()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _index_caught_up(self) -> RestoreIndex:
        """The index, caught up with the file (the lock is held)."""
        index = self._open_index()
        index.catch_up(self.path)
        return index

    def _open_index(self) -> RestoreIndex:
        if self._index is not None:
            return self._index
        rebuild = f"`modefsm replay {self.path} --rebuild-index {self.index_path}`"
        if _foreign(self.index_path):
            msg = f"the restore index cannot be used: {self.index_path}: exists and is "
            msg += f"not a restore index (not overwritten); rebuild it with {rebuild}"
            raise LogError(msg)
        try:
            index = RestoreIndex(self.index_path)
        except LogError as exc:
            msg = f"the restore index cannot be used: {exc}; rebuild it with {rebuild}"
            raise LogError(msg) from None
        index.report = self._report
        self._index = index
        return index

    def _report(self, event: str, fields: dict[str, Any]) -> None:
        """Write a diagnostic while the lock is held (the index reports a mismatch)."""
        self._log.write(event, fields)
        self._seen = os.lseek(self._fd, 0, os.SEEK_END)

    def release(self, session_id: str) -> None:
        """Stop following *session_id* (closed here): held heads stay bounded."""
        self._heads.pop(session_id, None)

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The committed records of *session_id* in the file, ``seq`` 1 to n (a full scan)."""
        for item in read_log([self.path]):
            if isinstance(item, LogEntry):
                record = item.record
                if record.session_id == session_id and record.event in (
                    EVENT_CREATED,
                    EVENT_CHANGED,
                ):
                    yield record

    def close(self) -> None:
        """Catch the index up with the file, commit it and close both (idempotent).

        The index is left current, so the next process's first restore reads little; when
        it cannot be (locked, refused), the next catch-up reads the rest from the file.
        """
        if self._fd < 0:
            return
        with contextlib.suppress(LogError):
            self._lock()
            try:
                self._sync_tail()
                self._open_index().catch_up(self.path)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        if self._index is not None:
            with contextlib.suppress(LogError):
                self._index.close()
            self._index = None
        self._log.close()
        os.close(self._fd)
        self._fd = -1


def _foreign(path: Path) -> bool:
    """Whether *path* holds something other than a restore index (or one being created).

    A SQLite file with no table yet is one a process was creating when it died: it is
    completed. Anything else that is not a restore index is never written to.
    """
    try:
        if not path.stat().st_size or is_index(path):
            return False
        with path.open("rb") as file:
            if file.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return True
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = db.execute("SELECT name FROM sqlite_master").fetchall()
        finally:
            db.close()
    except FileNotFoundError:
        return False
    except (OSError, sqlite3.Error):
        return True
    return bool(tables)


_SQLITE_HEADER = b"SQLite format 3\x00"


def _index_path(path: Path) -> Path:
    return path.with_name(path.name + ".index")


def _after(head: RestorePoint | None, data: dict[str, Any]) -> RestorePoint:
    """The session's point after the committed record *data*."""
    origin = data["origin"]
    if origin == "restore":
        previous = head.previous if head is not None else None
    else:
        previous = None if origin == "new" else data["from_mode"]
    return RestorePoint(data["session_id"], data["to_mode"], data["seq"], previous, data["digest"])
