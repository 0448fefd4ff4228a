"""PostgreSQL session store: one row per committed record, shared by a fleet of workers.

Needs ``psycopg`` 3 (``pip install 'modefsm[postgresql]'``). The database orders each
session: the table's primary key is ``(session_id, seq)`` and an append inserts its row
only if the row ``seq - 1`` with the digest it chains to (``session_prev``) is there, so a
gap, a duplicate or a fork is refused by the server, whichever process sent it.

Every wait on the database is bounded by the client, not only by the server: each call
runs on psycopg's ``AsyncConnection`` in the caller's event loop, and a timer set at its
deadline shuts the connection's socket down if the call is still waiting then (a stopped
backend, a partitioned network, a failover never answer, and the server's own timeouts
then never fire). psycopg then fails at once, the connection is closed, and the next call
opens a fresh one; the server sees the connection end. A record is inserted in an
explicit transaction (``BEGIN``, ``INSERT``, ``COMMIT``: three round trips) and
``COMMIT`` is sent only once the ``INSERT`` has answered in time, so a call cut before
its ``COMMIT`` was sent wrote nothing (the server rolls the
transaction back when the connection ends); only "``COMMIT`` sent, no answer" leaves the
outcome unknown (:class:`~modefsm.store.StoreInDoubt`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import functools
import math
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from pydantic import ValidationError

from modefsm.errors import LogError
from modefsm.log import (
    EVENT_DECIDED,
    EVENT_SPEC,
    DecisionRecord,
    TransitionLog,
    TransitionRecord,
    previous_of,
    record_digest,
    spec_header,
    utc_timestamp,
)
from modefsm.spec import MAX_GRANTS
from modefsm.store._interface import (
    AlreadyDecided,
    ListAfter,
    ListedSession,
    RestorePoint,
    SessionMoved,
    StoreBusy,
    StoreInDoubt,
)
from modefsm.store._restore import list_where

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = ["SCHEMA_VERSION", "PgStore"]

SCHEMA_VERSION = 2
"""The table layout this module reads and writes (the ``modefsm_schema`` row).

