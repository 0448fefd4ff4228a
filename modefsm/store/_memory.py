"""The in-memory session store: the :class:`~modefsm.store.SessionStore` contract, no files.

For tests, benchmarks and hosts that need no durability: records are sequenced, chained
and guarded exactly as a shared store does (a record whose ``seq`` is not the session's
next is refused with :class:`~modefsm.store.SessionMoved`), and restore points and
``session/list`` pages are answered from memory. Nothing survives the process; one
process only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from modefsm.errors import LogError
from modefsm.log import (
    EVENT_DECIDED,
    RECORD_EVENTS,
    exact_digest,
    previous_of,
    record_digest,
)
from modefsm.store._decided import call_key, remember_decision
from modefsm.store._interface import (
    AlreadyDecided,
    ListAfter,
    ListedSession,
    RestorePoint,
    SessionMoved,
)

if TYPE_CHECKING:
    from modefsm.log import DecisionRecord, TransitionRecord
    from modefsm.spec import ModeSpec

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~modefsm.store.SessionStore` held in this process's memory.

    Every line the engine writes (committed records, rejections, diagnostics) is kept in
    :attr:`lines`, in write order, with ``event``, ``prev``, ``session_prev`` and
    ``digest`` as a file store writes them; the memory it takes grows with them.

    Args:
        timeout: the store's :attr:`timeout` in seconds (the engine bounds by it how long
            one session's requests wait for each other); nothing here waits.

    Attributes:
        lines: every line written, oldest first (JSON objects, as in a transition log).

    Example:
        >>> import asyncio
        >>> from modefsm import MemoryStore, ModeEngine, preset
        >>> store = MemoryStore()
        >>> engine = ModeEngine(preset("seed"), store=store)
        >>> _ = engine.new_session("sess_1", cwd="/src")
        >>> _ = asyncio.run(engine.set_mode("sess_1", "architect"))
        >>> store.restore_point("sess_1")[:3]
        ('sess_1', 'architect', 2)
    """

    _session_prev = True
    """Whether the records this store keeps carry ``session_prev``."""
    _decided_kept: int | None = None
    """The most decided ``toolCallId`` values kept per session (``None``: every one)."""

    def __init__(self, *, timeout: float = 1.0) -> None:
        """An empty store."""
        self._timeout = timeout
        self.lines: list[dict[str, Any]] = []
        self._heads: dict[str, _Head | str] = {}  # sessionId -> its point (see _Head)
        self._created: str | None = None  # the mode of a point kept as its digest alone
        self._records: dict[str, list[dict[str, Any]]] = {}
        self._listed: dict[str, tuple[str, str]] = {}  # sessionId -> (cwd, updated_at)
        # sessionId -> call_key(toolCallId) -> outcome
        self._decided: dict[str, dict[bytes, str | None]] = {}
        self._head: str | None = None  # the digest of the last record (the chain's head)
        self._closed = False
        self._chain: Callable[[str, dict[str, Any], bool], str | None] = self._keep
        """Chain and keep (or write) one committed record, its fields given up (and whether
        they are exact: see :meth:`append`): its digest."""

    @property
    def timeout(self) -> float:
        """Seconds one call may wait (see :attr:`SessionStore.timeout`)."""
        return self._timeout

    def _open(self) -> None:
        if self._closed:
            raise LogError("the store is closed")

    def _write(self, event: str, fields: dict[str, Any], exact: bool = False) -> str | None:  # noqa: FBT001, FBT002 - positional: the hot path's call
        """Keep one line; a record (:data:`~modefsm.log.RECORD_EVENTS`) gets its digest."""
        line = {**fields, "event": event}
        digest = None
        if event in RECORD_EVENTS:
            line["prev"] = self._head
            line.pop("digest", None)
            digest = exact_digest(line) if exact else record_digest(line)
            line["digest"] = digest
            self._head = digest
        self.lines.append(line)
        return digest

    def _keep(self, event: str, fields: dict[str, Any], exact: bool) -> str | None:  # noqa: FBT001 - positional: the hot path's call
        """Keep a committed record (*fields*, with its ``session_prev``): its ``digest``.

        *fields* gets ``digest``. This store's :attr:`_chain`.
        """
        digest = self._write(event, fields, exact)
        fields["digest"] = digest
        self._records.setdefault(fields["session_id"], []).append(self.lines[-1])
        return digest

    def append(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None, *, exact: bool = False
    ) -> str:
        """Commit one record; see :meth:`SessionStore.append` (*exact* is taken at its word).

        The guard, then one call that chains and keeps (or writes) the record: *fields*
        gets ``session_prev`` (where the store keeps it) and ``digest``.

        Raises:
            SessionMoved: ``fields["seq"]`` is not the session's next; nothing was kept.
            LogError: the store is closed, or the record could not be written.
        """
        if self._closed:
            self._open()
        session_id = fields["session_id"]
        seq = fields["seq"]
        heads = self._heads
        held = heads.get(session_id)
        if held is None and seq == 1:  # a creation
            if self._session_prev:
                fields["session_prev"] = None
            digest = self._chain(event, fields, exact)
            assert digest is not None  # noqa: S101 - a committed record is chained
            mode = fields["to_mode"]
            config = fields.get("config")
            if fields["origin"] != "new":  # a creation (origin new) has no previous mode
                previous = previous_of(fields["origin"], fields["from_mode"], event)[0]
                heads[session_id] = (mode, 1, previous, digest, _pairs(config))
            elif config is None and mode == (self._created or mode):
                self._created = mode
                heads[session_id] = digest  # the point (mode, 1, None, digest, None)
            else:
                heads[session_id] = (mode, 1, None, digest, _pairs(config))
            cwd = fields.get("cwd")
            if cwd is not None:
                self._listed[session_id] = (cwd, fields["timestamp"])
            return digest
        return self._follow(event, fields, held, head, exact)

    def _follow(
        self,
        event: str,
        fields: dict[str, Any],
        held: _Head | str | None,
        head: RestorePoint | None,
        exact: bool,  # noqa: FBT001 - positional: as the hot path's
    ) -> str:
        """:meth:`append` of a record that is not a creation."""
        session_id = fields["session_id"]
        seq = fields["seq"]
        point: tuple[Any, ...]
        if held is not None:
            point = self._held(held)
            if seq != point[1] + 1:
                raise SessionMoved(self._point(session_id, held))
        elif head is not None:
            point = head[1:]  # a session restored from elsewhere: its head is the caller's
            if seq != point[1] + 1:
                raise SessionMoved(head)
        else:
            raise SessionMoved(RestorePoint(session_id, fields["to_mode"], seq - 1))
        if self._session_prev:
            fields["session_prev"] = point[3]
        digest = self._chain(event, fields, exact)
        assert digest is not None  # noqa: S101 - a committed record is chained
        previous, keep = previous_of(fields["origin"], fields["from_mode"], event)
        if keep:
            previous = point[2]
        self._heads[session_id] = (
            fields["to_mode"],
            seq,
            previous,
            digest,
            _pairs(fields.get("config")),
        )
        cwd = self._listed.get(session_id, (None,))[0] if self._listed else None
        if cwd is not None:
            self._listed[session_id] = (cwd, fields["timestamp"])
        return digest

    def _held(self, held: _Head | str) -> _Head:
        """A point as :data:`_Head` (one kept as its creation's digest alone, unfolded)."""
        if held.__class__ is str:
            return (self._created, 1, None, held, None)  # type: ignore[return-value]
        return held  # type: ignore[return-value]

    def _point(self, session_id: str, held: _Head | str) -> RestorePoint:
        """The :class:`RestorePoint` of *session_id* from its *held* point."""
        mode, seq, previous, digest, config = self._held(held)
        return RestorePoint(session_id, mode, seq, previous, digest, _values(config))

    def _forget(self, session_id: str) -> None:
        """Drop the point and the ``session/list`` entry of *session_id*."""
        self._heads.pop(session_id, None)
        self._decided.pop(session_id, None)
        if self._listed:
            self._listed.pop(session_id, None)

    async def append_async(
        self,
        event: str,
        fields: dict[str, Any],
        head: RestorePoint | None,
        *,
        deadline: float | None = None,  # noqa: ARG002 - nothing here waits
        exact: bool = False,
    ) -> str:
        """:meth:`append` (nothing to wait for)."""
        return self.append(event, fields, head, exact=exact)

    def note(self, event: str, fields: dict[str, Any], head: RestorePoint | None = None) -> None:
        """Keep a rejection or a diagnostic; see :meth:`SessionStore.note`.

        Raises:
            SessionMoved: the session has moved past *head* (nothing kept).
            LogError: the store is closed.
        """
        self._open()
        if head is not None:
            held = self._heads.get(head.session_id)
            if held is not None and self._held(held)[1] > head.seq:
                raise SessionMoved(self._point(head.session_id, held))
        self._write(event, fields)
        if event == EVENT_DECIDED:
            remember_decision(self._decided, fields, self._decided_kept)

    async def note_async(
        self, event: str, fields: dict[str, Any], head: RestorePoint | None = None
    ) -> None:
        """:meth:`note` (nothing to wait for)."""
        self.note(event, fields, head)

    async def note_once_async(self, fields: dict[str, Any], head: RestorePoint) -> None:
        """:meth:`note` of a decision unless its call has one here (one process: one step).

        See :meth:`DecidesOnce.note_once_async <modefsm.store.DecidesOnce.note_once_async>`.

        Raises:
            AlreadyDecided: this store holds a decision of ``fields["tool_call_id"]``.
            SessionMoved, LogError: as :meth:`note`.
        """
        self._open()
        session_id, call_id = fields["session_id"], fields["tool_call_id"]
        calls = self._decided.get(session_id, {})
        key = call_key(call_id)
        if key in calls:
            raise AlreadyDecided(session_id, call_id, calls[key])
        self.note(EVENT_DECIDED, fields, head)

    def restore_point(self, session_id: str) -> RestorePoint | None:
        """The session's latest committed point, or ``None`` if it has none here.

        Raises:
            LogError: the store is closed.
        """
        self._open()
        held = self._heads.get(session_id)
        return None if held is None else self._point(session_id, held)

    async def restore_point_async(
        self,
        session_id: str,
        *,
        deadline: float | None = None,  # noqa: ARG002 - nothing here waits
    ) -> RestorePoint | None:
        """:meth:`restore_point` (nothing to wait for)."""
        return self.restore_point(session_id)

    def history(self, session_id: str) -> Iterator[TransitionRecord]:
        """The session's committed records, ``seq`` 1 to n."""
        from modefsm.log import TransitionRecord  # noqa: PLC0415 - the model, when read

        for line in self._records.get(session_id, ()):
            yield TransitionRecord.model_validate(line)

    def decisions(self, session_id: str) -> Iterator[DecisionRecord]:
        """The ``modefsm.tool_decided`` records of *session_id*, in order."""
        from modefsm.log import DecisionRecord  # noqa: PLC0415 - the model, when read

        for line in self.lines:
            if line["event"] == EVENT_DECIDED and line["session_id"] == session_id:
                yield DecisionRecord.model_validate(line)

    def grants_seen(self, session_id: str) -> list[DecisionRecord]:
        """``[]``: one process writes this store, and its engine remembers its own grants."""
        del session_id
        return []

    def describe(self, spec: ModeSpec) -> None:
        """Nothing: the lines name their spec (``spec``, ``spec_hash``); no header is kept."""
        del spec

    def release(self, session_id: str) -> None:
        """Nothing: this store keeps every session (its history is its purpose)."""
        del session_id

    async def reopen_async(self) -> None:
        """Nothing: no file to follow."""

    def list_sessions(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """One page of the sessions created with a ``cwd``; see :meth:`SessionStore.list_sessions`.

        Raises:
            LogError: the store is closed.
        """
        self._open()
        listed = [
            ListedSession(session_id, at_cwd, updated_at)
            for session_id, (at_cwd, updated_at) in self._listed.items()
            if cwd is None or at_cwd == cwd
        ]
        if after is not None:
            listed = [
                s
                for s in listed
                if s.updated_at < after[0] or (s.updated_at == after[0] and s.session_id > after[1])
            ]
        listed.sort(key=lambda s: s.session_id)
        listed.sort(key=lambda s: s.updated_at, reverse=True)
        return listed[: max(limit, 0)]

    async def list_sessions_async(
        self, cwd: str | None = None, after: ListAfter = None, limit: int = 100
    ) -> list[ListedSession]:
        """:meth:`list_sessions` (nothing to wait for)."""
        return self.list_sessions(cwd, after, limit)

    def close(self) -> None:
        """Refuse later calls (idempotent); what was kept stays readable in :attr:`lines`."""
        self._closed = True


_Head = tuple[str, int, str | None, str | None, tuple[tuple[str, str | bool], ...] | None]
"""A session's point as the store keeps it: a :class:`~modefsm.store.RestorePoint`'s fields
after ``session_id``, as a plain tuple of plain values (the config values as ``(configId,
value)`` pairs), so that the collector stops tracking it; the point is built only when asked
for. A point ``(mode, 1, None, digest, None)`` of a creation to the mode of the store's
first creation is kept as its ``digest`` alone."""


def _pairs(config: dict[str, str | bool] | None) -> tuple[tuple[str, str | bool], ...] | None:
    """A record's ``config`` as the point keeps it, or ``None``."""
    return None if config is None else tuple(config.items())


def _values(pairs: tuple[tuple[str, str | bool], ...] | None) -> dict[str, str | bool] | None:
    """A point's config values as :attr:`RestorePoint.config` has them (a new dict)."""
    return None if pairs is None else dict(pairs)
