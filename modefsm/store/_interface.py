"""The session store every process of an agent shares: one interface, several backends.

A store sequences the committed records (``modefsm.session_created``,
``modefsm.mode_changed``, ``modefsm.config_changed``) of every session across processes and
answers where a session stands. The engine appends each record through
:meth:`SessionStore.append` *before* the change becomes visible (write-ahead); the store
refuses a record whose ``seq`` is not the session's next (another process moved the session
first: :class:`SessionMoved`).

Backends: :class:`~modefsm.store.FileStore` (one JSON-lines file shared by the processes
of one machine, the ``--log`` path) and ``modefsm.store._postgres.PgStore``
(``postgresql://...``, for processes on several hosts). :func:`~modefsm.store.open_store`
picks one. This module is the seam the engine writes and restores through: it imports no
backend (and no SQLite, no log reader).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from modefsm.errors import LogError, ModefsmError

if TYPE_CHECKING:  # a model: loaded by those who read history, not by every writer
    from modefsm.log import DecisionRecord, TransitionRecord
    from modefsm.spec import ModeSpec

__all__ = [
    "EXPORT_EVENT",
    "AlreadyDecided",
    "DecidesOnce",
    "ListAfter",
    "ListedSession",
    "RestorePoint",
    "SessionMoved",
    "SessionStore",
    "StoreBusy",
    "StoreInDoubt",
]


EXPORT_EVENT = "modefsm.store_export"
"""The event of an export's first line (not a record): ``{"event": ..., "store": ...,
"schema": N}``."""


class RestorePoint(NamedTuple):
    """Where a session stood at its last committed record.

    Attributes:
        session_id: ACP ``sessionId``.
        mode: the ``to_mode`` of its last ``session_created``/``mode_changed`` record.
        seq: that record's ``seq``.
        previous: the ``from_mode`` of its last client or switch change, which
            ``$previous`` switch options return to (``None`` if there was none).
        digest: the ``digest`` of that record (the head of the session's chain, which
            the session's next record names as ``session_prev``), or ``None`` when unknown.
        config: the ``config`` of that record: the session's host config option values
            by ``configId`` (``None``: none was set).
    """

    session_id: str
    mode: str
    seq: int
    previous: str | None = None
    digest: str | None = None
    config: dict[str, str | bool] | None = None


class ListedSession(NamedTuple):
    """A session as ``session/list`` reports it.

    Attributes:
        session_id: ACP ``sessionId``.
        cwd: ACP ``cwd``: the one its ``session/new`` gave (its ``session_created`` record).
        updated_at: the ``timestamp`` of its last committed record (UTC, ISO 8601 with
            ``Z``), or ``""`` when not known (a live session listed from memory).
    """

    session_id: str
    cwd: str
    updated_at: str


ListAfter = tuple[str, str] | None
"""Where a page of ``session/list`` starts: after ``(updated_at, session_id)`` of the
previous page's last session (sessions are listed newest ``updated_at`` first, then by
``session_id``), or ``None`` for the first page."""


class SessionMoved(ModefsmError):  # noqa: N818 - the shared interface names it
    """Another process moved the session first; nothing was written.

    Attributes:
        current: where the session stands now (its latest committed record).
    """

    def __init__(self, current: RestorePoint) -> None:
        """Build the error for the session now at *current*."""
        self.current = current
        super().__init__(
            f"sessionId {current.session_id} was changed by another process "
            f"(now in mode {current.mode!r} at seq {current.seq})"
        )


class AlreadyDecided(ModefsmError):  # noqa: N818 - named like SessionMoved
    """The session already has a decision record for the tool call; nothing was written.

    Raised by :meth:`DecidesOnce.note_once_async`.

    Attributes:
        session_id: ACP ``sessionId``.
        tool_call_id: ACP ``toolCallId`` of the call.
        outcome: the ``outcome`` of the call's last decision record the store found
            (``abandoned``, an ``optionId`` kind, ``cancelled``, ``granted``, or ``None``
            for an ``allow`` or a ``deny``).
    """

    def __init__(self, session_id: str, tool_call_id: str, outcome: str | None) -> None:
        """Build the error for the call *tool_call_id* of *session_id*, decided *outcome*."""
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.outcome = outcome
        super().__init__(
            f"toolCallId {tool_call_id!r} of sessionId {session_id} already has a decision"
        )


class StoreBusy(LogError):  # noqa: N818 - the shared interface names it
    """A bounded wait for another process (a lock, a busy database) ran out; nothing written.

    Answered as JSON-RPC ``-32603`` for that one request; a later request may succeed.
    """


class StoreInDoubt(LogError):  # noqa: N818 - named like StoreBusy
    """A record's commit was sent and not answered in time: whether it was written is unknown.

    Answered as JSON-RPC ``-32603``. The engine marks the session: its next use reads the
    session's point back from the store before acting (the record is there or not).

    Attributes:
        session_id: ACP ``sessionId`` of the record.
        seq: the record's ``seq``.
    """

    def __init__(self, message: str, session_id: str, seq: int) -> None:
        """Build the error for the record *seq* of *session_id*."""
        self.session_id = session_id
        self.seq = seq
        super().__init__(message)


class SessionStore(Protocol):
    """What the engine needs from a store (see the module docstring).

    The plain methods block until the store answers; the ``*_async`` coroutines are what
    the engine's coroutines (``await engine.set_mode(...)``, ...) use, so that a server's
    event loop keeps serving while the store answers. Both are bounded in time.

    A structural protocol, and every store implements every member: a host's store
    needs no base class, and ``mypy`` reports a missing member where the store is given
    to the engine (a default inherited from a base class would instead drop, say, a
    store's decisions without a word). A store with nothing to do for a member gives its
    neutral answer: :meth:`describe`, :meth:`release` and :meth:`reopen_async` do
    nothing, :meth:`grants_seen` returns ``[]``, :meth:`decisions` yields nothing
    (:class:`~modefsm.store.MemoryStore` shows each).
    """

    @property
    def timeout(self) -> float:
        """Seconds one call may wait for the store (its lock or its database).

        The engine also bounds by it how long one session's requests wait for each other.
        """
        ...  # pragma: no cover

    def append(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None, *, exact: bool = False
    ) -> str:
        """Write-ahead one committed record; return its ``digest`` once durable.

        Args:
            event: ``modefsm.session_created``, ``modefsm.mode_changed`` or
                ``modefsm.config_changed``.
            fields: the record's fields (see :class:`~modefsm.log.TransitionRecord`);
                ``fields["seq"]`` must be ``head.seq + 1`` (``1`` when *head* is ``None``).
                The store adds ``prev``, ``session_prev`` and ``digest``.
            head: where the caller believes the session stands (``None``: a new session).
            exact: the caller's word that *fields* hold only
                :class:`~modefsm.log.TransitionRecord` fields (no key of a host's, no
                ``level``, no ``digest``): a store may then take the digest of them all
                (:func:`~modefsm.log.exact_digest`) without looking for keys to leave out,
                or ignore it. The record's digest and bytes are the same either way. The
                engine gives it for its creation records.

        Raises:
            SessionMoved: the session is not at *head* any more; nothing was written.
            StoreBusy: a bounded wait ran out; nothing was written.
            LogError: the write failed; nothing was committed.
        """
        ...  # pragma: no cover

    async def append_async(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        deadline: float | None = None,
        exact: bool = False,
    ) -> str:
        """:meth:`append`, awaited (the event loop serves other work meanwhile).

        *deadline* (the event loop's ``time()``), when given, is when the request this
        call is part of must end: the call's waits end by then too (the store's own
        bounds still apply).

        Raises:
            SessionMoved, StoreBusy, LogError: as :meth:`append`.
            StoreInDoubt: the commit was sent and not answered in time (whether the record
                was written is unknown).
        """
        ...  # pragma: no cover

    def note(self, event: str, fields: dict[str, Any], head: RestorePoint | None = None) -> None:
        """Write a decision, a rejection or a diagnostic; not sequenced.

        A tool call decision (``modefsm.tool_decided``, :class:`~modefsm.log.DecisionRecord`;
        *head* is the point it was decided against, its ``mode_seq``) is durable when this
        returns, and written only if the session has not moved past *head*: the host runs
        the tool only after. A store that other processes share must keep decisions where
        they all read them (:meth:`decisions`, :meth:`grants_seen`).

        Args:
            event: the record's event (``modefsm.tool_decided``,
                ``modefsm.change_rejected``, or a diagnostic).
            fields: its fields.
            head: where the writer believed the session stood when it decided (its
                ``seq`` counts). A decision is refused when the session has moved past it;
                a store that sees every record at the moment it writes (the file store,
                under its lock) refuses a rejection's line then too, so that a rejection
                always names the mode the session was in.

        Raises:
            SessionMoved: the session moved past *head*; nothing was written.
            StoreBusy, LogError: as :meth:`append`.
        """
        ...  # pragma: no cover

    async def note_async(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None = None
    ) -> None:
        """:meth:`note`, awaited: a wait for another process (a lock) leaves the loop free.

        Raises:
            SessionMoved, StoreBusy, LogError: as :meth:`note`.
        """
        ...  # pragma: no cover

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's latest committed point (never stale), or ``None`` if never seen.

        Raises:
            StoreBusy, LogError: the point cannot be read now (only this lookup fails).
        """
        ...  # pragma: no cover

    async def restore_point_async(
        self, session_id: str, *, deadline: float | None = None
    ) -> RestorePoint | None:
        """:meth:`restore_point`, awaited: how a live session catches up with other processes.

        Cheap when nothing moved where the store can tell (the file store compares the
        file's size with what it has read); one indexed query for PostgreSQL. *deadline*:
        as for :meth:`append_async`.

        Raises:
            StoreBusy, LogError: as :meth:`restore_point`.
        """
        ...  # pragma: no cover

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The session's committed records, ``seq`` 1 to n."""
        ...  # pragma: no cover

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """One page of every session the store holds (every process's), for ``session/list``.

        Newest last activity first, then by ``sessionId``; only sessions created with a
        ``cwd``. Closed sessions are listed too: they can still be loaded or resumed.

        Args:
            cwd: only sessions with exactly this ``cwd`` (filtered by the backend).
            after: where the page starts (:data:`~modefsm.store._restore.ListAfter`).
            limit: the most sessions returned.

        Raises:
            StoreBusy, LogError: the store cannot be read now (only this call fails).
        """
        ...  # pragma: no cover

    async def list_sessions_async(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """:meth:`list_sessions`, awaited (what ``session/list`` uses).

        Raises:
            StoreBusy, LogError: as :meth:`list_sessions`.
        """
        ...  # pragma: no cover

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        """The session's ``modefsm.tool_decided`` records, oldest first (every process's).

        What a restored session's ``persist = true`` grants are rebuilt from (the engine
        calls it, from a worker thread, on restore when some mode's grants persist). A
        store that keeps no decisions yields none: grants then end with the process.

        Raises:
            StoreBusy, LogError: the store cannot be read now (the restore fails).
        """
        ...  # pragma: no cover

    def grants_seen(self, session_id: str) -> list[DecisionRecord]:
        """The ``allow_always`` decisions of *session_id* that the store read since the last call.

        Collected as the session caught up (:meth:`restore_point_async`), so that a grant
        another process made is honoured here; only for sessions this store follows
        (created, restored or caught up here); without I/O (the engine calls it with the
        session's turn held). A store one process owns returns ``[]``.
        """
        ...  # pragma: no cover

    def describe(self, spec: ModeSpec) -> None:
        """Name *spec* where the records go (a log's header), once per spec; or nothing.

        Called by the engine when it is made with this store.

        Raises:
            StoreBusy, LogError: the header cannot be written.
        """
        ...  # pragma: no cover

    def release(self, session_id: str) -> None:
        """Forget what the store keeps for *session_id* in this process (the engine closed it).

        Keeps the memory a store holds per session bounded by the live sessions; the
        records stay in the store.
        """
        ...  # pragma: no cover

    async def reopen_async(self) -> None:
        """Follow a rotation of the store's files (``modefsm serve`` on ``SIGHUP``), or nothing.

        Raises:
            StoreBusy, LogError: the new file cannot be opened (the old one stays in use).
        """
        ...  # pragma: no cover

    def close(self) -> None:
        """Release the store's files or connections (idempotent)."""
        ...  # pragma: no cover


@runtime_checkable
class DecidesOnce(Protocol):
    """A store that writes a tool call's decision only if the call has none yet, in one step.

    What settles an ask a process that ended left open (``outcome`` ``abandoned``) exactly
    once when several processes restore the session at the same moment: the check and the
    write are one step under the store's own guard (the file's lock, the database's
    transaction), so of two processes settling the call one writes and the other is
    refused. Every store of this package implements it. A host's own store may; one that
    does not still works with the engine, which then checks
    :meth:`SessionStore.decisions` and writes with :meth:`SessionStore.note`: two
    processes restoring the session at the same moment may then both settle the call
    (``modefsm replay --verify`` reports it as ``abandoned twice``).
    """

    async def note_once_async(self, fields: dict[str, Any], head: RestorePoint) -> None:
        """Write the ``modefsm.tool_decided`` record *fields* unless its call has a decision.

        As :meth:`SessionStore.note_async` with *head*, and refused when the session has a
        decision record for ``fields["tool_call_id"]`` already, any process's. The caller
        holds the session: it called :meth:`SessionStore.restore_point_async` (which
        *head* came from) and read :meth:`SessionStore.decisions` after that; a store may
        rely on both, and check under its guard only the decisions written since it began
        following the session (its own, and those it read of other processes). The
        refusal is exact however many decisions the session has: a store that remembers
        the decided calls in a bounded memory (:class:`~modefsm.store.FileStore`: the last
        :data:`~modefsm.store.DECIDED_KEPT` per session) looks the call up in the store
        when it forgot some, and a ``toolCallId`` of any length is remembered in a bounded
        size (a digest).

        Args:
            fields: the record's fields (:class:`~modefsm.log.DecisionRecord`: its
                ``session_id``, ``tool_call_id`` and ``outcome`` are read).
            head: where the session stood when the call was decided (its ``mode_seq``).

        Raises:
            AlreadyDecided: the call has a decision record; nothing was written.
            SessionMoved: the session moved past *head*; nothing was written.
            StoreBusy, StoreInDoubt, LogError: as :meth:`SessionStore.note_async`.
        """
        ...  # pragma: no cover
