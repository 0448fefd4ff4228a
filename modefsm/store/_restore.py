"""Restore: the last mode of each session, from the log or from an index kept beside it.

``session/load`` and ``session/resume`` ask "which mode was this session in?". Two
answers share one signature, ``restore_point(session_id) -> RestorePoint | None``:

- :class:`LogRestore` reads the whole log for every question (no state; fine for small
  logs and tests);
- :class:`RestoreIndex` answers from a SQLite table (standard library ``sqlite3``) that
  :class:`~modefsm.log.TransitionLog` keeps current as it writes, in milliseconds
  however long the log.

The agent then calls :meth:`ModeEngine.restore_session(session_id, point.mode, point.seq)
<modefsm.engine._engine.ModeEngine.restore_session>`; a mode the spec marks not restorable
falls back as the spec says, and that fallback is logged as a ``restore`` record.

Why the index cannot go stale. Commits are batched (one per :attr:`RestoreIndex.commit_every`
records or :attr:`RestoreIndex.commit_seconds`; a catch-up's are larger,
:meth:`RestoreIndex.batched`), and each commit also stores how far into
the log the index reaches (a byte offset, with the file's device and inode). The log is
written before the index, so after a crash the log holds everything the index lost;
opening the log with the index (:meth:`RestoreIndex.open_log`) first reads
the log from that offset on and applies what it finds. Within the writing process, lookups
see the uncommitted updates too: they wait in memory until a commit succeeds, so another
process holding the file's lock, or a full disk, delays commits (each attempt waits a few
milliseconds) but neither blocks the writer nor stops restore.

Why the index is never believed beyond the log. Each row also names the record it came
from: its ``digest`` and the byte offset where its line ends in the log the index follows.
Once the index follows a log (:meth:`RestoreIndex.catch_up`, which ``to_file`` calls),
every :meth:`RestoreIndex.restore_point` reads that line back and checks it: the record
must be there, unchanged (its digest recomputed), for the same session, ``seq``, mode and
previous mode. A row that fails the check (a session the log never had, a wrong mode or
``seq``, a row that names no record of the followed file) is not used: the answer is
caught up from the log itself (a scan of the followed file), and the disagreement is
reported as a ``modefsm.restore_index_mismatch`` event in the transition log.

Example:
    >>> import tempfile, pathlib
    >>> from modefsm import LogStore, ModeEngine, preset
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> log = RestoreIndex.open_log(folder / "modes.jsonl", folder / "modes.index")
    >>> engine = ModeEngine(preset("seed"), store=LogStore(log))
    >>> _ = engine.new_session("sess_1"); _ = engine.change("sess_1", "code", "set_mode")
    >>> log.index.restore_point("sess_1")
    RestorePoint(session_id='sess_1', mode='code', seq=2, previous='ask', digest=None, config=None)
    >>> log.close()
    >>> LogRestore(folder / "modes.jsonl").restore_point("sess_1")
    RestorePoint(session_id='sess_1', mode='code', seq=2, previous='ask', digest=None, config=None)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from modefsm.errors import LogError
from modefsm.log import (
    EVENT_CHANGED,
    EVENT_CONFIG,
    EVENT_CREATED,
    EVENT_REJECTED,
    JOURNAL_SUFFIX,
    RECORD_MARK,
    LogEntry,
    LogProblem,
    check_private,
    create_private,
    journal_path,
    previous_of,
    read_log,
    record_decoder,
    record_digest,
    utc_timestamp,
)
from modefsm.log._writer import TransitionLog, _line_ending_at
from modefsm.store._interface import ListAfter, ListedSession, RestorePoint

__all__ = [
    "EVENT_INDEX_MISMATCH",
    "MAX_PENDING",
    "RETRY_SECONDS",
    "LogRestore",
    "RestoreIndex",
    "check_index_modes",
    "check_index_path",
    "is_index",
    "last_points",
]

EVENT_INDEX_MISMATCH = "modefsm.restore_index_mismatch"
"""A diagnostic, not a record: a restore index row disagreed with the log (``problem``);
the restore used the log's point (``log_mode``, ``log_seq``; null if the log never had the
session) instead of the row's (``index_mode``, ``index_seq``)."""


def last_points(paths: Iterable[str | Path], *, digests: bool = False) -> dict[str, RestorePoint]:
    """The :class:`RestorePoint` of every session found in *paths* (the last record wins).

    With *digests*, each point carries its record's ``digest`` (else ``None``).
    """
    points: dict[str, RestorePoint] = {}
    for item in read_log(paths):
        if isinstance(item, LogEntry):
            point = _point(item, digests=digests)
            if point is not None:
                record = item.record
                previous, keep = previous_of(record.origin, record.from_mode, record.event)
                last = points.get(point.session_id)
                if keep:
                    previous = last.previous if last else None
                points[point.session_id] = point._replace(previous=previous)
    return points


def _point(entry: LogEntry, *, digests: bool = False) -> RestorePoint | None:
    record = entry.record
    if record.event == EVENT_REJECTED or record.seq is None or record.to_mode is None:
        return None
    digest = record.digest if digests else None
    return RestorePoint(record.session_id, record.to_mode, record.seq, None, digest, record.config)