Version 2 adds ``modefsm_decisions`` (the ``modefsm.tool_decided`` records); a version 1
database is migrated when a store opens it (the table is created, the row set to 2)."""

GRACE = 1.0
"""Seconds the client waits for an answer beyond the server's own ``lock_timeout``."""

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
    """CREATE TABLE IF NOT EXISTS modefsm_specs (
    spec_hash text PRIMARY KEY,
    header jsonb NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS modefsm_decisions (
    session_id text NOT NULL,
    gseq bigint NOT NULL DEFAULT nextval('modefsm_records_gseq_seq'),
    mode_seq bigint NOT NULL CHECK (mode_seq >= 1),
    at_gseq bigint NOT NULL,
    digest text NOT NULL,
    outcome text,
    record jsonb NOT NULL,
    PRIMARY KEY (session_id, gseq),
    UNIQUE (session_id, digest)
)""",
    "UPDATE modefsm_schema SET version = %s WHERE version = 1",
)
"""Run in one transaction under an advisory lock: creates what is missing, and migrates a
version 1 database (the decisions table is all version 2 adds). A decision's ``at_gseq``
is the ``gseq`` of the record it was decided against (its place among the records: right
after that record, before the session's next); its own ``gseq`` (from the records'
sequence) orders the decisions made against one record."""
_COLUMNS = "v(session_id, seq, to_mode, previous, digest, record, session_prev"
_GUARDED = (
    "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
    "SELECT v.session_id, v.seq, v.to_mode, v.previous, v.digest, v.record FROM {rows} "
    "WHERE v.seq = 1 OR EXISTS (SELECT 1 FROM modefsm_records r WHERE r.session_id = "
    "v.session_id AND r.seq = v.seq - 1 AND r.digest = v.session_prev) "
    "{order}ON CONFLICT (session_id, seq) DO NOTHING RETURNING session_id, gseq"
)
_INSERT = _GUARDED.format(
    rows=(
        "unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::text[], %s::jsonb[], "
        f"%s::text[]) WITH ORDINALITY AS {_COLUMNS}, n)"
    ),
    order="ORDER BY v.n ",
)
"""One transaction's records, each row still guarded: ``seq`` 1, or the row ``seq - 1``
with the digest it chains to (``session_prev``) is there; a row whose ``seq`` is taken is
left out (not an error), and ``RETURNING`` tells which rows went in. Rows go in in the
order given, so their ``gseq`` follows the worker's file chain."""
_INSERT_ONE = _GUARDED.format(
    rows=(
        "(VALUES (%s::text, %s::bigint, %s::text, %s::text, %s::text, %s::jsonb, %s::text)) "
        f"AS {_COLUMNS})"
    ),
    order="",
)
""":data:`_INSERT` for one record (the same guard; a plainer plan than ``unnest``)."""
_HEADS = (
    "SELECT h.* FROM unnest(%s::text[]) AS s(session_id) CROSS JOIN LATERAL ("
    "SELECT session_id, to_mode, seq, previous, digest, record->'config' FROM modefsm_records r "
    "WHERE r.session_id = s.session_id ORDER BY seq DESC LIMIT 1) AS h"
)
_GSEQS = (
    "SELECT r.session_id, r.gseq FROM modefsm_records r JOIN unnest(%s::text[], %s::bigint[]) "
    "AS v(session_id, seq) ON r.session_id = v.session_id AND r.seq = v.seq"
)
HEAD_QUERY = (
    "SELECT to_mode, seq, previous, digest, record->'config' AS config FROM modefsm_records "
    "WHERE session_id = %s ORDER BY seq DESC LIMIT 1"
)
"""The session's last record (a backward scan of the primary key)."""
CATCH_UP_QUERY = (
    "SELECT h.*, (SELECT max(gseq) FROM modefsm_decisions WHERE session_id = %(sid)s), "
    "(SELECT jsonb_agg(g.record ORDER BY g.gseq) FROM (SELECT gseq, record FROM "
    "modefsm_decisions WHERE session_id = %(sid)s AND gseq > %(mark)s "
    "AND outcome = 'allow_always' ORDER BY gseq LIMIT %(limit)s) g) "
    "FROM (SELECT to_mode, seq, previous, digest, record->'config' AS config "
    "FROM modefsm_records WHERE session_id = %(sid)s ORDER BY seq DESC LIMIT 1) h"
)
"""The one query :meth:`PgStore.restore_point_async` runs: the session's last record, the
``gseq`` of its last decision, and the ``allow_always`` decisions after *mark* (the last
``gseq`` this store saw of the session), each a backward or range scan of a primary key."""
_DECIDE_FORM = (
    "WITH h AS (SELECT to_mode, seq, previous, digest, record->'config' AS config, gseq "
    "FROM modefsm_records WHERE session_id = %(sid)s ORDER BY seq DESC LIMIT 1), "
    "{found}ins AS (INSERT INTO modefsm_decisions "
    "(session_id, mode_seq, at_gseq, digest, outcome, record) "
    "SELECT %(sid)s, %(seq)s, h.gseq, %(digest)s, %(outcome)s, %(record)s::jsonb FROM h "
    "WHERE h.seq = %(seq)s{unless} ON CONFLICT (session_id, digest) DO NOTHING "
    "RETURNING gseq, at_gseq) "
    "SELECT d.gseq, d.at_gseq, h.to_mode, h.seq, h.previous, h.digest, h.config{answer} "
    "FROM h LEFT JOIN (SELECT gseq, at_gseq FROM ins UNION ALL SELECT gseq, at_gseq "
    "FROM modefsm_decisions WHERE session_id = %(sid)s AND digest = %(digest)s) d ON true"
)
_DECIDE = _DECIDE_FORM.format(found="", unless="", answer="")
"""A decision, guarded as a record is: inserted only if the session's last record is still
the one it was decided against (``mode_seq``); one statement (its own transaction). The
answer: its ``gseq`` and ``at_gseq`` (``NULL``: refused) and the session's head; no row:
no record. A decision sent again after a lost answer is found by its digest (the
statement's own insert and that lookup never both hold it), not written twice."""
_DECIDE_ONCE = _DECIDE_FORM.format(
    found=(
        "x AS (SELECT outcome FROM modefsm_decisions WHERE session_id = %(sid)s "
        "AND record->>'tool_call_id' = %(call)s AND digest <> %(digest)s "
        "ORDER BY gseq DESC LIMIT 1), "
    ),
    unless=" AND NOT EXISTS (SELECT 1 FROM x)",
    answer=", EXISTS (SELECT 1 FROM x), (SELECT outcome FROM x)",
)
""":data:`_DECIDE`, and only if the session has no other decision of the call
(``toolCallId``); the answer adds whether it has one and that one's ``outcome`` (the
last). Run after :data:`_DECIDE_LOCK` in the same transaction: its snapshot, taken after
the lock, holds every decision committed before the lock was granted."""
_DECIDE_LOCK = "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(sid)s))"
"""The session's decide-once lock, held to the transaction's end: two :data:`_DECIDE_ONCE`
of a session run one after the other (the two-key advisory locks, apart from the schema's
one-key lock)."""
_DECIDE_KEY = 0x6D6F6465
_LIST = (
    "SELECT c.session_id, c.record->>'cwd', h.updated_at FROM modefsm_records c "
    "CROSS JOIN LATERAL (SELECT r.record->>'timestamp' AS updated_at FROM modefsm_records r "
    "WHERE r.session_id = c.session_id ORDER BY r.seq DESC LIMIT 1) h "
    "WHERE c.seq = 1 AND c.record ? 'cwd'{where} "
    "ORDER BY h.updated_at DESC, c.session_id LIMIT %s"
)
"""One page of ``session/list``: each session's creation record (its ``cwd``) and its
last record (its ``timestamp``), newest first; the filter and the order run in the server."""
_PAGE = 1000
_EXPORT = (
    "SELECT * FROM (SELECT gseq AS at_gseq, 0 AS rank, gseq, record FROM modefsm_records "
    "UNION ALL SELECT at_gseq, 1, gseq, record FROM modefsm_decisions) a "
    "WHERE (at_gseq, rank, gseq) > (%s, %s, %s) ORDER BY at_gseq, rank, gseq LIMIT %s"
)
"""One page of the export: the records in ``gseq`` order, each followed by the decisions
made against it (their ``at_gseq``), in ``gseq`` order."""
_NO_GSEQ = (1 << 63) - 1
"""A ``gseq`` above every other: no decision comes after it."""
_BATCH = 256
"""The most records one transaction commits (the others go in the next)."""
_KEEPALIVE_IDLE = 5
_KEEPALIVE_INTERVAL = 2
"""TCP keepalives (seconds): a connection to a host gone from the network dies while idle."""

_T = TypeVar("_T")
Connection = psycopg.AsyncConnection[Any]


class _Stalled(Exception):  # noqa: N818 - internal signal, never leaves the module
    """A call's deadline passed while the database had not answered."""


class _Lost(Exception):  # noqa: N818 - internal signal, never leaves the module
    """The connection broke (or could not be opened): worth one more try."""

    def __init__(self, error: LogError) -> None:
        self.error = error


@dataclass(eq=False)
class _Entry:
    """A record waiting for its transaction: ``done`` gets its digest or its error."""

    event: str
    fields: dict[str, Any]
    head: RestorePoint | None
    deadline: float | None
    done: asyncio.Future[str]
    taken: bool = False  # in a transaction on its way: its outcome is that one's


@dataclass(eq=False)
class _Lane:
    """The connection of one event loop and the turn this process's calls on it take.

    ``waiting``: the records waiting for the next transaction (written by ``writer``).
    """

    loop: asyncio.AbstractEventLoop
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Connection | None = None
    waiting: list[_Entry] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None


@dataclass
class _Try:
    """One call: its deadline (event loop time) and how far it got.

    ``phase``: ``insert`` (nothing can commit) or ``commit`` (``COMMIT`` sent).
    ``cut``: its connection was cut at the deadline.
    """

    deadline: float
    phase: str = "insert"
    resent: bool = False
    cut: bool = False


