"""PostgreSQL session store: one row per committed record, shared by a fleet of workers.

Needs ``psycopg`` 3 (``pip install 'modefsm[postgresql]'``). The database orders each
session: the table's primary key is ``(session_id, seq)`` and an append inserts its row
only if the row ``seq - 1`` with the digest it chains to (``session_prev``) is there, so a
gap, a duplicate or a fork is refused by the server, whichever process sent it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import orjson
import psycopg
from psycopg import errors as pgerrors

from modefsm.errors import LogError
from modefsm.log import TransitionLog, TransitionRecord, previous_of, record_digest
from modefsm.restore import RestorePoint
from modefsm.store._interface import SessionMoved, StoreBusy

__all__ = ["SCHEMA_VERSION", "PgStore"]

SCHEMA_VERSION = 1
"""The table layout this module reads and writes (the ``modefsm_schema`` row)."""

_LOCK_KEY = 0x6D6F6465  # pg_advisory_xact_lock key: one schema creator at a time

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS modefsm_schema (version integer NOT NULL)",
    (
        "INSERT INTO modefsm_schema (version) "
        "SELECT %s WHERE NOT EXISTS (SELECT 1 FROM modefsm_schema)"
    ),
    """CREATE TABLE IF NOT EXISTS modefsm_records (
    session_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    gseq bigint GENERATED ALWAYS AS IDENTITY,
    to_mode text NOT NULL,
    previous text,
    digest text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
)
_FIRST = (
    "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
    "VALUES (%s, 1, %s, %s, %s, %s) RETURNING gseq"
)
_NEXT = (
    "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
    "SELECT %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM modefsm_records "
    "WHERE session_id = %s AND seq = %s AND digest = %s) RETURNING gseq"
)
HEAD_QUERY = (
    "SELECT to_mode, seq, previous, digest FROM modefsm_records "
    "WHERE session_id = %s ORDER BY seq DESC LIMIT 1"
)
"""The one query :meth:`PgStore.restore_point` runs (a backward scan of the primary key)."""
_GSEQ = "SELECT gseq FROM modefsm_records WHERE session_id = %s AND seq = %s"
_PAGE = 1000


