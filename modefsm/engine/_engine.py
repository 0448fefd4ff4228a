"""The mode engine: every session's mode, one transition function for every origin.

Data flows one way: a request is validated against the spec, fired through the
transitions machine, written through the store *before* the state changes
(write-ahead), committed in memory, and its :class:`~modefsm.engine.ModeChanged` event is
queued in commit order; :meth:`ModeEngine.flush` then sends them through the host's sink. The async
methods (:meth:`ModeEngine.set_mode`, ...) do both, so a request's notifications have
left before its response.

Concurrency: the engine belongs to one asyncio event loop (the SDK runs each request in
its own task). Without a :class:`~modefsm.store.SessionStore` a change is synchronous
from validation to commit, so changes never interleave. With a store, the coroutines
(:meth:`ModeEngine.set_mode`, :meth:`ModeEngine.change_async`, ...) validate and run the
hooks, then *await* the store's write (the loop serves other sessions meanwhile), then
commit; the changes of one session take turns (a lock made when a session is first
waited for and dropped when no one waits), those of different sessions do not wait for
each other. The synchronous methods remain for a host without a loop: with a store they
block until it answers. The notification queue is drained under one ``asyncio.Lock`` so
notifications leave in commit order. Nothing awaits the client while a change is in
progress.

An agent's ``switch_mode`` is one offer settled once (:class:`~modefsm.engine.SwitchOffers`,
in ``_offers.py``): it goes through the same pipeline, in the session's turn.

Several processes sharing a store: before acting on a session (a prompt turn, an answer
that reports the mode), call :meth:`ModeEngine.refresh` (a switch offer does it itself):
it takes the mode other processes committed and tells the client. A change checks the session's
point as it writes; a request refused for the mode it asks for, or that changes nothing,
is decided on the committed mode (the session is read back first).

Example:
    >>> import asyncio
    >>> from modefsm import ModeEngine, preset
    >>> sent = []
    >>> async def sink(session_id, event):
    ...     sent.append((session_id, event.mode_id, event.seq))
    >>> engine = ModeEngine(preset("seed"), sink=sink)
    >>> session = engine.new_session("sess_1")
    >>> change = asyncio.run(engine.set_mode("sess_1", "architect"))
    >>> (change.seq, change.from_mode, change.to_mode, session.state)
    (2, 'ask', 'architect', 'architect')
    >>> sent
    [('sess_1', 'architect', 2)]
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from modefsm.engine._backlog import Backlog
from modefsm.engine._events import ConfigChanged, ModeChange, ModeChanged
from modefsm.engine._machine import ModeMachine, state_name
from modefsm.engine._offers import SwitchOffers
from modefsm.engine._options import HostOption, HostOptions, OptionChange
from modefsm.engine._rows import (
    CONFIG,
    CWD,
    DIGEST,
    DOUBT,
    MODE,
    PREVIOUS,
    SEQ,
    SERIAL,
    Config,
    Row,
    Session,
    commit_row,
    config_dict,
    config_pairs,
    is_live,
    put_row,
    row_of,
    with_doubt,
)
from modefsm.engine._tools import ToolCalls
from modefsm.engine._views import ModeView, OptionView, build_views
from modefsm.errors import (
    INVALID_PARAMS,
    ChangeRefused,
    HookError,
    InvalidParamsError,
    InvalidValueError,
    ModefsmError,
    SessionExistsError,
    TransitionNotAllowedError,
    UnknownConfigOptionError,
    UnknownModeError,
    UnknownSessionError,
)
from modefsm.log import (
    EVENT_CHANGED,
    EVENT_CONFIG,
    EVENT_CREATED,
    EVENT_DROPPED,
    EVENT_REJECTED,
    Origin,
    RejectReason,
    utc_timestamp,
)
from modefsm.spec import ORIGIN_KINDS, TriggerKind
from modefsm.store import RestorePoint, SessionMoved, SessionStore, StoreBusy, StoreInDoubt

if TYPE_CHECKING:  # the spec's models: an engine is built with one, never builds them
    from modefsm.log import DecisionRecord
    from modefsm.spec import ModeSpec

__all__ = [
    "ModeChange",  # defined in _events, named here too for the modules that import it from here
    "ModeEngine",
    "NotificationSink",
    "Session",  # defined in _rows, named here too
    "notification_kind",
]

NotificationSink = Callable[[str, Any], Awaitable[None]]
"""``await sink(session_id, event)``: a :class:`~modefsm.engine.ModeChanged`, or a host's
own update given to :meth:`ModeEngine.notify`, as given (see
:func:`modefsm.protocol.v1.session_updates` for their ACP v1 ``session/update`` models)."""

_KIND = ORIGIN_KINDS


ChangeHook = Callable[[ModeChange], None]


class ModeEngine(SwitchOffers, ToolCalls):
    """Every session's mode under one spec: sessions, changes, and the tool calls modes decide.

    An agent's switch is offered and settled through the methods of
    :class:`~modefsm.engine.SwitchOffers` (``offer_switch``, ``settle_switch``); the tool-call
    methods (:meth:`decide`, :meth:`decide_async`, :meth:`settle`, :meth:`outcome_of`,
    :meth:`open_asks`, :meth:`prompt_for`) are described in :mod:`modefsm.engine._tools`.

    Args:
        spec: the modes and policy.
        store: where records are written and sessions restored from (the one persistence
            seam): a :class:`~modefsm.store.FileStore`, a PostgreSQL store
            (:func:`~modefsm.store.open_store`) or a :class:`~modefsm.store.MemoryStore`.
            A :class:`~modefsm.store.LogStore` writes the records to a transition log
            only (a stream, a host's logger). ``None``: no record is written.
        sink: ``await sink(session_id, event)`` for each notification: a
            :class:`~modefsm.engine.ModeChanged` per change, or a host's own update given
            to :meth:`notify`, in order (:func:`modefsm.protocol.v1.session_updates`
            renders them as ACP v1 ``session/update`` models); ``None`` sends none.
        before_change: host callbacks run before a change commits; one that raises cancels
            the change and nothing is changed: a veto
            (:class:`~modefsm.errors.ChangeRefused`, or an
            :class:`~modefsm.errors.InvalidParamsError`) reaches the client with its code
            and message, anything else as a :class:`~modefsm.errors.HookError`.
        after_change: host callbacks run after a change committed; one that raises is logged
            and does not undo the change.
        config_options: the host's own config options (a model picker, ...), declared
            once: every complete ``configOptions`` list shows them after the mode option,
            and :meth:`set_config_option` sets them (checked, vetoed by their
            ``on_change``, logged as ``modefsm.config_changed`` records, announced,
            restored with the session).

    Raises:
        ValueError: two *config_options* share an ``id``, or one has the mode option's.
    """

    def __init__(
        self,
        spec: ModeSpec,
        *,
        store: SessionStore | None = None,
        sink: NotificationSink | None = None,
        before_change: Iterable[ChangeHook] = (),
        after_change: Iterable[ChangeHook] = (),
        config_options: Iterable[HostOption] = (),
    ) -> None:
        """Compile *spec* into a machine and prepare its ACP views."""
        self.spec = spec
        self.store = store
        self._digest: str | None = None  # the digest of the record just written ahead
        self._written: str | None = None  # the digest of a record the store has committed
        self.sink = sink
        self.before_change: list[ChangeHook] = list(before_change)
        self.after_change: list[ChangeHook] = list(after_change)
        self.host_options = HostOptions(config_options, mode_option_id=spec.config_option_id)
        """The host's config options (see *config_options*)."""
        before = self._append if store is not None else _write_nothing
        self.machine = ModeMachine(spec, before=before, after=self._commit)
        self.views: Mapping[str, ModeView] = build_views(spec)
        self._sessions: dict[str, Row] = {}  # sessionId -> its row (see _rows)
        self._serial = 0  # the serial of the last session made live here
        self._turns: dict[str, _Turn] = {}
        self._outbox: deque[tuple[str, object]] = deque()
        self._backlog = Backlog()  # records written after their callback returned
        self._flush_lock = asyncio.Lock()
        self._initial = spec.initial
        self._spec_name = spec.name
        self._spec_hash = spec.content_hash
        self._spec_fields = {"spec": spec.name, "spec_hash": spec.content_hash}
        if store is not None:  # the log's header names the spec
            store.describe(spec)
        self.protocol: int | None = None
        """The ACP protocol version of the client, written into records when not ``None``."""
        self._init_tools()

    # -- sessions ------------------------------------------------------------------------

    def new_session(
        self,
        session_id: str | None = None,
        *,
        request_id: str | int | None = None,
        cwd: str | None = None,
    ) -> Session:
        """Start a session in the spec's initial mode and log its creation (``seq`` 1).

        With a store this blocks until the store answers (see
        :meth:`new_session_async`).

        Args:
            session_id: ACP ``sessionId``; a fresh ``sess_<hex>`` id when ``None``.
            request_id: the ``session/new`` request id, for the record.
            cwd: the ACP ``cwd`` of ``session/new``, kept in the creation record (and on
                the session) for ``session/list``.

        Raises:
            SessionExistsError: *session_id* is in use.
            LogError: the creation record cannot be written (no session is created).
        """
        fields = self._creating(session_id, request_id, cwd)
        digest = None
        store = self.store
        if store is not None:
            try:
                digest = store.append(EVENT_CREATED, fields, None, exact=True)
            except SessionMoved:  # another process created this sessionId first
                raise SessionExistsError(fields["session_id"]) from None
        return self._created(fields["session_id"], digest, cwd)

    async def new_session_async(
        self,
        session_id: str | None = None,
        *,
        request_id: str | int | None = None,
        cwd: str | None = None,
    ) -> Session:
        """:meth:`new_session`, awaiting the store's write (the loop serves others meanwhile).

        Raises:
            SessionExistsError, LogError: as :meth:`new_session`.
        """
        if self.store is None:
            return self.new_session(session_id, request_id=request_id, cwd=cwd)
        fields = self._creating(session_id, request_id, cwd)
        try:
            digest = await self.store.append_async(EVENT_CREATED, fields, None, exact=True)
        except SessionMoved:
            raise SessionExistsError(fields["session_id"]) from None
        return self._created(fields["session_id"], digest, cwd)

    def _creating(
        self, session_id: str | None, request_id: str | int | None, cwd: str | None
    ) -> dict[str, Any]:
        """The fields of a new session's creation record (its ``session_id`` chosen).

        The record is built in place, in the key order of :meth:`_fields`: this is the
        create path, which the sessions benchmark holds against a hand-written handler.
        Its keys are all record fields: the store is told so (``exact``).
        """
        session_id = session_id or f"sess_{uuid.uuid4().hex}"
        if session_id in self._sessions:
            raise SessionExistsError(session_id)
        initial = self._initial
        fields: dict[str, Any] = {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "seq": 1,
            "from_mode": None,
            "to_mode": initial,
            "origin": "new",
        }
        if request_id is not None:
            fields["request_id"] = request_id
        if self.protocol is not None:
            fields["protocol"] = self.protocol
        fields["spec"] = self._spec_name
        fields["spec_hash"] = self._spec_hash
        if cwd is not None:
            fields["cwd"] = cwd
        return fields

    def _created(self, session_id: str, digest: str | None, cwd: str | None) -> Session:
        """Make the session whose creation record is written live: its row, and a view."""
        self._serial = serial = self._serial + 1
        row: Row = (self._initial, 1, None, digest, cwd, None, False, serial)
        rows = self._sessions
        rows[session_id] = row
        return Session(session_id, rows, row)

    def _view(self, session_id: str) -> Session | None:
        """The view of the live session *session_id*, or ``None``."""
        row = self._sessions.get(session_id)
        return None if row is None else Session(session_id, self._sessions, row)

    def get(self, session_id: str) -> Session:
        """Return the live session *session_id*.

        Raises:
            UnknownSessionError: no such session.
        """
        row = self._sessions.get(session_id)
        if row is None:
            raise UnknownSessionError(session_id)
        return Session(session_id, self._sessions, row)

    def __contains__(self, session_id: object) -> bool:
        """Whether *session_id* is a live session."""
        return session_id in self._sessions

    def __len__(self) -> int:
        """The number of live sessions."""
        return len(self._sessions)

    def live_sessions(self) -> Iterator[Session]:
        """The live sessions, in the order they became live."""
        rows = self._sessions
        return iter([Session(session_id, rows, row) for session_id, row in rows.items()])

    def close_session(self, session_id: str) -> None:
        """Forget session *session_id*; later changes to it raise ``UnknownSessionError``.

        O(1), plus one record per open ask of a tool call: each is cancelled (see
        :mod:`modefsm.engine._tools`), written before this returns, blocking while the
        store waits for its lock; on an event loop use :meth:`close_session_async`.

        Raises:
            UnknownSessionError: no such session.
        """
        session = self.get(session_id)
        if session_id in self._tools:
            self._tools_closed(session)
        self._drop(session_id)

    async def close_session_async(self, session_id: str) -> None:
        """:meth:`close_session`, its records awaited: the event loop runs while they wait.

        Each open ask of a tool call is cancelled and its record written (durable) before
        the session is forgotten and this returns; an ask opened meanwhile is cancelled
        too. A record that cannot be written is logged as a warning, and the ask ends
        ``cancelled`` all the same.

        Raises:
            UnknownSessionError: no such session.
        """
        session = self.get(session_id)
        while session_id in self._tools:
            await self._tools_closed_async(session)
            if not is_live(session):
                return  # another close ended it meanwhile
        self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        """Forget the live session *session_id* (its asks already closed)."""
        self._granting.discard(session_id)
        del self._sessions[session_id]
        if self.store is not None:
            self.store.release(session_id)

    def restore_session(
        self,
        session_id: str,
        mode_id: str,
        seq: int,
        *,
        previous: str | None = None,
        request_id: str | int | None = None,
        digest: str | None = None,
        config: Mapping[str, object] | None = None,
    ) -> Session:
        """Bring back a session whose last record put it in *mode_id* with number *seq*.

        Used by ``session/load`` and ``session/resume`` after the process restarted. A
        restorable mode comes back as it was, with no record and no notification. A mode
        the spec marks not restorable moves to its fallback through the ``restore``
        trigger (logged, notified). A mode the spec no longer has comes back as the initial
        mode, also logged as a ``restore`` record.

        Args:
            session_id: ACP ``sessionId``.
            mode_id: the ``to_mode`` of the session's last record.
            seq: the ``seq`` of that record.
            previous: the mode before it (the ``from_mode`` of the last change), which
                ``$previous`` switch options return to. It obeys the restore rules too: a
                mode the spec no longer has or marks not restorable is dropped, and
                ``$previous`` options are then not offered until the next change.
            request_id: the load/resume request id, for the record.
            digest: the ``digest`` of that record (the session chain's head), if known.
            config: that record's ``config`` (the host option values set); a value the
                host's options no longer have is dropped (the option shows its default).

        Returns:
            The live session (already live sessions are returned unchanged).

        Raises:
            HookError, LogError: the fallback could not be made; the session stays unknown.
        """
        last = (mode_id, seq, previous, digest, config)
        steps = self._restore_steps(session_id, request_id, last)
        reply: Any = None
        while True:
            try:
                session, context = steps.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]  # the generator's Session
            reply = self._restore_step(session, context)

    async def restore_session_async(
        self,
        session_id: str,
        mode_id: str,
        seq: int,
        *,
        previous: str | None = None,
        request_id: str | int | None = None,
        digest: str | None = None,
        config: Mapping[str, object] | None = None,
    ) -> Session:
        """:meth:`restore_session`, awaiting the store's write of a fallback.

        Raises:
            HookError, LogError: as :meth:`restore_session`.
        """
        if self.store is None:
            return self.restore_session(
                session_id,
                mode_id,
                seq,
                previous=previous,
                request_id=request_id,
                digest=digest,
                config=config,
            )
        last = (mode_id, seq, previous, digest, config)
        steps = self._restore_steps(session_id, request_id, last)
        reply: Any = None
        async with self._turn(session_id) as deadline:
            while True:
                try:
                    session, context = steps.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]  # the generator's Session
                reply = await self._restore_step_async(session, context, deadline)

    def _restore_steps(
        self,
        session_id: str,
        request_id: str | int | None,
        last: tuple[str, int, str | None, str | None, Mapping[str, object] | None],
    ) -> Generator[tuple[Session, ModeChange | None], Any, Session]:
        """The steps of a restore, for :meth:`restore_session` and its async twin to run.

        Yields ``(session, fallback)`` for each I/O step: with a fallback, its write
        (answered with ``None``, or the :class:`SessionMoved` that refused it); with
        ``None``, the read of the session's past decisions (answered with them). Returns the
        live session. *last* is where the session's last record left it: its mode,
        ``seq``, previous mode, ``digest`` and ``config`` (see :meth:`restore_session`).

        Raises:
            StoreBusy: other processes moved the session every time it was tried.
        """
        for _ in range(_RACES):
            live = self._view(session_id)
            if live is not None:
                return live
            session, context = self._restoring(session_id, last, request_id)
            if context is not None:
                moved = yield session, context
                if moved is not None:  # another process wrote the fallback (or more)
                    last = moved.current[1:]
                    continue
            past = yield session, None
            live = self._view(session_id)
            if live is not None:  # pragma: no cover - held by the async turn
                return live
            self._tools_restored(session_id, past)
            self._sessions[session_id] = row_of(session)  # live from now on
            return session
        raise self._busy(session_id)

    def _restore_step(
        self, session: Session, context: ModeChange | None
    ) -> SessionMoved | list[DecisionRecord] | None:
        """Run one step of :meth:`_restore_steps`: fire the fallback, or read past decisions."""
        if context is None:
            return self._past_decisions(session.session_id)
        try:
            if self.spec.has_mode(context.from_mode):
                self._fire(session, "restore", context.to_mode, context)
            else:  # the spec no longer has this mode: no machine state to leave
                self._fire_outside_machine(session, context)
        except SessionMoved as moved:
            return moved
        return None

    async def _restore_step_async(
        self, session: Session, context: ModeChange | None, deadline: float | None
    ) -> SessionMoved | list[DecisionRecord] | None:
        """:meth:`_restore_step`, awaiting the store's write and read."""
        if context is None:
            if not self._persists:
                return []
            return await asyncio.to_thread(self._past_decisions, session.session_id)
        try:
            if self.spec.has_mode(context.from_mode):
                await self._fire_async(session, "restore", context.to_mode, context, deadline)
            else:
                self._run_before_hooks(session, context)
                self._digest = await self._write_async(session, context, deadline)
                firing = _Firing(session, "")  # no machine state: the mode left is gone
                self._commit(firing, context.from_mode, context.to_mode, context)
        except SessionMoved as moved:
            return moved
        return None

    def _restoring(
        self,
        session_id: str,
        last: tuple[str, int, str | None, str | None, Mapping[str, object] | None],
        request_id: str | int | None,
    ) -> tuple[Session, ModeChange | None]:
        """The session as its *last* record left it (not live yet), and the fallback to fire.

        The fallback is ``None`` when the session comes back in the mode it was in.
        """
        mode_id, seq, previous, digest, values = last
        config = config_pairs(self.host_options.restored(values))
        known = self.spec.has_mode(mode_id)
        if previous is not None and not (
            self.spec.has_mode(previous) and self.spec.mode(previous).restorable
        ):
            previous = None  # a non-restorable mode is not carried across a restart
        self._serial = serial = self._serial + 1
        row: Row = (
            mode_id if known else self.spec.initial, seq, previous, digest, None, config, False,
            serial,
        )  # fmt: skip
        session = Session(session_id, self._sessions, row)
        target = self.spec.restore_target(mode_id) if known else self.spec.initial
        if known and target == mode_id:
            return session, None
        return session, ModeChange(session_id, seq + 1, mode_id, target, "restore", request_id)

    # -- changes -------------------------------------------------------------------------

    def change(
        self,
        session_id: str,
        mode_id: object,
        origin: Origin,
        *,
        request_id: str | int | None = None,
        field: str = "modeId",
    ) -> ModeChange | None:
        """Change a session's mode now; queue its notifications (send them with :meth:`flush`).

        This is the one transition function behind every client origin. Setting the
        current mode succeeds and changes nothing.

        Args:
            session_id: ACP ``sessionId``.
            mode_id: the mode asked for (ACP ``modeId`` or the mode option's ``value``).
            origin: ``set_mode`` or ``set_config_option``.
            request_id: the JSON-RPC request id, for the record.
            field: the ACP field *mode_id* came from, for errors.

        Returns:
            The committed change, or ``None`` when *mode_id* is already the current mode.

        With a :attr:`store`, another process may have moved the session since this one
        last saw it: the session then takes the mode that process committed (both
        notifications are queued), and the request is validated and tried again from
        there, at most three times in all (``before_change`` hooks run once per try).

        Raises:
            UnknownSessionError: no such session (nothing is logged).
            UnknownModeError: *mode_id* is not advertised (logged as a rejection).
            TransitionNotAllowedError: the policy forbids it from the current mode (logged).
            HookError: a ``before_change`` hook refused (logged).
            LogError: the record could not be written (nothing changed); a
                :class:`~modefsm.store.StoreBusy` when other processes kept moving the
                session (three lost races) or held the store too long.
        """
        for _ in range(_RACES):
            try:
                return self._change(session_id, mode_id, origin, request_id, field)
            except SessionMoved as moved:
                self._adopt(moved.current)
        raise self._busy(session_id)

    async def change_async(
        self,
        session_id: str,
        mode_id: object,
        origin: Origin,
        *,
        request_id: str | int | None = None,
        field: str = "modeId",
    ) -> ModeChange | None:
        """:meth:`change`, awaiting the store (what a server uses; see the module docstring).

        The session's changes take turns; the store's write is awaited, so the event loop
        serves other sessions (and ``initialize``) while the store answers, and the
        change is committed only once the store has it. A session whose last write was
        left in doubt (:class:`~modefsm.store.StoreInDoubt`) is read back first.

        Raises:
            UnknownSessionError: as :meth:`change`.
            UnknownModeError: as :meth:`change`.
            TransitionNotAllowedError: as :meth:`change`.
            HookError: as :meth:`change`.
            LogError: as :meth:`change`.
            StoreInDoubt: the store did not answer the commit in time (the session is
                then in doubt).
        """
        if self.store is None:
            return self.change(session_id, mode_id, origin, request_id=request_id, field=field)
        return await self._in_turn(
            session_id,
            lambda deadline: self._change_async(
                session_id, mode_id, origin, request_id, field, deadline
            ),
        )

    def _change(
        self,
        session_id: str,
        mode_id: object,
        origin: Origin,
        request_id: str | int | None,
        field: str,
    ) -> ModeChange | None:
        session = self.get(session_id)
        row = row_of(session)
        if row[DOUBT]:
            self._confirm(session)
            row = row_of(session)
        target = self._requested(session, mode_id, origin, request_id, field)
        mode = row[MODE]
        if target == mode:
            self._confirm(session)
            return None
        kind = _KIND[origin]
        if not self.machine.allows(kind, mode, target):
            self._confirm(session)  # refused on the committed mode, not on a stale view
            self._refuse(session, target, origin, request_id, field)
        context = ModeChange(session_id, row[SEQ] + 1, mode, target, origin, request_id)
        self._fire(session, kind, target, context)
        return context

    async def _change_async(  # noqa: PLR0917 - _change's arguments and the deadline
        self,
        session_id: str,
        mode_id: object,
        origin: Origin,
        request_id: str | int | None,
        field: str,
        deadline: float | None,
    ) -> ModeChange | None:
        session = self.get(session_id)
        row = row_of(session)
        if row[DOUBT]:
            await self._confirm_async(session, deadline)
            row = row_of(session)
        target = self._requested(session, mode_id, origin, request_id, field)
        mode = row[MODE]
        if target == mode:
            await self._confirm_async(session, deadline)
            return None
        kind = _KIND[origin]
        if not self.machine.allows(kind, mode, target):
            await self._confirm_async(session, deadline)
            self._refuse(session, target, origin, request_id, field)
        context = ModeChange(session_id, row[SEQ] + 1, mode, target, origin, request_id)
        await self._fire_async(session, kind, target, context, deadline)
        return context

    def _requested(
        self,
        session: Session,
        mode_id: object,
        origin: Origin,
        request_id: str | int | None,
        field: str,
    ) -> str:
        """*mode_id* if the spec has it; else the rejection is logged and raised."""
        if not self.spec.has_mode(mode_id):
            self._reject(session, mode_id, origin, "unknown_mode", request_id=request_id)
            raise UnknownModeError(mode_id, self.spec.mode_ids, field=field)
        assert isinstance(mode_id, str)  # noqa: S101 - has_mode checked it
        return mode_id

    def _refuse(
        self,
        session: Session,
        target: str,
        origin: Origin,
        request_id: str | int | None,
        field: str,
    ) -> NoReturn:
        """Log and raise that the policy forbids *target* from the session's mode.

        Raises:
            SessionMoved: the session moved before the rejection was written: decide again.
            TransitionNotAllowedError: the refusal.
        """
        kind = _KIND[origin]
        self._reject(session, target, origin, "not_allowed", request_id=request_id, redecide=True)
        raise TransitionNotAllowedError(
            session_id=session.session_id,
            source=session.state,
            dest=target,
            origin=origin,
            allowed=self.machine.targets(kind, session.state),
            field=field,
        )

    def set_config_value(
        self,
        session_id: str,
        config_id: object,
        value: object,
        *,
        request_id: str | int | None = None,
    ) -> ModeChange | OptionChange | None:
        """Apply ``session/set_config_option`` now; queue its notifications (see :meth:`flush`).

        The mode option changes the mode (see :meth:`change`); a host option
        (*config_options*) takes *value*, written first as a ``modefsm.config_changed``
        record. Setting the current value succeeds and changes nothing.

        Returns:
            The committed :class:`ModeChange` or :class:`~modefsm.engine.OptionChange`, or
            ``None`` when *value* is already the current one.

        Raises:
            UnknownSessionError: no such session.
            UnknownConfigOptionError: *config_id* is none of the session's options (logged).
            InvalidValueError: *value* is not one of the option's values (logged).
            ChangeRefused: the host option's ``on_change`` vetoed it (logged).
            UnknownModeError: as :meth:`change`.
            TransitionNotAllowedError: as :meth:`change`.
            HookError: as :meth:`change`.
            LogError: as :meth:`change`.
        """
        option = self._check_config(session_id, config_id, value, request_id)
        if option is not None:
            return self._set_host_value(session_id, option, value, request_id)
        return self.change(
            session_id, value, "set_config_option", request_id=request_id, field="value"
        )

    def _check_config(
        self, session_id: str, config_id: object, value: object, request_id: str | int | None
    ) -> HostOption | None:
        """The host option *config_id* with *value* checked; ``None`` for the mode option.

        Refuses (and logs) an unknown ``configId``, a value a host option does not have,
        and a non-string value for the mode option.
        """
        session = self.get(session_id)
        if config_id in self.host_options:
            assert isinstance(config_id, str)  # noqa: S101 - a host option's id
            try:
                return self.host_options.check(config_id, value)
            except InvalidValueError:
                self._reject(
                    session,
                    None,
                    "set_config_option",
                    "invalid_value",
                    request_id=request_id,
                    config_id=config_id,
                    value=value if isinstance(value, str | bool) else None,
                )
                raise
        if config_id != self.spec.config_option_id:
            self._reject(
                session,
                None,
                "set_config_option",
                "unknown_config_option",
                request_id=request_id,
                config_id=config_id if isinstance(config_id, str) else None,
            )
            raise UnknownConfigOptionError(config_id, self.host_options.ids)
        if not isinstance(value, str):
            self._reject(session, None, "set_config_option", "invalid_value", request_id=request_id)
            raise InvalidValueError("value", value, self.spec.mode_ids, "a mode id (string)")
        return None

    # -- host config options -----------------------------------------------------------------

    def _set_host_value(
        self, session_id: str, option: HostOption, value: object, request_id: str | int | None
    ) -> OptionChange | None:
        """Set a host option now (write-ahead, commit, queue); races with others retried."""
        for _ in range(_RACES):
            session = self.get(session_id)
            if session.doubt:
                self._confirm(session)
            step = self._host_step(session, option, value, request_id)
            if step is None:
                self._confirm(session)
                return None
            change, fields = step
            try:
                digest = self._write_config(session, fields)
            except SessionMoved as moved:
                self._adopt(moved.current)
                continue
            self._commit_config(session, change, fields, digest)
            return change
        raise self._busy(session_id)

    async def _set_host_value_async(
        self, session_id: str, option: HostOption, value: object, request_id: str | int | None
    ) -> OptionChange | None:
        """:meth:`_set_host_value` in the session's turn, the store's write awaited."""
        if self.store is None:
            return self._set_host_value(session_id, option, value, request_id)
        async with self._turn(session_id) as deadline:
            for _ in range(_RACES):
                session = self.get(session_id)

                async def attempt(session: Session = session) -> OptionChange | None:
                    if session.doubt:
                        await self._confirm_async(session, deadline)
                    step = self._host_step(session, option, value, request_id)
                    if step is None:
                        await self._confirm_async(session, deadline)
                        return None
                    change, fields = step
                    head = RestorePoint(
                        session.session_id, session.state, session.seq, session.previous,
                        session.digest,
                    )  # fmt: skip
                    try:
                        digest = await self.store.append_async(  # type: ignore[union-attr]
                            EVENT_CONFIG, fields, head, deadline=deadline
                        )
                    except (StoreInDoubt, asyncio.CancelledError):  # it may have committed
                        with_doubt(session, doubt=True)
                        raise
                    self._commit_config(session, change, fields, digest)
                    return change

                try:
                    return await self._noting(attempt)
                except SessionMoved as moved:
                    self._adopt(moved.current)
        raise self._busy(session_id)

    def _host_step(
        self, session: Session, option: HostOption, value: object, request_id: str | int | None
    ) -> tuple[OptionChange, dict[str, Any]] | None:
        """The change and its record's fields, once ``on_change`` agreed; ``None``: no change.

        Raises:
            ChangeRefused, HookError: ``on_change`` refused (logged, nothing changed).
        """
        assert isinstance(value, str)  # noqa: S101 - checked against the option's values
        config = row_of(session)[CONFIG]
        previous = self.host_options.value(config_dict(config), option.id)
        if value == previous:
            return None
        change = OptionChange(
            session.session_id,
            session.seq + 1,
            option.id,
            value,
            previous,
            session.state,
            request_id,
        )
        if option.on_change is not None:
            try:
                option.on_change(change)
            except Exception as exc:
                self._reject(
                    session,
                    None,
                    "set_config_option",
                    "hook_failed",
                    request_id=request_id,
                    config_id=option.id,
                    value=value,
                )
                error = _hook_error(option.on_change, exc)
                if error is exc:
                    raise
                raise error from exc
        values = {**(config_dict(config) or {}), option.id: value}
        fields = self._fields(
            session.session_id,
            change.seq,
            session.state,
            session.state,
            "set_config_option",
            request_id=request_id,
            config_id=option.id,
            value=value,
        )
        fields["config"] = values
        return change, fields

    def _write_config(self, session: Session, fields: dict[str, Any]) -> str | None:
        """Write a ``config_changed`` record ahead (through the store, or to the log)."""
        if self.store is None:
            return None
        head = RestorePoint(
            session.session_id, session.state, session.seq, session.previous, session.digest
        )
        try:
            return self.store.append(EVENT_CONFIG, fields, head)
        except StoreInDoubt:
            with_doubt(session, doubt=True)
            raise

    def _commit_config(
        self, session: Session, change: OptionChange, fields: dict[str, Any], digest: str | None
    ) -> None:
        """The record is written: the session takes the value; its notification is queued."""
        row = row_of(session)
        config = config_pairs(fields["config"])
        seq, mode = change.seq, row[MODE]
        put_row(session, (mode, seq, row[PREVIOUS], digest, row[CWD], config, *row[DOUBT:]))
        if self.sink is not None:
            options = self._complete(self.views[row[MODE]], config)
            event = ConfigChanged(
                session.session_id, change.config_id, change.value, change.seq, options
            )
            self._outbox.append((session.session_id, event))

    def _detached(self, session_id: str) -> Session:
        """The live session *session_id*, or a stand-in for a closed or unknown one.

        The stand-in (no mode, ``seq`` 0) is for logging a rejection about it.
        """
        live = self._view(session_id)
        if live is not None:
            return live
        return Session(session_id, self._sessions, ("", 0, None, None, None, None, False, 0))

    async def set_mode(
        self, session_id: str, mode_id: object, *, request_id: str | int | None = None
    ) -> ModeChange | None:
        """``session/set_mode``: :meth:`change_async`, then send its notifications."""
        change = await self.change_async(session_id, mode_id, "set_mode", request_id=request_id)
        await self.flush()
        return change

    async def set_config_option(
        self,
        session_id: str,
        config_id: object,
        value: object,
        *,
        request_id: str | int | None = None,
    ) -> tuple[OptionView, ...]:
        """``session/set_config_option``: change, send notifications, return ``configOptions``.

        The mode option or a host option (see :meth:`set_config_value`); the store's
        write is awaited (see :meth:`change_async`).

        Returns:
            The complete ``configOptions`` list once the change's notifications have left
            (ACP requires the complete list), for the session at that moment.

        Raises:
            UnknownSessionError: as :meth:`set_config_value`.
            UnknownConfigOptionError: as :meth:`set_config_value`.
            InvalidValueError: as :meth:`set_config_value`.
            ChangeRefused: as :meth:`set_config_value`.
            UnknownModeError: as :meth:`change`.
            TransitionNotAllowedError: as :meth:`change`.
            HookError: as :meth:`change`.
            LogError: as :meth:`change`.
        """
        session = self.get(session_id)
        if self.store is None:
            option = self._check_config(session_id, config_id, value, request_id)
        else:
            option = await self._noting(
                lambda: _now(self._check_config, session_id, config_id, value, request_id)
            )
        if option is not None:
            await self._set_host_value_async(session_id, option, value, request_id)
        else:
            await self.change_async(
                session_id, value, "set_config_option", request_id=request_id, field="value"
            )
        row_of(session)  # the view takes the committed row
        await self.flush()
        # The view, not the id: a close during the flush must not fail a change that is
        # committed; and its row now, so the answer matches the last notification.
        row = row_of(session)
        return self._complete(self.views[row[MODE]], row[CONFIG])

    async def refresh(self, session_id: str) -> Session:
        """Catch up with what other processes committed to the session, before acting on it.

        Call it at the start of a prompt turn, before a switch offer, before answering
        anything that reports the mode, and before any decision of the host that depends
        on the mode. With a store, the session's point is read back (cheap when nothing
        moved: see :meth:`SessionStore.restore_point_async
        <modefsm.store.SessionStore.restore_point_async>`); if another process moved the
        session, it takes that mode and its notification is sent (after anything queued
        before them) before this returns; else nothing is sent.

        Returns:
            The live session, as committed.

        Raises:
            UnknownSessionError: no such session.
            LogError: the store cannot be read now (a
                :class:`~modefsm.store.StoreBusy`); the session is unchanged.
        """
        session = self.get(session_id)
        if self.store is None:
            return session
        async with self._turn(session_id) as deadline:
            try:
                await self._confirm_async(session, deadline)
            except SessionMoved as moved:
                self._adopt(moved.current)
            else:
                return session
        await self.flush()
        return session

    def config_options(self, session_id: str) -> tuple[OptionView, ...]:
        """The session's complete ``configOptions``: the mode option, then the host's.

        Each is an :class:`~modefsm.engine.OptionView` at the session's value.

        Raises:
            UnknownSessionError: no such session.
        """
        row = self._sessions.get(session_id)
        if row is None:
            raise UnknownSessionError(session_id)
        return self._complete(self.views[row[MODE]], row[CONFIG])

    def view(self, session_id: str) -> ModeView:
        """The ACP views (``modes``, ``configOptions``, updates) of the session's current mode.

        Raises:
            UnknownSessionError: no such session.
        """
        return self.views[self.get(session_id).state]

    # -- notifications ---------------------------------------------------------------------

    async def notify(self, session_id: str, update: Any) -> None:
        """Send another ``session/update`` (a tool call, a message) in order with mode changes.

        *update* is queued behind every notification already queued, then the queue is
        flushed, so a ``tool_call_update`` sent after a switch always follows its
        ``current_mode_update``.
        """
        if self.sink is not None:
            self._outbox.append((session_id, update))
        await self.flush()

    def enqueue(self, session_id: str, update: Any) -> None:
        """Queue *update* behind every queued notification without sending (see :meth:`flush`).

        For code that must not wait (a ``finally`` of a cancelled task): the next
        :meth:`notify` or :meth:`flush` sends it, in order.
        """
        if self.sink is not None:
            self._outbox.append((session_id, update))

    def pending(self) -> int:
        """The number of notifications queued and not yet handed to the sink."""
        return len(self._outbox)

    async def flush(self) -> None:
        """Send every queued notification through the sink, in commit order.

        One flush sends at a time; a caller that arrives while another flush is sending
        waits for it. When ``flush()`` returns, the queue is empty and no flush is sending:
        every notification of every change committed so far has been handed to the sink,
        so a response built right after it reports no state the client has not been told.
        A notification whose sink call raises is dropped and logged (the change stays
        committed).
        """
        while self._outbox or self._flush_lock.locked():
            async with self._flush_lock:
                sink = self.sink
                while self._outbox:
                    session_id, update = self._outbox.popleft()
                    if sink is None:
                        continue
                    try:
                        await sink(session_id, update)
                    except Exception as exc:  # noqa: BLE001 - a broken sink must not stop the queue
                        self._log_failure(
                            "modefsm.notify_failed",
                            session_id,
                            exc,
                            update=notification_kind(update),
                        )

    # -- internals ------------------------------------------------------------------------

    def _fire(self, session: Session, kind: TriggerKind, dest: str, context: ModeChange) -> bool:
        """Policy, then hooks, then the machine (write-ahead record, commit), then after-hooks."""
        if not self.machine.allows(kind, context.from_mode, dest):
            return False
        self._run_before_hooks(session, context)
        firing = _Firing(session, state_name(context.from_mode))
        if not self.machine.fire(firing, kind, dest, context):  # pragma: no cover - allowed
            return False
        self._run_after_hooks(session, context)
        return True

    def _fire_outside_machine(self, session: Session, context: ModeChange) -> None:
        """Commit a restore from a mode the spec no longer has: same record, hooks, commit."""
        self._run_before_hooks(session, context)
        if self.store is not None:
            self._append(_Firing(session, ""), context.from_mode, context.to_mode, context)
        self._commit(_Firing(session, ""), context.from_mode, context.to_mode, context)

    async def _fire_async(
        self,
        session: Session,
        kind: TriggerKind,
        dest: str,
        context: ModeChange,
        deadline: float | None,
    ) -> None:
        """:meth:`_fire` with the store's write awaited before the machine fires.

        The session's turn is held, so nothing moves it between the write and the
        commit: the machine then only commits (its write-ahead callback finds the record
        written, :attr:`_written`). Without a store it is :meth:`_fire` (the log's write
        is local).
        """
        if self.store is None:
            self._fire(session, kind, dest, context)
            return
        self._run_before_hooks(session, context)
        written = await self._write_async(session, context, deadline)
        self._written = written
        try:
            firing = _Firing(session, state_name(context.from_mode))
            fired = self.machine.fire(firing, kind, dest, context)
        finally:
            self._written = None
        assert fired  # noqa: S101 - allowed (checked by the caller) and serialized
        self._run_after_hooks(session, context)

    async def _write_async(
        self, session: Session, context: ModeChange, deadline: float | None
    ) -> str:
        """Write the change's record through the store, by *deadline*; its digest.

        Raises:
            SessionMoved, StoreBusy, LogError: as the store's ``append_async``.
            StoreInDoubt: the commit was not answered (the session is marked in doubt).
        """
        row = row_of(session)
        fields = self._change_record(
            session.session_id, row, context.from_mode, context.to_mode, context
        )
        head = RestorePoint(
            session.session_id, context.from_mode, row[SEQ], row[PREVIOUS], row[DIGEST]
        )
        try:
            return await self.store.append_async(  # type: ignore[union-attr]
                EVENT_CHANGED, fields, head, deadline=deadline
            )
        except (StoreInDoubt, asyncio.CancelledError):  # it may have committed
            with_doubt(session, doubt=True)
            raise

    async def _in_turn(
        self,
        session_id: str,
        attempt: Callable[[float | None], Awaitable[_T]],
        moved: Callable[[], None] | None = None,
    ) -> _T:
        """``await attempt(deadline)`` in the session's turn, its rejections written after it.

        When another process moved the session (:class:`~modefsm.store.SessionMoved`), the
        session takes that point, ``moved()`` is called, and *attempt* runs again, at most
        :data:`_RACES` times in all.

        Raises:
            StoreBusy: the races were all lost, or the turn did not come in time.
        """
        async with self._turn(session_id) as deadline:
            for _ in range(_RACES):
                try:
                    return await self._noting(lambda: attempt(deadline))
                except SessionMoved as lost:
                    self._adopt(lost.current)
                    if moved is not None:
                        moved()
        raise self._busy(session_id)

    def _turn(self, session_id: str) -> _Turn:
        """The session's turn (``async with``): one change of a session at a time.

        The request then has a deadline (see :class:`_Turn`): requests piled on a session
        whose store call is stuck fail in turn (:class:`~modefsm.store.StoreBusy`)
        instead of waiting for each other without end.
        """
        turn = self._turns.get(session_id)
        if turn is None:
            limit = self.store.timeout if self.store is not None else None
            turn = self._turns[session_id] = _Turn(self._turns, session_id, limit)
        return turn

    def _run_before_hooks(self, session: Session, context: ModeChange) -> None:
        for hook in self.before_change:
            try:
                hook(context)
            except Exception as exc:
                self._reject(
                    session,
                    context.to_mode,
                    context.origin,
                    "hook_failed",
                    request_id=context.request_id,
                    tool_call_id=context.tool_call_id,
                    option_id=context.option_id,
                )
                error = _hook_error(hook, exc)
                if error is exc:
                    raise
                raise error from exc

    def _run_after_hooks(self, session: Session, context: ModeChange) -> None:
        for hook in self.after_change:
            try:
                hook(context)
            except Exception as exc:  # noqa: BLE001 - the change is committed; report, go on
                self._log_failure(
                    "modefsm.hook_failed",
                    session.session_id,
                    exc,
                    hook=getattr(hook, "__qualname__", repr(hook)),
                    seq=context.seq,
                )

    def _append(self, firing: _Firing, source: str, dest: str, context: ModeChange) -> None:
        """Write the change's record ahead through the store (it checks the session's head).

        A record already committed by :meth:`_write_async` is not written again.
        """
        if self._written is not None:
            self._digest = self._written
            return
        session = firing.session
        row = row_of(session)
        fields = self._change_record(session.session_id, row, source, dest, context)
        head = RestorePoint(session.session_id, source, row[SEQ], row[PREVIOUS], row[DIGEST])
        try:
            self._digest = self.store.append(EVENT_CHANGED, fields, head)  # type: ignore[union-attr]
        except StoreInDoubt:
            with_doubt(session, doubt=True)
            raise

    def _change_record(
        self, session_id: str, row: Row, source: str, dest: str, context: ModeChange
    ) -> dict[str, Any]:
        """The fields of a ``mode_changed`` record, in the key order of :meth:`_fields`.

        Built in place: this is the engine's hot path.
        """
        fields: dict[str, Any] = {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "seq": context.seq,
            "from_mode": source,
            "to_mode": dest,
            "origin": context.origin,
        }
        if context.request_id is not None:
            fields["request_id"] = context.request_id
        if context.tool_call_id is not None:
            fields["tool_call_id"] = context.tool_call_id
        if context.option_id is not None:
            fields["option_id"] = context.option_id
        if context.proposed_in is not None:
            fields["proposed_in"] = context.proposed_in
        if self.protocol is not None:
            fields["protocol"] = self.protocol
        config = row[CONFIG]
        if config is not None:
            fields["config"] = dict(config)
        fields["spec"] = self._spec_name
        fields["spec_hash"] = self._spec_hash
        return fields

    def adopt(self, current: RestorePoint) -> bool:
        """Move a live session to *current*, a later point another process committed.

        Its notification is queued (send it with :meth:`flush`). Used when
        ``session/load`` or ``session/resume`` finds the session moved on in the store.

        Returns:
            Whether the session moved (``False``: not live, or *current* is not later).
        """
        row = self._sessions.get(current.session_id)
        if row is None or current.seq <= row[SEQ]:
            return False
        self._adopt(current)
        return True

    def _adopt(self, current: RestorePoint) -> None:
        """Take the point another process moved the session to; tell the client."""
        session_id = current.session_id
        row = self._sessions.get(session_id)
        if row is None:
            return
        mode = current.mode if self.spec.has_mode(current.mode) else self.spec.initial
        config = config_pairs(self.host_options.restored(current.config))
        self._sessions[session_id] = (
            mode, current.seq, current.previous, current.digest, row[CWD], config, False,
            row[SERIAL],
        )  # fmt: skip
        self._enqueue(session_id, mode, current.seq, config)
        self._tools_moved(session_id)

    def _confirm(self, session: Session) -> None:
        """Before deciding on the session's mode: is it still where this process saw it?

        Raises:
            SessionMoved: another process moved it (the caller adopts and tries again).
        """
        if self.store is None:
            return
        self._confirmed(session, self.store.restore_point(session.session_id))

    async def _confirm_async(self, session: Session, deadline: float | None) -> None:
        """:meth:`_confirm`, the store read awaited (and ended by *deadline*)."""
        if self.store is None:
            return
        current = await self.store.restore_point_async(session.session_id, deadline=deadline)
        self._confirmed(session, current)

    @staticmethod
    def _confirmed(session: Session, current: RestorePoint | None) -> None:
        if current is not None and current.seq > session.seq:
            raise SessionMoved(current)
        with_doubt(session, doubt=False)

    def _busy(self, session_id: str) -> StoreBusy:
        msg = f"sessionId {session_id} is being changed by another process; retry"
        return StoreBusy(msg)

    def _commit(self, firing: _Firing, source: str, dest: str, context: ModeChange) -> None:
        """The machine's callback once its state is set: the session's row takes the change.

        The machine has set the mode already, except for a restore from a mode the spec no
        longer has, which has no machine state to leave: the row takes *dest* for both.
        """
        session = firing.session
        # a fallback (restore) is not a move the user can return from: previous is kept
        previous = source if context.origin != "restore" else None
        row = commit_row(session, dest, context.seq, previous, self._digest)
        self._enqueue(session.session_id, dest, context.seq, row[CONFIG])
        self._tools_moved(session.session_id)

    def _enqueue(self, session_id: str, mode_id: str, seq: int, config: Config | None) -> None:
        if self.sink is not None:
            options = self._complete(self.views[mode_id], config)
            self._outbox.append((session_id, ModeChanged(session_id, mode_id, seq, options)))

    def _complete(self, view: ModeView, config: Config | None) -> tuple[OptionView, ...]:
        """The mode option of *view* followed by the host's options at *config*'s values."""
        if not self.host_options:
            return (view.mode_option,)
        return (view.mode_option, *self.host_options.views(config_dict(config)))

    def _reject(
        self,
        session: Session,
        dest: object,
        origin: Origin,
        reason: RejectReason,
        *,
        redecide: bool = False,
        **ids: Any,
    ) -> None:
        """Log a rejection from the session's mode as committed when the line is written.

        A store that sees the session move past this process's view as it writes (the
        file store) refuses the line: the session then takes the committed point and the
        line is written from there, unless the rejection depended on the mode
        (*redecide*), whose caller decides again. Within :meth:`_noting` (the coroutines),
        the line is only noted here and written, awaited, when the call ends.

        Raises:
            SessionMoved: with *redecide*, the session moved (nothing written).
            LogError: the line cannot be written.
        """
        store = self.store
        if store is None:
            return
        ids = {key: _clip(value) if isinstance(value, str) else value for key, value in ids.items()}
        note = _Rejection(session, _clip(dest) if isinstance(dest, str) else None, origin, reason)
        noted = _NOTED.get()
        if noted is not None:
            noted.append((note, ids, redecide))
            return
        for _ in range(_RACES):
            fields, head = self._rejected(note, ids)
            try:
                store.note(EVENT_REJECTED, fields, head)
            except SessionMoved as moved:
                if redecide:
                    raise
                self._adopt(moved.current)
            else:
                return
        raise self._busy(session.session_id)

    async def _reject_async(self, note: _Rejection, ids: dict[str, Any], *, redecide: bool) -> None:
        """:meth:`_reject`'s write with a store, awaited (see :meth:`_noting`)."""
        assert self.store is not None  # noqa: S101 - noted only with a store
        for _ in range(_RACES):
            fields, head = self._rejected(note, ids)
            try:
                await self.store.note_async(EVENT_REJECTED, fields, head)
            except SessionMoved as moved:
                if redecide:
                    raise
                self._adopt(moved.current)
            else:
                return
        raise self._busy(note.session.session_id)

    def _rejected(
        self, note: _Rejection, ids: dict[str, Any]
    ) -> tuple[dict[str, Any], RestorePoint | None]:
        """The rejection line's fields (from the session's mode now) and the session's head."""
        session = note.session
        fields = self._fields(
            session.session_id, None, session.state or None, note.dest, note.origin, **ids
        )
        fields["reason"] = note.reason
        head = None
        if session.seq:
            head = RestorePoint(session.session_id, session.state, session.seq)
        return fields, head

    async def _noting(self, work: Callable[[], Awaitable[_T]]) -> _T:
        """Await ``work()``; the rejection lines it logs are written afterwards, awaited.

        The decisions stay synchronous (a rejection is raised as it is decided); only the
        wait for the store's lock, to write its line, is awaited, so that another
        process holding the lock never stalls the event loop. A line that cannot be
        written (or whose session moved, for a decision to take again) raises that error
        instead of the refusal, as :meth:`_reject` does.
        """
        noted: list[tuple[_Rejection, dict[str, Any], bool]] = []
        token = _NOTED.set(noted)
        try:
            try:
                result = await work()
            finally:
                _NOTED.reset(token)
        except Exception:
            for note, ids, redecide in noted:
                await self._reject_async(note, ids, redecide=redecide)
            raise
        for note, ids, redecide in noted:
            await self._reject_async(note, ids, redecide=redecide)
        return result

    def _fields(
        self,
        session_id: str,
        seq: int | None,
        from_mode: str | None,
        to_mode: str | None,
        origin: Origin,
        *,
        request_id: str | int | None = None,
        tool_call_id: str | None = None,
        option_id: str | None = None,
        proposed_in: str | None = None,
        config_id: str | None = None,
        value: str | bool | None = None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "seq": seq,
            "from_mode": from_mode,
            "to_mode": to_mode,
            "origin": origin,
        }
        if request_id is not None:
            fields["request_id"] = request_id
        if tool_call_id is not None:
            fields["tool_call_id"] = tool_call_id
        if option_id is not None:
            fields["option_id"] = option_id
        if proposed_in is not None:
            fields["proposed_in"] = proposed_in
        if config_id is not None:
            fields["config_id"] = config_id
        if value is not None:
            fields["value"] = value
        if self.protocol is not None:
            fields["protocol"] = self.protocol
        fields["spec"] = self._spec_name
        fields["spec_hash"] = self._spec_hash
        return fields

    def drop_answer_soon(
        self,
        session_id: str,
        reason: Literal["late_answer", "duplicate_answer"],
        *,
        tool_call_id: str,
        option_id: str | None = None,
        request_id: str | int | None = None,
    ) -> None:
        """Log an answer to a permission request no switch sent; returns at once.

        For the answers to a host's tool call's ``session/request_permission`` that decide
        nothing: one that came after the ask was settled (``late_answer``: cancelled,
        closed, withdrawn by a mode change) or a second one (``duplicate_answer``). The
        line is a :data:`~modefsm.log.EVENT_DROPPED` diagnostic (``tool_call_id``,
        ``option_id``, ``request_id``, ``reason``): not a decision, not a change, not
        chained. It is written as :meth:`reject_switch_soon`'s line is: by the engine's
        backlog with an event loop running, before this returns without one. Works for
        closed and unknown sessions; without a store nothing is written.

        Raises:
            LogError: only without a running loop, when the line could not be written.
        """
        store = self.store
        if store is None:
            return
        fields: dict[str, Any] = {"timestamp": utc_timestamp(), "session_id": session_id}
        if request_id is not None:
            fields["request_id"] = request_id
        fields["tool_call_id"] = _clip(tool_call_id)
        if option_id is not None:
            fields["option_id"] = _clip(option_id)
        fields["reason"] = reason
        if self.protocol is not None:
            fields["protocol"] = self.protocol
        fields.update(self._spec_fields)
        self._backlog.put_soon(
            lambda: store.note(EVENT_DROPPED, fields),
            lambda: store.note_async(EVENT_DROPPED, fields),
        )

    def _log_failure(self, event: str, session_id: str, exc: BaseException, **fields: Any) -> None:
        store = self.store
        if store is None:
            return
        record = {
            "timestamp": utc_timestamp(),
            "session_id": session_id,
            "error": repr(exc),
            **fields,
            **self._spec_fields,
        }
        with contextlib.suppress(ModefsmError):  # nowhere left to report a failed write
            store.note(event, record)


