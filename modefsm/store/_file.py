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

Rotation: every time the lock is taken, the store checks that the path still names the
file it reads (renamed away by a rotation tool: it reads the old file's last lines, then
moves to the new file, creating it if missing) and that the file is not shorter than what
it read, nor changed before that point (copied, then truncated in place: it reads it
again from its start). Either way each session's head and the file's chain head are
kept, so the new file's first record continues the old file's chain, and the restore
index keeps the points of the sessions last written in the old file.
:meth:`FileStore.reopen` does this at once (``serve`` calls it on ``SIGHUP``).

Of the lines other processes appended, a store parses only those that can move what it
keeps: the lines of the sessions it holds, the spec headers and the last chained line
(the file's chain head); a line naming one other session is passed over by a look at its
bytes.

The restore index beside the file (``<path>.index``, SQLite in WAL mode) is a shared
cache of the file. Each store tells it of its own records as it lets the file's lock go
(with one line another process appended just before, parsed for the chain head); the log
position the index reached (from which a catch-up reads) moves only over lines it was told
of in order. :meth:`FileStore.restore_point` catches it up from that position (committed
by whichever process moved it last), under the file's lock, and commits at once; so do
listing, closing, a rotation, and a store whose index fell :data:`_ALIGN_MAX` bytes behind
what it read (so the index is never further behind). The lines a store passed over since
its index last caught up are kept until then (at most that many bytes), so a file
truncated in place, which keeps nothing for a catch-up to read, still leaves their
sessions' points in the index. Commits are batched as the index's own; no process keeps
a write transaction open, and opening the store never touches the index.
An index that is not a restore index is refused for restores only (with the command that
rebuilds it); the store still writes.

Only for local filesystems: ``flock`` and ``O_APPEND`` are not reliable over NFS.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from pydantic import ValidationError

from modefsm.errors import LogError
from modefsm.log import (
    CHAINED_EVENTS,
    EVENT_CHANGED,
    EVENT_CONFIG,
    EVENT_CREATED,
    EVENT_DECIDED,
    EVENT_REJECTED,
    EVENT_SPEC,
    SEQ_MAX,
    DecisionEntry,
    DecisionRecord,
    LogEntry,
    TransitionRecord,
    lock_holders,
    open_private,
    previous_of,
    read_log,
)
from modefsm.log._writer import (
    TransitionLog,
    _check_regular,
    _end_torn_line,
    _index_record,
    _record_line,
)
from modefsm.spec import MAX_GRANTS
from modefsm.store._decided import DECIDED_KEPT, call_key, remember_decision
from modefsm.store._interface import (
    AlreadyDecided,
    ListAfter,
    ListedSession,
    RestorePoint,
    SessionMoved,
    StoreBusy,
)
from modefsm.store._restore import RestoreIndex, is_index

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = ["FileStore"]

_CHUNK = 1 << 20
_SPIN = 100e-6
"""Seconds a blocking lock is tried again (yielding the processor) before the first sleep."""
_SPIN_LOOP = 20e-6
"""Seconds the event loop tries a taken lock again before it waits for it in a thread:
another process holds it a few microseconds per record. The processor is not yielded (a
yield on a busy machine can last milliseconds)."""
_BATCH = 256
"""The most queued records one hold of the lock writes (the others wait for the next)."""

_READ_TRIES = 4
"""How many times :meth:`FileStore.note_once_async` reads a session's decisions from the file
again when the session dropped one meanwhile (other processes deciding fast)."""

_UNDECIDED = object()
"""No decision of the call is known."""


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
        self._path_text = os.fspath(self.path)
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
        self._granted: dict[str, list[dict[str, Any]]] = {}  # others' allow_always, by session
        # held sessions' decisions read or written since the hold (the last DECIDED_KEPT):
        # call_key(toolCallId) -> outcome; and how many each has dropped to keep the bound
        self._decided: dict[str, dict[bytes, str | None]] = {}
        self._dropped: dict[str, int] = {}
        self._queued: list[tuple[str, dict[str, Any], asyncio.Future[str]]] = []
        self._writer: asyncio.Task[None] | None = None  # writes the queued records
        self._watch = _LockWatch()
        self._index: RestoreIndex | None = None
        self._index_problem: str | None = None
        self._seen = 0  # bytes of the file read (under the lock)
        self._mark = b""  # the last bytes before _seen: a file cut and refilled differs
        self._fed: int | None = None  # bytes the index was told of in order (caught up here)
        self._unfed: list[tuple[int, bytes]] = []  # others' lines read since _fed, by offset
        self._telling: list[_Told] = []  # own records the index is told of after the lock
        self._aligning = True  # try to make the index follow at the next append
        self._ahead: tuple[int, bytes] | None = None  # the file's size, and bytes after _seen
        try:
            _check_regular(os.fstat(self._fd).st_mode, self.path)
            self._identity = _identity(self._fd)
            self._lock(follow=False)
            try:  # the writer ends a torn line and finds the chain head: under the lock
                self._log = TransitionLog.to_file(self.path, fsync=fsync)
                self._read_to(os.lseek(self._fd, 0, os.SEEK_END))
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(self._fd)
            raise
        with contextlib.suppress(LogError):  # opened now (while there is room), used later
            kept = self._open_index()
            if self._log.head is None and self._seen == 0:  # a new file after a rotation
                self._log.follow(kept.head)

    @property
    def timeout(self) -> float:
        """The longest wait for the file's lock, in seconds (:attr:`lock_timeout`)."""
        return self.lock_timeout

    # -- the lock ------------------------------------------------------------------------

    def _lock(self, *, follow: bool = True) -> None:
        """Lock the file (see :meth:`_lock_steps`), sleeping between tries.

        Raises:
            StoreBusy: the lock was not had in time.
            LogError: a rotated file could not be followed (the lock is not held then).
        """
        for wait in self._lock_steps(self.lock_timeout, follow=follow):
            time.sleep(wait.pause)

    async def _lock_async(self, deadline: float | None) -> None:
        """:meth:`_lock`, the waits awaited (the event loop serves others meanwhile).

        Each try takes the lock if free, else tries again for up to :data:`_SPIN_LOOP`
        seconds; then a wait for a lock another process holds is a thread of the store's
        own blocked until no process holds it (:class:`_LockWatch`), and the lock is
        tried again at once: no sleeping while it is free. The wait ends by *deadline*
        (the event loop's ``time()``) if that comes first.

        Raises:
            StoreBusy: the lock was not had in time.
            LogError: a rotated file could not be followed (the lock is not held then).
        """
        loop = asyncio.get_running_loop()
        limit = self.lock_timeout
        if deadline is not None:
            limit = min(limit, deadline - loop.time())
        for wait in self._lock_steps(limit, spin=_SPIN_LOOP, again=_SPIN_LOOP, yielding=False):
            if wait.fd is None:
                await asyncio.sleep(wait.pause)
                continue
            freed: asyncio.Future[None] = loop.create_future()
            try:
                self._watch.wait(wait.fd, partial(loop.call_soon_threadsafe, _resolve, freed))
            except OSError:  # no descriptor to watch with: the pause
                loop.call_later(wait.pause, _resolve, freed)
            left = max(wait.until - time.monotonic(), 0)
            with contextlib.suppress(TimeoutError):  # the next try finds out
                await asyncio.wait_for(freed, left)

    def _lock_now(self) -> bool:
        """Lock the file and notice a rotation if that takes no wait (one try, spun).

        Returns:
            Whether the lock is held now (nothing else is).

        Raises:
            LogError: a rotated file could not be followed (the lock is not held then).
        """
        steps = self._lock_steps(self.lock_timeout, spin=_SPIN_LOOP, yielding=False)
        try:
            next(steps)
        except StopIteration:
            return True
        steps.close()
        return False

    def _lock_steps(
        self,
        limit: float,
        *,
        follow: bool = True,
        spin: float = _SPIN,
        again: float = 0.0,
        yielding: bool = True,
    ) -> Generator[_Wait]:
        """Lock the file; with *follow*, then notice a rotation (:meth:`_follow_file`).

        Yields each wait before the next try (:class:`_Wait`: a pause to sleep, or the
        lock to wait for), for at most *limit* seconds in all. The lock is held only
        between two waits, never across one: when the file was renamed away and another
        process holds the new file's lock, ours is let go and both are tried again after
        the pause. A taken lock is tried again for up to *spin* seconds before the first
        wait, *again* seconds before each later one (*yielding*: the processor between
        two tries).

        Raises:
            StoreBusy: the locks were not had in time.
            LogError: a rotated file could not be followed (the lock is not held then).
        """
        started = time.monotonic()
        pause = 50e-6
        while True:
            yield from self._lock_waits(self._fd, limit, started, (spin, again, yielding))
            if not follow:
                return
            try:
                busy = self._follow_file()
            except BaseException:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                raise
            if busy is None:
                return
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if time.monotonic() - started >= limit:
                raise busy
            yield _Wait(pause, None, started + limit)
            pause = min(pause * 2, 2e-3)

    @staticmethod
    def _try_lock(fd: int, spin: float = 0.0, *, yielding: bool = False) -> bool:
        """Take the lock of *fd* if free, else try again for up to *spin* seconds.

        *yielding*: the processor is yielded between two tries (``sched_yield``), so
        that the holder, if waiting for it, runs.
        """
        until = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                now = time.monotonic()
                if not until:
                    until = now + spin
                if now >= until:
                    return False
                if yielding:
                    os.sched_yield()
                continue
            return True

    def _lock_waits(
        self, fd: int, limit: float, since: float, spins: tuple[float, float, bool]
    ) -> Iterator[_Wait]:
        """Try the lock of *fd*; yield each wait before the next try, until taken.

        *spins*: *spin*, *again* and *yielding*, as for :meth:`_lock_steps`.

        Raises:
            StoreBusy: the lock was not taken within *limit* seconds of *since* (a
                ``time.monotonic()``).
        """
        spin, again, yielding = spins
        if self._try_lock(fd, spin, yielding=yielding):
            return
        deadline = since + limit
        pause = 50e-6
        while True:
            yield _Wait(pause, fd, deadline)
            if self._try_lock(fd, again, yielding=yielding):
                return
            if time.monotonic() >= deadline:
                raise self._busy(fd, limit)
            pause = min(pause * 2, 2e-3)

    def _unlock(self) -> None:
        """Let the file's lock go; then tell the index of the records written meanwhile.

        The index learns of this store's own records (and commits them when due, which
        may wait for SQLite's lock) while no other process waits for the file's lock.
        """
        self._ahead = None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        if self._telling:
            self._tell_index()

    def _tell_index(self) -> None:
        """Tell the index of this store's records not told yet, in the order written."""
        telling, self._telling = self._telling, []
        index = self._index
        if index is None:
            return
        for event, fields, digest, end, follows in telling:
            if event is None or digest is None:  # another process's line
                self._feed(index, fields, end)
            else:
                _index_record(index, event, fields, digest, end, follows=follows)

    def _busy(self, fd: int, limit: float) -> StoreBusy:
        """The error for the lock of *fd* not had within *limit* seconds (who holds it)."""
        holders = lock_holders(fd)
        who = f" ({holders})" if holders else ""
        msg = (
            f"the transition log is locked by another process{who} for over "
            f"{max(limit, 0):g} s; nothing was written"
        )
        return StoreBusy(msg, str(self.path))

    def _busy_queued(self, limit: float) -> StoreBusy:
        """:meth:`_busy` for a queued call not written in time.

        Names the holder of our file's lock, else (after a rename) of the file the path
        names now.
        """
        if lock_holders(self._fd):
            return self._busy(self._fd, limit)
        try:
            named = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return self._busy(self._fd, limit)
        try:
            return self._busy(named, limit)
        finally:
            os.close(named)

    # -- rotation --------------------------------------------------------------------------

    def _follow_file(self) -> StoreBusy | None:
        """Notice a rotation, the lock held: the path names another file, or ours was cut.

        Returns:
            ``None``; or, when another process holds the new file's lock, the error to
            raise if that lasts (nothing changed).

        Raises:
            LogError: the new file cannot be opened (nothing changed).
        """
        try:
            named = os.stat(self._path_text)  # noqa: PTH116 - each append: no pathlib
        except FileNotFoundError:
            named = None
        except OSError as exc:
            raise self._cannot_open(exc) from None
        if named is None or (named.st_dev, named.st_ino) != self._identity:
            return self._move_to_new_file()
        size = named.st_size
        if size < self._seen or (size > self._seen and not self._unchanged(size)):
            self._feed_unfed()
            self._read_again(continued=self._fed is not None)
        elif size == self._seen:
            self._ahead = (size, b"")
        return None

    def _cannot_open(self, exc: OSError) -> LogError:
        return LogError(f"cannot open the transition log: {exc.strerror}", str(self.path))

    def _unchanged(self, size: int) -> bool:
        """Whether the bytes just before :attr:`_seen` still hold :attr:`_mark`.

        The file is *size* bytes long (more than :attr:`_seen`): the same read takes the
        bytes after :attr:`_seen` too, up to :data:`_CHUNK` of them, for
        :meth:`_sync_tail` (:attr:`_ahead`), so a look at others' lines costs one read.
        """
        seen, mark = self._seen, self._mark
        start = max(0, seen - _MARK) if mark else seen
        read = os.pread(self._fd, min(size, seen + _CHUNK) - start, start)
        if mark and mark not in read[: seen - start]:
            return False
        if len(read) == size - start:  # all of it: else the lines are read in blocks
            self._ahead = (size, read[seen - start :])
        return True

    def _move_to_new_file(self) -> StoreBusy | None:
        """The file was renamed away: read its last lines, then follow the new one.

        Returns:
            ``None``, or the error to raise when another process holds the new file's
            lock (one try: nothing changed, see :meth:`_follow_file`).
        """
        old = self._fd
        try:  # created 0600 if missing, as the first one was
            fd = open_private(
                self.path, os.O_RDWR | os.O_APPEND | os.O_NONBLOCK, "the transition log"
            )
        except OSError as exc:
            raise self._cannot_open(exc) from None
        try:
            _check_regular(os.fstat(fd).st_mode, self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy = self._busy(fd, self.lock_timeout)
                os.close(fd)
                return busy
            self._sync_tail(align=False)  # the old file's last records: the index reads them
            index = self._usable_index()
            continued = index is not None
            if index is not None:  # it learns every record of the old file, through our fd
                try:
                    self._catch_up_index(index, _descriptor_path(old))
                except LogError:
                    continued = False
            self._log.reopen()  # ends a torn line, keeps the chain: under the new lock
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._identity = _identity(fd)
        self._watch.forget()  # the old file is not kept open for the watch
        fcntl.flock(old, fcntl.LOCK_UN)
        os.close(old)
        self._read_again(continued=continued)
        return None

    def _read_again(self, *, continued: bool) -> None:
        """Read the file from its start (new, or cut shorter), keeping every head.

        The index follows it from its start; *continued*: the index holds every record
        read so far, so it keeps their points as those of an earlier file.
        """
        self._seen, self._mark, self._fed = 0, b"", None
        self._ahead = None
        self._unfed.clear()
        self._log.unnamed()  # the headers it has are those read now
        index = self._usable_index()
        if index is not None:
            with contextlib.suppress(LogError):
                index.rotated(self.path, continued=continued)
        self._sync_tail()
        self._align()

    def _usable_index(self) -> RestoreIndex | None:
        """The index if it can be opened, else ``None``."""
        try:
            return self._open_index()
        except LogError:
            return None

    def _align(self, at_most: int | None = None) -> None:
        """Catch the index up with the file (the lock held) and tell it of every line after.

        With *at_most*, only if that reads at most so many bytes (the first record of a
        process must not wait for a long catch-up: its first restore does that).
        """
        self._aligning = False
        index = self._usable_index()
        if index is None:
            return
        if at_most is not None:
            lag = index.lag(self.path)
            if lag is None or lag > at_most:
                return
        with contextlib.suppress(LogError):
            self._index_caught_up()
            return
        self._fed = None  # the index fails: restores catch it up (or say why they cannot)
        self._unfed.clear()

    # -- reading others' lines --------------------------------------------------------------

    def _read_to(self, size: int, digest: str | None = None) -> None:
        """Note that the file was read up to *size* bytes.

        What marks that point (:meth:`_unchanged`): *digest*, when the last line is a
        record whose digest is known, else the last bytes, read.
        """
        self._seen = size
        if digest is not None:
            self._mark = digest.encode()
        else:
            self._mark = os.pread(self._fd, _MARK, max(0, size - _MARK)) if size else b""

    def _sync_tail(self, *, align: bool = True) -> None:
        """Read what other processes appended since :attr:`_seen` (the lock is held).

        Only the lines that can move what this process keeps are parsed: those naming a
        session it holds, the spec headers, lines with no ``session_id`` and the last
        chained line (the file's chain head); the others are passed over by a look at
        their bytes (:func:`_passed_over`).

        The index is told of those lines later (:meth:`_index_caught_up`); until then
        they are kept (at most :data:`_ALIGN_MAX` bytes) for a cut file
        (:meth:`_feed_unfed`). With *align*, the index catches up here when that is
        exceeded. One line right after the lines the index was told of (parsed for the
        chain head) is told of at once, with this store's records: the index then
        follows the file without a catch-up while two processes take turns.
        """
        fd = self._fd
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            size, read = os.lseek(fd, 0, os.SEEK_END), None
        else:  # what the look for a rotation found, under this hold of the lock
            size, read = ahead
        if size == self._seen:
            return  # nobody else wrote: the hot path
        if read is not None and read.endswith(b"\n"):
            blocks: Iterable[tuple[int, bytes]] = ((self._seen, read),)
        else:
            if os.pread(fd, 1, size - 1) != b"\n":  # a writer died inside its write
                size += _end_torn_line(fd, size)
            blocks = _blocks(fd, self._seen, size)
        chain: object = self._log.head
        last: object = None  # the digest of the last line, if it is a record
        keep = self._fed is not None and size - self._fed < _ALIGN_MAX  # else caught up below
        for start, block in blocks:
            found, final = self._take_block(block)
            end = start + len(block)
            one = block.find(b"\n") == len(block) - 1
            if final and found is not None and start == self._fed and one:
                self._telling.append((None, found, None, end, True))
                self._fed = end  # one line, parsed: the index is told of it in order
            elif keep:
                self._unfed.append((start, block))
            if found is not None:
                chain = found.get("digest")
            last = chain if final else None
        self._log.follow(chain if isinstance(chain, str) else None)
        self._read_to(size, last if isinstance(last, str) else None)
        if align and not keep and self._fed is not None:  # a bounded stretch behind at most
            self._align()

    def _take_block(self, block: bytes) -> tuple[dict[str, Any] | None, bool]:
        """Take the lines of *block* (whole lines others wrote) that move what this one keeps.

        Returns:
            The fields of the block's last chained line (the chain head), else ``None``;
            and whether that line is the block's last.
        """
        cut = block.rfind(b"\n", 0, len(block) - 1) + 1  # where the last line begins
        final = _record_line(block[cut:-1])  # parsed once: a head, and the chain head
        found: dict[str, Any] | None = None
        if cut:
            body = block[:cut]
            lines = body.split(b"\n")
            lines.pop()
            at = -1
            if not _all_passed_over(body, self._heads):
                at, found = self._take_lines(lines)
            if final is None:  # the chain head is an earlier line: the last record's
                for later in range(len(lines) - 1, at, -1):
                    data = _record_line(lines[later])
                    if data is not None:
                        found = data
                        break
        if final is None:
            return found, False
        self._take(final)
        return final, True

    def _take_lines(self, lines: list[bytes]) -> tuple[int, dict[str, Any] | None]:
        """Take the lines other processes wrote that move what this one keeps.

        Returns:
            The position in *lines* of the last chained line parsed and its fields, else
            ``(-1, None)``.
        """
        heads = self._heads
        chained: tuple[int, dict[str, Any] | None] = (-1, None)
        for at, line in enumerate(lines):
            if _passed_over(line, heads):
                continue
            data = _record_line(line)
            if data is None:
                continue
            chained = (at, data)
            self._take(data)
        return chained

    def _take(self, data: dict[str, Any]) -> None:
        """Take the chained line *data* another process wrote, if it moves what this one keeps.

        A spec header is noted (not written twice); a record of a session held here moves
        its head; a decision of one is noted for :meth:`note_once_async`, and an
        ``allow_always`` one kept for :meth:`grants_seen`.
        """
        if data.get("event") == EVENT_SPEC:  # another writer's header: not twice
            spec_hash = data.get("spec_hash")
            if isinstance(spec_hash, str):
                self._log.named(spec_hash)
        held = self._heads.get(data.get("session_id"))  # type: ignore[arg-type]
        seq = data.get("seq")
        if held is not None and isinstance(seq, int) and seq > held.seq:
            self._heads[held.session_id] = _after(held, data, data.get("event"))
        elif held is not None and data.get("event") == EVENT_DECIDED:
            self._remember(data)
            if data.get("outcome") == "allow_always":
                self._grant_seen(held.session_id, data)

    def _wrote(self, event: str, fields: dict[str, Any], digest: str | None) -> None:
        """This process appended a line of *event* (a record if *digest*), the lock held.

        Notes how far the file is read (the next record of this hold of the lock reads
        nothing) and tells the index of the record: the log
        position the index reached moves with it only when the index was told of every
        line before it (:attr:`_fed`); else the record's row alone is kept, and a catch-up
        (:meth:`_index_caught_up`) reads others' lines from that position.
        """
        size = os.lseek(self._fd, 0, os.SEEK_END)
        index = self._index
        follows = self._fed is not None and self._fed == self._seen
        if index is not None and digest is not None:  # told once the lock is let go
            self._telling.append((event, fields, digest, size, follows))
        if follows:
            self._fed = size
        self._read_to(size, digest)
        self._ahead = (size, b"")  # the next record of this hold of the lock: nothing new

    def _feed_lines(self, index: RestoreIndex, start: int) -> None:
        """Tell *index* of every line from byte *start* to :attr:`_seen` (the lock held).

        *start* is where the index's log position is in this file (a line's end).
        """
        with index.batched():
            for first, block in _blocks(self._fd, start, self._seen):
                self._feed_block(index, first, block)

    @staticmethod
    def _feed(index: RestoreIndex, data: dict[str, Any], end: int, *, follows: bool = True) -> None:
        """Tell *index* of the record *data* (any process's), whose line ends at *end*.

        *follows*: as for :meth:`RestoreIndex.update`.
        """
        digest = data.get("digest")
        if not isinstance(digest, str):
            return
        event = data.get("event")
        if event in (EVENT_REJECTED, EVENT_DECIDED, EVENT_SPEC):  # no mode moved: the chain did
            _index_record(index, event, {}, digest, end, follows=follows)
        elif _committed(data):
            _index_record(index, data["event"], data, digest, end, follows=follows)

    def _feed_unfed(self) -> None:
        """Tell the index of the others' lines read since :attr:`_fed` (the file was cut).

        Their sessions' rows only: the bytes are gone from the file, so no catch-up can
        read them; the index keeps them as points of the file before.
        """
        unfed, self._unfed = self._unfed, []
        if self._telling:
            self._tell_index()
        index = self._index
        if index is None:
            return
        for start, block in unfed:
            self._feed_block(index, start, block, follows=False)

    @classmethod
    def _feed_block(
        cls, index: RestoreIndex, start: int, block: bytes, *, follows: bool = True
    ) -> None:
        """Tell *index* of the records among *block*'s lines (from byte *start* of the file)."""
        lines = block.split(b"\n")
        lines.pop()
        line_end, at, count = start, 0, len(lines)
        while at < count:
            if follows:  # the records the index takes at once (RestoreIndex.take)
                stop = index.take(lines, at, line_end)
                if stop > at:
                    line_end, at = index.offset, stop
                    if at == count:
                        break
            line = lines[at]
            at += 1
            line_end += len(line) + 1
            data = _record_line(line)
            if data is not None:
                cls._feed(index, data, line_end, follows=follows)

    # -- the interface -------------------------------------------------------------------

    def describe(self, spec: ModeSpec) -> None:
        """Name *spec* in the file (a header before its first record of *spec*).

        See :meth:`TransitionLog.describe <modefsm.log.TransitionLog.describe>`. The file
        has one header per spec hash whichever process writes first: a process notes the
        headers others appended as it reads their lines under the lock.
        """
        self._log.describe(spec)

    def append(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        exact: bool = False,  # noqa: ARG002 - the digest is taken as for any record
    ) -> str:
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
        exact: bool = False,  # noqa: ARG002 - the digest is taken as for any record
    ) -> str:
        """:meth:`append`, with the wait for the lock awaited; the write itself is local.

        While the lock is taken, the records of this process's calls made meanwhile wait
        together: the next hold of the lock writes them all (at most :data:`_BATCH`), in
        the order they came, each with its own outcome. A call whose time runs out before
        its record is written writes nothing (:class:`~modefsm.store.StoreBusy`).
        """
        session_id = fields["session_id"]
        if fields["seq"] != 1 and session_id not in self._heads:
            point = await self.restore_point_async(session_id, deadline=deadline)
            self._adopt(session_id, head, point)
        if not self._queued and self._lock_now():  # free, nobody waiting: now
            return self._append_locked(event, fields)
        loop = asyncio.get_running_loop()
        limit = self.lock_timeout
        if deadline is not None:
            limit = min(limit, deadline - loop.time())
        written: asyncio.Future[str] = loop.create_future()
        self._queued.append((event, fields, written))
        if self._writer is None:
            self._writer = loop.create_task(self._write_queued())
        try:
            async with asyncio.timeout(max(limit, 0)):
                return await written
        except TimeoutError:
            if written.done() and not written.cancelled():  # written just in time
                return written.result()
            raise self._busy_queued(limit) from None  # its turn never came

    async def _write_queued(self) -> None:
        """Write the queued records, as many as are queued each time the lock is taken."""
        try:
            while self._queued:
                try:
                    await self._lock_async(None)
                except StoreBusy:  # each call waits by its own deadline: those left wait on
                    self._queued = [queued for queued in self._queued if not queued[2].done()]
                    continue
                except LogError as exc:  # nothing written: the waiting calls fail with it
                    queued, self._queued = self._queued, []
                    for _, _, written in queued:
                        if not written.done():
                            written.set_exception(exc)
                    continue
                batch, self._queued = self._queued[:_BATCH], self._queued[_BATCH:]
                try:
                    for event, fields, written in batch:
                        if written.done():  # its caller gave up
                            continue
                        try:
                            written.set_result(self._append_held(event, fields))
                        except Exception as exc:  # noqa: BLE001 - that record's own outcome
                            written.set_exception(exc)
                finally:
                    self._unlock()
        finally:
            self._writer = None

    def _append_locked(self, event: str, fields: dict[str, Any]) -> str:
        """The rest of :meth:`append`, the lock held (released here)."""
        try:
            return self._append_held(event, fields)
        finally:
            self._unlock()

    def _append_held(self, event: str, fields: dict[str, Any]) -> str:
        """:meth:`_append_locked`, the lock kept."""
        session_id = fields["session_id"]
        seq = fields["seq"]
        self._sync_tail()
        if self._aligning:
            self._align(at_most=_ALIGN_MAX)
        held = self._heads.get(session_id)
        if seq != (held.seq if held is not None else 0) + 1:
            if held is None:  # pragma: no cover - a seq-1 record always fits
                held = RestorePoint(session_id, fields["to_mode"], seq - 1)
            raise SessionMoved(held)
        fields["session_prev"] = held.digest if held is not None else None
        self._log.write(event, fields)
        digest = self._log.head
        assert digest is not None  # noqa: S101 - a record was just written
        fields["digest"] = digest
        self._wrote(event, fields, digest)
        self._heads[session_id] = _after(held, fields, event)
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
        self._note_locked(event, fields, head)

    async def note_async(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None = None
    ) -> None:
        """:meth:`note`, with the wait for the lock awaited; the write itself is local."""
        await self._lock_async(None)
        self._note_locked(event, fields, head)

    async def note_once_async(self, fields: dict[str, Any], head: RestorePoint) -> None:
        """Write the decision *fields* unless its call has one: checked under the file's lock.

        See :meth:`DecidesOnce.note_once_async <modefsm.store.DecidesOnce.note_once_async>`.
        Exact for every decision in the current file and, for a session this store holds,
        every one it read or wrote since it began holding it (across a rotation it
        followed, the last :data:`~modefsm.store.DECIDED_KEPT` of them). A session this
        store does not hold is held first (as by :meth:`restore_point_async`); its earlier
        decisions, and those of a held session past :data:`~modefsm.store.DECIDED_KEPT`,
        are read from the file off the event loop and outside the lock, then the lines
        written since are checked under the lock.

        Raises:
            AlreadyDecided: the call has a decision record; nothing was written.
            SessionMoved, StoreBusy, LogError: as :meth:`note` (``StoreBusy`` too when
                other processes keep deciding calls of the session faster than its file
                is read).
        """
        session_id, call_id = fields["session_id"], fields["tool_call_id"]
        held = session_id in self._heads
        if not held:
            await self.restore_point_async(session_id)
        for _ in range(_READ_TRIES):
            dropped = self._dropped.get(session_id, 0)
            read: tuple[str | None] | None = None  # the last outcome of the call read, if any
            if session_id in self._heads and (not held or dropped):
                read = await asyncio.to_thread(self._last_outcome, session_id, call_id)
            await self._lock_async(None)
            if self._note_locked(EVENT_DECIDED, fields, head, once=(dropped, read)):
                return
            held = True  # read: what the file held then is known, the rest was taken since
        raise self._busy_deciding(session_id)

    def _last_outcome(self, session_id: str, call_id: str) -> tuple[str | None] | None:
        """The last outcome of *call_id*'s decisions in the file (in a 1-tuple), else ``None``."""
        last = None
        for record in self.decisions(session_id):
            if record.tool_call_id == call_id:
                last = (record.outcome,)
        return last

    def _busy_deciding(self, session_id: str) -> StoreBusy:
        msg = f"sessionId {session_id}: other processes kept deciding its tool calls while "
        msg += "its decisions were read; nothing was written"
        return StoreBusy(msg, str(self.path))

    def _remember(self, fields: dict[str, Any]) -> None:
        """Remember the decision *fields* of a held session (its count of dropped ones)."""
        if remember_decision(self._decided, fields, DECIDED_KEPT):
            session_id = fields["session_id"]
            self._dropped[session_id] = self._dropped.get(session_id, 0) + 1

    def _note_locked(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        once: tuple[int, tuple[str | None] | None] | None = None,
    ) -> bool:
        """The rest of :meth:`note` (of :meth:`note_once_async` if *once*), the lock held.

        *once*: the session's count of dropped decisions before its file was read, and
        what was read (see :meth:`_refuse_decided`). The lock is released here.

        Returns:
            ``False`` when *once* must be read again (nothing was written), else ``True``.
        """
        try:
            self._sync_tail()
            if head is not None:
                held = self._heads.get(head.session_id)
                if held is not None and held.seq > head.seq:
                    raise SessionMoved(held)
            if once is not None and not self._refuse_decided(fields, *once):
                return False
            self._log.write(event, fields)
            self._wrote(event, fields, self._log.head if event in CHAINED_EVENTS else None)
            if event == EVENT_DECIDED and fields.get("session_id") in self._heads:
                self._remember(fields)
        finally:
            self._unlock()
        return True

    def _refuse_decided(
        self, fields: dict[str, Any], dropped: int, read: tuple[str | None] | None
    ) -> bool:
        """Raise :class:`AlreadyDecided` if the call of *fields* has a decision (the lock held).

        A held session: the file's lines after the point its hold began all passed through
        :meth:`_take` under this lock, in file order (:meth:`_sync_tail` reads every line
        after :attr:`_seen` before anything is written, and the hold, taken after a read
        under the lock, is in place before the next read), so :attr:`_decided` has every
        decision written since, this store's own included, unless it dropped some to keep
        its bound; the lines before are covered by a read of the file begun after the hold
        (the caller's :meth:`decisions`, or *read*, :meth:`_last_outcome`'s answer), a read
        begun after :attr:`_decided` last dropped one (*dropped*: the count then) when it
        did. The two together cover the file, and a decision written by another process
        after this check waits for this lock, so it sees this line in its own check.

        A session not held (it has no point in the file to hold it from): the file is
        read now, under the lock.

        Returns:
            ``False`` when the session dropped a decision since *dropped* (what it dropped
            may be newer than the read: read again), else ``True``: the call has no
            decision.
        """
        session_id, call_id = fields["session_id"], fields["tool_call_id"]
        if session_id not in self._heads:
            read = self._last_outcome(session_id, call_id)
        elif self._dropped.get(session_id, 0) != dropped:
            return False
        outcome = self._decided.get(session_id, {}).get(call_key(call_id), _UNDECIDED)
        if outcome is _UNDECIDED and read is not None:
            outcome = read[0]
        if outcome is not _UNDECIDED:
            raise AlreadyDecided(session_id, call_id, cast("str | None", outcome))
        return True

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
        one last read the file and the log's path still names that file (no rotation):
        then the answer costs one ``lseek``, one ``stat`` and no lock. Else the lines
        appended since are read under the lock (awaited), in the new file after a
        rotation; a session not held is looked up as by :meth:`restore_point`.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`.
        """
        held = self._heads.get(session_id)
        if held is not None and self._read_all():
            return held
        await self._lock_async(deadline)
        try:
            self._sync_tail()
            held = self._heads.get(session_id)
            point = held if held is not None else self._index_caught_up().lookup(session_id)
        finally:
            self._unlock()
        return self._hold(session_id, point)

    def _read_all(self) -> bool:
        """Whether this store has read every line of the log (without taking the lock).

        The file it reads did not grow since, and the log's path still names it.
        """
        if os.lseek(self._fd, 0, os.SEEK_END) != self._seen:
            return False
        try:
            named = os.stat(self._path_text)  # noqa: PTH116 - each append: no pathlib
        except OSError:
            return False
        return (named.st_dev, named.st_ino) == self._identity

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
            self._unlock()

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
            self._unlock()

    def _index_caught_up(self) -> RestoreIndex:
        """The index, caught up with the file (the lock is held); told of every line after.

        Raises:
            LogError: the index cannot be used or cannot catch up (it is not told of lines
                then).
        """
        index = self._open_index()
        self._catch_up_index(index, self.path)
        self._fed = self._seen
        self._unfed.clear()
        return index

    def _catch_up_index(self, index: RestoreIndex, path: str | Path) -> None:
        """Tell *index* of the lines of the file read here (*path* names it) it lacks.

        From the log position the index reached, the lines read here are fed to it
        (:meth:`_feed_lines`); when it follows another file, or one replaced, it reads
        *path* itself (:meth:`RestoreIndex.catch_up`).

        Raises:
            LogError: the index cannot catch up.
        """
        start = index.resume(path)
        if start is None or start > self._seen:
            index.catch_up(path)
        elif start < self._seen:
            self._feed_lines(index, start)
            index.commit()

    def _open_index(self) -> RestoreIndex:
        """The index (opened at the first call), told of every record this store wrote.

        Raises:
            LogError: the index cannot be used (the message says how to rebuild it).
        """
        if self._index is not None:
            if self._telling:
                self._tell_index()
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
        self._wrote(event, fields, None)

    def reopen(self) -> None:
        """Follow a rotation now rather than at the next append (``serve`` on ``SIGHUP``).

        If the log was renamed away, the old file's last lines are read and the new file
        at the path (created if missing) is used from now on; if it was truncated in
        place, it is read again from its start. Nothing happens when neither is so.

        Raises:
            StoreBusy: the lock was held too long (the next append tries again).
            LogError: the new file cannot be opened (the old one is still used).
        """
        self._lock()
        try:
            self._sync_tail()
        finally:
            self._unlock()

    async def reopen_async(self) -> None:
        """:meth:`reopen`, the waits for the locks awaited (``serve`` on ``SIGHUP``).

        Raises:
            StoreBusy, LogError: as :meth:`reopen`.
        """
        await self._lock_async(None)
        try:
            self._sync_tail()
        finally:
            self._unlock()

    def release(self, session_id: str) -> None:
        """Stop following *session_id* (closed here): held heads stay bounded."""
        self._heads.pop(session_id, None)
        self._granted.pop(session_id, None)
        self._decided.pop(session_id, None)
        self._dropped.pop(session_id, None)

    def _grant_seen(self, session_id: str, data: dict[str, Any]) -> None:
        seen = self._granted.setdefault(session_id, [])
        if len(seen) < MAX_GRANTS:
            seen.append(data)

    def grants_seen(self, session_id: str) -> list[DecisionRecord]:
        """The ``allow_always`` decisions other processes wrote for *session_id* since then.

        Read as the store caught up with the file, since the last call (at most
        :data:`~modefsm.spec.MAX_GRANTS`). Only for sessions this process holds; a line
        that is not a valid decision is left out (replay reports it).
        """
        seen = self._granted.pop(session_id, ())
        grants = []
        for data in seen:
            with contextlib.suppress(ValidationError):
                grants.append(DecisionRecord.model_validate(data))
        return grants

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The committed records of *session_id* in the file, ``seq`` 1 to n (a full scan)."""
        for item in read_log([self.path]):
            if isinstance(item, LogEntry):
                record = item.record
                if record.session_id == session_id and record.event in (
                    EVENT_CREATED,
                    EVENT_CHANGED,
                    EVENT_CONFIG,
                ):
                    yield record

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        """The ``modefsm.tool_decided`` records of *session_id* in the file, in order.

        A full scan (what a restored session's grants are rebuilt from).
        """
        for item in read_log([self.path], decisions=True):
            if isinstance(item, DecisionEntry) and item.record.session_id == session_id:
                yield item.record

    def close(self) -> None:
        """Catch the index up with the file, commit it and close both (idempotent).

        The index is left current, so the next process's first restore reads little; when
        it cannot be (locked, refused), the next catch-up reads the rest from the file.
        """
        if self._fd < 0:
            return
        with contextlib.suppress(LogError), self._caught_up():
            pass
        if self._index is not None:
            with contextlib.suppress(LogError):
                self._index.close()
            self._index = None
        self._log.close()
        self._watch.close()
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


_ALIGN_MAX = 1 << 20
"""Bytes an index may be behind what a store read: a process's first record catches it
up if it is no further behind; past it, the store catches it up at once."""

_MARK = 128
"""Bytes kept from just before the end of what was read (a record's digest is among them)."""


def _blocks(fd: int, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
    """The whole lines of the file behind *fd* from byte *start* to *stop*, in blocks.

    Yields ``(offset, block)``: where the block begins, and its lines, each ending in a
    newline (about :data:`_CHUNK` bytes; a longer line is read on until its end). Ends
    early if the file ends sooner.
    """
    position, rest = start, b""
    while position < stop:
        read = os.pread(fd, min(_CHUNK, stop - position), position)
        if not read:
            return
        chunk = rest + read
        first = position - len(rest)
        position += len(read)
        end = chunk.rfind(b"\n") + 1
        rest = chunk[end:]
        if end:
            yield first, chunk[:end]


def _descriptor_path(fd: int) -> str:
    """A path that opens the file behind *fd*, wherever it was renamed to."""
    return f"{_descriptors()}/{fd}"


@cache
def _descriptors() -> str:
    """The folder naming this process's open files (``/proc/self/fd``, else ``/dev/fd``)."""
    return "/proc/self/fd" if Path("/proc/self/fd").is_dir() else "/dev/fd"


def _committed(data: dict[str, Any]) -> bool:
    """Whether *data* is a committed record whose fields the index can take."""
    seq, source, cwd = data.get("seq"), data.get("from_mode"), data.get("cwd")
    return (
        data.get("event") in (EVENT_CREATED, EVENT_CHANGED, EVENT_CONFIG)
        and isinstance(data.get("session_id"), str)
        and isinstance(data.get("to_mode"), str)
        and isinstance(data.get("origin"), str)
        and isinstance(data.get("timestamp"), str)
        and (source is None or isinstance(source, str))
        and (cwd is None or isinstance(cwd, str))
        and type(seq) is int
        and 1 <= seq <= SEQ_MAX
    )


_SESSION_NAME = b'"session_id"'
_SESSION_VALUE = re.compile(rb'"session_id":"([^"\\]*)"')
_SPEC_MARK = f'"{EVENT_SPEC}"'.encode()


def _passed_over(line: bytes, heads: dict[str, RestorePoint]) -> bool:
    """Whether *line* certainly names one session, not one of *heads*, and is no header.

    A look at the bytes, no parsing: the line has ``"session_id"`` once, as a key whose
    value is a string with no escape whose text is not a key of *heads*. Any other line
    (no ``session_id``, a second one, an escaped or held one, a spec header) is parsed.
    """
    at = line.find(_SESSION_NAME)
    if at < 0 or _SPEC_MARK in line:
        return False
    start = at + len(_SESSION_NAME)
    if line[start : start + 2] != b':"' or line.find(_SESSION_NAME, start) >= 0:
        return False
    stop = line.find(b'"', start + 2)
    value = line[start + 2 : stop]
    if stop < 0 or b"\\" in value:
        return False
    return value.decode(errors="replace") not in heads


def _all_passed_over(block: bytes, heads: dict[str, RestorePoint]) -> bool:
    """Whether no line of *block* (whole lines) can move what a store keeps, at one look.

    Every ``"session_id"`` in it is a key whose value is a string with no escape, none of
    them a key of *heads*, there are as many as lines, and no line is a spec header: the
    lines :func:`_passed_over` would pass over, and lines with no session, which move
    only the chain head.
    """
    if _SPEC_MARK in block:
        return False
    values = _SESSION_VALUE.findall(block)
    if len(values) != block.count(b"\n") or block.count(_SESSION_NAME) != len(values):
        return False
    return heads.keys().isdisjoint({value.decode(errors="replace") for value in values})


def _identity(fd: int) -> tuple[int, int]:
    """The device and inode of the file behind *fd*."""
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _index_path(path: Path) -> Path:
    return path.with_name(path.name + ".index")


def _after(head: RestorePoint | None, data: dict[str, Any], event: object) -> RestorePoint:
    """The session's point after the committed record *data* of *event*."""
    previous, keep = previous_of(data["origin"], data["from_mode"], str(event))
    if keep:
        previous = head.previous if head is not None else None
    config = data.get("config")
    return RestorePoint(
        data["session_id"],
        data["to_mode"],
        data["seq"],
        previous,
        data["digest"],
        config if isinstance(config, dict) else None,
    )


_Told = tuple[str | None, dict[str, Any], str | None, int, bool]
"""A record for the index: its event, fields, digest, where its line ends, and whether the
index was told of every line before it; or ``None``, another process's parsed line,
``None``, its end and ``True``."""


class _Wait(NamedTuple):
    """One wait of :meth:`FileStore._lock_steps` before its next try."""

    pause: float
    """Seconds to sleep."""
    fd: int | None
    """The descriptor whose lock is wanted, to wait for instead of the pause; ``None``
    when the pause itself is the wait (after a rename, see :meth:`FileStore._lock_steps`)."""
    until: float
    """When the tries end (a ``time.monotonic()``)."""


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _LockWatch:
    """Tells when no process holds a file's ``flock``, from a thread of its own.

    The watch opens the file once (a descriptor of its own, whose lock is not the
    store's; again when the store moves to another file) and queues each wait for the
    thread, which blocks in ``flock(LOCK_SH)`` on that descriptor until no process holds
    the lock, lets it go at once and calls *notify*. The waiter then tries the lock
    itself (another process may take it first: it waits again). The thread starts at
    the first wait (again in a forked child) and ends after :meth:`close` once the
    waits queued before are done; it closes the descriptors it was given.
    """

    def __init__(self) -> None:
        self._waits: _Waits | None = None
        self._pid = 0
        self._own = -1  # the watching descriptor
        self._of: tuple[int, int] | None = None  # the device and inode it opened

    def wait(self, fd: int, notify: Callable[[], object]) -> None:
        """Call *notify* (from the thread) once the lock of *fd*'s file is free.

        Raises:
            OSError: the file cannot be opened again.
        """
        if self._waits is None or self._pid != os.getpid():
            self.forget()
            self._waits, self._pid = queue.SimpleQueue(), os.getpid()
            threading.Thread(
                target=_watch, args=(self._waits,), name="modefsm-flock", daemon=True
            ).start()
        identity = _identity(fd)
        if identity != self._of:
            own = os.open(_descriptor_path(fd), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self.forget()
            self._own, self._of = own, identity
        self._waits.put((self._own, notify))

    def forget(self) -> None:
        """Close the watching descriptor once the waits queued before are done."""
        if self._own >= 0:
            if self._waits is not None and self._pid == os.getpid():
                self._waits.put((self._own, None))
            else:  # a forked child's copy of its parent's: no thread here uses it
                with contextlib.suppress(OSError):
                    os.close(self._own)
        self._own, self._of = -1, None

    def close(self) -> None:
        """End the thread (closing the descriptor) once the waits queued before are done."""
        self.forget()
        if self._waits is not None and self._pid == os.getpid():
            self._waits.put(None)
        self._waits = None


_Waits = queue.SimpleQueue[tuple[int, Callable[[], object] | None] | None]
"""A :class:`_LockWatch`'s queue: a descriptor to watch and whom to tell (``None``: close
the descriptor), or ``None`` to end."""


def _watch(waits: _Waits) -> None:
    """The thread of a :class:`_LockWatch`: each wait in turn, blocked until the lock is free."""
    while (wait := waits.get()) is not None:
        fd, notify = wait
        if notify is None:
            os.close(fd)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # the waiter tries the lock, and finds out
        with contextlib.suppress(RuntimeError):  # its event loop has closed
            notify()