class _LoopThread:
    """A private event loop in a thread of its own, for the blocking methods."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="modefsm-pgstore", daemon=True
        )
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        future: concurrent.futures.Future[_T] = asyncio.run_coroutine_threadsafe(work, self.loop)
        return future.result()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(_cancel_others(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class PgStore:
    """A :class:`~modefsm.store.SessionStore` in a PostgreSQL database.

    The tables (``modefsm_schema``, ``modefsm_records``) are created if missing; a
    database holding another schema version is refused. The store uses one connection at
    a time, whose ``application_name`` is ``modefsm/PID`` (PID: this process's id), so
    ``pg_stat_activity`` tells the workers apart; the server bounds each statement with
    ``lock_timeout`` and ``statement_timeout`` of *lock_timeout* seconds, and drops a
    transaction left idle for *timeout* seconds.

    Bounds on the client: a call waits at most *timeout* seconds for the database once it
    is its turn (connecting again included), and at most *timeout* seconds more for the
    calls of this process ahead of it (the worker's file is one chain, so its transactions
    go one at a time; the records of calls waiting meanwhile go together in the next
    one): every call ends within twice *timeout*. At its deadline a
    call fails with :class:`~modefsm.store.StoreBusy` (nothing written) or, when its
    ``COMMIT`` was sent and not answered, :class:`~modefsm.store.StoreInDoubt`.

    After a record commits it is also written, with its ``gseq`` (the database's global
    commit counter), as one JSON line to *log*: that file chains this process's records
    (``prev``) and each record links to its session's previous one (``session_prev``), so
    ``modefsm replay`` can read several workers' files together.

    The coroutines (:meth:`append_async`, :meth:`restore_point_async`) run in the
    caller's event loop; the blocking methods run the same code on a private event loop
    in a thread of the store's own, so they work with or without a running loop (and
    block it). Use the coroutines from one event loop at a time, and close the store once
    no call runs.

    Args:
        url: a libpq connection URL (``postgresql://user@host:5432/db``).
        log: where this process writes its lines (rejections too); default: stderr.
        lock_timeout: seconds any statement may wait or run on the server.
        timeout: seconds the client waits for the database (see above); default
            *lock_timeout* plus :data:`GRACE`. Also the connect timeout (rounded up, at
            least 2 s) and the TCP ``tcp_user_timeout``; the server's
            ``idle_in_transaction_session_timeout`` is twice it.

    Attributes:
        where: the database as messages name it (``host:port/dbname``, no password).

    Raises:
        LogError: the database cannot be reached or holds another schema version.
    """

    def __init__(
        self,
        url: str,
        *,
        log: TransitionLog | None = None,
        lock_timeout: float = 1.0,
        timeout: float | None = None,
    ) -> None:
        """Connect, create the tables if missing and check the schema version."""
        self.url = url
        self.lock_timeout = lock_timeout
        self.timeout = timeout if timeout is not None else lock_timeout + GRACE
        self.log = log if log is not None else TransitionLog.to_stream(sys.stderr.buffer)
        self.mirror_error: LogError | None = None
        self.where = _display(url)
        self._lanes: dict[asyncio.AbstractEventLoop, _Lane] = {}
        self._checked = False
        self._held: list[tuple[str, dict[str, Any]]] | None = None
        self._described: set[str] = set()  # the spec_hash of the specs in modefsm_specs
        # per session held here: the last decision gseq seen, and the allow_always
        # decisions of other workers read since (grants_seen); bounded by release()
        self._marks: dict[str, int] = {}
        self._granted: dict[str, list[Any]] = {}
        self._thread: _LoopThread | None = None
        self._blocking(self._setup())

    # -- connection ---------------------------------------------------------------------

    async def _setup(self) -> None:
        lane = self._lane()
        async with self._turn(lane):
            try:
                async with asyncio.timeout_at(self._deadline(lane)):
                    lane.conn = await self._connect()
            except TimeoutError:
                msg = (
                    f"cannot connect to the session store {self.where}: no answer within "
                    f"{self.timeout:g} s"
                )
                raise LogError(msg) from None

    async def _connect(self) -> Connection:
        """A fresh connection (the schema checked on the store's first one)."""
        millis = max(1, round(self.lock_timeout * 1000))
        idle = max(1, round(self.timeout * 1000))
        # The server ends a transaction left idle by a frozen client only after twice the
        # client's own deadline, so a live client always decides (and words) the outcome.
        abandoned = 2 * idle
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(2, math.ceil(self.timeout)),
                options=(
                    f"-c lock_timeout={millis} -c statement_timeout={millis} "
                    f"-c idle_in_transaction_session_timeout={abandoned}"
                ),
                application_name=f"modefsm/{os.getpid()}",
                tcp_user_timeout=idle,
                keepalives=1,
                keepalives_idle=_KEEPALIVE_IDLE,
                keepalives_interval=_KEEPALIVE_INTERVAL,
            )
        except psycopg.Error as exc:
            msg = f"cannot connect to the session store {self.where}: {_first_line(exc)}"
            raise LogError(msg) from None
        try:
            if not self._checked:
                await self._check_schema(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _check_schema(self, conn: Connection) -> None:
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                for statement in _SCHEMA:
                    await conn.execute(statement, (SCHEMA_VERSION,) if "%s" in statement else None)
            cur = await conn.execute("SELECT version FROM modefsm_schema")
            versions = [row[0] for row in await cur.fetchall()]
        except psycopg.Error as exc:
            msg = f"cannot set up the session store {self.where}: {_first_line(exc)}"
            raise LogError(msg) from None
        if versions != [SCHEMA_VERSION]:
            msg = (
                f"the session store {self.where} has schema version "
                f"{', '.join(map(str, versions)) or 'none'}; this modefsm uses {SCHEMA_VERSION}"
            )
            raise LogError(msg)
        self._checked = True

    def _lane(self) -> _Lane:
        """The running loop's lane; another loop's connection is dropped (one at a time)."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is not None:
            return lane
        private = self._thread.loop if self._thread is not None else None
        for other in list(self._lanes.values()):
            if other.loop is private and other.conn is not None:
                # the blocking methods' idle connection: closed in its own loop
                asyncio.run_coroutine_threadsafe(other.conn.close(), other.loop)
                other.conn = None
            elif other.loop is not private:  # a loop that has ended
                _finish(other.conn)
                del self._lanes[other.loop]
        lane = self._lanes[loop] = _Lane(loop)
        return lane

    def _deadline(self, lane: _Lane, limit: float | None = None) -> float:
        """When a call that has its turn now must end: *timeout*, or *limit* if sooner."""
        end = lane.loop.time() + self.timeout
        return end if limit is None else min(end, limit)

    @contextlib.asynccontextmanager
    async def _turn(self, lane: _Lane, limit: float | None = None) -> Any:
        """Wait for the calls of this process ahead of this one (and hold the turn).

        At most *timeout* seconds, or until *limit* (event loop time: the deadline of the
        request the call is part of) when given.
        """
        turn = lane.turn
        if turn.locked():
            until = lane.loop.time() + self.timeout if limit is None else limit
            try:
                async with asyncio.timeout_at(until):
                    await turn.acquire()
            except TimeoutError:
                msg = (
                    f"the session store {self.where} is still busy with this process's "
                    "earlier requests; nothing was written"
                )
                raise StoreBusy(msg) from None
        else:
            await turn.acquire()  # free: taken at once
        try:
            yield
        finally:
            turn.release()

    async def _call(
        self, lane: _Lane, attempt: _Try, work: Callable[[Connection], Awaitable[_T]]
    ) -> _T:
        """Run ``work(conn)`` on the lane's connection within *attempt*'s deadline.

        A connection that breaks is opened again and *work* run once more
        (``attempt.resent``). The caller holds the lane's turn.

        Raises:
            _Stalled: the deadline passed (the connection was cut and is closed).
            StoreBusy: the server's lock or statement timeout fired; nothing was written.
            LogError: the database cannot be reached, or failed.
        """
        try:
            return await self._once(lane, attempt, work)
        except _Lost:
            attempt.resent = True
        try:
            return await self._once(lane, attempt, work)
        except _Lost as lost:  # the one reconnection failed
            raise lost.error from None

    async def _once(
        self, lane: _Lane, attempt: _Try, work: Callable[[Connection], Awaitable[_T]]
    ) -> _T:
        conn = lane.conn
        try:
            if conn is None or conn.closed:
                try:
                    async with asyncio.timeout_at(attempt.deadline):
                        conn = lane.conn = await self._connect()
                except TimeoutError:
                    raise _Stalled from None
            alarm = lane.loop.call_at(attempt.deadline, _cut, conn, attempt)
            try:
                return await work(conn)
            finally:
                alarm.cancel()
        except (pgerrors.LockNotAvailable, pgerrors.QueryCanceled) as exc:
            msg = (
                f"the session store {self.where} did not answer within "
                f"{self.lock_timeout:g} s ({_first_line(exc)}); nothing was written"
            )
            raise StoreBusy(msg) from None
        except LogError as exc:
            raise _Lost(exc) from None
        except psycopg.OperationalError as exc:
            if attempt.cut:
                raise _Stalled from None
            raise _Lost(self._failure(exc)) from None
        except psycopg.Error as exc:
            raise self._failure(exc) from None
        finally:
            self._settle(lane, conn, attempt)

    @staticmethod
    def _settle(lane: _Lane, conn: Connection | None, attempt: _Try) -> None:
        """After a call: keep the lane's connection only if it is open, idle and not cut."""
        if conn is None or conn is not lane.conn:
            return
        if attempt.cut or conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            _finish(conn)  # a transaction cut short: the server rolls it back
            lane.conn = None

    def _failure(self, exc: psycopg.Error) -> LogError:
        return LogError(f"the session store {self.where} failed: {_first_line(exc)}")

    def _stalled(self, what: str) -> StoreBusy:
        msg = (
            f"the session store {self.where} did not answer {what} within {self.timeout:g} s "
            "(the connection was dropped); nothing was written"
        )
        return StoreBusy(msg)

    def _blocking(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run *work* on the store's private event loop and wait for it."""
        if self._thread is None:
            self._thread = _LoopThread()
        return self._thread.run(work)

    # -- SessionStore -------------------------------------------------------------------

    def append(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        exact: bool = False,  # noqa: ARG002 - the digest is taken as for any record
    ) -> str:
        """:meth:`append_async`, blocking until it ends."""
        return self._blocking(self.append_async(event, fields, head))

    async def append_async(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        deadline: float | None = None,
        exact: bool = False,  # noqa: ARG002 - the digest is taken as for any record
    ) -> str:
        """Commit one record if *head* is still the session's head; return its digest.

        The records of this process's calls that wait while a transaction is on its way
        go together in the next one (at most :data:`_BATCH`, one per session): one
        ``BEGIN``, one ``INSERT`` of them all, each row still guarded by its own ``seq``
        and ``session_prev``, one ``COMMIT``. Each call gets its own record's outcome: a
        row refused is rolled back with the others, which go in again without it.
        Rejections and diagnostics noted while a record is on its way are written to
        the log after its line (the log is one chain).

        Args:
            event: ``modefsm.session_created`` or ``modefsm.mode_changed``.
            fields: the record's fields; ``seq`` must be ``head.seq + 1`` (1 without
                *head*).
            head: the point the change starts from, as this process knows it.
            deadline: when the request this call is part of must end (the event loop's
                ``time()``); the call's waits end by then (and within *timeout* anyway).
            exact: see :meth:`SessionStore.append`; the digest is taken as for any record.

        Raises:
            SessionMoved: another process committed this ``seq`` first, or *head* is not
                the session's last record; ``current`` is where the session stands now.
            StoreBusy: a timeout (the server's, or the client's before the ``COMMIT`` was
                sent); nothing was written.
            StoreInDoubt: the ``COMMIT`` was sent and not answered within *timeout*.
            LogError: the database is unreachable after one reconnection (whether the
                record committed is then unknown to this call: the next append from the
                same head finds it and answers :class:`SessionMoved`, or commits).
            ValueError: ``fields["seq"]`` does not follow *head*.
        """
        seq: int = fields["seq"]
        if seq != (head.seq + 1 if head is not None else 1):
            msg = f"seq {seq} does not follow the head {head!r}"
            raise ValueError(msg)
        lane = self._lane()
        entry = _Entry(event, fields, head, deadline, lane.loop.create_future())
        lane.waiting.append(entry)
        if lane.writer is None and not lane.turn.locked():  # nothing on its way: now
            lane.writer = asyncio.current_task()
            try:
                await self._write_batch(lane)
            finally:
                lane.writer = None
                if lane.waiting:  # calls made meanwhile
                    lane.writer = lane.loop.create_task(self._write_waiting(lane))
            return entry.done.result()
        if lane.writer is None:
            lane.writer = lane.loop.create_task(self._write_waiting(lane))
        until = lane.loop.time() + self.timeout if deadline is None else deadline
        try:
            async with asyncio.timeout_at(until):
                return await asyncio.shield(entry.done)
        except TimeoutError:
            if entry.taken:  # on its way: its transaction ends by its deadline
                return await entry.done
            lane.waiting.remove(entry)
            msg = (
                f"the session store {self.where} is still busy with this process's "
                "earlier requests; nothing was written"
            )
            raise StoreBusy(msg) from None
        except asyncio.CancelledError:
            if not entry.taken:
                lane.waiting.remove(entry)
            raise

    async def _write_waiting(self, lane: _Lane) -> None:
        """Commit the waiting records, a transaction at a time, while there are some."""
        try:
            while lane.waiting:
                await self._write_batch(lane)
        finally:
            lane.writer = None

    async def _write_batch(self, lane: _Lane) -> None:
        """Take the turn, then commit the records waiting then (one per session) together."""
        async with lane.turn:
            batch: list[_Entry] = []
            sessions: set[str] = set()
            for entry in lane.waiting:
                sid = entry.fields["session_id"]
                if len(batch) < _BATCH and sid not in sessions and not entry.done.done():
                    batch.append(entry)
                    sessions.add(sid)
                    entry.taken = True
            lane.waiting = [e for e in lane.waiting if not e.taken and not e.done.done()]
            if not batch:
                return
            self._held = []
            try:
                await self._append(lane, batch)
            except BaseException:  # not a record's own outcome: theirs is unknown
                for entry in batch:
                    entry.done.cancel()
                raise
            finally:
                held, self._held = self._held, None
                for note in held:
                    self._write_note(*note)

    async def _append(self, lane: _Lane, batch: list[_Entry]) -> None:  # noqa: C901 - each outcome
        """Commit *batch* in one transaction; settle each entry with its own outcome.

        A row refused (another process moved its session) is rolled back with the rest,
        and the rest go in again in a new transaction, within the same deadline.
        """
        limits = [e.deadline for e in batch if e.deadline is not None]
        attempt = _Try(self._deadline(lane, min(limits) if limits else None))
        while batch:
            rows = self._rows_or_none(batch)
            if rows is None:
                return
            params = tuple(list(column) for column in zip(*(row[:7] for row in rows), strict=True))
            try:
                gseqs, heads = await self._call(
                    lane, attempt, functools.partial(_insert, attempt=attempt, params=params)
                )
            except _Stalled:
                for entry in batch:
                    _outcome(entry, error=self._unanswered(attempt, entry))
                return
            except LogError as exc:  # each record gets that error (see append_async)
                for entry in batch:
                    _outcome(entry, error=copy.copy(exc))
                return
            kept = []
            for entry, row in zip(batch, rows, strict=True):
                sid, seq, digest, session_prev = row[0], row[1], row[4], row[6]
                current = None if heads is None else heads.get(sid)
                if heads is None or (
                    attempt.resent and current is not None and current.digest == digest
                ):  # committed (on a first try whose answer was lost, if resent)
                    fields = {**entry.fields, "session_prev": session_prev, "gseq": gseqs.get(sid)}
                    self._mirror(entry.event, fields)
                    if seq == 1:  # a new session: every decision of it is news
                        self._marks.setdefault(sid, 0)
                    _outcome(entry, digest)
                elif current is None and seq > 1:
                    msg = f"sessionId {sid} has no record to follow with seq {seq}"
                    _outcome(entry, error=LogError(msg, self.where))
                elif current is not None and (
                    seq == 1 or (current.seq, current.digest) != (seq - 1, session_prev)
                ):
                    _outcome(entry, error=SessionMoved(current))
                else:  # it would go in: rolled back with a refused one
                    kept.append(entry)
            batch = kept

    def _rows_or_none(self, batch: list[_Entry]) -> list[tuple[Any, ...]] | None:
        """:meth:`_rows`, or ``None`` when a header they need was not written.

        Then no record is written either: each entry is settled with that error.
        """
        try:
            return self._rows(batch)
        except LogError as exc:
            for entry in batch:
                _outcome(entry, error=copy.copy(exc))
            return None

    def _rows(self, batch: list[_Entry]) -> list[tuple[Any, ...]]:
        """Each entry's row, its record chained to the one before in this process's file.

        ``(session_id, seq, to_mode, previous, digest, body, session_prev)``.
        """
        rows = []
        for entry in batch:  # headers first: the records chain after them
            self.log.prepare(entry.fields)
        prev = self.log.head
        for entry in batch:
            fields, head = entry.fields, entry.head
            session_prev = head.digest if head is not None else None
            record = {**fields, "event": entry.event, "prev": prev, "session_prev": session_prev}
            digest = prev = record["digest"] = record_digest(record)
            value, keep = previous_of(fields["origin"], fields.get("from_mode"), entry.event)
            previous = (head.previous if head is not None else None) if keep else value
            body = orjson.dumps(record).decode()
            row = (fields["session_id"], fields["seq"], fields["to_mode"], previous)
            rows.append((*row, digest, body, session_prev))
        return rows

    def _unanswered(self, attempt: _Try, entry: _Entry) -> LogError:
        """The error of a record whose transaction ran out of time."""
        sid, seq = entry.fields["session_id"], entry.fields["seq"]
        if attempt.phase == "commit":
            msg = (
                f"the session store {self.where} did not answer the commit of sessionId "
                f"{sid} (seq {seq}) within {self.timeout:g} s: whether it was written is "
                "unknown; the session is read back before its next use"
            )
            return StoreInDoubt(msg, sid, seq)
        return self._stalled(f"sessionId {sid} (seq {seq})")

    def _mirror(self, event: str, fields: dict[str, Any]) -> None:
        try:
            self.log.write(event, fields)
        except LogError as exc:  # the database holds the record: the change stands
            self.mirror_error = exc

    def note(self, event: str, fields: dict[str, Any], head: RestorePoint | None = None) -> None:
        """:meth:`note_async`, blocking until it ends."""
        if event == EVENT_DECIDED and head is not None:
            self._blocking(self._decide(fields, head, None))
            return
        self._note_local(event, fields)

    async def note_async(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None = None
    ) -> None:
        """Write a decision to the database, or a rejection or diagnostic to the log only.

        A ``modefsm.tool_decided`` record with *head* is committed to ``modefsm_decisions``
        only if *head* (its ``mode_seq``) is still the session's last record, durable when
        this returns, then written to this process's log with its ``gseq`` (as a record
        is). Any other line goes to this process's log only (*head* is not checked): while
        a record of this process is on its way to the database, right after that record's
        line (at most *timeout* seconds later).

        Raises:
            SessionMoved: the session moved past *head* (the decision was not written).
            StoreBusy, StoreInDoubt, LogError: as :meth:`append_async`, for a decision.
            LogError: the log cannot be written.
        """
        if event == EVENT_DECIDED and head is not None:
            await self._decide(fields, head, None)
            return
        self._note_local(event, fields)

    async def note_once_async(self, fields: dict[str, Any], head: RestorePoint) -> None:
        """Commit the decision *fields* unless the session has a decision of its call.

        See :meth:`DecidesOnce.note_once_async <modefsm.store.DecidesOnce.note_once_async>`:
        as :meth:`note_async` of a decision, in one transaction that first takes the
        session's decide-once lock (:data:`_DECIDE_LOCK`), then checks every decision the
        database holds for ``fields["tool_call_id"]`` and inserts (:data:`_DECIDE_ONCE`).

        Raises:
            AlreadyDecided: the session has a decision of the call; nothing was written.
            SessionMoved, StoreBusy, StoreInDoubt, LogError: as :meth:`note_async`.
        """
        await self._decide(fields, head, None, once=True)

    def _note_local(self, event: str, fields: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append((event, fields))
            return
        self.log.write(event, fields)

    async def _decide(
        self, fields: dict[str, Any], head: RestorePoint, limit: float | None, *, once: bool = False
    ) -> None:
        """Commit one decision against *head* (see :meth:`note_async`), then log it.

        *once*: only if the call has no decision yet (:meth:`note_once_async`).
        """
        sid = head.session_id
        lane = self._lane()
        async with self._turn(lane, limit):
            attempt = _Try(self._deadline(lane, limit))
            self._held = []
            try:
                self.log.prepare(fields)
                record = {**fields, "event": EVENT_DECIDED, "prev": self.log.head}
                digest = record["digest"] = record_digest(record)
                params = {
                    "sid": sid,
                    "seq": fields["mode_seq"],
                    "digest": digest,
                    "outcome": fields.get("outcome"),
                    "record": orjson.dumps(record).decode(),
                }

                async def insert(conn: Connection) -> list[Any]:
                    attempt.phase = "commit"  # one statement: sent is committed or not
                    return await _rows(conn, _DECIDE, params)

                if once:
                    params |= {"call": fields["tool_call_id"], "lock": _DECIDE_KEY}
                try:
                    work = functools.partial(_decide_once, attempt=attempt, params=params)
                    rows = await self._call(lane, attempt, work if once else insert)
                except _Stalled:
                    what = f"sessionId {sid} (toolCallId {fields['tool_call_id']})"
                    if attempt.phase != "commit":  # not sent: nothing written
                        raise self._stalled(f"the decision of {what}") from None
                    msg = (
                        f"the session store {self.where} did not answer the decision of "
                        f"{what} within {self.timeout:g} s: whether it was written is unknown"
                    )
                    raise StoreInDoubt(msg, sid, fields["mode_seq"]) from None
                if not rows:
                    msg = f"sessionId {sid} has no record to decide a tool call against"
                    raise LogError(msg, self.where)
                gseq, at_gseq, mode, seq, previous, at, config = rows[0][:7]
                if gseq is None and once and rows[0][7]:
                    raise AlreadyDecided(sid, fields["tool_call_id"], rows[0][8])
                if gseq is None:
                    raise SessionMoved(RestorePoint(sid, mode, seq, previous, at, config))
                self._mirror(EVENT_DECIDED, {**fields, "gseq": gseq, "at_gseq": at_gseq})
            finally:
                held, self._held = self._held, None
                for note in held:
                    self._write_note(*note)

    def _write_note(self, event: str, fields: dict[str, Any]) -> None:
        try:
            self.log.write(event, fields)
        except LogError as exc:  # its caller has moved on: keep the error for the host
            self.mirror_error = exc

    def describe(self, spec: ModeSpec) -> None:
        """Name *spec* in this worker's file and in the database (``modefsm_specs``).

        The file gets a header before its first record of *spec*
        (:meth:`TransitionLog.describe <modefsm.log.TransitionLog.describe>`); the database
        keeps one row per ``spec_hash`` (the first worker's), which :meth:`export` writes
        before the records; a store asks the database once per spec.

        Raises:
            StoreBusy, LogError: the database did not take the row in time.
        """
        self.log.describe(spec)
        if spec.content_hash in self._described:  # another engine of this store: once
            return
        header = {"timestamp": utc_timestamp(), **spec_header(spec)}
        self._blocking(
            self._query(
                "INSERT INTO modefsm_specs (spec_hash, header) VALUES (%s, %s::jsonb) "
                "ON CONFLICT (spec_hash) DO NOTHING",
                (spec.content_hash, orjson.dumps(header).decode()),
                f"spec {spec.name!r}",
            )
        )
        self._described.add(spec.content_hash)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """:meth:`restore_point_async`, blocking until it ends."""
        return self._blocking(self.restore_point_async(session_id))

    async def restore_point_async(
        self, session_id: str, *, deadline: float | None = None
    ) -> RestorePoint | None:
        """The session's last committed point, read from the database (:data:`CATCH_UP_QUERY`).

        The same query reads the ``allow_always`` decisions of the session committed since
        this store last looked (none the first time: a session is followed from then on),
        which :meth:`grants_seen` hands over. *deadline*: as for :meth:`append_async
        <modefsm.store.SessionStore.append_async>`.

        Raises:
            StoreBusy: the query ran out of time (the server's or the client's).
            LogError: the database is unreachable after one reconnection.
        """
        mark = self._marks.get(session_id)
        params = {"sid": session_id, "mark": _NO_GSEQ if mark is None else mark}
        params["limit"] = MAX_GRANTS
        rows = await self._query(CATCH_UP_QUERY, params, f"sessionId {session_id}", deadline)
        if not rows:
            return None
        mode, seq, previous, digest, config, last, grants = rows[0]
        if last is not None and (mark is None or last > mark):
            self._marks[session_id] = last
        elif mark is None:
            self._marks[session_id] = 0
        if grants:
            seen = self._granted.setdefault(session_id, [])
            seen.extend(grants[: max(0, MAX_GRANTS - len(seen))])
        return RestorePoint(session_id, mode, seq, previous, digest, config)

    def grants_seen(self, session_id: str) -> list[DecisionRecord]:
        """The ``allow_always`` decisions of *session_id* read since the last call.

        Read as the session caught up (:meth:`restore_point_async`), at most
        :data:`~modefsm.spec.MAX_GRANTS`; this worker's own come back too (remembering a
        grant twice changes nothing). A row that is not a valid decision is left out
        (replay of the export reports it).
        """
        grants = []
        for data in self._granted.pop(session_id, ()):
            with contextlib.suppress(ValidationError):
                grants.append(DecisionRecord.model_validate(data))
        return grants

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        """The session's ``modefsm.tool_decided`` records, in commit order (1,000 per query).

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`; ``LogError`` also for a row that
                is not a valid decision (raised when that row is reached).
        """
        query = (
            "SELECT gseq, record FROM modefsm_decisions WHERE session_id = %s "
            "AND gseq > %s ORDER BY gseq LIMIT %s"
        )
        for gseq, record in self._pages(
            query, (session_id,), f"the decisions of sessionId {session_id}"
        ):
            try:
                yield DecisionRecord.model_validate(record)
            except ValidationError:
                msg = f"the decision of gseq {gseq} is not a modefsm.tool_decided record"
                raise LogError(msg, self.where) from None

    def _pages(self, query: str, fixed: tuple[Any, ...], what: str) -> Iterator[tuple[Any, ...]]:
        """Every row of *query*, read 1,000 per query (blocking).

        The query's parameters: *fixed*, then the first column of the previous page's last
        row (0 for the first page), then the page size.
        """
        after = 0
        while True:
            params = (*fixed, after, _PAGE)
            rows = self._blocking(self._query(query, params, what))
            yield from rows
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]

    def release(self, session_id: str) -> None:
        """Stop following *session_id* (closed here): what is kept per session stays bounded."""
        self._marks.pop(session_id, None)
        self._granted.pop(session_id, None)

    async def reopen_async(self) -> None:
        """Reopen this worker's log file after a rotation (``serve`` on ``SIGHUP``).

        Nothing happens when the log is not a file (a stream).

        Raises:
            LogError: the new file cannot be opened (the old one is still used).
        """
        if self.log.reopenable:
            self.log.reopen()

    async def _query(
        self,
        query: str,
        params: tuple[Any, ...] | dict[str, Any],
        what: str,
        limit: float | None = None,
    ) -> list[Any]:
        lane = self._lane()
        async with self._turn(lane, limit):
            attempt = _Try(self._deadline(lane, limit))
            try:
                rows: list[Any] = await self._call(
                    lane, attempt, lambda conn: _rows(conn, query, params)
                )
            except _Stalled:
                raise self._stalled(f"a read of {what}") from None
        return rows

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The session's records, ``seq`` 1 to n, read 1,000 rows per query.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`.
        """
        query = (
            "SELECT seq, record FROM modefsm_records WHERE session_id = %s "
            "AND seq > %s ORDER BY seq LIMIT %s"
        )
        for _, record in self._pages(
            query, (session_id,), f"the history of sessionId {session_id}"
        ):
            yield TransitionRecord.model_validate(record)

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """:meth:`list_sessions_async`, blocking until it ends."""
        return self._blocking(self.list_sessions_async(cwd, after, limit))

    async def list_sessions_async(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """One page of the database's sessions (see :meth:`SessionStore.list_sessions`).

        One query: the ``cwd`` filter, the order and the page are the server's work. A
        *cwd* holding a NUL matches nothing (PostgreSQL text holds none): no query.

        Raises:
            StoreBusy: the query ran out of time (the server's or the client's).
            LogError: the database is unreachable after one reconnection.
        """
        if cwd is not None and "\x00" in cwd:
            return []
        columns = ("c.record->>'cwd'", "h.updated_at", "c.session_id")
        where, params = list_where(cwd, after, mark="%s", columns=columns)
        rows = await self._query(_LIST.format(where=where), (*params, limit), "the sessions")
        return [ListedSession(row[0], row[1], row[2]) for row in rows]

    def export(self) -> Iterator[dict[str, Any]]:
        """Every spec's header, then every record in ``gseq`` order, each with its decisions.

        Each as a JSON object: a header (``modefsm.spec``) with its ``digest`` (its ``prev``
        null: an export chains by session only); a record with its ``gseq``; after it, the
        decisions made against it, each with its ``gseq`` and, as ``at_gseq``, the
        record's (a decision's place is after the record it was decided against).

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`; also a row whose ``record`` is
                not a JSON object (raised when that row is reached).
        """
        specs = self._blocking(
            self._query(
                "SELECT spec_hash, header FROM modefsm_specs ORDER BY spec_hash", (), "the specs"
            )
        )
        for spec_hash, header in specs:
            if not isinstance(header, dict):
                msg = f"the header of spec {spec_hash} is {_json_kind(header)}, not a JSON object"
                raise LogError(msg, self.where)
            line = {**header, "event": EVENT_SPEC, "prev": None}
            yield {**line, "digest": record_digest(line)}
        after = (0, 0, 0)
        while True:
            rows = self._blocking(self._query(_EXPORT, (*after, _PAGE), "the records"))
            for at_gseq, rank, gseq, record in rows:
                what = "record" if rank == 0 else "decision"
                if not isinstance(record, dict):
                    msg = f"the {what} of gseq {gseq} is {_json_kind(record)}, not a JSON object"
                    raise LogError(msg, self.where)
                yield {**record, "gseq": gseq} if rank == 0 else {
                    **record, "gseq": gseq, "at_gseq": at_gseq,
                }  # fmt: skip
            if len(rows) < _PAGE:
                return
            after = tuple(rows[-1][:3])

    def close(self) -> None:
        """Close the connections (the log given to the constructor stays open)."""
        for lane in self._lanes.values():
            _finish(lane.conn)
            lane.conn = None
        self._lanes.clear()
        if self._thread is not None:
            self._thread.stop()
            self._thread = None


async def _insert(
    conn: Connection, *, attempt: _Try, params: tuple[list[Any], ...]
) -> tuple[dict[str, int], dict[str, RestorePoint] | None]:
    """Insert rows in a transaction: ``(gseqs, None)`` once all committed; else the heads.

    ``BEGIN``, the ``INSERT`` of all rows (:data:`_INSERT`; prepared by psycopg once used
    a few times), then ``COMMIT`` only after the ``INSERT`` answered and only if every
    row went in: three plain round trips. Not a pipeline: the server's
    ``idle_in_transaction_session_timeout``, which ends a transaction whose client froze
    before its ``COMMIT``, is not armed after a pipeline's flush. If a row was refused,
    the transaction is rolled back and the heads of the rows' sessions and the ``gseq`` of
    the rows at their ``seq`` (whoever wrote them) are read, in one round trip:
    ``(gseqs, heads)``, a session without records having no head.
    """
    sessions, seqs = params[0], params[1]
    attempt.phase = "insert"
    await conn.execute("BEGIN")
    if len(sessions) == 1:
        cur = await conn.execute(_INSERT_ONE, tuple(column[0] for column in params))
    else:
        cur = await conn.execute(_INSERT, params)
    inserted = await cur.fetchall()
    if len(inserted) == len(sessions):
        if asyncio.get_running_loop().time() >= attempt.deadline:
            raise _Stalled  # too late to commit: rolled back when the connection is closed
        attempt.phase = "commit"  # sent within this step: the alarm cannot cut before it
        await conn.execute("COMMIT")
        attempt.phase = "committed"
        return dict(inserted), None
    async with conn.pipeline():  # no transaction is left open by these
        await conn.execute("ROLLBACK")
        found = await conn.execute(_HEADS, (sessions,))
        taken = await conn.execute(_GSEQS, (sessions, seqs))
    heads = {
        sid: RestorePoint(sid, mode, seq, previous, digest, config)
        for sid, mode, seq, previous, digest, config in await found.fetchall()
    }
    return dict(await taken.fetchall()), heads


async def _decide_once(conn: Connection, *, attempt: _Try, params: dict[str, Any]) -> list[Any]:
    """:data:`_DECIDE_ONCE` in a transaction under :data:`_DECIDE_LOCK`: its answer rows.

    ``COMMIT`` only when the decision went in (and the deadline has not passed); else the
    transaction is rolled back (nothing was written).
    """
    attempt.phase = "insert"
    await conn.execute("BEGIN")
    await conn.execute(_DECIDE_LOCK, params)
    rows = await _rows(conn, _DECIDE_ONCE, params)
    if not rows or rows[0][0] is None:
        await conn.execute("ROLLBACK")
        return rows
    if asyncio.get_running_loop().time() >= attempt.deadline:
        raise _Stalled  # too late to commit: rolled back when the connection is closed
    attempt.phase = "commit"
    await conn.execute("COMMIT")
    attempt.phase = "committed"
    return rows


def _outcome(entry: _Entry, digest: str | None = None, error: BaseException | None = None) -> None:
    """Give *entry*'s caller its record's outcome (unless it has gone)."""
    if entry.done.done():
        return
    if error is not None:
        entry.done.set_exception(error)
    else:
        entry.done.set_result(digest)  # type: ignore[arg-type]


async def _rows(
    conn: Connection, query: str, params: tuple[Any, ...] | dict[str, Any]
) -> list[Any]:
    cur = await conn.execute(query, params)
    return await cur.fetchall() if cur.description is not None else []


def _cut(conn: Connection, attempt: _Try) -> None:
    """The deadline: shut *conn*'s socket down; the call waiting on it fails at once.

    Only the socket is shut (through a duplicate of its descriptor): the connection stays
    psycopg's to close, so no descriptor is reused under the feet of its wait.
    """
    attempt.cut = True
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


async def _cancel_others() -> None:
    """Cancel every other task of the running loop and wait for them (a clean stop)."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _finish(conn: Connection | None) -> None:
    """Close *conn* now, outside any event loop (libpq's ``PQfinish``)."""
    if conn is not None and not conn.closed:
        conn.pgconn.finish()


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
