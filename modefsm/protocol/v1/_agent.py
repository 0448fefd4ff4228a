"""The ACP agent adapter: session modes of an agent over the official Python SDK.

:class:`ModeAgent` implements the mode-related ACP methods (``initialize``,
``session/new``, ``session/load``, ``session/resume``, ``session/close``,
``session/set_mode``, ``session/set_config_option``, ``session/cancel``) on a
:class:`~modefsm.engine.ModeEngine`. A host agent either subclasses it (adding
``prompt`` and the rest) or keeps one and delegates those methods to it. Its tool code
proposes agent-initiated switches with :meth:`ModeAgent.propose_switch` and runs each tool
call through :meth:`ModeAgent.run_tool` (decided by the session's committed mode).

Errors reach the client as JSON-RPC errors: an unknown ``sessionId`` is ``-32002``
(``data: {"uri": sessionId}``); an unknown or unadvertised ``modeId``, ``configId`` or
``value`` is ``-32602`` with ``data`` naming the field and listing the valid ids. A
failed request changes nothing and notifies nothing.

Example (a host embedding modefsm; ``acp.run_agent`` serves it over stdio)::

    import asyncio, acp
    from modefsm import FileStore, ModeAgent, preset

    class MyAgent(ModeAgent):
        async def prompt(self, prompt, session_id, **kwargs):
            mode = (await self.refresh(session_id)).state   # decide tools by the mode
            ...

    agent = MyAgent(preset("seed"), store=FileStore("modes.jsonl"))
    asyncio.run(acp.run_agent(agent, use_unstable_protocol=True))
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionNotification,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallProgress,
    ToolCallStart,
)

from modefsm.engine import HostOption, ModeChange, ModeEngine, Session, SwitchResult, ToolCall
from modefsm.errors import InvalidParamsError, UnknownSessionError
from modefsm.log import ConversationItem, ConversationStore, Part, owner_alive
from modefsm.protocol._list import list_page
from modefsm.protocol.errors import acp_errors, invalid_params
from modefsm.protocol.transport._shared import SharedEngine
from modefsm.protocol.transport._stdio import PermissionRequest
from modefsm.protocol.v1._ask import text_content
from modefsm.protocol.v1._render import config_options, mode_state, session_updates
from modefsm.protocol.v1._switch import propose_switch, switch_asked
from modefsm.protocol.v1._tools import ToolResult, run_tool
from modefsm.spec import TOOL_KINDS, ModeSpec
from modefsm.store import RestorePoint, SessionStore

if TYPE_CHECKING:
    from modefsm.spec import ToolKind

__all__ = ["CLOSE_WAIT", "MAX_CWD_CHARS", "ModeAgent"]

_T = TypeVar("_T")


class ModeAgent:
    """The mode-related half of an ACP agent.

    Args:
        spec: the modes and policy every session follows.
        store: where the engine writes its records and where ``session/load``,
            ``session/resume`` and ``session/list`` find sessions unknown to this process
            (after a restart): a :class:`~modefsm.store.FileStore`, a PostgreSQL store
            (:func:`~modefsm.store.open_store`) or a :class:`~modefsm.store.MemoryStore`.
            A :class:`~modefsm.store.LogStore` only writes the records to a transition
            log. ``None``: nothing is logged and ``session/load``/``session/resume`` of
            an unknown session answer ``-32002``.
        unstable: advertise ``session/resume``, ``session/close`` and ``session/list``
            (the SDK routes them whatever its ``use_unstable_protocol``).
        conversation: where the ``switch_mode`` tool calls (and anything the host passes
            to :meth:`record`) are kept for replay; a fresh in-memory
            :class:`~modefsm.log.ConversationStore` when ``None``.
        engine: an engine to use instead of building one (*store* and the hooks
            and options below are then ignored: the engine's own are used); its ``sink``
            is set to this agent's connection, which a
            :class:`~modefsm.protocol.SharedEngine` keeps per connection.
        before_change: host callbacks run before a change commits; one that raises
            cancels the change (see :class:`~modefsm.engine.ModeEngine`).
        after_change: host callbacks run after a change committed.
        config_options: the host's own config options (:class:`~modefsm.engine.HostOption`),
            declared once: listed after the mode option in every complete list, set by
            ``session/set_config_option``, logged and restored (see
            :class:`~modefsm.engine.ModeEngine`).

    Attributes:
        engine: the engine; its sink is this connection's ``session/update``.
        conn: the SDK connection to the client, set by ``on_connect``.
        conversation: the :class:`~modefsm.log.ConversationStore`.
        message_ids: ``sessionId`` -> ``(user messageId, agent messageId)`` of the turn
            running (set by a v2 connection); :meth:`record` gives a user or agent
            message chunk without a ``messageId`` the turn's, so a replay keeps it.
        replay_on_load: whether ``session/load`` replays the whole kept conversation
            before it answers (``False``: a host replays its own conversation, taking the
            mode's part from :meth:`switch_history`).
    """

    agent_name = "modefsm"
    replay_on_load = False

    def __init__(
        self,
        spec: ModeSpec,
        *,
        store: SessionStore | None = None,
        unstable: bool = False,
        conversation: ConversationStore | None = None,
        engine: ModeEngine | None = None,
        before_change: Iterable[Callable[[ModeChange], None]] = (),
        after_change: Iterable[Callable[[ModeChange], None]] = (),
        config_options: Iterable[HostOption] = (),
    ) -> None:
        """Build the engine for *spec*; the connection arrives with :meth:`on_connect`."""
        if engine is None:
            self.engine = ModeEngine(
                spec,
                store=store,
                sink=self._send,
                before_change=before_change,
                after_change=after_change,
                config_options=config_options,
            )
        else:  # shared with other connections (log and hooks are the engine's own)
            self.engine = engine
            engine.sink = self._send
        self.conversation = conversation if conversation is not None else ConversationStore()
        self.message_ids: dict[str, tuple[str, str]] = {}
        self.unstable = unstable
        self.conn: Any = None
        self._cancels: dict[str, set[asyncio.Event]] = {}
        self._closing: set[str] = set()  # sessions whose session/close waits for their turns
        self._turn_ended = asyncio.Event()  # set by end_turn (a closing session's wait)
        # (sessionId, toolCallId, request id) of the permission requests a cancel or a
        # withdrawal ended (request id None: the transport did not say which it was) ->
        # what asked (a switch or a tool call)
        self._abandoned: OrderedDict[tuple[str, str, Any], _Asker] = OrderedDict()
        # (sessionId, toolCallId) -> JSON-RPC id of its permission request awaiting an answer
        self._sent: OrderedDict[tuple[str, str], Any] = OrderedDict()
        # (sessionId, toolCallId) being asked -> by what
        self._asking: dict[tuple[str, str], _Asker] = {}
        self._ids_known = False  # whether the transport reports each request's id

    def on_connect(self, conn: Any) -> None:
        """Called by the SDK with the connection to the client."""
        self.conn = conn

    async def _send(self, session_id: str, update: Any) -> None:
        if self.conn is None:
            msg = "ModeAgent has no connection: the SDK calls on_connect(conn); a host that "
            msg += "delegates to a ModeAgent must call it too"
            raise ConnectionError(msg)
        for item in session_updates(update):
            await self.conn.session_update(session_id=session_id, update=item)

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """``initialize``: ``loadSession: true`` (and resume, close, list when unstable)."""
        del protocol_version, client_capabilities, client_info, kwargs
        sessions = (
            SessionCapabilities(
                resume=SessionResumeCapabilities(),
                close=SessionCloseCapabilities(),
                list=SessionListCapabilities(),
            )
            if self.unstable
            else None
        )
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True, session_capabilities=sessions),
            agent_info=Implementation(name=self.agent_name, version=_version()),
        )

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        """``session/new``: a session in the initial mode, with ``modes`` and ``configOptions``.

        The ``cwd`` is kept in the session's creation record, for ``session/list``.

        Raises:
            RequestError: ``-32602`` naming ``cwd`` for one over :data:`MAX_CWD_CHARS`
                characters (no path is that long), or holding a NUL (no path does; a
                PostgreSQL store could not keep it); nothing is created.
        """
        del mcp_servers, kwargs
        if isinstance(cwd, str) and len(cwd) > MAX_CWD_CHARS:
            text = f"cwd: a path of at most {MAX_CWD_CHARS} characters, not {len(cwd)}"
            raise invalid_params(text, {"field": "cwd", "limit": "cwd_chars", "max": MAX_CWD_CHARS})
        if isinstance(cwd, str) and "\x00" in cwd:
            raise invalid_params("cwd: a path holds no NUL character", {"field": "cwd"})
        with acp_errors():
            session = await self.engine.new_session_async(cwd=cwd)
        self.conversation.start(session.session_id)
        view = self.engine.views[session.state]
        return NewSessionResponse(
            session_id=session.session_id,
            modes=mode_state(view),
            config_options=config_options(self.engine.config_options(session.session_id)),
        )

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> LoadSessionResponse:
        """``session/load``: the session's last mode, restored from the log after a restart.

        No historical mode change is replayed; a non-restorable mode's fallback is applied
        (logged and announced) before the response, which reports the effective mode. With
        :attr:`replay_on_load`, the kept conversation is replayed first, in order, as
        ``session/update`` notifications (see :meth:`replay`).
        """
        del cwd, mcp_servers, kwargs
        point = await self._settled_point(session_id)
        if self.replay_on_load:
            await self.replay(session_id)
        view = await self._restore(session_id, point)
        return LoadSessionResponse(
            modes=mode_state(view),
            config_options=config_options(self.engine.config_options(session_id)),
        )

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        """``session/resume`` (unstable): as :meth:`load_session`, without any replay."""
        del cwd, kwargs
        view = await self._restore(session_id, await self._settled_point(session_id))
        return ResumeSessionResponse(
            modes=mode_state(view),
            config_options=config_options(self.engine.config_options(session_id)),
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> None:
        """``session/close`` (unstable): end the session's turns, then forget the session.

        The turns this agent runs on the session are cancelled as by ``session/cancel``
        (a pending switch ends ``cancelled``, its permission request is withdrawn) and
        waited for, at most :data:`CLOSE_WAIT` seconds: their last updates (v2: the
        ``state_update`` ``idle`` with ``stopReason: "cancelled"``) precede the close's
        answer, and each prompt answers (v1: ``stopReason: "cancelled"``, or
        ``end_turn`` if it had ended). A prompt that arrives meanwhile starts cancelled.
        Then the session is freed. Once it has begun, a close runs to its end even if
        its request is cancelled. On a :class:`~modefsm.protocol.SharedEngine` whose
        session another connection holds too, only this connection's hold ends
        (:meth:`SharedEngine.leave <modefsm.protocol.SharedEngine.leave>`): the session
        stays live for the others; a later ``session/load`` or ``session/resume`` here
        holds it again.

        Raises:
            RequestError: ``-32002`` for an unknown session.
        """
        del kwargs
        with acp_errors():
            self._held(session_id)
            self.engine.get(session_id)
        await _finish(self._close(session_id))

    async def _close(self, session_id: str) -> None:
        self._closing.add(session_id)
        try:
            await self._end_turns(session_id)
        finally:
            self._closing.discard(session_id)
        if session_id not in self.engine:
            return  # another close (or the last holder's) ended it meanwhile
        with acp_errors():
            kept = isinstance(self.engine, SharedEngine) and self.engine.leave(session_id)
            if not kept:
                await self.engine.close_session_async(session_id)
        if not kept:
            self.conversation.forget(session_id)

    async def _end_turns(self, session_id: str) -> None:
        """Cancel this agent's turns on *session_id*; wait (boundedly) until they end."""
        deadline = time.monotonic() + CLOSE_WAIT
        while session_id in self._cancels:
            for event in self._cancels[session_id]:
                event.set()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._cancels.pop(session_id, None)
                return
            self._turn_ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turn_ended.wait(), remaining)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """``session/list``: one page of the sessions the log or store knows.

        See :mod:`modefsm.protocol._list`: every process's sessions (newest activity
        first), closed ones included, each with the ``cwd`` its ``session/new`` gave and
        ``updatedAt`` (its last record's time); ``nextCursor`` when more follow.

        Raises:
            RequestError: ``-32602`` naming ``cursor`` (not one this agent gave);
                ``-32603`` when the store or index cannot be read now.
        """
        del kwargs
        with acp_errors():
            page, next_cursor = await list_page(self.engine, cwd, cursor)
        return ListSessionsResponse(
            sessions=[
                SessionInfo(session_id=s.session_id, cwd=s.cwd, updated_at=s.updated_at or None)
                for s in page
            ],
            next_cursor=next_cursor,
        )

    async def _restore_point(self, session_id: str) -> RestorePoint:
        """Where the engine's store last saw *session_id*."""
        store = self.engine.store
        if store is None:
            raise UnknownSessionError(session_id)
        point = await store.restore_point_async(session_id)
        if point is None:
            raise UnknownSessionError(session_id)
        return point

    async def _settled_point(self, session_id: str) -> RestorePoint | None:
        """For a session not live here: settle what ended processes left open; its point.

        A tool call the kept conversation shows still open (``pending``: not decided yet,
        or its permission request unanswered; ``in_progress``: running) whose sender no
        longer runs (:func:`~modefsm.log.owner_alive`) ends ``failed`` in the conversation.
        Before that, a ``pending`` one the mode decides (a ``switch_mode`` switch, a
        ``run_tool`` call: :attr:`~modefsm.log.ConversationItem.gated`) with no decision
        logged is recorded ``abandoned`` (:meth:`ModeEngine.abandon_ask
        <modefsm.engine.ModeEngine.abandon_ask>`, written once); a host's tool call only
        reported with :meth:`record` was never asked: no record. ``None`` for a live
        session.

        Restores of one session in this process (on any connection sharing this agent's
        conversation store) settle one at a time, each reading the kept conversation in
        its turn, so a tool call is settled once. Two processes restoring the session at
        the same moment record it ``abandoned`` once (the store's
        :class:`~modefsm.store.DecidesOnce`); each ends it ``failed`` in the conversation.

        Raises:
            RequestError: ``-32002`` for an unknown session; ``-32603`` when the store or
                the journal cannot be read, or the record cannot be written.
        """
        with acp_errors():
            if session_id in self.engine:
                return None
            await self._restore_point(session_id)  # an unknown session: nothing is settled
        turns = _SETTLING.setdefault(self.conversation, {})
        turn = turns.get(session_id)
        if turn is None:
            turn = turns[session_id] = _Turn()
        turn.waiting += 1
        try:
            async with turn.lock:
                return await self._settle(session_id)
        finally:
            turn.waiting -= 1
            if not turn.waiting:
                del turns[session_id]

    async def _settle(self, session_id: str) -> RestorePoint | None:
        """:meth:`_settled_point`'s work, in the session's settling turn (see there)."""
        with acp_errors():
            if session_id in self.engine:  # restored while this waited for its turn
                return None
            point = await self._restore_point(session_id)
            # read again in the turn: an earlier settlement here ended what it settled
            left = left_open(await self.conversation.history(session_id))
            wrote = False
            for item, status in left:
                update = item.update
                call_id = update["toolCallId"]
                text = _RESTARTED_RUNNING if status == "in_progress" else _RESTARTED
                if status == "pending" and item.gated:
                    kind = update.get("kind", "other")
                    kind = cast("ToolKind", kind if kind in TOOL_KINDS else "other")
                    call = ToolCall(call_id, kind, None, update.get("title"))
                    settled = await self.engine.abandon_ask(point, call)
                    wrote = wrote or settled == "written"
                    if settled != "decided":
                        text = _RESTARTED_ASKING
                final = ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=call_id,
                    status="failed",
                    content=text_content(text),
                )
                self._keep(session_id, final, item.part)
            return await self._restore_point(session_id) if wrote else point

    async def _restore(self, session_id: str, point: RestorePoint | None = None) -> Any:
        """Bring the session back from *point* (looked up if ``None``) unless it is live.

        A live session catches up with what other processes sharing the store committed
        (:meth:`ModeEngine.refresh <modefsm.engine.ModeEngine.refresh>`).
        """
        with acp_errors():
            if session_id in self.engine:
                await self.engine.refresh(session_id)
            else:
                point = point or await self._restore_point(session_id)
                await self.engine.restore_session_async(
                    session_id,
                    point.mode,
                    point.seq,
                    previous=point.previous,
                    digest=point.digest,
                    config=point.config,
                )
            # the answer reports the current mode: its notifications must have left first
            await self.engine.flush()
            return self.engine.view(session_id)

    # -- conversation ----------------------------------------------------------------------

    def record(self, session_id: str, update: Any, part: Part = "host") -> None:
        """Keep *update* (an ACP v1 ``session/update`` update model) for replay on load.

        Call it before sending the update (write-ahead): once it returns, the item is in
        the conversation journal, if the store has one.

        Raises:
            RequestError: ``-32603`` when the journal cannot be written (nothing kept).
        """
        data = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        ids = self.message_ids.get(session_id)
        if ids is not None and "messageId" not in data:
            kind = data.get("sessionUpdate")
            if kind == "user_message_chunk":
                data["messageId"] = ids[0]
            elif kind == "agent_message_chunk":
                data["messageId"] = ids[1]
        with acp_errors():
            self.conversation.append(session_id, data, part)

    async def history(self, session_id: str, *, part: Part | None = None) -> list[Any]:
        """The session's kept conversation as SDK update models, oldest first.

        Args:
            session_id: ACP ``sessionId``.
            part: only the ``mode`` items (the ``switch_mode`` tool calls) or only the
                ``host`` ones; ``None`` for all.

        Returns:
            ``UserMessageChunk``, ``AgentMessageChunk``, ``ToolCallStart``,
            ``ToolCallProgress``... as they were sent (``[]`` for a session never seen).

        Raises:
            RequestError: ``-32603`` when the journal cannot be read.
        """
        with acp_errors():
            items = await self.conversation.history(session_id)
        return [
            SessionNotification.model_validate(
                {"sessionId": session_id, "update": item.update}
            ).update
            for item in items
            if part is None or item.part == part
        ]

    async def switch_history(self, session_id: str) -> list[ToolCallStart | ToolCallProgress]:
        """The session's ``switch_mode`` tool calls and their updates, in the order sent.

        What a host replays on ``session/load`` for the mode's part of the conversation,
        interleaved with its own items: each ``tool_call`` (``kind: "switch_mode"``, its
        plan) and each ``tool_call_update`` (``completed``/``failed`` and the outcome text).
        """
        return await self.history(session_id, part="mode")

    async def replay(self, session_id: str) -> None:
        """Send the session's kept conversation as ``session/update`` notifications, in order.

        Nothing is recorded again and no mode notification is replayed.
        """
        for update in await self.history(session_id):
            await self.engine.notify(session_id, update)

    # -- mode changes --------------------------------------------------------------------

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        """``session/set_mode``: change the mode; both notifications precede the response."""
        del kwargs
        with acp_errors():
            self._held(session_id)
            await _finish(self.engine.set_mode(session_id, mode_id))
        return SetSessionModeResponse()

    async def set_config_option(
        self,
        config_id: str,
        session_id: str,
        value: str | bool,  # noqa: FBT001 - the SDK passes it by keyword
        **kwargs: Any,
    ) -> SetSessionConfigOptionResponse:
        """``session/set_config_option`` on the mode option or a host option.

        Answers the complete list once the change's ``config_option_update`` has left.
        """
        del kwargs
        with acp_errors():
            self._held(session_id)
            options = await _finish(self.engine.set_config_option(session_id, config_id, value))
        return SetSessionConfigOptionResponse(config_options=config_options(options))

    # -- prompts and the switch_mode tool ---------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The live session (its ``state`` is the mode as this process knows it), for a request.

        A prompt turn starts here, or with :meth:`refresh`: on a
        :class:`~modefsm.protocol.SharedEngine`, a session the connection does not hold is
        unknown to it (:meth:`holds`).

        Raises:
            RequestError: ``-32002`` for an unknown session, or one the connection does not
                hold.
        """
        with acp_errors():
            self._held(session_id)
            return self.engine.get(session_id)

    async def refresh(self, session_id: str) -> Session:
        """The live session, caught up with what other processes committed to it.

        Call it where a prompt turn starts and before any decision that depends on the
        mode: with a shared store, another process may have changed the mode since this
        one last looked; the session then takes that mode and the client gets its
        ``current_mode_update`` and ``config_option_update`` before this returns (see
        :meth:`ModeEngine.refresh <modefsm.engine.ModeEngine.refresh>`). As for
        :meth:`session`, a session the connection does not hold is unknown to it.

        Raises:
            RequestError: ``-32002`` for an unknown session, or one the connection does not
                hold; ``-32603`` when the store cannot be read now.
        """
        with acp_errors():
            self._held(session_id)
            return await self.engine.refresh(session_id)

    def holds(self, session_id: str) -> bool:
        """Whether this agent's connection may act on *session_id*.

        On a :class:`~modefsm.protocol.SharedEngine`: whether the connection holds it (it
        created, loaded or resumed it and has not closed it); on an engine of the agent's
        own: always.
        """
        engine = self.engine
        return not isinstance(engine, SharedEngine) or engine.holds(session_id)

    def _held(self, session_id: str) -> None:
        """Refuse a request about a session the connection does not hold (as unknown)."""
        if not self.holds(session_id):
            raise UnknownSessionError(session_id)

    def begin_turn(self, session_id: str) -> asyncio.Event:
        """Mark the start of a prompt turn; the returned event is set by ``session/cancel``.

        Optional: :meth:`propose_switch` watches for ``session/cancel`` by itself; pass it
        this event to have it also see a cancel that arrives before the switch is proposed.
        Several turns of one session may run at once (each request runs in its own task);
        ``session/cancel`` and ``session/close`` set the events of all of them.
        """
        event = asyncio.Event()
        if session_id in self._closing:  # a session/close waits for the turns to end
            event.set()
        self._cancels.setdefault(session_id, set()).add(event)
        return event

    def end_turn(self, session_id: str, event: asyncio.Event | None = None) -> None:
        """Mark the end of the turn whose :meth:`begin_turn` returned *event* (default: all)."""
        events = self._cancels.get(session_id)
        if events is None:
            return
        if event is None:
            events.clear()
        else:
            events.discard(event)
        if not events:
            del self._cancels[session_id]
        self._turn_ended.set()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """``session/cancel``: end the running turns; a pending switch ends as ``cancelled``."""
        del kwargs
        for event in self._cancels.get(session_id, ()):
            event.set()

    async def propose_switch(
        self,
        session_id: str,
        *,
        plan: str,
        tool_call_id: str | None = None,
        cancelled: asyncio.Event | None = None,
    ) -> SwitchResult:
        """Propose the current mode's ``switch_mode`` and apply the answer.

        See :func:`modefsm.protocol.propose_switch`. A ``session/cancel`` ends it as
        ``cancelled`` (the prompt should then answer ``stopReason: "cancelled"``): one that
        arrives while the request is pending, or, with the turn's :meth:`begin_turn` event
        as *cancelled*, any time during the turn.

        Raises:
            RequestError: ``-32002`` for an unknown session; ``-32602`` naming
                ``toolCallId`` when a switch or a tool call with *tool_call_id* is open in
                the session here (nothing is sent).
            NoSwitchError: the mode, caught up with what other processes committed, has no
                switch: nothing was proposed (see :func:`modefsm.protocol.propose_switch`).
        """
        tool_call_id = tool_call_id or f"call_switch_mode_{uuid.uuid4().hex[:12]}"
        with acp_errors():
            key = self._ask_begins(session_id, tool_call_id, "switch")
        try:
            return await self._propose(session_id, plan, tool_call_id, cancelled)
        finally:
            del self._asking[key]

    async def _propose(
        self, session_id: str, plan: str, tool_call_id: str, cancelled: asyncio.Event | None
    ) -> SwitchResult:
        waiter = cancelled if cancelled is not None else self.begin_turn(session_id)
        try:
            with acp_errors():
                result = await propose_switch(
                    self.engine,
                    self.conn,
                    session_id,
                    plan=plan,
                    tool_call_id=tool_call_id,
                    cancelled=waiter,
                    abandoned=lambda: self._abandon(session_id, tool_call_id, "switch"),
                    record=lambda update: self._record_switch(session_id, update),
                )
        finally:
            if cancelled is None:
                self.end_turn(session_id, waiter)
        return result

    async def run_tool(
        self,
        session_id: str,
        call: ToolCall,
        run: Callable[[], Awaitable[_T]],
        *,
        cancelled: asyncio.Event | None = None,
    ) -> ToolResult[_T]:
        """Report *call*, have the committed mode decide it, ask if it says so, run it.

        See :func:`modefsm.protocol.run_tool` for the flow: a ``deny`` fails the tool call
        with the rule's reason and *run* is never awaited; an ``ask`` is a
        ``session/request_permission`` settled through the engine; *run* is awaited only
        once the decision lets the tool run, and an exception it raises fails the tool
        call and propagates. A ``session/cancel`` (while the client decides, or, with the
        turn's :meth:`begin_turn` event as *cancelled*, any time before the call is
        decided) settles it ``cancelled``; an answer that comes after the wait ended is
        logged as ``late_answer``. The tool call and its updates are kept in the
        conversation (part ``host``) for replay on ``session/load``.

        Raises:
            RequestError: ``-32002`` for an unknown session; ``-32602`` naming ``kind`` or
                ``toolCallId`` (a kind that is not an ACP ``ToolKind``; a switch or a tool
                call with the id open in the session: being asked or run); ``-32603``
                when the decision cannot be recorded (the tool did not run) or the session
                has too many asks open.
            Exception: whatever *run* raised.
        """
        with acp_errors():
            key = self._ask_begins(session_id, call.tool_call_id, "tool")
        try:
            return await self._run_tool(session_id, call, run, cancelled)
        finally:
            del self._asking[key]

    async def _run_tool(
        self,
        session_id: str,
        call: ToolCall,
        run: Callable[[], Awaitable[_T]],
        cancelled: asyncio.Event | None,
    ) -> ToolResult[_T]:
        waiter = cancelled if cancelled is not None else self.begin_turn(session_id)
        try:
            with acp_errors():
                self._held(session_id)
                return await run_tool(
                    self.engine,
                    self.conn,
                    session_id,
                    call,
                    run,
                    cancelled=waiter,
                    abandoned=lambda: self._abandon(session_id, call.tool_call_id, "tool"),
                    record=lambda update: self._keep(session_id, update, "host"),
                )
        finally:
            if cancelled is None:
                self.end_turn(session_id, waiter)

    def prompt_for(self, session_id: str) -> str | None:
        """The system-prompt text of the session's mode (the spec's ``prompt``), or ``None``.

        The mode as this process knows it: call :meth:`refresh` first where a turn starts
        (with a shared store another process may have changed it).

        Raises:
            RequestError: ``-32002`` for an unknown session, or one the connection does not
                hold.
        """
        with acp_errors():
            self._held(session_id)
            return self.engine.prompt_for(session_id)

    def _record_switch(self, session_id: str, update: Any) -> None:
        self._keep(session_id, update, "mode")

    def _keep(self, session_id: str, update: Any, part: Part) -> None:
        """Keep a tool call's update; only its first (``tool_call``) must be kept to go on.

        The ``tool_call`` of a switch or a ``run_tool`` call is kept *gated* (see
        :attr:`~modefsm.log.ConversationItem.gated`).
        """
        if isinstance(update, ToolCallStart):
            data = update.model_dump(mode="json", by_alias=True, exclude_none=True)
            with acp_errors():  # failing: nothing proposed, -32603
                self.conversation.append(session_id, data, part, gated=True)
            return
        try:  # the outcome stands whether or not the journal takes it
            self.record(session_id, update, part)
        except RequestError:
            logging.getLogger("modefsm").warning(
                "conversation journal: the outcome of %s was not kept", update.tool_call_id
            )

    def _abandon(self, session_id: str, tool_call_id: str, asker: _Asker) -> None:
        request_id = self._sent.pop((session_id, tool_call_id), None)
        if request_id is None and self._ids_known:
            return  # the request never went out: no answer can come
        _keep_last(self._abandoned, (session_id, tool_call_id, request_id), asker)

    def permission_sent(self, request: PermissionRequest) -> _Asker | None:
        """A ``session/request_permission`` of this agent's goes out (its JSON-RPC id).

        Called by the transports (:class:`~modefsm.protocol.CheckedTransport`, HTTP and
        WebSocket) so that an answer that comes after the wait ended is matched to the
        request it answers, by id, even when a ``toolCallId`` is asked again meanwhile.

        Returns:
            What sent it: ``"switch"`` (a ``switch_mode`` switch, proposed through
            :meth:`propose_switch` or :func:`modefsm.protocol.propose_switch`), ``"tool"``
            (:meth:`run_tool`), or ``None`` (a request the host sent itself). The
            transport keeps it with the request
            (:attr:`~modefsm.protocol.transport.PermissionRequest.asker`) for as long as
            it remembers the request, to log a second answer as what it answers.
        """
        self._ids_known = True
        key = (request.session_id, request.tool_call_id)
        _keep_last(self._sent, key, request.request_id)
        asker = self._asking.get(key)
        if asker is None:
            switch = switch_asked(self.engine, *key)
            if switch is not None:  # proposed through the module-level propose_switch
                asker = "switch"
                switch.gave_up.append(lambda: self._abandon(*key, "switch"))
        return asker

    def _ask_begins(self, session_id: str, tool_call_id: str, asker: _Asker) -> tuple[str, str]:
        """Hold *tool_call_id* as asked in the session by *asker* (the caller deletes it).

        Raises:
            InvalidParamsError: the session has a switch or a tool call with this
                ``toolCallId`` being asked here (field ``toolCallId``): nothing is sent.
        """
        key = (session_id, tool_call_id)
        if key in self._asking:
            msg = f"toolCallId: {tool_call_id!r} already has an open permission request"
            raise InvalidParamsError("toolCallId", tool_call_id, (), msg)
        self._asking[key] = asker
        return key

    def late_answer(self, request: PermissionRequest, response: dict[str, Any]) -> None:
        """The first answer to a ``session/request_permission``, seen on the wire.

        If the switch or the tool call had stopped waiting (``session/cancel``,
        ``session/close``, a mode change that withdrew a tool call's ask), the SDK drops the
        answer: it changes nothing, and an option it selected is logged here
        (``late_answer``): a switch's as a ``modefsm.change_rejected`` record, a tool
        call's as a ``modefsm.answer_dropped`` line (the call was settled already: the
        answer is no decision). Called by :class:`~modefsm.protocol.CheckedTransport`; the
        line is written after this returns, by the engine's backlog
        (:meth:`~modefsm.engine.ModeEngine.reject_switch_soon`,
        :meth:`~modefsm.engine.ModeEngine.drop_answer_soon`), so a store waiting for
        another process's lock never holds up the event loop; the transports wait for it
        (:meth:`~modefsm.engine.ModeEngine.drain_notes`) when their connection ends.
        """
        asked = (request.session_id, request.tool_call_id)
        if self._sent.get(asked) == request.request_id:
            del self._sent[asked]
        key = (*asked, request.request_id)
        if key not in self._abandoned:
            key = (*asked, None)  # abandoned before the transport named its request
            if key not in self._abandoned:
                return
        asker = self._abandoned.pop(key)
        option_id = _selected(response)
        if option_id is not None:
            self._answer_dropped(request, "late_answer", option_id, asker)

    def stray_answer(self, request: PermissionRequest, response: dict[str, Any]) -> None:
        """A second answer to a ``session/request_permission``: change nothing, log it.

        The SDK drops such answers silently; :class:`~modefsm.protocol.CheckedTransport` calls
        this so the log shows them (``duplicate_answer``, with the option selected, if any),
        written after this returns as :meth:`late_answer`'s line is: a ``change_rejected``
        record for a switch's request, a ``modefsm.answer_dropped`` line for any other
        (a tool call's, or one the host sent itself).
        """
        asker: _Asker | None = None
        if request.asker in ("switch", "tool"):
            asker = "switch" if request.asker == "switch" else "tool"
        self._answer_dropped(request, "duplicate_answer", _selected(response), asker)

    def _answer_dropped(
        self,
        request: PermissionRequest,
        reason: Literal["late_answer", "duplicate_answer"],
        option_id: str | None,
        asker: _Asker | None,
    ) -> None:
        """Log an answer to *request* that changed nothing, as what *asker* asked for."""
        engine = self.engine
        note = engine.reject_switch_soon if asker == "switch" else engine.drop_answer_soon
        note(
            request.session_id,
            reason,
            tool_call_id=request.tool_call_id,
            option_id=option_id,
            request_id=request.request_id,
        )


class _Turn:
    """One session's settling turn: its lock, and how many restores hold or wait for it."""

    __slots__ = ("lock", "waiting")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.waiting = 0


_SETTLING: weakref.WeakKeyDictionary[ConversationStore, dict[str, _Turn]] = (
    weakref.WeakKeyDictionary()
)
"""By conversation store: the settling turn of each session being restored (while held)."""

_RESTARTED = "Failed: the agent restarted before the tool call ended; its result is unknown."
_RESTARTED_ASKING = "Failed: the agent restarted before the permission request was answered."
_RESTARTED_RUNNING = "Failed: the agent restarted while the tool call ran; its result is unknown."


def left_open(items: Iterable[ConversationItem]) -> list[tuple[ConversationItem, str]]:
    """The tool calls *items* leave open whose sender no longer runs, oldest first.

    Returns:
        ``(item, status)`` pairs: the ``tool_call`` item and the last status sent
        (``pending`` or ``in_progress``); a tool call whose last update (the ``tool_call``
        itself included) is ``completed`` or ``failed`` has ended, one whose sender runs
        (:func:`~modefsm.log.owner_alive`) is its own.
    """
    started: dict[str, tuple[ConversationItem, str]] = {}
    for item in items:
        update = item.update
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str):
            continue
        kind, status = update.get("sessionUpdate"), update.get("status")
        if kind == "tool_call":
            if status in ("completed", "failed"):  # it ended in its first update
                started.pop(call_id, None)
            else:
                started[call_id] = (item, status if isinstance(status, str) else "pending")
        elif kind == "tool_call_update" and call_id in started:
            if status in ("completed", "failed"):
                del started[call_id]
            elif isinstance(status, str):
                started[call_id] = (started[call_id][0], status)
    return [(item, status) for item, status in started.values() if not owner_alive(item.owner)]