class LogRestore:
    """Find a session's last mode in a transition log file (a full scan per lookup).

    Args:
        path: the JSON-lines transition log.
    """

    def __init__(self, path: str | Path) -> None:
        """Read from *path* (which may not exist yet)."""
        self.path = Path(path)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The last committed point of *session_id*, or ``None`` if the log never saw it."""
        if not self.path.exists():
            return None
        return last_points([self.path]).get(session_id)


_Pending = tuple[
    str, int, str | None, int | None, str | None, bool, str | None, str | None, int, str | None
]
"""An update waiting for a commit: mode, seq, digest, offset, previous, keep, cwd,
updated_at, earlier, config (JSON text)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    seq INTEGER NOT NULL,
    previous TEXT,
    digest TEXT,
    offset INTEGER,
    cwd TEXT,
    updated_at TEXT,
    earlier INTEGER,
    config TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_position (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    device INTEGER,
    inode INTEGER,
    offset INTEGER NOT NULL,
    head TEXT
);
INSERT OR IGNORE INTO log_position (id, offset) VALUES (1, 0);
"""
_UPSERT = (
    "INSERT INTO sessions "
    "(session_id, mode, seq, digest, offset, previous, cwd, updated_at, earlier, config) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?8, ?9, ?10, ?11) "
    "ON CONFLICT (session_id) DO UPDATE SET mode = excluded.mode, seq = excluded.seq, "
    "config = excluded.config, "
    "digest = excluded.digest, offset = excluded.offset, earlier = excluded.earlier, "
    "previous = CASE WHEN ?7 THEN sessions.previous ELSE excluded.previous END, "
    "cwd = COALESCE(excluded.cwd, sessions.cwd), updated_at = excluded.updated_at "
    "WHERE excluded.seq >= sessions.seq"
)
"""A row never goes back to an older record: processes sharing the index may commit the
same records in any order."""
_MOVE_POSITION = (
    "UPDATE log_position SET device = ?1, inode = ?2, offset = ?3, head = ?4 WHERE id = 1 "
    "AND (?5 OR device IS NOT ?1 OR inode IS NOT ?2 OR offset <= ?3)"
)
"""The log position moves on, never back within the file another process indexed further
(``?5``: the file followed changed, a rotation or a cut: it starts again)."""
_NAMED_COLUMNS = (
    ("digest", "TEXT"),
    ("offset", "INTEGER"),
    ("earlier", "INTEGER"),
    ("config", "TEXT"),
)
"""Columns added after the first release: an older index gets them (empty) when opened.
``earlier`` is 1 for a row whose record is in a file the log was rotated from."""
_LISTED_COLUMNS = (("cwd", "TEXT"), ("updated_at", "TEXT"))
"""Columns ``session/list`` reads (``cwd`` from each session's ``session_created`` record,
``updated_at`` the ``timestamp`` of its last committed record). An index without them gets
them when opened, and is then read again from the start of its log (the next catch-up),
so that every row has them."""
_LIST_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_listed ON sessions (updated_at DESC, session_id)
    WHERE cwd IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, updated_at DESC, session_id);
"""
_LIST = (
    "SELECT session_id, cwd, updated_at FROM sessions "
    "WHERE cwd IS NOT NULL AND updated_at IS NOT NULL{where} "
    "ORDER BY updated_at DESC, session_id LIMIT ?"
)


def list_where(
    cwd: str | None,
    after: ListAfter,
    *,
    mark: str = "?",
    columns: tuple[str, str, str] = ("cwd", "updated_at", "session_id"),
) -> tuple[str, list[Any]]:
    """The SQL conditions of one ``session/list`` page (`` AND ...``) and their parameters.

    Args:
        cwd: the ``cwd`` filter, or ``None``.
        after: where the page starts (:data:`ListAfter`).
        mark: the parameter placeholder of the database (``?`` SQLite, ``%s`` psycopg).
        columns: the expressions of the ``cwd``, the ``updated_at`` and the session id.
    """
    cwd_column, updated, session = columns
    where = ""
    params: list[Any] = []
    if cwd is not None:
        where += f" AND {cwd_column} = {mark}"
        params.append(cwd)
    if after is not None:
        where += f" AND ({updated} < {mark} OR ({updated} = {mark} AND {session} > {mark}))"
        params.extend((after[0], after[0], after[1]))
    return where, params


