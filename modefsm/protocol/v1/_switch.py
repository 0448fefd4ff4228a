"""The agent-initiated ``switch_mode`` tool call and its ``session/request_permission`` round trip.

An agent's tool code calls :func:`propose_switch` when the model wants to leave the
current mode (the "exit plan mode" flow of the ACP Session Modes page):

1. a ``tool_call`` update (``kind: "switch_mode"``, ``status: "pending"``, the plan as
   ``{"type": "content", "content": {"type": "text", ...}}``);
2. ``session/request_permission`` with the options the spec defines for the current mode,
   resolved once (each names the mode it leads to);
3. on a selected allow option, the engine fires the approved switch to exactly that
   option's target (both mode notifications go out), then ``tool_call_update`` ``completed``;
4. on anything else (a reject option, ``cancelled``, a ``-32800`` error, an ``optionId``
   that was not offered, the session closed meanwhile), nothing changes, the tool call
   ends ``failed`` and the log records why (an answer that is not a valid response or is
   another error, a refusing host hook and a failed log write end it ``failed`` too).

An answer that arrives after ``session/cancel`` ended the wait changes nothing: the SDK
drops it, and :class:`~modefsm.protocol.ModeAgent` logs it as ``late_answer`` (served through
:mod:`modefsm.protocol`, which also reports a second answer as ``duplicate_answer``).

The engine holds the switch as one object: :meth:`ModeEngine.offer_switch
<modefsm.engine.SwitchOffers.offer_switch>` builds the offer from the committed mode (with a
store shared by several processes, the session first catches up with what the others
committed), options resolved once: a ``$previous`` option names its concrete mode, and is
left out when it has none or another option already leads there.
:meth:`ModeEngine.settle_switch <modefsm.engine.SwitchOffers.settle_switch>` takes the answer
and decides, once, against the committed mode; an outcome that changes nothing is logged
from the committed mode too (its client is told of a mode taken meanwhile before the tool
call ends).

If the session changed while the request was pending (a stale approval), the approval
applies exactly the target its option showed, never re-resolved, and only when the spec
lets the *current* mode reach it by a switch and it is restorable (the record then
carries ``proposed_in``); otherwise it is refused and logged as ``stale_option``. Nothing
is locked while the client is deciding.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from acp.schema import (
    PermissionOption,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from modefsm.engine import ModeEngine, SwitchOffer, SwitchResult
from modefsm.log import RejectReason
from modefsm.protocol.v1._ask import ask_permission, shielded, text_content

__all__ = ["propose_switch"]


class SwitchAsk:
    """A switch's ``session/request_permission`` being asked (see :func:`switch_asked`).

    Attributes:
        gave_up: called, in order, the moment a cancel ends the wait for the answer (the
            SDK then drops the answer if it comes): an agent adds one to log it.
    """

    __slots__ = ("gave_up",)

    def __init__(self) -> None:
        self.gave_up: list[Callable[[], None]] = []


_ASKING: weakref.WeakKeyDictionary[ModeEngine, dict[tuple[str, str], list[SwitchAsk]]] = (
    weakref.WeakKeyDictionary()
)
"""By engine, by (``sessionId``, ``toolCallId``): the switches asking now, oldest first."""


def switch_asked(engine: ModeEngine, session_id: str, tool_call_id: str) -> SwitchAsk | None:
    """The newest switch of *engine* asking about *tool_call_id* in the session, if any.

    Whichever public path proposed it (:func:`propose_switch` or
    :meth:`ModeAgent.propose_switch <modefsm.protocol.ModeAgent.propose_switch>`), so a
    transport's agent can tell a switch's permission request from any other.
    """
    asks = _ASKING.get(engine, {}).get((session_id, tool_call_id))
    return asks[-1] if asks else None


_DECLINED_TEXT: dict[RejectReason, str] = {
    "option_rejected": "Declined: staying in {mode} mode.",
    "cancelled": "Cancelled: staying in {mode} mode.",
    "option_not_offered": "Refused: the answer selected an option that was not offered.",
    "session_closed": "Refused: the session ended before the answer arrived.",
    "not_allowed": "Refused: the mode changed meanwhile and {mode} cannot reach the target.",
    "stale_option": "Refused: the mode changed while the request was open; staying in {mode} mode.",
    "no_previous_mode": "Refused: there is no previous mode to return to.",
    "invalid_answer": "Refused: the answer was not a valid permission response.",
    "hook_failed": "Refused by the agent's policy: staying in {mode} mode.",
    "log_failed": "Failed: the change could not be recorded; staying in {mode} mode.",
}


async def propose_switch(  # noqa: C901 - one flow, read top to bottom
    engine: ModeEngine,
    client: Any,
    session_id: str,
    *,
    plan: str,
    tool_call_id: str | None = None,
    cancelled: asyncio.Event | None = None,
    abandoned: Callable[[], None] | None = None,
    record: Callable[[Any], None] | None = None,
) -> SwitchResult:
    """Propose the current mode's switch to the client and apply the user's answer.

    Whatever happens, the tool call ends (``completed`` or ``failed``) and an outcome that
    changed nothing is logged with its reason.

    Args:
        engine: the engine that owns the session.
        client: the SDK connection to the client (``request_permission`` is awaited).
        session_id: ACP ``sessionId``.
        plan: the text shown with the request (Markdown), e.g. an implementation plan.
        tool_call_id: ACP ``toolCallId``; a fresh ``call_switch_mode_<hex>`` when ``None``.
        cancelled: set by the agent's ``session/cancel`` handler; once it is set, the
            switch ends as ``cancelled`` (without asking, if the request was not sent yet).
        abandoned: called the moment a cancel ends the wait for the client's answer (which
            the SDK will then drop), so that the agent can log it if it still comes.
        record: called with the ``tool_call`` and the final ``tool_call_update`` before
            each is sent (to keep them for replay on ``session/load``); if it raises for
            the ``tool_call``, nothing is proposed.

    Returns:
        How it ended (:class:`SwitchResult`).

    Raises:
        UnknownSessionError: no such session.
        NoSwitchError: the session's mode, caught up with what other processes committed,
            has no switch: nothing was proposed (the mode changed since the caller chose
            to propose; decide again from ``engine.get(session_id).state``).
        LogError: the store could not be read to catch up (nothing was proposed).
        ConnectionError: the connection closed while waiting (logged as ``session_closed``).
    """
    offer = await engine.offer_switch(session_id, tool_call_id=tool_call_id)
    tool_call_id = offer.tool_call_id
    content = text_content(plan)
    start = ToolCallStart(
        session_update="tool_call",
        tool_call_id=tool_call_id,
        title=offer.title,
        kind="switch_mode",
        status="pending",
        content=content,
    )
    if record is not None:
        record(start)
    try:
        await shielded(engine.notify(session_id, start))
    except asyncio.CancelledError:
        await _end_cancelled(engine, offer, None)
        raise
    option_id: str | None = None
    reason: RejectReason | None = None
    if cancelled is not None and cancelled.is_set():
        reason = "cancelled"
    elif not offer.approvable:
        reason = "no_previous_mode"
    else:
        with _asking(engine, session_id, tool_call_id, abandoned) as gave_up:
            try:
                answer = await ask_permission(
                    client,
                    session_id,
                    ToolCallUpdate(
                        tool_call_id=tool_call_id,
                        title=offer.title,
                        kind="switch_mode",
                        status="pending",
                        content=content,
                    ),
                    _permission_options(offer),
                    cancelled=cancelled,
                    abandoned=gave_up,
                )
            except ConnectionError:
                await engine.settle_switch(offer, None, reason="session_closed")
                raise
            except asyncio.CancelledError:  # $/cancel_request of the request running the turn
                await _end_cancelled(engine, offer, gave_up)
                raise
        option_id = answer.option_id
        if answer.unanswered is not None:
            reason = "invalid_answer" if answer.unanswered == "invalid_answer" else "cancelled"
    result = await engine.settle_switch(offer, option_id, reason=reason)
    if session_id in engine:
        mode = engine.get(session_id).state
        if result.reason is None:
            text = f"Switched to {mode} mode." if result.change else f"Already in {mode} mode."
        else:
            text = _DECLINED_TEXT[result.reason].format(mode=mode)
        final = ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=tool_call_id,
            status="completed" if result.reason is None else "failed",
            content=text_content(text),
        )
        if record is not None:
            record(final)
        # shielded: once decided, the outcome is announced in full whatever cancels the turn
        await shielded(engine.notify(session_id, final))
    return result


@contextlib.contextmanager
def _asking(
    engine: ModeEngine,
    session_id: str,
    tool_call_id: str,
    abandoned: Callable[[], None] | None,
) -> Iterator[Callable[[], None]]:
    """Hold the switch as asking (:func:`switch_asked`) while the block runs.

    Yields:
        The callback for the moment a cancel ends the wait: the hooks agents added to
        :attr:`SwitchAsk.gave_up`, then *abandoned*.
    """
    ask = SwitchAsk()

    def gave_up() -> None:
        for hook in ask.gave_up:
            hook()
        if abandoned is not None:
            abandoned()

    key = (session_id, tool_call_id)
    asking = _ASKING.setdefault(engine, {})
    asking.setdefault(key, []).append(ask)
    try:
        yield gave_up
    finally:
        asks = asking.get(key, [])
        if ask in asks:
            asks.remove(ask)
        if not asks:
            asking.pop(key, None)
        if not asking:
            _ASKING.pop(engine, None)


async def _end_cancelled(
    engine: ModeEngine, offer: SwitchOffer, abandoned: Callable[[], None] | None
) -> None:
    """A cancelled turn ends its switch: logged ``cancelled``, the tool call ``failed``."""
    await shielded(engine.settle_switch(offer, None, reason="cancelled"))
    if abandoned is not None:
        abandoned()  # the SDK drops the answer if it comes: log it as late_answer
    session_id = offer.session_id
    if session_id in engine:
        final = _final(offer.tool_call_id, "cancelled", engine.get(session_id).state)
        engine.enqueue(session_id, final)
        await shielded(engine.flush())


def _final(tool_call_id: str, reason: RejectReason, mode: str) -> ToolCallProgress:
    """The ``failed`` update that ends a switch which changed nothing."""
    return ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=tool_call_id,
        status="failed",
        content=text_content(_DECLINED_TEXT[reason].format(mode=mode)),
    )


def _permission_options(offer: SwitchOffer) -> list[PermissionOption]:
    """The ACP options of *offer*, with the names as resolved (each names its mode)."""
    return [
        PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in offer.options
    ]