class PgStore:
    """A :class:`~modefsm.store.SessionStore` in a PostgreSQL database.

    The tables (``modefsm_schema``, ``modefsm_records``) are created if missing; a
    database holding another schema version is refused. Every statement runs in its own
    transaction (autocommit) on one connection, bounded by ``lock_timeout`` and
    ``statement_timeout`` of *lock_timeout* seconds each; its ``application_name`` is
    ``modefsm/PID`` (PID: this process's id), so ``pg_stat_activity`` tells the workers
    apart. After a record commits it is
    also written, with its ``gseq`` (the database's global commit counter), as one JSON
    line to *log*: that file chains this process's records (``prev``) and each record
    links to its session's previous one (``session_prev``), so ``modefsm replay`` can read
    several workers' files together.

    Args:
        url: a libpq connection URL (``postgresql://user@host:5432/db``).
        log: where this process writes its lines (rejections too); default: stderr.
        lock_timeout: seconds any statement may wait or run (also the connect timeout,
            rounded up, at least 2 s).

    Attributes:
        where: the database as messages name it (``host:port/dbname``, no password).

    Raises:
        LogError: the database cannot be reached or holds another schema version.
    """

    def __init__(
        self, url: str, *, log: TransitionLog | None = None, lock_timeout: float = 1.0
    ) -> None:
        """Connect, create the tables if missing and check the schema version."""
        self.url = url
        self.lock_timeout = lock_timeout
        self.log = log if log is not None else TransitionLog.to_stream(sys.stderr.buffer)
        self.mirror_error: LogError | None = None
        self.where = _display(url)
        self._conn: psycopg.Connection[Any] | None = None
        self._resent = False
        self._connect()

    # -- connection ---------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        millis = max(1, round(self.lock_timeout * 1000))
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(2, math.ceil(self.lock_timeout)),
                options=f"-c lock_timeout={millis} -c statement_timeout={millis}",
                application_name=f"modefsm/{os.getpid()}",
            )
        except psycopg.Error as exc:
            msg = f"cannot connect to the session store {self.where}: {_first_line(exc)}"
            raise LogError(msg) from None
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                for statement in _SCHEMA:
                    conn.execute(statement, (SCHEMA_VERSION,) if "%s" in statement else None)
            versions = [row[0] for row in conn.execute("SELECT version FROM modefsm_schema")]
        except psycopg.Error as exc:
            conn.close()
            msg = f"cannot set up the session store {self.where}: {_first_line(exc)}"
            raise LogError(msg) from None
        if versions != [SCHEMA_VERSION]:
            conn.close()
            msg = (
                f"the session store {self.where} has schema version "
                f"{', '.join(map(str, versions)) or 'none'}; this modefsm uses {SCHEMA_VERSION}"
            )
            raise LogError(msg)
        self._conn = conn
        return conn

    def _run(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run one statement; reconnect once if the connection is gone (sets ``_resent``)."""
        self._resent = False
        for attempt in (1, 2):
            self._resent = attempt == 2  # noqa: PLR2004
            conn = self._conn
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                cur = conn.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
            except pgerrors.UniqueViolation:
                raise
            except (pgerrors.LockNotAvailable, pgerrors.QueryCanceled) as exc:
                msg = (
                    f"the session store {self.where} did not answer within "
                    f"{self.lock_timeout:g} s ({_first_line(exc)}); nothing was written"
                )
                raise StoreBusy(msg) from None
            except LogError:
                if attempt == 2:  # noqa: PLR2004 - the one reconnection failed
                    raise
                self._drop()
            except psycopg.OperationalError as exc:
                self._drop()
                if attempt == 2:  # noqa: PLR2004
                    self._fail(exc)
            except psycopg.Error as exc:
                self._fail(exc)
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _fail(self, exc: psycopg.Error) -> NoReturn:
        msg = f"the session store {self.where} failed: {_first_line(exc)}"
        raise LogError(msg) from None

    # -- SessionStore -------------------------------------------------------------------

    def append(self, event: str, fields: dict[str, Any], head: RestorePoint | None) -> str:
        """Commit one record if *head* is still the session's head; return its digest.

        Args:
            event: ``modefsm.session_created`` or ``modefsm.mode_changed``.
            fields: the record's fields; ``seq`` must be ``head.seq + 1`` (1 without
                *head*).
            head: the point the change starts from, as this process knows it.

        Raises:
            SessionMoved: another process committed this ``seq`` first, or *head* is not
                the session's last record; ``current`` is where the session stands now.
            StoreBusy: the statement ran out of time; nothing was written.
            LogError: the database is unreachable after one reconnection (whether the
                record committed is then unknown to this call: the next append from the
                same head finds it and answers :class:`SessionMoved`, or commits).
            ValueError: ``fields["seq"]`` does not follow *head*.
        """
        session_id: str = fields["session_id"]
        seq: int = fields["seq"]
        if seq != (head.seq + 1 if head is not None else 1):
            msg = f"seq {seq} does not follow the head {head!r}"
            raise ValueError(msg)
        session_prev = head.digest if head is not None else None
        record = {**fields, "event": event, "prev": self.log.head, "session_prev": session_prev}
        digest = record_digest(record)
        record["digest"] = digest
        value, keep = previous_of(fields["origin"], fields.get("from_mode"))
        previous = (head.previous if head is not None else None) if keep else value
        body = orjson.dumps(record).decode()
        to_mode = fields["to_mode"]
        try:
            if head is None:
                rows = self._run(_FIRST, (session_id, to_mode, previous, digest, body))
            else:
                chained = (session_id, seq - 1, session_prev)
                rows = self._run(
                    _NEXT, (session_id, seq, to_mode, previous, digest, body, *chained)
                )
        except pgerrors.UniqueViolation:
            rows = []
        resent = self._resent
        if rows:
            gseq = rows[0][0]
        else:  # refused: the seq is taken, or seq - 1 is not the record chained to
            current = self.restore_point(session_id)
            if current is None:
                msg = f"sessionId {session_id} has no record to follow with seq {seq}"
                raise LogError(msg, self.where)
            if not (resent and current.digest == digest):
                raise SessionMoved(current)
            # the first try committed before the connection was lost: its gseq
            found = self._run(_GSEQ, (session_id, seq))
            gseq = found[0][0] if found else None
        self._mirror(event, {**fields, "session_prev": session_prev, "gseq": gseq})
        return digest

    def _mirror(self, event: str, fields: dict[str, Any]) -> None:
        try:
            self.log.write(event, fields)
        except LogError as exc:  # the database holds the record: the change stands
            self.mirror_error = exc

    def note(self, event: str, fields: dict[str, Any]) -> None:
        """Write a rejection or diagnostic to this process's log only (not to the database).

        Raises:
            LogError: the log cannot be written.
        """
        self.log.write(event, fields)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's last committed point, read from the database (one index scan).

        Raises:
            StoreBusy: the query ran out of time.
            LogError: the database is unreachable after one reconnection.
        """
        rows = self._run(HEAD_QUERY, (session_id,))
        if not rows:
            return None
        mode, seq, previous, digest = rows[0]
        return RestorePoint(session_id, mode, seq, previous, digest)

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The session's records, ``seq`` 1 to n, read 1,000 rows per query.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`.
        """
        after = 0
        while True:
            rows = self._run(
                "SELECT seq, record FROM modefsm_records WHERE session_id = %s AND seq > %s "
                "ORDER BY seq LIMIT %s",
                (session_id, after, _PAGE),
            )
            for _, record in rows:
                yield TransitionRecord.model_validate(record)
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]

    def export(self) -> Iterator[dict[str, Any]]:
        """Every record in the database as a JSON object with its ``gseq``, in ``gseq`` order.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`; also a row whose ``record`` is
                not a JSON object (raised when that row is reached).
        """
        after = 0
        while True:
            rows = self._run(
                "SELECT gseq, record FROM modefsm_records WHERE gseq > %s ORDER BY gseq LIMIT %s",
                (after, _PAGE),
            )
            for gseq, record in rows:
                if not isinstance(record, dict):
                    msg = f"the record of gseq {gseq} is {_json_kind(record)}, not a JSON object"
                    raise LogError(msg, self.where)
                yield {**record, "gseq": gseq}
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]

    def close(self) -> None:
        """Close the connection (the log given to the constructor stays open)."""
        self._drop()


def _json_kind(value: object) -> str:
    """What JSON value *value* (parsed) is, for messages: ``a JSON array``, ..."""
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, str):
        return "a JSON string"
    if isinstance(value, bool):
        return "a JSON boolean"
    if isinstance(value, int | float):
        return "a JSON number"
    return "JSON null"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _display(url: str) -> str:
    """*url* without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "(unparsable URL)"
    host = info.get("host", "localhost")
    port = info.get("port", "5432")
    return f"{host}:{port}/{info.get('dbname', '')}"