def _write_nothing(firing: _Firing, source: str, dest: str, context: ModeChange) -> None:
    """The machine's write-ahead callback of an engine without a store: no record."""
    del firing, source, dest, context


class _Firing:
    """What the machine moves in one firing: the session, and its machine state.

    The machine reads and sets :data:`~modefsm.engine.MODEL_ATTRIBUTE` on it; the
    engine's commit then writes the session's new row (the session's state is its row).
    """

    __slots__ = ("fsm_state", "session")

    def __init__(self, session: Session, fsm_state: str) -> None:
        self.session = session
        self.fsm_state = fsm_state


def _hook_error(hook: Callable[..., None], exc: Exception) -> HookError:
    """What a ``before_change`` hook that raised *exc* makes the change raise.

    A veto (:class:`~modefsm.errors.ChangeRefused`, or modefsm's own
    :class:`~modefsm.errors.InvalidParamsError`, whose code and data it keeps) stays the
    host's answer; anything else is a failure of the hook (``-32603``).
    """
    name = getattr(hook, "__qualname__", repr(hook))
    if isinstance(exc, ChangeRefused):
        exc.hook = name
        return exc
    if isinstance(exc, InvalidParamsError):
        refused = ChangeRefused(str(exc), code=INVALID_PARAMS, data=exc.to_data())
        refused.hook = name
        return refused
    return HookError(name, exc)


