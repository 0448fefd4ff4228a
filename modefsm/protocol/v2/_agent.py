"""ACP v2 (Preview) on the same engine: the mode as a ``configOptions`` entry only.

:class:`ModeAgentV2` serves a v2 client (``initialize.protocolVersion >= 2``) on the
engine, log and restore source of a :class:`~modefsm.protocol.ModeAgent`. It builds every
frame from the SDK's v2 models (``acp.experimental.v2.schema``):

- the mode is the ``configOptions`` entry ``{configId, category: "mode", type:
  "select", currentValue, options}``; there is no ``modes``, no ``session/set_mode``
  (``-32601``) and no ``current_mode_update``;
- ``session/set_config_option`` answers the complete list; agent-initiated changes (an
  approved ``switch_mode``, a restore fallback) are announced by ``config_option_update``
  with the complete list;
- the ``switch_mode`` tool call is a ``tool_call_update`` (the first one creates it) and
  its permission request carries ``title`` and ``subject: {type: "tool_call",
  toolCall}``; ``state_update`` ``requires_action`` is sent while the user decides,
  ``running`` after, and ``idle`` with the ``stopReason`` at the end of the turn; the
  ``session/prompt`` response is ``{messageId}``;
- ``session/resume`` restores the mode (from the log after a restart, whichever version
  made the session) and sends a current ``state_update`` before its answer; an unknown
  session is ``-32002`` with ``data: {"sessionId": ...}``. With ``replayFrom`` it first
  replays the kept conversation (see :func:`replay_cursor` and :func:`replay_updates`);
  the current mode is then reported once, by the response (and a restore fallback's
  ``config_option_update``), never by historical mode updates.

The switch flow is :func:`modefsm.protocol.propose_switch` itself: the v1 permission call
it makes is carried out as the v2 request by a per-connection port. Records of changes made
over v2 carry ``protocol: 2``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import orjson
from acp import RequestError
from acp import schema as v1
from acp.experimental.v2 import schema as v2

from modefsm.engine import ConfigChanged, ModeChanged, ToolCall
from modefsm.errors import RESOURCE_NOT_FOUND, UnknownSessionError
from modefsm.log import ConversationItem
from modefsm.protocol._list import list_page
from modefsm.protocol.errors import acp_errors, invalid_params, session_not_found
from modefsm.protocol.v1 import ToolResult
from modefsm.protocol.v1._agent import ModeAgent, _finish, _version
from modefsm.protocol.v2._render import config_options, session_updates

__all__ = ["V2_PROTOCOL_VERSION", "ModeAgentV2"]
# Also for the other transports of this package (not re-exported): REPLAY_FROM_MESSAGE,
# replay_cursor, replay_updates, connect_v2.

_T = TypeVar("_T")

V2_PROTOCOL_VERSION = 2
"""The ACP protocol version :class:`ModeAgentV2` speaks."""


REPLAY_FROM_MESSAGE = "_modefsm/message"
"""The ``replayFrom.type`` of modefsm's cursor naming a message: ``{"type":
"_modefsm/message", "messageId": ...}`` (an implementation-specific cursor: the v2 schema
reserves types beginning with ``_`` for those)."""

_CURSOR_KEYS = {"start": {"type", "_meta"}, REPLAY_FROM_MESSAGE: {"type", "messageId", "_meta"}}
_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
}
_VALID_CURSORS = [{"type": "start"}, {"type": REPLAY_FROM_MESSAGE, "messageId": "<messageId>"}]


def replay_cursor(value: Any) -> str | None:
    """Check a ``session/resume`` ``replayFrom`` (its JSON value, present and not ``null``).

    Args:
        value: ``{"type": "start"}`` (replay the whole kept conversation) or
            ``{"type": "_modefsm/message", "messageId": ID}`` (replay from the message
            *ID*, inclusive); either may carry a ``_meta`` object.

    Returns:
        ``None`` for ``start``, else the ``messageId`` replay starts at.

    Raises:
        RequestError: ``-32602`` with ``data: {"field": "replayFrom", "valid": [...]}`` for
            any other value (an unknown ``type`` -- ACP's future ones included -- a
            missing or empty ``messageId``, another member).
    """
    kind = value.get("type") if isinstance(value, dict) else None
    keys = _CURSOR_KEYS.get(kind) if isinstance(kind, str) else None
    meta = value.get("_meta") if isinstance(value, dict) else None
    message_id = value.get("messageId") if isinstance(value, dict) else None
    problem = None
    if keys is None:
        shown = repr(kind) if isinstance(kind, str) else "a cursor without a string type"
        problem = f"replayFrom: {shown} is not a replay cursor this agent serves"
    elif not set(value) <= keys:
        problem = f"replayFrom: a {kind!r} cursor has no member {min(set(value) - keys)!r}"
    elif not isinstance(meta, dict | None):
        shown = _JSON_TYPES.get(type(meta), type(meta).__name__)
        problem = f"replayFrom._meta: an object, not {shown}"
    elif kind == REPLAY_FROM_MESSAGE and not (isinstance(message_id, str) and message_id):
        problem = f"replayFrom.messageId: a {kind!r} cursor needs a non-empty string"
    if problem is not None:
        text = (
            f"{problem} (valid: {{'type': 'start'}}, "
            f"{{'type': '{REPLAY_FROM_MESSAGE}', 'messageId': ...}})"
        )
        raise invalid_params(text, {"field": "replayFrom", "valid": _VALID_CURSORS})
    return message_id if kind == REPLAY_FROM_MESSAGE else None


def _minted_id(session_id: str, kind: str, blocks: list[Any], seen: Counter[bytes]) -> str:
    """A stable ``messageId`` for a message kept without one (a v1 turn's)."""
    key = orjson.dumps([session_id, kind, blocks], option=orjson.OPT_SORT_KEYS)
    seen[key] += 1
    digest = hashlib.sha256(key + b"#" + str(seen[key]).encode()).hexdigest()
    return f"msg_{digest[:32]}"


_CHUNKS = {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"}
_TOOL_CALLS = {"tool_call", "tool_call_update"}


def _runs(items: Iterable[ConversationItem]) -> Iterable[tuple[str, Any, list[dict[str, Any]]]]:
    """Tool calls one by one; chunks in runs of one kind and one kept ``messageId``."""
    run: list[dict[str, Any]] = []
    key: tuple[str, Any] = ("", None)
    for item in items:
        update = item.update
        kind = update.get("sessionUpdate")
        if kind in _TOOL_CALLS:
            if run:
                yield key[0], key[1], run
                run = []
            yield kind, None, [update]
        elif kind in _CHUNKS:
            this = (kind, update.get("messageId"))
            if run and this != key:
                yield key[0], key[1], run
                run = []
            key = this
            run.append(update)
        # anything else has no v2 shape (a plan) or is a mode update: never replayed
    if run:
        yield key[0], key[1], run


def replay_updates(session_id: str, items: Iterable[ConversationItem]) -> list[tuple[Any, Any]]:
    """The kept conversation (ACP v1 updates) as the v2 updates a replay sends, in order.

    Args:
        session_id: ACP ``sessionId`` (ids minted for messages kept without one use it).
        items: the session's :class:`~modefsm.log.ConversationItem` s, oldest first.

    Returns:
        ``(messageId, update)`` pairs (``messageId`` ``None`` for tool calls), *update*
        an SDK v2 model: a user's chunks become one ``user_message`` with all its
        blocks (as a v2 prompt echoes it); an agent's chunks stay
        ``agent_message_chunk`` s (``agent_thought_chunk`` s), without the whole-message
        update a replay sends before them (:func:`primed`); ``tool_call`` and
        ``tool_call_update`` become ``tool_call_update`` (the first one creates the tool
        call). A message kept with a ``messageId`` keeps it; one kept without (a v1
        turn's) gets ``msg_`` and 32 hex digits derived from the session, its content
        and how many identical messages precede it. Items with no v2 shape (a ``plan``)
        and mode updates are left out.
    """
    out: list[tuple[Any, Any]] = []
    seen: Counter[bytes] = Counter()
    for kind, kept_id, run in _runs(items):
        if kind in _TOOL_CALLS:
            data = {**run[0], "sessionUpdate": "tool_call_update"}
            out.append((None, v2.SessionToolCallUpdate.model_validate(data)))
            continue
        blocks = [update.get("content") for update in run]
        message_id = kept_id if isinstance(kept_id, str) else None
        message_id = message_id or _minted_id(session_id, kind, blocks, seen)
        if kind == "user_message_chunk":
            body = {"sessionUpdate": "user_message", "messageId": message_id, "content": blocks}
            out.append((message_id, v2.UserMessageUpdate.model_validate(body)))
            continue
        model = v2.AgentMessageChunk if kind == "agent_message_chunk" else v2.AgentThoughtChunk
        out.extend(
            (
                message_id,
                model.model_validate(
                    {"sessionUpdate": kind, "messageId": message_id, "content": block}
                ),
            )
            for block in blocks
        )
    return out


_WHOLE = {
    "agent_message_chunk": v2.AgentMessageUpdate,
    "agent_thought_chunk": v2.AgentThoughtUpdate,
    "user_message_chunk": v2.UserMessageUpdate,
}
"""The whole-message update of each chunk kind, in the v2 schema."""


def _replay(session_id: str, items: list[ConversationItem], message_id: str | None) -> list[Any]:
    """:meth:`ModeAgentV2.replay_from` of the kept *items*.

    Raises:
        RequestError: ``-32602`` naming ``replayFrom.messageId`` (not in *items*).
    """
    pairs = replay_updates(session_id, items)
    if message_id is None:
        return primed(update for _id, update in pairs)
    for index, (kept, _update) in enumerate(pairs):
        if kept == message_id:
            return primed(update for _id, update in pairs[index:])
    text = f"replayFrom.messageId: {message_id!r} is not in the session's kept conversation"
    raise invalid_params(text, {"field": "replayFrom.messageId", "value": message_id})


def _joined(before: list[ConversationItem], now: list[ConversationItem]) -> list[ConversationItem]:
    """The kept conversation *before*, then what *now* (read later) added after it.

    The journal keeps a session's last items only: items are appended at the end and the
    oldest let go, so *now* is a stretch of *before* (from some item on) followed by new
    items. That stretch is found where the longest end of *before* is the start of *now*;
    what *now* no longer holds is taken from *before*, so every item of *before* is there,
    in order (a minted ``messageId`` counts the same earlier messages).
    """
    if not now:
        return before
    first = now[0]
    for start, item in enumerate(before):
        if item == first and before[start:] == now[: len(before) - start]:
            return before[:start] + now
    return before + now


def primed(updates: Iterable[Any]) -> list[Any]:
    """*updates* with each message's whole-message update before its first chunk.

    In a replay, every ``*_chunk`` of a ``messageId`` is preceded, in the same replay, by
    the whole-message update of that id with ``content: []`` (``agent_message``,
    ``agent_thought``, ``user_message``), then the chunks, so a client meets the
    message before its content. A message already started by its whole update in
    *updates* is left as it is.
    """
    out: list[Any] = []
    started: set[tuple[str, Any]] = set()
    for update in updates:
        kind = getattr(update, "session_update", None)
        message_id = getattr(update, "message_id", None)
        whole = _WHOLE.get(kind) if isinstance(kind, str) else None
        if whole is not None and isinstance(message_id, str):
            key = (whole.__name__, message_id)
            if key not in started:
                started.add(key)
                out.append(whole(message_id=message_id, content=[]))
        elif kind in ("agent_message", "agent_thought", "user_message"):
            started.add((type(update).__name__, message_id))
        out.append(update)
    return out


class _PermissionPort:
    """What :func:`~modefsm.protocol.propose_switch` calls as ``client``, over v2."""

    def __init__(self, agent: ModeAgentV2) -> None:
        self._agent = agent

    async def request_permission(
        self, session_id: str, tool_call: v1.ToolCallUpdate, options: list[v1.PermissionOption]
    ) -> v1.RequestPermissionResponse:
        engine = self._agent.base.engine
        await engine.notify(session_id, v2.RequiresActionSessionStateUpdate())
        call = tool_call.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            answer = await self._agent.conn.request_permission(
                session_id=session_id,
                title=tool_call.title or "Permission",
                options=[
                    v2.PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                    for o in options
                ],
                subject=v2.ToolCallPermissionSubjectVariant(
                    tool_call=v2.ToolCallUpdate.model_validate(call)
                ),
            )
        finally:
            if session_id in engine:
                engine.enqueue(session_id, v2.RunningSessionStateUpdate())
        outcome = answer.outcome
        if isinstance(outcome, v2.SelectedPermissionOutcomeVariant):
            chosen: Any = v1.AllowedOutcome(outcome="selected", option_id=outcome.option_id)
        else:  # cancelled, or an outcome this version does not know: never an approval
            chosen = v1.DeniedOutcome(outcome="cancelled")
        return v1.RequestPermissionResponse(outcome=chosen)


class ModeAgentV2:
    """The v2 face of a :class:`~modefsm.protocol.ModeAgent` for one connection.

    Args:
        base: the v1 agent whose engine, log and restore source are shared; its
            ``prompt`` (if any) runs the turn, its ``propose_switch`` the switch.
        conn: the SDK's v2 ``AgentSideConnection``.
    """

    def __init__(self, base: ModeAgent, conn: Any) -> None:
        """Attach *base*'s engine to this v2 connection (notifications rendered as v2)."""
        self.base = base
        self.conn = conn
        base.engine.protocol = V2_PROTOCOL_VERSION
        base.engine.sink = self._send
        base.conn = _PermissionPort(self)

    async def _send(self, session_id: str, update: Any) -> None:
        """The engine's sink: its events and a host's v1 updates as v2 models, v2 ones as given."""
        if isinstance(update, ModeChanged | ConfigChanged):
            for item in session_updates(update):
                await self.conn.session_update(session_id=session_id, update=item)
            return
        if isinstance(update, v1.ToolCallStart | v1.ToolCallProgress):
            data = update.model_dump(mode="json", by_alias=True, exclude_none=True)
            data["sessionUpdate"] = "tool_call_update"
            update = v2.SessionToolCallUpdate.model_validate(data)
        elif isinstance(update, v1.AgentMessageChunk):
            content = update.content.model_dump(mode="json", by_alias=True, exclude_none=True)
            update = v2.AgentMessageChunk.model_validate(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": update.message_id or self._agent_message_id(session_id),
                    "content": content,
                }
            )
        await self.conn.session_update(session_id=session_id, update=update)

    def _agent_message_id(self, session_id: str) -> str:
        ids = self.base.message_ids.get(session_id)
        return ids[1] if ids is not None else _message_id()

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize(
        self, protocol_version: int, info: Any = None, capabilities: Any = None, **kwargs: Any
    ) -> v2.InitializeResponse:
        """``initialize``: protocol version 2 and ``capabilities.session: {}``.

        ``{}`` advertises the v2 session baseline, all of it served: ``session/new``,
        ``session/list``, ``session/resume``, ``session/close``, ``session/prompt``,
        ``session/cancel`` and ``session/update``. No sub-capability is advertised:
        ``session/delete``, ``additionalDirectories``, MCP servers and prompt content
        beyond the baseline are not served.
        """
        del protocol_version, info, capabilities, kwargs
        return v2.InitializeResponse(
            protocol_version=V2_PROTOCOL_VERSION,
            capabilities=v2.AgentCapabilities(session=v2.SessionCapabilities()),
            info=v2.Implementation(name=self.base.agent_name, version=_version()),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> v2.NewSessionResponse:
        """``session/new``: a session in the initial mode; the mode is a config option."""
        del kwargs
        response = await self.base.new_session(cwd=cwd)
        return v2.NewSessionResponse(
            session_id=response.session_id,
            config_options=config_options(self.base.engine.config_options(response.session_id)),
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> v2.ListSessionsResponse:
        """``session/list``: one page of the sessions the log or store knows (v2 models).

        As :meth:`ModeAgent.list_sessions <modefsm.protocol.ModeAgent.list_sessions>`.
        """
        del kwargs
        with acp_errors():
            page, next_cursor = await list_page(self.base.engine, cwd, cursor)
        return v2.ListSessionsResponse(
            sessions=[
                v2.SessionInfo(session_id=s.session_id, cwd=s.cwd, updated_at=s.updated_at or None)
                for s in page
            ],
            next_cursor=next_cursor,
        )

    async def resume_session(
        self, session_id: str, cwd: str, replay_from: Any = None, **kwargs: Any
    ) -> v2.ResumeSessionResponse:
        """``session/resume``: replay (with ``replayFrom``), the mode, ``idle``, the answer.

        With ``replayFrom`` the kept conversation is sent first, as :func:`replay_updates`
        gives it, from the start or from the message the cursor names (inclusive; see
        :func:`replay_cursor`). Then the session's mode is restored (after a restart, from
        the log, whichever version made the session; a fallback is announced), a current
        ``state_update`` is sent, and the answer carries the complete ``configOptions``.
        Without ``replayFrom`` nothing is replayed. A failed request sends nothing, and a
        request refused for its params settles nothing (asks ended processes left open
        are settled only once ``replayFrom`` is known to be served: the message it names
        is looked up before, and the replay is the conversation kept then followed by what
        was kept since, the settlement's ``failed`` updates among it, so a journal whose
        bound lets that message go meanwhile still serves it). A
        ``$/cancel_request`` during the replay ends it (``-32800``, nothing restored);
        once the restore has begun, the resume runs to its end and answers.

        Raises:
            RequestError: ``-32002`` with ``data: {"sessionId": ...}`` for an unknown
                session; ``-32602`` naming ``replayFrom`` (a cursor not served) or
                ``replayFrom.messageId`` (no such message in the kept conversation).
        """
        del cwd, kwargs
        base = self.base
        with _V2_ERRORS, acp_errors():
            if session_id not in base.engine:
                await base._restore_point(session_id)  # noqa: SLF001 - unknown: -32002
        message_id = None
        kept: list[ConversationItem] | None = None
        if replay_from is not None:
            cursor = replay_from
            if not isinstance(cursor, dict):
                cursor = replay_from.model_dump(mode="json", by_alias=True, exclude_none=True)
            message_id = replay_cursor(cursor)
            kept = await self._kept(session_id)
            _replay(session_id, kept, message_id)  # not kept: -32602, nothing changed
        # the request is valid: settle what ended processes left open, then replay
        with _V2_ERRORS, acp_errors():
            point = await base._settled_point(session_id)  # noqa: SLF001
        if kept is not None:
            # what was kept then, and what was appended since (the settlement's ends): the
            # message named is in it even if the journal's bound has let it go since
            joined = _joined(kept, await self._kept(session_id))
            for update in _replay(session_id, joined, message_id):
                await base.engine.notify(session_id, update)
        # from here on the resume runs to its end: a fallback it applies is logged and
        # announced, so a $/cancel_request must not turn its answer into a failure
        return await _finish(self._restore_and_report(session_id, point))

    async def _restore_and_report(self, session_id: str, point: Any) -> v2.ResumeSessionResponse:
        base = self.base
        with _V2_ERRORS:
            await base._restore(session_id, point)  # noqa: SLF001
        await base.engine.notify(session_id, v2.IdleSessionStateUpdate())
        return v2.ResumeSessionResponse(
            config_options=config_options(base.engine.config_options(session_id))
        )

    async def replay_from(self, session_id: str, message_id: str | None = None) -> list[Any]:
        """The v2 updates a replay sends: all kept ones, or from *message_id* (inclusive).

        Each message's chunks come after its whole-message update (:func:`primed`).

        Raises:
            RequestError: ``-32602`` naming ``replayFrom.messageId`` when *message_id* is
                not a message of the kept conversation; ``-32603`` when the journal
                cannot be read.
        """
        return _replay(session_id, await self._kept(session_id), message_id)

    async def _kept(self, session_id: str) -> list[ConversationItem]:
        """The session's kept conversation (``-32603`` when the journal cannot be read)."""
        with acp_errors():
            return await self.base.conversation.history(session_id)

    async def close_session(self, session_id: str, **kwargs: Any) -> v2.CloseSessionResponse:
        """``session/close``: forget the session; an unknown one succeeds too (v2).

        As :meth:`ModeAgent.close_session <modefsm.protocol.ModeAgent.close_session>`: on
        a shared engine, while another connection holds the session, only this
        connection's hold ends and its own turns on the session are cancelled; one the
        connection does not hold is unknown to it (succeeds, changes nothing).
        """
        del kwargs
        if session_id in self.base.engine and self.base.holds(session_id):
            await self.base.close_session(session_id)
        return v2.CloseSessionResponse()

    # -- the mode option ---------------------------------------------------------------

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> v2.SetSessionConfigOptionResponse:
        """``session/set_config_option``: the complete list once the change is announced.

        The request's ``type`` is checked on the wire (it must be ``"id"``); see
        :func:`modefsm.protocol.serve_negotiated`.

        Raises:
            RequestError: ``-32602`` naming ``configId`` or ``value``; ``-32002``.
        """
        del kwargs
        engine = self.base.engine
        with _V2_ERRORS, acp_errors():
            if not self.base.holds(session_id):
                raise UnknownSessionError(session_id)
            options = await _finish(engine.set_config_option(session_id, config_id, value))
        return v2.SetSessionConfigOptionResponse(config_options=config_options(options))

    # -- prompts -----------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> v2.PromptResponse:
        """``session/prompt``: echo the user message, run the turn, answer ``{messageId}``.

        The turn is the base agent's ``prompt``; its progress is reported with
        ``state_update`` ``running`` ... ``idle`` (with the turn's ``stopReason``).
        """
        del kwargs
        with _V2_ERRORS:
            self.base.session(session_id)  # -32002 before anything is sent
        working = self.base.begin_turn(session_id)  # a session/close waits for its idle
        try:
            return await self._turn(session_id, prompt)
        finally:
            self.base.end_turn(session_id, working)

    async def _turn(self, session_id: str, prompt: list[Any]) -> v2.PromptResponse:
        engine = self.base.engine
        message_id = _message_id()
        user = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in prompt]
        await engine.notify(
            session_id,
            v2.UserMessageUpdate.model_validate(
                {"sessionUpdate": "user_message", "messageId": message_id, "content": user}
            ),
        )
        await engine.notify(session_id, v2.RunningSessionStateUpdate())
        stop_reason = "end_turn"
        ids = self.base.message_ids[session_id] = (message_id, _message_id())
        try:
            turn = getattr(self.base, "prompt", None)
            if turn is not None:
                blocks = [
                    v1.TextContentBlock.model_validate(b) for b in user if b.get("type") == "text"
                ]
                result = await turn(prompt=blocks, session_id=session_id)
                stop_reason = result.stop_reason
        except asyncio.CancelledError:
            stop_reason = "cancelled"
            raise
        finally:
            if self.base.message_ids.get(session_id) is ids:
                del self.base.message_ids[session_id]
            if session_id in engine:
                engine.enqueue(session_id, v2.IdleSessionStateUpdate(stop_reason=stop_reason))
                await asyncio.shield(engine.flush())
        return v2.PromptResponse(message_id=message_id)

    async def run_tool(
        self,
        session_id: str,
        call: ToolCall,
        run: Callable[[], Awaitable[_T]],
        *,
        cancelled: asyncio.Event | None = None,
    ) -> ToolResult[_T]:
        """:meth:`ModeAgent.run_tool <modefsm.protocol.ModeAgent.run_tool>` over v2.

        The same flow and errors; the tool call is a ``tool_call_update`` (the first one,
        ``pending``, creates it), and while the user decides an ask the session's state is
        ``requires_action`` (``running`` once answered).
        """
        with _V2_ERRORS:
            return await self.base.run_tool(session_id, call, run, cancelled=cancelled)

    def prompt_for(self, session_id: str) -> str | None:
        """:meth:`ModeAgent.prompt_for <modefsm.protocol.ModeAgent.prompt_for>`."""
        with _V2_ERRORS:
            return self.base.prompt_for(session_id)

    async def cancel_session(self, session_id: str, **kwargs: Any) -> None:
        """``session/cancel``: end the running turn; a pending switch ends ``cancelled``."""
        await self.base.cancel(session_id, **kwargs)

    # -- wire callbacks (late and second permission answers) ---------------------------

    def late_answer(self, request: Any, response: dict[str, Any]) -> None:
        """See :meth:`ModeAgent.late_answer <modefsm.protocol.ModeAgent.late_answer>`."""
        self.base.late_answer(request, response)

    def permission_sent(self, request: Any) -> str | None:
        """See :meth:`ModeAgent.permission_sent <modefsm.protocol.ModeAgent.permission_sent>`."""
        return self.base.permission_sent(request)

    def stray_answer(self, request: Any, response: dict[str, Any]) -> None:
        """See :meth:`ModeAgent.stray_answer <modefsm.protocol.ModeAgent.stray_answer>`."""
        self.base.stray_answer(request, response)


def connect_v2(
    base: ModeAgent | Callable[[Any], ModeAgentV2], transport: Any, *, listening: bool = False
) -> Any:
    """The SDK's v2 agent connection on *transport*, serving ``ModeAgentV2(base, ...)``.

    For a connection whose version is already chosen (its ``initialize`` asks for
    ``protocolVersion`` 2; a higher one must be rewritten to 2 first): the SDK's
    ``AgentSideConnection`` of ``acp.experimental.v2`` with its initialization checks,
    without the per-message lock of the SDK's ``AgentProtocolRouter``.

    Args:
        base: the v1 agent whose engine, log and restore source the v2 face shares, or a
            function of the SDK's v2 connection that returns the :class:`ModeAgentV2`.
        transport: a message transport (``receive``, ``send``, ``close``).
        listening: start reading at once (else the caller awaits ``listen()``).

    Returns:
        An ``acp.experimental.AgentProtocolConnection`` (``listen()``, ``close()``); the
        :class:`ModeAgentV2` is ``connection.agent``.
    """
    from acp.connection import Connection  # noqa: PLC0415 - the v2 path only
    from acp.experimental import AgentProtocolConnection  # noqa: PLC0415
    from acp.experimental.v2 import AgentSideConnection  # noqa: PLC0415

    handlers: list[Any] = []

    async def handle(method: str, params: Any, is_notification: bool) -> Any:  # noqa: FBT001
        return await handlers[0](method, params, is_notification)

    connection = Connection(handle, transport, listening=listening)
    agents: list[ModeAgentV2] = []

    def make(conn: Any) -> ModeAgentV2:
        agents.append(ModeAgentV2(base, conn) if isinstance(base, ModeAgent) else base(conn))
        return agents[0]

    _v2conn, router = AgentSideConnection.attach(make, connection)
    handlers.append(router)
    connected = AgentProtocolConnection(connection)
    connected.agent = agents[0]  # type: ignore[attr-defined]
    return connected


class _V2Errors(contextlib.AbstractContextManager[None]):
    """v1's ``-32002 {uri}`` becomes v2's ``-32002 {sessionId}`` (other errors pass)."""

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, RequestError) and exc.code == RESOURCE_NOT_FOUND:
            data = exc.data if isinstance(exc.data, dict) else {}
            session_id = data.get("uri", data.get("sessionId"))
            raise session_not_found(str(session_id), 2) from None


_V2_ERRORS = _V2Errors()


def _message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"
