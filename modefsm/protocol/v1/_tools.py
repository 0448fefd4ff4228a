"""A host's tool call, decided by the session's committed mode and reported over ACP.

A host runs each tool call its model makes through :func:`run_tool` (or
:meth:`ModeAgent.run_tool <modefsm.protocol.ModeAgent.run_tool>`):

1. a ``tool_call`` update (its ``kind``, ``status: "pending"``);
2. the engine decides it against the committed mode (:meth:`ModeEngine.decide_async
   <modefsm.engine.ModeEngine.decide_async>`; with a shared store it catches up first), and
   an ``allow`` or ``deny`` is recorded before anything runs;
3. ``deny``: ``tool_call_update`` ``failed`` with the rule's ``reason`` as content; the
   tool never runs;
4. ``ask``: ``session/request_permission`` with the decision's options (ACP
   ``PermissionOption`` kinds ``allow_once``, ``allow_always``, ``reject_once``), the
   answer settled through :meth:`ModeEngine.settle <modefsm.engine.ModeEngine.settle>`
   (``cancelled``, ``session/cancel``, ``-32800`` or an ``optionId`` not offered settle it
   ``cancelled``). If the client changes the mode while it decides and the new mode denies
   the call, the engine withdraws the ask: the flow stops waiting at once, the tool call
   fails with the new mode's reason, and an answer that still comes is logged as
   ``late_answer`` (a ``modefsm.answer_dropped`` line: no decision); if the new mode
   allows it, it runs at once;
5. allowed (or approved, or covered by a remembered grant): ``tool_call_update``
   ``in_progress``, the host's *run*, then ``completed`` (its result as content when it is
   text). If *run* raises, the tool call ends ``failed`` with the exception's type and
   message as content, and the exception propagates to the caller unchanged.

The permission round trip is the one the switch flow uses
(:func:`~modefsm.protocol.v1._ask.ask_permission`); over ACP v2 the same calls become a
``tool_call_update`` and the v2 request with ``state_update`` ``requires_action`` while
the user decides.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from acp.schema import (
    PermissionOption,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from modefsm.engine import ModeEngine, ToolCall, ToolDecision
from modefsm.errors import AskClosedError, InvalidParamsError
from modefsm.protocol.v1._ask import ask_permission, shielded, text_content

__all__ = ["ToolResult", "run_tool"]

_T = TypeVar("_T")

_OUTCOME_TEXT = {
    "reject_once": "Rejected by the user.",
    "reject_always": "Rejected by the user.",
    "cancelled": "Cancelled: the permission request was not answered.",
}


@dataclass(frozen=True, slots=True)
class ToolResult(Generic[_T]):
    """How a tool call run through :func:`run_tool` ended.

    Attributes:
        tool_call_id: ACP ``toolCallId``.
        decision: the final decision (an ask as settled); ``None`` when the turn was
            cancelled before the call was decided.
        status: the last ``tool_call_update`` status sent: ``completed`` or ``failed``.
        value: what *run* returned (``None`` when it did not run).
        text: the content of that last update (the result, or why it did not run).
    """

    tool_call_id: str
    decision: ToolDecision | None
    status: Literal["completed", "failed"]
    value: _T | None
    text: str

    @property
    def ran(self) -> bool:
        """Whether the tool ran (its decision let it run, and it completed)."""
        return self.status == "completed"


async def run_tool(  # noqa: C901 - one flow, read top to bottom
    engine: ModeEngine,
    client: Any,
    session_id: str,
    call: ToolCall,
    run: Callable[[], Awaitable[_T]],
    *,
    cancelled: asyncio.Event | None = None,
    abandoned: Callable[[], None] | None = None,
    record: Callable[[Any], None] | None = None,
) -> ToolResult[_T]:
    """Report *call*, have the committed mode decide it, ask if it says so, and run it.

    See the module docstring for the flow and the frames.

    Args:
        engine: the engine that owns the session.
        client: the SDK connection to the client (``request_permission`` is awaited).
        session_id: ACP ``sessionId``.
        call: the tool call (its ``tool_call_id``, ``kind``, host ``name`` and ``title``).
        run: the tool itself, awaited only when the decision lets it run.
        cancelled: set by the agent's ``session/cancel`` handler: a call not yet decided
            is not decided, an ask pending ends ``cancelled``.
        abandoned: called the moment a cancel or a withdrawal ends the wait for the
            client's answer (which the SDK will then drop), so the agent can log it.
        record: called with each ``tool_call`` / ``tool_call_update`` before it is sent
            (to keep it for replay on ``session/load``).

    Returns:
        How it ended (:class:`ToolResult`); *run*'s value when it ran.

    Raises:
        UnknownSessionError: no such session (nothing is sent).
        InvalidParamsError: ``call.kind`` is not an ACP ``ToolKind``, or an ask for
            ``call.tool_call_id`` is already open (nothing is sent).
        AskLimitError: the session has too many asks open (the tool call ends ``failed``).
        LogError: the decision or the answer could not be recorded (the tool call ends
            ``failed``; the tool did not run).
        ConnectionError: the connection closed while the client decided (the ask is
            settled ``cancelled``).
        Exception: whatever *run* raised (the tool call ends ``failed``).
    """
    engine.decide(session_id, call)  # an unknown session or a bad kind: nothing is sent
    if any(open_.call.tool_call_id == call.tool_call_id for open_ in engine.open_asks(session_id)):
        msg = f"toolCallId: {call.tool_call_id!r} already has an open permission request"
        raise InvalidParamsError("toolCallId", call.tool_call_id, (), msg)
    kind = call.kind or "other"
    title = call.title or call.name or kind
    tool_call_id = call.tool_call_id
    start = ToolCallStart(
        session_update="tool_call",
        tool_call_id=tool_call_id,
        title=title,
        kind=kind,
        status="pending",
    )

    async def end(status: Literal["completed", "failed"], text: str) -> None:
        final = ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=tool_call_id,
            status=status,
            content=text_content(text),
        )
        if record is not None:
            record(final)
        if session_id in engine:
            await shielded(engine.notify(session_id, final))

    if record is not None:
        record(start)
    await shielded(engine.notify(session_id, start))
    if cancelled is not None and cancelled.is_set():
        text = "Cancelled: the turn was cancelled before the tool call was decided."
        await end("failed", text)
        return ToolResult(tool_call_id, None, "failed", None, text)
    try:
        decision = await engine.decide_async(session_id, call)
        if decision.decision == "ask" and decision.outcome is None:
            decision = await _asked(
                engine,
                client,
                session_id,
                decision,
                title=title,
                cancelled=cancelled,
                abandoned=abandoned,
            )
    except asyncio.CancelledError:
        await end("failed", "Cancelled: the turn was cancelled.")
        raise
    except Exception as exc:
        await end("failed", f"Failed: {exc}")
        raise
    if not decision.runs:
        text = _refusal(decision)
        await end("failed", text)
        return ToolResult(tool_call_id, decision, "failed", None, text)
    progress = ToolCallProgress(
        session_update="tool_call_update", tool_call_id=tool_call_id, status="in_progress"
    )
    if record is not None:
        record(progress)
    await shielded(engine.notify(session_id, progress))
    try:
        value = await run()
    except BaseException as exc:
        await end("failed", f"Failed: {type(exc).__name__}: {exc}")
        raise
    text = value if isinstance(value, str) else "Done."
    await end("completed", text)
    return ToolResult(tool_call_id, decision, "completed", value, text)


async def _asked(
    engine: ModeEngine,
    client: Any,
    session_id: str,
    decision: ToolDecision,
    *,
    title: str,
    cancelled: asyncio.Event | None,
    abandoned: Callable[[], None] | None,
) -> ToolDecision:
    """Ask the client about the open ask *decision*; its settled (or withdrawn) decision."""
    call = decision.call
    ended = asyncio.ensure_future(engine.outcome_of(decision))
    ended.add_done_callback(_retrieved)
    try:
        try:
            answer = await ask_permission(
                client,
                session_id,
                ToolCallUpdate(
                    tool_call_id=call.tool_call_id,
                    title=title,
                    kind=call.kind or "other",
                    status="pending",
                ),
                [
                    PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                    for o in decision.options
                ],
                cancelled=cancelled,
                abandoned=abandoned,
                withdrawn=ended,
            )
        except BaseException:  # the connection closed, or the turn's task was cancelled
            if abandoned is not None:
                abandoned()
            await shielded(_settle(engine, decision, None, ended))
            raise
        if answer.unanswered == "withdrawn":
            return ended.result()
        offered = {o.option_id for o in decision.options}
        option_id = answer.option_id if answer.option_id in offered else None
        return await _settle(engine, decision, option_id, ended)
    finally:
        ended.cancel()


async def _settle(
    engine: ModeEngine,
    decision: ToolDecision,
    option_id: str | None,
    ended: asyncio.Future[ToolDecision],
) -> ToolDecision:
    """Settle the ask; if a mode change or the close ended it first, that decision."""
    try:
        return await engine.settle(decision, option_id)
    except AskClosedError:
        with contextlib.suppress(asyncio.CancelledError):
            return await asyncio.shield(ended)
        raise


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark *future*'s outcome seen (an ask closed before it was waited for raises there)."""
    if not future.cancelled():
        future.exception()


def _refusal(decision: ToolDecision) -> str:
    """The content of the ``failed`` update of a tool call its decision does not run."""
    if decision.decision == "deny":
        return decision.reason or f"Not allowed in {decision.mode} mode."
    return _OUTCOME_TEXT.get(str(decision.outcome), "Not run.")