_ABANDONED_KEPT = 1024
"""How many permission requests given up on (by a cancel, a close or a withdrawal) are
remembered, to log their late answers. What sent a request (a switch or a tool call), to
log a second answer as the answer it is, is kept by the transport with the request."""

_Asker = Literal["switch", "tool"]
"""What sent a permission request: a ``switch_mode`` switch, or a host's tool call."""

_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep_last(kept: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Set *key* in *kept* as its newest entry; forget the oldest past :data:`_ABANDONED_KEPT`."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > _ABANDONED_KEPT:
        kept.popitem(last=False)


MAX_CWD_CHARS = 4096
"""The longest ``cwd`` a ``session/new`` may give (Linux's ``PATH_MAX``): it is kept whole
in the session's creation record, for ``session/list``."""

CLOSE_WAIT = 10.0
"""Seconds a ``session/close`` waits for the session's cancelled turns to end before it
frees the session anyway."""


def _selected(response: dict[str, Any]) -> str | None:
    """The ``optionId`` a raw permission answer selected, if it is one."""
    result = response.get("result")
    outcome = result.get("outcome") if isinstance(result, dict) else None
    option_id = outcome.get("optionId") if isinstance(outcome, dict) else None
    return option_id if isinstance(option_id, str) else None


async def _finish(change: Coroutine[Any, Any, _T]) -> _T:
    """Run a client's change to its end, even if its request is cancelled meanwhile.

    A change is committed before its notifications are sent: a ``$/cancel_request`` that
    arrives while they are being sent must neither cut them short nor have the client told
    that the change failed. The change finishes; its answer is the one the client gets.
    """
    task = asyncio.ensure_future(change)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is None or task.cancelled():
                raise
            current.uncancel()


@functools.cache
def _version() -> str:
    try:
        return metadata.version("modefsm")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"