class RestoreIndex:
    """The last mode of every session, in a SQLite file, kept current by the log writer.

    Open it with the log (:meth:`open_log`), which
    catches it up and then calls :meth:`update` for every record it writes; rebuild it from
    the logs with :meth:`rebuild` (``modefsm replay LOG... --rebuild-index INDEX``). One
    process writes a log and its index; lookups are answered in that process.

    Args:
        path: the SQLite file; created if missing.
        commit_every: commit after this many updates.
        commit_seconds: also commit on the first update this many seconds after the last
            commit.

    Raises:
        LogError: the file cannot be opened or is not a restore index.
    """

    _decoder: tuple[Callable[[bytes], Any], type[Exception], object] | None = None
    """:meth:`take`'s decoder (:func:`_decoder`), from its first call on."""
    _taken = 0
    """The records :meth:`take` applied so far."""

    def __init__(
        self, path: str | Path, *, commit_every: int = 256, commit_seconds: float = 1.0
    ) -> None:
        """Open (or create) the index at *path*."""
        self.path = Path(path)
        self.commit_every = commit_every
        self.commit_seconds = commit_seconds
        self._pending: dict[str, _Pending] = {}
        # updates not committed yet: session_id -> (mode, seq, digest, offset, previous,
        # keep, cwd, updated_at, earlier), in the order of _UPSERT's parameters
        self._records = 0  # records since the last commit
        self._last_commit = time.monotonic()
        self._retry_at = 0.0  # after a failed commit, the next is tried from then on
        self._problem: str | None = None  # why the last commit failed
        self._behind = False  # updates were dropped: catch up from the log before answering
        self._catching_up = False
        self._restarted = False  # the file followed changed: the position may go back
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(self.path.stat().st_mode):  # a FIFO would block
                raise LogError("not a regular file: the restore index must be one", str(path))
        _private_index(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=_OPEN_WAIT)
        except sqlite3.Error as exc:
            raise LogError(f"cannot open the restore index: {exc}", str(self.path)) from None
        try:
            self._db.execute("PRAGMA synchronous=NORMAL")
            row = self._position()  # an index already: reading needs no lock (WAL)
            if row is None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(_SCHEMA)
                row = self._position()
                if row is None:
                    raise sqlite3.DatabaseError("the index tables were not created")
            self._db.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            row = self._upgrade(row)
        except sqlite3.Error as exc:
            self._db.close()
            if _busy(exc):
                msg = f"the restore index is locked by another process: {exc}"
                raise LogError(msg, str(self.path)) from None
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
                raise LogError(f"not a restore index: {exc}", str(self.path)) from None
            raise LogError(f"cannot open the restore index: {exc}", str(self.path)) from None
        self._device: int | None = row[0]
        self._inode: int | None = row[1]
        self._offset: int = row[2]
        self.head: str | None = row[3]
        """The ``digest`` of the last record indexed (the chain head a new file continues)."""
        self.log_path: Path | None = None
        """The log file the index follows (set by :meth:`catch_up`); restore points are
        checked against it. ``None``: points are answered as stored."""
        self.report: Callable[[str, dict[str, Any]], object] | None = None
        """``report(event, fields)`` for a row that disagrees with the log, e.g. the
        ``write`` of the :class:`~modefsm.log.TransitionLog` that keeps the index."""
        self._committed = (self._device, self._inode, self._offset, self.head)

    @classmethod
    def open_log(cls, log: str | Path, index: str | Path, *, fsync: bool = False) -> TransitionLog:
        """Open the transition log *log* with the index at *index* kept current.

        The same as ``TransitionLog.to_file(log, fsync=fsync, index=RestoreIndex(index),
        close_index=True)``: the index is caught up with the log first, and closed with it.

        Raises:
            LogError: the log or the index cannot be opened.
        """
        opened = cls(index)
        try:
            return TransitionLog.to_file(log, fsync=fsync, index=opened, close_index=True)
        except BaseException:
            opened.close()
            raise

    def _position(self) -> tuple[int | None, int | None, int, str | None] | None:
        """The stored log position, or ``None`` when the file has no index tables yet."""
        journal = self._db.execute("PRAGMA journal_mode").fetchone()[0]
        try:
            row = self._db.execute(
                "SELECT device, inode, offset, head FROM log_position WHERE id = 1"
            ).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return row if journal == "wal" else None

    def _upgrade(
        self, row: tuple[int | None, int | None, int, str | None]
    ) -> tuple[int | None, int | None, int, str | None]:
        """Bring an index of an older layout up to this one; the log position to use."""
        columns = {c[1] for c in self._db.execute("PRAGMA table_info(sessions)")}
        for name, kind in _NAMED_COLUMNS:
            if name not in columns:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
        if not {name for name, _ in _LISTED_COLUMNS} <= columns:
            row = self._add_listed_columns(columns, row)
        found = self._db.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
            "AND name IN ('sessions_listed', 'sessions_by_cwd')"
        ).fetchone()[0]
        if found < 2:  # noqa: PLR2004 - the two indexes of _LIST_INDEXES
            self._db.executescript(_LIST_INDEXES)
        return row

    def _add_listed_columns(
        self, columns: set[str], row: tuple[int | None, int | None, int, str | None]
    ) -> tuple[int | None, int | None, int, str | None]:
        """Add the columns ``session/list`` reads to an older index; it is read again.

        One transaction: the columns, and the log position set back to the start, so
        the next catch-up fills them in for every session its log holds.
        """
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for name, kind in _LISTED_COLUMNS:
                if name not in columns:
                    self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
            self._db.execute("UPDATE log_position SET offset = 0 WHERE id = 1")
            self._db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        return (row[0], row[1], 0, row[3])

    # -- lookups ---------------------------------------------------------------------------

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The last committed point of *session_id*, or ``None`` if no record named it.

        The same as :meth:`lookup`, without the record's ``digest``.
        """
        point = self.lookup(session_id)
        return None if point is None else point._replace(digest=None)

    def lookup(self, session_id: str) -> RestorePoint | None:
        """The last committed point of *session_id* with its record's ``digest``.

        Answers from the updates not yet committed first (this process wrote their
        records), then from the SQLite table (reading does not wait for another process's
        write lock: the file is in WAL mode). When the index follows a log
        (:attr:`log_path`), a row from the table is checked against the record it names (see
        the module docstring); a row that fails the check is replaced by the log's own
        point, and the disagreement is reported (:attr:`report`).

        Args:
            session_id: ACP ``sessionId`` of the ``session/load`` or ``session/resume``.

        Returns:
            ``RestorePoint(session_id, mode, seq, previous)``, from the session's last
            ``session_created``/``mode_changed`` record.

        Raises:
            LogError: the table cannot be read now (locked, or failing), or the index fell
                behind the log and cannot catch up yet; only this lookup fails, and a later
                one is answered once the index can be read and written again; or the log
                cannot be read to settle a disagreement.
        """
        if self._behind:
            self.commit()  # catches up from the log first, if the index can be written
            if self._behind:
                msg = (
                    "the restore index is behind the log and cannot be written now "
                    f"({self._problem}); try again"
                )
                raise LogError(msg, str(self.path))
        entry = self._pending.get(session_id)
        if entry is not None and not entry[5]:
            config = _config(entry[9])
            return RestorePoint(session_id, entry[0], entry[1], entry[4], entry[2], config)
        try:
            row = self._db.execute(
                "SELECT mode, seq, previous, digest, offset, earlier, config FROM sessions "
                "WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise LogError(f"cannot read the restore index now: {exc}", str(self.path)) from None
        point = None
        if row is not None:
            point = RestorePoint(session_id, row[0], row[1], row[2], row[3], _config(row[6]))
        log = self.log_path
        if log is not None and point is not None and not row[5]:
            problem = _disagreement(log, point, row[3], row[4])
            if problem is not None:
                point = self._settle(session_id, problem, point, log)
        if entry is not None:  # a restore or config record: previous stays as it was
            previous = point.previous if point else None
            config = _config(entry[9])
            return RestorePoint(session_id, entry[0], entry[1], previous, entry[2], config)
        return point

    def _settle(
        self, session_id: str, problem: str, point: RestorePoint, log: Path
    ) -> RestorePoint | None:
        """The log's own point for *session_id*, after reporting why the row was not used."""
        try:
            points = last_points([log], digests=True) if log.exists() else {}
            truth = points.get(session_id)
        except OSError as exc:
            raise LogError(f"cannot read the transition log: {exc.strerror}", str(log)) from None
        if self.report is not None:
            with contextlib.suppress(LogError):  # the answer stands; nowhere to report it
                self.report(
                    EVENT_INDEX_MISMATCH,
                    {
                        "timestamp": utc_timestamp(),
                        "session_id": session_id,
                        "problem": problem,
                        "index_mode": point.mode,
                        "index_seq": point.seq,
                        "log_mode": truth.mode if truth else None,
                        "log_seq": truth.seq if truth else None,
                    },
                )
        return truth

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """One page of the sessions indexed, newest ``updated_at`` first, then by id.

        Only sessions whose creation record carries a ``cwd`` are listed (a session made
        by an older modefsm, or without a ``cwd``, is not). The updates noted so far are
        committed first.

        Args:
            cwd: only sessions with exactly this ``cwd``; ``None`` for all.
            after: where the page starts (see :data:`ListAfter`).
            limit: the most sessions returned.

        Raises:
            LogError: the index cannot be committed or read now (only this call fails).
        """
        self.commit()
        if self._pending or self._behind:
            msg = f"the restore index cannot be written now ({self._problem}); try again"
            raise LogError(msg, str(self.path))
        where, params = list_where(cwd, after)
        try:
            rows = self._db.execute(_LIST.format(where=where), [*params, limit]).fetchall()
        except sqlite3.Error as exc:
            raise LogError(f"cannot read the restore index now: {exc}", str(self.path)) from None
        return [ListedSession(*row) for row in rows]

    def __len__(self) -> int:
        """The number of sessions indexed (committed or not)."""
        count = int(self._db.execute("SELECT count(*) FROM sessions").fetchone()[0])
        for session_id in self._pending:
            found = self._db.execute(
                "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            count += found is None
        return count

    # -- writes ----------------------------------------------------------------------------

    def update(  # noqa: PLR0917 - the writer passes a record's fields in order
        self,
        session_id: str,
        mode: str,
        seq: int,
        offset: int | None,
        head: str | None,
        previous: tuple[str | None, bool] = (None, False),
        *,
        cwd: str | None = None,
        timestamp: str | None = None,
        earlier: bool = False,
        config: dict[str, str | bool] | None = None,
        follows: bool = True,
    ) -> None:
        """Record that *session_id* is now in *mode* at *seq* (after the log line is written).

        The update is kept in memory (lookups see it at once) and written to SQLite with
        the next commit. Never raises and never waits long: a commit that fails (the file
        locked by another process, a full disk) is retried later; past
        :data:`MAX_PENDING` sessions waiting, the updates are dropped and the index
        catches up from the log once it can be written again.

        Args:
            session_id: ACP ``sessionId``.
            mode: the record's ``to_mode``.
            seq: the record's ``seq``.
            offset: the byte offset just past the record's line in the log file, if known.
            head: the record's ``digest``.
            previous: :func:`previous_of` the record.
            cwd: the record's ``cwd`` (a ``session_created`` record's), if any.
            timestamp: the record's ``timestamp``.
            earlier: the record is in a file before the one the index follows (a rotated
                file): its point is answered as stored.
            config: the record's ``config`` (the session's host option values), if any.
            follows: the index was told of every line before this record's; else only
                the session's row is kept (the log position the index reached, from
                which a catch-up reads, stays where it was).
        """
        if not self._behind:
            value, keep = previous
            before = self._pending.get(session_id)
            if before is not None:
                if keep:
                    value, keep = before[4], before[5]
                cwd = cwd if cwd is not None else before[6]
            self._pending[session_id] = (
                mode,
                seq,
                head,
                offset,
                value,
                keep,
                cwd,
                timestamp,
                int(earlier),
                None if not config else orjson.dumps(config).decode(),
            )
            self._bound_pending()
        if follows:
            self.advance(offset, head)
        else:
            self._count()

    def _bound_pending(self) -> None:
        """Past :data:`MAX_PENDING` sessions waiting, drop them: catch up from the log later."""
        if len(self._pending) > MAX_PENDING:
            self._pending.clear()
            self._behind = True
            self._problem = self._problem or f"over {MAX_PENDING} sessions waited"

    @property
    def offset(self) -> int:
        """The byte offset in the log up to which the index was told of every line."""
        return self._offset

    def advance(self, offset: int | None, head: str | None) -> None:
        """Note that the log reaches *offset* with chain head *head* (a rejection: no mode)."""
        if offset is not None:
            self._offset = offset
        self.head = head
        self._count()

    def _count(self, updates: int = 1) -> None:
        """Count *updates*; commit after :attr:`commit_every` or :attr:`commit_seconds`."""
        self._records += updates
        if (
            self._records >= self.commit_every
            or len(self._pending) >= _rows_waiting()
            or time.monotonic() - self._last_commit >= self.commit_seconds
        ):
            self.commit()

    def commit(self) -> None:
        """Write every update so far to SQLite, with the log position it reaches.

        The rows go in transactions of at most :data:`COMMIT_ROWS` rows each (so that no
        transaction holds SQLite's write lock long), the log position with the last of
        them: a row may be written before the position that covers its record, never
        after. Waits at most a few milliseconds for another process's lock; when a
        transaction fails the updates stay in memory and the next commit is tried
        :data:`RETRY_SECONDS` later at the earliest (updates and lookups still work).
        """
        if self._db is None or time.monotonic() < self._retry_at:
            return
        if self._behind:
            if not self._catching_up:
                self._recover()
            return
        position = (self._device, self._inode, self._offset, self.head)
        rows = sorted((sid, *entry) for sid, entry in self._pending.items())  # in key order
        try:
            for first in range(0, len(rows), COMMIT_ROWS) if rows else (0,):
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(_UPSERT, rows[first : first + COMMIT_ROWS])
                last = first + COMMIT_ROWS >= len(rows)
                if last and position != self._committed:  # else another process may move it
                    self._db.execute(_MOVE_POSITION, (*position, self._restarted))
                self._db.execute("COMMIT")
        except (sqlite3.Error, OverflowError) as exc:  # OverflowError: past SQLite's INTEGER
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            self._problem = str(exc)
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return
        self._pending.clear()
        self._committed = position
        self._restarted = False
        self._problem = None
        self._records = 0
        self._last_commit = time.monotonic()

    def _recover(self) -> None:
        """Catch up from the log, from the last committed position (updates were dropped)."""
        if self.log_path is None:
            return
        self._device, self._inode, self._offset, self.head = self._committed
        self._behind = False
        self._catching_up = True
        try:
            self._catch_up(self.log_path, strict=False)
        except LogError as exc:
            self._behind = True
            self._problem = str(exc)
        finally:
            self._catching_up = False

    def catch_up(self, log: str | Path) -> int:
        """Apply the records of *log* that the index has not seen; commit.

        Reads from the offset of the last commit when *log* is the file the index was
        following (same device and inode, and the record indexed last still ends there),
        else from its beginning: a rotated file (renamed away and a new one created, or
        copied and truncated in place) or a replaced one. Then the rows naming records of
        the file followed before are kept as points of an earlier file (answered as
        stored, :attr:`RestorePoint`) when *log* continues its chain (its first record's
        ``prev`` is the digest of the record indexed last, or it holds no record yet: its
        writer continues from there); otherwise their offsets are forgotten (a replaced
        log: they are not believed, each lookup checks the log). A failed index is reset
        and rebuilt from *log* alone.

        Args:
            log: the transition log file the writer appends to.

        Returns:
            The number of records applied.

        Raises:
            LogError: *log* exists but cannot be read.
        """
        return self._catch_up(Path(log), strict=False)

    def _catch_up(self, path: Path, *, strict: bool) -> int:
        try:
            stat = path.stat()
        except FileNotFoundError:
            if strict:
                raise LogError(
                    "unreadable: cannot read: No such file or directory", str(path)
                ) from None
            return 0
        except OSError as exc:
            raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
        self.log_path = path
        if self._pending and not self._behind:
            self.commit()  # rows told out of order must not hide later records read here
        if not self._pending and not self._behind:
            self._reload_position()  # another process may have moved it (a shared index)
        same = (stat.st_dev, stat.st_ino) == (self._device, self._inode)
        if same and self._ends_with_head(path, stat.st_size):
            start = self._offset
        else:
            start = 0
            if self._device is not None:
                # another file (rotated, replaced) or this one truncated: the stored
                # offsets point into what was followed before
                self._rotated(continued=not self._behind and _continues(path, self.head))
        self._device, self._inode = stat.st_dev, stat.st_ino
        self._offset = start
        with self.batched():
            taken = self._taken
            items = read_log([path], start=start, take=self._take_read)
            applied = self._apply(items, strict=strict) + self._taken - taken
        self.commit()
        if strict and (self._pending or self._behind):
            raise LogError(f"cannot write the restore index: {self._problem}", str(self.path))
        return applied

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Within the block, commit as a catch-up does: in batches of :data:`CATCH_UP_COMMIT`.

        For a caller telling the index of many lines at once (a catch-up): each session's
        row is written once per commit however many of its records the batch holds; a
        batch also ends at :data:`CATCH_UP_ROWS` sessions waiting, and after
        :data:`CATCH_UP_SECONDS` (:attr:`commit_every` and :attr:`commit_seconds`, if more,
        still apply). The block's last updates wait for the next commit.
        """
        every, seconds = self.commit_every, self.commit_seconds
        self.commit_every = max(every, CATCH_UP_COMMIT)
        self.commit_seconds = max(seconds, CATCH_UP_SECONDS)
        try:
            yield
        finally:
            self.commit_every, self.commit_seconds = every, seconds

    def _take_read(
        self,
        path: str,  # noqa: ARG002 - read_log's Take: the lines are the followed file's
        line: int,  # noqa: ARG002 - as for path
        lines: list[bytes],
        start: int,
        offset: int,
    ) -> int:
        """:meth:`take`, as :func:`~modefsm.log.read_log`'s ``take`` for a catch-up."""
        return self.take(lines, start, offset)

    def take(self, lines: list[bytes], start: int, offset: int) -> int:  # noqa: C901, PLR0912 - the hot loop: no call per line it can spare
        """Apply the record lines from ``lines[start]`` on, up to the first other line.

        The fast path of a catch-up: the same updates as :meth:`update` and :meth:`advance`
        for each record, in order, without building its model. Takes the lines that
        :func:`~modefsm.log.record_decoder` decodes whole (a record whose every field holds
        a value :class:`~modefsm.log.TransitionRecord` keeps as it is, ``config``
        included) with a point to keep (a committed record with a ``seq`` and a
        ``to_mode``) or none (a rejection); stops at the first other line (a decision, a
        header, a host's line, anything to judge the slow way), changing nothing for it.

        Args:
            lines: complete lines of the log the index follows, without their newline.
            start: the first line to look at.
            offset: the byte offset where ``lines[start]`` begins in the log.

        Returns:
            The index in *lines* of the first line not taken; when any was taken,
            :attr:`offset` is where the last one taken ends.
        """
        if self._behind:
            return start  # update() keeps nothing then: the slow way
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = _decoder()
        decode, not_taken, unset = decoder
        pending, mark, rejected, dumps = self._pending, RECORD_MARK, EVENT_REJECTED, orjson.dumps
        head, end, most = self.head, offset, _rows_waiting()
        index, count, points = start, len(lines), 0
        while index < count:
            raw = lines[index]
            if raw[:1] != b"{" or mark not in raw:
                break
            try:
                record = decode(raw)
            except not_taken:
                break
            seq, mode, event = record.seq, record.to_mode, record.event
            if event != rejected and (seq is None or mode is None):
                break  # the slow way's to judge
            index += 1
            end += len(raw) + 1
            head = record.digest
            if head is unset:
                head = None
            if event == rejected:
                continue  # no point moves: the chain does (advance)
            previous, keep = previous_of(record.origin, record.from_mode, event)
            session_id, cwd, config = record.session_id, record.cwd, record.config
            if cwd is unset:
                cwd = None
            before = pending.get(session_id)
            if before is not None:
                if keep:
                    previous, keep = before[4], before[5]
                if cwd is None:
                    cwd = before[6]
            points += 1
            text = None if config is unset or not config else dumps(config).decode()
            pending[session_id] = (
                mode, seq, head, end, previous, keep, cwd, record.timestamp, 0, text,
            )  # fmt: skip
            if before is None and len(pending) >= most:
                break  # a commit first
        if index > start:
            self._offset, self.head = end, head
            self._taken += points
            self._count(index - start)
            self._bound_pending()
        return index

    def resume(self, log: str | Path) -> int | None:
        """Where in *log* the index's log position is, for its writer to go on from there.

        The updates kept so far are committed first, and the position is then the one
        committed last by any process sharing the index. The caller tells the index of
        every line of *log* from there on, in order (:meth:`update`, :meth:`advance`).

        Returns:
            The byte offset, or ``None`` when the index does not follow *log* there (another
            file, one replaced, updates dropped): :meth:`catch_up` reads it then.
        """
        path = Path(log)
        try:
            stat = path.stat()
        except OSError:
            return None
        if self._behind:
            return None
        if self._pending:
            self.commit()
            if self._pending:
                return None
        self._reload_position()
        if (stat.st_dev, stat.st_ino) != (self._device, self._inode) or not (
            self._ends_with_head(path, stat.st_size)
        ):
            return None
        self.log_path = path
        return self._offset

    def _ends_with_head(self, path: Path, size: int) -> bool:
        """Whether the line that ends at the committed offset is the record indexed last.

        Guards against a file replaced by another that reuses the inode number.
        """
        if self._offset > size:
            return False
        if self._offset == 0 or self.head is None:
            return True
        data = _object_ending_at(path, self._offset)
        return data is not None and data.get("digest") == self.head

    def lag(self, log: str | Path) -> int | None:
        """About how many bytes of *log* a :meth:`catch_up` would read (``0``: current).

        All of it when the index follows another file (or none yet); ``None`` when *log*
        cannot be looked at.
        """
        try:
            stat = Path(log).stat()
        except OSError:
            return None
        if (stat.st_dev, stat.st_ino) != (self._device, self._inode):
            return stat.st_size
        return max(0, stat.st_size - self._offset)

    def _reload_position(self) -> None:
        """Take the log position committed last (by any process sharing the index)."""
        with contextlib.suppress(sqlite3.Error):
            row = self._db.execute(
                "SELECT device, inode, offset, head FROM log_position WHERE id = 1"
            ).fetchone()
            if row is not None:
                self._device, self._inode, self._offset, self.head = row
                self._committed = (self._device, self._inode, self._offset, self.head)

    def _rotated(self, *, continued: bool) -> None:
        """The file followed was rotated or replaced: no row's offset names a record now.

        *continued*: the new file continues the chain of the records indexed, so rows
        keep their points as those of an earlier file (``earlier``); else the rows cannot
        be vouched for and their offsets are forgotten (each lookup then checks the log).
        """
        earlier = int(continued)
        self._restarted = True
        self._pending = {
            sid: (
                mode,
                seq,
                digest,
                None,
                previous,
                keep,
                cwd,
                stamp,
                earlier if offset is not None else was,
                config,
            )
            for sid, (mode, seq, digest, offset, previous, keep, cwd, stamp, was, config) in (
                self._pending.items()
            )
        }
        change = (
            "UPDATE sessions SET offset = NULL, earlier = 1 WHERE offset IS NOT NULL"
            if continued
            else "UPDATE sessions SET offset = NULL, earlier = NULL"
        )
        try:
            self._db.execute(change)
        except sqlite3.Error as exc:  # locked or failing: every row must be caught up anew
            self._problem = str(exc)
            self._pending.clear()
            self._behind = True

    def rotated(self, log: str | Path, *, continued: bool) -> None:
        """Follow *log*, a new file at the log's path, from its beginning (see :meth:`catch_up`).

        For a writer that noticed the rotation itself and knows whether the index holds
        every record of the file before (*continued*: the rows keep their points as those
        of an earlier file; else their offsets are forgotten). Call :meth:`catch_up` next.

        Raises:
            LogError: *log* cannot be looked at.
        """
        path = Path(log)
        try:
            stat = path.stat()
        except OSError as exc:
            raise LogError(f"cannot read the transition log: {exc.strerror}", str(path)) from None
        if self._device is not None:
            self._rotated(continued=continued and not self._behind)
        self._device, self._inode, self._offset = stat.st_dev, stat.st_ino, 0
        self.log_path = path

    def _apply(self, items: Iterable[LogEntry | LogProblem], *, strict: bool = False) -> int:
        applied = 0
        for item in items:
            if isinstance(item, LogProblem):
                if strict and item.fatal:
                    raise LogError(f"{item.kind}: {item.message}", str(item.location))
                continue
            followed = self._inode is not None  # else a rebuild's earlier file
            offset = item.end if followed else None
            point = _point(item)
            if point is None:
                self.advance(offset, item.record.digest)
            else:
                record = item.record
                self.update(
                    point.session_id,
                    point.mode,
                    point.seq,
                    offset,
                    record.digest,
                    previous_of(record.origin, record.from_mode, record.event),
                    cwd=record.cwd,
                    timestamp=record.timestamp,
                    earlier=not followed,
                    config=record.config,
                )
                applied += 1
        return applied

    @classmethod
    def rebuild(cls, path: str | Path, logs: Iterable[str | Path]) -> int:
        """Build the index at *path* anew from *logs* (oldest first), atomically.

        The new index is written beside *path* and renamed over it when complete, so a
        reader never sees half of it. The last of *logs* is taken as the file the writer
        appends to: the index follows it from its end.

        Args:
            path: the index file to replace.
            logs: the transition logs, in the order they were written.

        Returns:
            The number of sessions indexed.

        Raises:
            LogError: a log is unusable (unreadable, not text); *path* is one of *logs*,
                is not a regular file, or exists and is not a restore index (it is never
                overwritten then); or the index cannot be written.
        """
        target = Path(path)
        files = [Path(log) for log in logs]
        _check_target(target, files)
        temporary = target.with_name(f".{target.name}.rebuild-{os.getpid()}")
        for leftover in _sqlite_files(temporary):
            leftover.unlink(missing_ok=True)
        try:
            index = cls(temporary, commit_every=10_000, commit_seconds=3600.0)
        except LogError as exc:  # name the file asked for, not the temporary one beside it
            reason = str(exc).removeprefix(f"{temporary}: ")
            raise LogError(reason, str(target)) from None
        try:
            index._apply(read_log(files[:-1]), strict=True)
            if files:
                index._catch_up(files[-1], strict=True)
            count = len(index)
            index.close()
            for stale in _sqlite_files(target)[1:]:
                stale.unlink(missing_ok=True)
            temporary.replace(target)
        except BaseException:
            index.close()
            for leftover in _sqlite_files(temporary):
                leftover.unlink(missing_ok=True)
            raise
        return count

    def close(self) -> None:
        """Commit and close the database (idempotent).

        Waits up to :data:`_OPEN_WAIT` seconds for another process's lock; what still
        cannot be committed is caught up from the log when the index is next opened.
        """
        if self._db is None:
            return
        self._retry_at = 0.0
        with contextlib.suppress(sqlite3.Error):
            self._db.execute(f"PRAGMA busy_timeout = {int(_OPEN_WAIT * 1000)}")
        self.commit()
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()
        self._db = None  # type: ignore[assignment]  # closed for good


MAX_PENDING = 100_000
"""The most sessions whose updates wait in memory for a commit; past it they are dropped and
the index catches up from the log (from its last committed position) when it can."""
CATCH_UP_COMMIT = 1 << 20
"""Records a catch-up applies between two commits (:meth:`RestoreIndex.batched`)."""
CATCH_UP_SECONDS = 30.0
"""Seconds after which a catch-up's batch ends however few records it holds."""
CATCH_UP_ROWS = 1 << 15
"""The most sessions a catch-up keeps waiting for a commit (well under :data:`MAX_PENDING`)."""
COMMIT_ROWS = 2048
"""The most rows one SQLite transaction writes (a commit of more takes several: each holds
the write lock for tens of milliseconds at most)."""
RETRY_SECONDS = 0.25
"""After a failed commit, the least time before the next is tried."""
_BUSY_MS = 20
"""How long a write waits for another process's lock, in milliseconds (on the event loop)."""
_OPEN_WAIT = 5.0
"""How long opening (and closing) the index waits for another process's lock, in seconds."""


def _rows_waiting() -> int:
    """The most sessions waiting before a commit: :data:`CATCH_UP_ROWS`, or fewer."""
    return min(CATCH_UP_ROWS, MAX_PENDING)


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_target(target: Path, logs: list[Path]) -> None:
    """Refuse to replace *target* unless it is missing, empty or a restore index.

    Nor a log read, nor a conversation journal (one beside a log read, or any file named
    like one): ``modefsm serve`` would refuse to start with an index there.
    """
    own = "the restore index needs a file of its own"
    for log in logs:
        with contextlib.suppress(OSError):
            if target.resolve() == log.resolve() or target.samefile(log):
                raise LogError(f"is one of the logs read: {own}", str(target))
        journal = journal_path(log)
        with contextlib.suppress(OSError):
            if target.resolve() == journal.resolve() or target.samefile(journal):
                raise LogError(f"is the conversation journal of {log}: {own}", str(target))
    if target.name.endswith(JOURNAL_SUFFIX):
        msg = f"is named like a conversation journal (*{JOURNAL_SUFFIX}): {own}"
        raise LogError(msg, str(target))
    check_index_path(target, doing="rebuild")


def check_index_path(path: Path, *, doing: str = "open") -> None:
    """Refuse *path* as a restore index unless it is missing, empty or a restore index.

    Nothing is written: a file that holds something else is never overwritten. Only a
    regular file is opened (read-only, by :func:`is_index`).

    Args:
        path: the restore index file.
        doing: the verb for the message when *path* cannot be looked at (``open``,
            ``rebuild``).

    Raises:
        LogError: *path* cannot be looked at, is a directory or another file that is not
            a regular one, or exists, is not empty and is not a restore index.
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogError(f"cannot {doing} the restore index: {exc.strerror}", str(path)) from None
    if stat.S_ISDIR(status.st_mode):
        raise LogError("is a directory: give the restore index file's path", str(path))
    if not stat.S_ISREG(status.st_mode):
        raise LogError("not a regular file: the restore index must be one", str(path))
    if status.st_size and not is_index(path):
        raise LogError("exists and is not a restore index: not overwritten", str(path))


def check_index_modes(path: Path) -> None:
    """Refuse an index whose file or SQLite side files (``-wal``, ``-shm``) others may write.

    Raises:
        LogError: one of them exists and users other than its owner may write it.
    """
    for file in _sqlite_files(path):
        try:
            status = file.stat()
        except OSError:
            continue
        check_private(status, file, "the restore index")


def _private_index(path: Path) -> None:
    """Check the index's modes (:func:`check_index_modes`); create it ``0600`` if missing.

    SQLite gives its ``-wal`` and ``-shm`` files the mode of the index.
    """
    check_index_modes(path)
    create_private(path, "the restore index")


def is_index(path: Path) -> bool:
    """Whether *path* is a SQLite file with the restore index's tables (opened read-only).

    Example:
        >>> import pathlib, tempfile
        >>> notes = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
        >>> _ = notes.write_text("my notes")
        >>> is_index(notes)
        False
    """
    try:
        with path.open("rb") as file:
            if file.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return False
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except (OSError, sqlite3.Error):
        return False
    try:
        db.execute("SELECT session_id, mode, seq, previous FROM sessions LIMIT 0")
        db.execute("SELECT device, inode, offset, head FROM log_position LIMIT 0")
    except sqlite3.Error:
        return False
    finally:
        db.close()
    return True


def _continues(path: Path, head: str | None) -> bool:
    """Whether the log *path* continues the chain whose last record has digest *head*.

    It does when its first chained line's ``prev`` (its header's, in a file that has one)
    is *head*, or when it holds no record yet (its writer appends the next one with
    ``prev`` *head*).
    """
    for item in read_log([path], decisions=True, headers=True):  # its first chained line
        if not isinstance(item, LogProblem):
            return item.record.prev == head
        if item.fatal:
            return False
    return True


def _object_ending_at(path: Path, offset: int) -> dict[str, Any] | None:
    """The JSON object on the line of *path* that ends at byte *offset*, if there is one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        line = _line_ending_at(fd, offset)
    except OSError:
        return None
    finally:
        os.close(fd)
    if line is None:
        return None
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _disagreement(  # noqa: PLR0911 - one check after another, each with its sentence
    log: Path, point: RestorePoint, digest: str | None, offset: int | None
) -> str | None:
    """Why the index row *point* is not the log's record it names, or ``None`` if it is."""
    if digest is None or offset is None or offset <= 0:
        return "the row names no record of the log the index follows"
    data = _object_ending_at(log, offset)
    if data is None or data.get("digest") != digest:
        return f"the log has no record with the row's digest at byte {offset}"
    if record_digest(data) != digest:
        return f"the log's record at byte {offset} was changed after it was written"
    if data.get("event") not in (EVENT_CREATED, EVENT_CHANGED, EVENT_CONFIG):
        return f"the log's record at byte {offset} is not a committed change"
    found = (data.get("session_id"), data.get("seq"), data.get("to_mode"))
    if found != (point.session_id, point.seq, point.mode):
        return (
            f"the log's record at byte {offset} is session {found[0]!r} seq {found[1]} in "
            f"{found[2]!r}, not session {point.session_id!r} seq {point.seq} in {point.mode!r}"
        )
    previous, keep = previous_of(
        str(data.get("origin")), data.get("from_mode"), str(data.get("event"))
    )
    if not keep and previous != point.previous:
        return f"the row's previous mode {point.previous!r} is not the log's {previous!r}"
    return None


def _decoder() -> tuple[Callable[[bytes], Any], type[Exception], object]:
    """The catch-up's decoder, what it raises for a line it does not take, and ``UNSET``.

    The decoder is :func:`~modefsm.log.record_decoder` with ``config`` objects taken;
    ``UNSET`` is the value of an optional field the line does not have.
    """
    import msgspec  # noqa: PLC0415 - with the decoder, at the first catch-up

    return record_decoder(config=True), msgspec.MsgspecError, msgspec.UNSET


def _config(text: str | None) -> dict[str, str | bool] | None:
    """A ``config`` column's value: the host option values, or ``None``."""
    if text is None:
        return None
    config: dict[str, str | bool] = orjson.loads(text)
    return config


def _sqlite_files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
