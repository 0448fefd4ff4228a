"""The agent-initiated ``switch_mode`` tool call and its ``session/request_permission`` round trip.

An agent's tool code calls :func:`propose_switch` when the model wants to leave the
current mode (the "exit plan mode" flow of the ACP Session Modes page):

1. a ``tool_call`` update (``kind: "switch_mode"``, ``status: "pending"``, the plan as
   ``{"type": "content", "content": {"type": "text", ...}}``);
2. ``session/request_permission`` with the options the spec defines for the current mode;
3. on a selected allow option, the engine fires the approved switch to exactly that
   option's target (both mode notifications go out), then ``tool_call_update`` ``completed``;
4. on anything else (a reject option, ``cancelled``, a ``-32800`` error, an ``optionId``
   that was not offered, an answer that is not a valid response or another error, the
   session closed meanwhile), nothing changes, the tool call ends ``failed`` and the log
   records why.

An answer that arrives after ``session/cancel`` ended the wait changes nothing; if it
selected an option it is logged as ``late_answer``. (A second answer to the same request
never reaches this module: the SDK drops it, and :mod:`modefsm.wire` reports it.)

If the client changed the mode while the request was pending, the approval is still the
user's latest explicit choice: it applies when the spec lets the *current* mode reach the
target (the record then carries ``proposed_in``); otherwise it is refused and logged.
Nothing is locked while the client is deciding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    AllowedOutcome,
    ContentToolCallContent,
    PermissionOption,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from pydantic import ValidationError

from modefsm.errors import TransitionNotAllowedError, UnknownSessionError
from modefsm.records import RejectReason
from modefsm.sessions import ModeChange, ModeEngine

__all__ = ["REQUEST_CANCELLED", "SwitchResult", "offered_options", "propose_switch"]

REQUEST_CANCELLED = -32800
"""JSON-RPC error code of a request cancelled by the peer (``$/cancel_request``)."""

_DECLINED_TEXT: dict[RejectReason, str] = {
    "option_rejected": "Declined: staying in {mode} mode.",
    "cancelled": "Cancelled: staying in {mode} mode.",
    "option_not_offered": "Refused: the answer selected an option that was not offered.",
    "session_closed": "Refused: the session ended before the answer arrived.",
    "not_allowed": "Refused: the mode changed meanwhile and {mode} cannot reach the target.",
    "no_previous_mode": "Refused: there is no previous mode to return to.",
    "invalid_answer": "Refused: the answer was not a valid permission response.",
}


@dataclass(frozen=True, slots=True)
class SwitchResult:
    """How a proposed switch ended.

    Attributes:
        tool_call_id: ACP ``toolCallId`` of the switch's tool call.
        option_id: ACP ``optionId`` the client selected (``None`` when cancelled).
        change: the committed change, or ``None`` when nothing changed.
        reason: why nothing changed, or ``None`` when the switch was approved.
    """

    tool_call_id: str
    option_id: str | None
    change: ModeChange | None
    reason: RejectReason | None

    @property
    def approved(self) -> bool:
        """Whether the client selected an allow option and the switch was applied."""
        return self.reason is None


def offered_options(engine: ModeEngine, session_id: str) -> dict[str, str | None]:
    """The options the switch from the session's current mode offers now.

    Returns:
        ``{optionId: target}`` in the spec's order; the target is ``None`` for reject
        options. A ``$previous`` option is left out when the session has no previous mode.

    Raises:
        UnknownSessionError: no such session.
        TransitionNotAllowedError: the current mode has no switch.
    """
    session = engine.get(session_id)
    switch = engine.spec.switch_from(session.state)
    if switch is None:
        raise TransitionNotAllowedError(
            session_id=session_id,
            source=session.state,
            dest="",
            origin="switch_mode",
            allowed=(),
            field="kind",
        )
    offered: dict[str, str | None] = {}
    for option in switch.options:
        target = engine.resolve_target(session_id, option)
        if option.allows and target is None:
            continue
        offered[option.option_id] = target
    return offered


async def propose_switch(  # noqa: C901, PLR0912, PLR0915
    engine: ModeEngine,
    client: Any,
    session_id: str,
    *,
    plan: str,
    tool_call_id: str | None = None,
    cancelled: asyncio.Event | None = None,
) -> SwitchResult:
    """Propose the current mode's switch to the client and apply the user's answer.

    Args:
        engine: the engine that owns the session.
        client: the SDK connection to the client (``request_permission`` is awaited).
        session_id: ACP ``sessionId``.
        plan: the text shown with the request (Markdown), e.g. an implementation plan.
        tool_call_id: ACP ``toolCallId``; a fresh ``call_switch_mode_<hex>`` when ``None``.
        cancelled: set by the agent's ``session/cancel`` handler; if it is set before the
            client answers, the switch ends as ``cancelled`` without waiting further.

    Returns:
        How it ended (:class:`SwitchResult`).

    Raises:
        UnknownSessionError: no such session.
        TransitionNotAllowedError: the current mode has no switch to propose.
        ConnectionError: the connection closed while waiting (logged as ``session_closed``).
    """
    tool_call_id = tool_call_id or f"call_switch_mode_{uuid.uuid4().hex[:12]}"
    source = engine.get(session_id).state
    offered = offered_options(engine, session_id)
    switch = engine.spec.switch_from(source)
    assert switch is not None  # noqa: S101 - offered_options checked it
    kinds = {o.option_id: o.kind for o in switch.options}
    names = {o.option_id: o.name for o in switch.options}
    content = [
        ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=plan))
    ]
    await engine.notify(
        session_id,
        ToolCallStart(
            session_update="tool_call",
            tool_call_id=tool_call_id,
            title=switch.title,
            kind="switch_mode",
            status="pending",
            content=content,
        ),
    )
    options = [
        PermissionOption(option_id=option_id, name=names[option_id], kind=kinds[option_id])
        for option_id in offered
    ]
    request = client.request_permission(
        session_id=session_id,
        tool_call=ToolCallUpdate(
            tool_call_id=tool_call_id,
            title=switch.title,
            kind="switch_mode",
            status="pending",
            content=content,
        ),
        options=options,
    )
    option_id: str | None = None
    reason: RejectReason | None = None
    invalid = False

    def late(answer: Any) -> None:
        if isinstance(answer.outcome, AllowedOutcome):
            selected = answer.outcome.option_id
            engine.reject_switch(
                session_id,
                "late_answer",
                dest=offered.get(selected),
                tool_call_id=tool_call_id,
                option_id=selected,
            )

    try:
        response = await _until_cancelled(request, cancelled, late)
    except RequestError as exc:
        invalid = exc.code != REQUEST_CANCELLED
        response = None
    except ValidationError:  # the SDK could not read the answer as a RequestPermissionResponse
        invalid = True
        response = None
    except ConnectionError:
        engine.reject_switch(session_id, "session_closed", tool_call_id=tool_call_id)
        raise
    if response is not None and isinstance(response.outcome, AllowedOutcome):
        option_id = response.outcome.option_id
    if session_id not in engine:
        reason = "session_closed"
    elif invalid:
        reason = "invalid_answer"
    elif option_id is None:
        reason = "cancelled"
    elif option_id not in offered:
        reason = "option_not_offered"
    elif offered[option_id] is None:
        reason = "option_rejected"
    change: ModeChange | None = None
    if reason is not None:
        engine.reject_switch(
            session_id,
            reason,
            dest=offered.get(option_id) if option_id else None,
            tool_call_id=tool_call_id,
            option_id=option_id,
        )
    else:
        assert option_id is not None  # noqa: S101
        dest = offered[option_id]
        assert dest is not None  # noqa: S101
        try:
            change = engine.apply_switch(
                session_id,
                dest,
                tool_call_id=tool_call_id,
                option_id=option_id,
                proposed_in=source,
            )
        except TransitionNotAllowedError:
            reason = "not_allowed"
        except UnknownSessionError:  # pragma: no cover - checked above; no await between
            reason = "session_closed"
    if session_id in engine:
        mode = engine.get(session_id).state
        if reason is None:
            text = f"Switched to {mode} mode." if change else f"Already in {mode} mode."
        else:
            text = _DECLINED_TEXT[reason].format(mode=mode)
        await engine.notify(
            session_id,
            ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=tool_call_id,
                status="completed" if reason is None else "failed",
                content=[
                    ContentToolCallContent(
                        type="content", content=TextContentBlock(type="text", text=text)
                    )
                ],
            ),
        )
    return SwitchResult(tool_call_id, option_id, change, reason)


async def _until_cancelled(
    request: Any, cancelled: asyncio.Event | None, late: Callable[[Any], None]
) -> Any:
    """Await *request*; return ``None`` early if *cancelled* is set first.

    The request is not abandoned: the client must still answer it (with ``cancelled``),
    and ``late(answer)`` is called if it does with a valid answer.
    """
    if cancelled is None:
        return await request
    answer = asyncio.ensure_future(request)
    stop = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({answer, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if answer.done():
        return answer.result()

    def arrived(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            late(future.result())

    answer.add_done_callback(arrived)
    return None