_T = TypeVar("_T")

_NOTED: contextvars.ContextVar[list[tuple[_Rejection, dict[str, Any], bool]] | None] = (
    contextvars.ContextVar("modefsm_noted_rejections", default=None)
)
"""The rejections a coroutine of the engine decided, to write once it ends (see _noting)."""


@dataclass(frozen=True, slots=True)
class _Rejection:
    """A rejection to log: the session (its mode when written), the target, why."""

    session: Session
    dest: str | None
    origin: Origin
    reason: RejectReason


async def _now(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``call(*args, **kwargs)`` as a coroutine (a synchronous step given to _noting)."""
    return call(*args, **kwargs)


_RACES = 3
"""How many times a change is tried when other processes keep moving its session."""

REQUEST_TIMEOUTS = 3
"""A request on a session with a store ends within this many times the store's
``timeout``: waiting for the session's previous request, for the store's turn, for the
store itself all count against it."""


class _Turn:
    """One session's turn: an ``asyncio.Lock`` kept only while someone holds or awaits it.

    Memory is thus bounded by the changes in flight, not by the sessions (100k live
    sessions hold no lock). ``async with turn as deadline:`` waits for it and holds it;
    *deadline* (event loop time, or ``None`` without a store) is when the request must
    have ended: :data:`REQUEST_TIMEOUTS` times the store's ``timeout`` after it began.
    Every wait of the request (for the turn, for the store) ends by then.
    """

    __slots__ = ("_key", "_limit", "_lock", "_owner", "_users")

    def __init__(self, owner: dict[str, _Turn], key: str, limit: float | None) -> None:
        self._owner = owner
        self._key = key
        self._limit = limit
        self._lock = asyncio.Lock()
        self._users = 0

    async def __aenter__(self) -> float | None:
        self._users += 1
        deadline = None
        try:
            if self._limit is not None:
                budget = REQUEST_TIMEOUTS * self._limit
                deadline = asyncio.get_running_loop().time() + budget
            if self._lock.locked() and deadline is not None:
                try:
                    async with asyncio.timeout_at(deadline):
                        await self._lock.acquire()
                except TimeoutError:
                    msg = (
                        f"sessionId {self._key}: the previous request on this session has "
                        f"not ended after {budget:g} s; nothing was written"
                    )
                    raise StoreBusy(msg) from None
            else:
                await self._lock.acquire()
        except BaseException:
            self._leave()
            raise
        return deadline

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        self._users -= 1
        if not self._users and self._owner.get(self._key) is self:
            del self._owner[self._key]


CLIP = 256
"""Client-supplied strings in a rejection record keep at most this many characters."""


def notification_kind(update: object) -> str:
    """What a notification is, for the log: an update's ``sessionUpdate`` or an event's class.

    ``"ModeChanged"`` for a :class:`~modefsm.engine.ModeChanged`.
    """
    return str(getattr(update, "session_update", type(update).__name__))


def _clip(value: str) -> str:
    """*value*, cut to :data:`CLIP` characters with the count of the rest (``...[+N chars]``).

    A rejection records what the client sent; a megabyte-long unknown mode id must not
    become a megabyte of log.
    """
    if len(value) <= CLIP:
        return value
    return f"{value[:CLIP]}...[+{len(value) - CLIP} chars]"
