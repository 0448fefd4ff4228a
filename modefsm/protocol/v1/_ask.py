"""The ``session/request_permission`` round trip that the switch and tool-call flows share.

:func:`ask_permission` sends the request and waits for its answer, or for the turn's
``session/cancel``, or for the engine to withdraw the question (a tool call's ask that a
mode change made moot); it says which, as an :class:`Answer`. What the answer means is the
caller's: :func:`~modefsm.protocol.propose_switch` applies a switch,
:func:`~modefsm.protocol.run_tool` settles a tool call's ask through the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from acp.exceptions import RequestError
from acp.schema import (
    AllowedOutcome,
    ContentToolCallContent,
    PermissionOption,
    TextContentBlock,
    ToolCallUpdate,
)
from pydantic import ValidationError

from modefsm.errors import REQUEST_CANCELLED

__all__: list[str] = []  # used by the switch and tool-call flows of this package only

Unanswered = Literal["cancelled", "invalid_answer", "withdrawn"]
"""Why a request ended without a selected option: ``session/cancel`` (or ``-32800``, or the
``cancelled`` outcome), an answer that is not a permission response, or the engine withdrew
the question."""


@dataclass(frozen=True, slots=True)
class Answer:
    """How a permission request ended.

    Attributes:
        option_id: the ``optionId`` the client selected (``None``: none was).
        unanswered: why no option was selected, or ``None`` when one was.
    """

    option_id: str | None
    unanswered: Unanswered | None


async def ask_permission(
    client: Any,
    session_id: str,
    tool_call: ToolCallUpdate,
    options: list[PermissionOption],
    *,
    cancelled: asyncio.Event | None = None,
    abandoned: Callable[[], None] | None = None,
    withdrawn: Awaitable[Any] | None = None,
) -> Answer:
    """Send ``session/request_permission`` and wait for the answer (or a reason to stop).

    Args:
        client: the SDK connection to the client (``request_permission`` is awaited).
        session_id: ACP ``sessionId``.
        tool_call: the request's ``toolCall``.
        options: the request's ``options``.
        cancelled: once set (``session/cancel``), the wait ends as ``cancelled``.
        abandoned: called the moment *cancelled* or *withdrawn* ends the wait (the SDK
            will then drop the client's answer: the caller logs it if it still comes).
        withdrawn: once done, the wait ends as ``withdrawn``.

    Returns:
        The :class:`Answer`; an ``optionId`` the client selected is given as it came,
        offered or not (the caller checks).

    Raises:
        ConnectionError: the connection closed while waiting.
        asyncio.CancelledError: the task running the turn was cancelled
            (``$/cancel_request``).
    """
    request = client.request_permission(session_id=session_id, tool_call=tool_call, options=options)
    try:
        response, stopped = await _until_stopped(request, cancelled, withdrawn, abandoned)
    except RequestError as exc:
        return Answer(None, "cancelled" if exc.code == REQUEST_CANCELLED else "invalid_answer")
    except ValidationError:  # the SDK could not read the answer as a permission response
        return Answer(None, "invalid_answer")
    if stopped is not None:
        return Answer(None, stopped)
    if response is not None and isinstance(response.outcome, AllowedOutcome):
        return Answer(response.outcome.option_id, None)
    return Answer(None, "cancelled")


async def _until_stopped(
    request: Awaitable[Any],
    cancelled: asyncio.Event | None,
    withdrawn: Awaitable[Any] | None,
    abandoned: Callable[[], None] | None,
) -> tuple[Any, Unanswered | None]:
    """Await *request* in this task, unless *cancelled* is set or *withdrawn* is done first.

    The request is awaited directly (not in a task of its own), so its answer is handled
    in the order the client sent it relative to the client's next requests.
    """
    if cancelled is None and withdrawn is None:
        return await request, None
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - always called from a task
    fired: list[Unanswered] = []

    async def watch() -> None:
        stops: dict[asyncio.Future[Any], Unanswered] = {}
        if cancelled is not None:
            stops[asyncio.ensure_future(cancelled.wait())] = "cancelled"
        if withdrawn is not None:
            # shielded: ending this watch must not cancel the engine's own awaitable
            stops[asyncio.ensure_future(asyncio.shield(withdrawn))] = "withdrawn"
        try:
            done, _pending = await asyncio.wait(stops, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in stops:
                if not future.done():
                    future.cancel()
        fired.append(stops[next(iter(done))])
        if abandoned is not None:
            abandoned()
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await request, None
    except asyncio.CancelledError:
        if not fired:
            raise
        task.uncancel()
        return None, fired[0]
    finally:
        watcher.cancel()


async def shielded(work: Awaitable[Any]) -> None:
    """Run *work* to its end even if this task is cancelled meanwhile (then re-raise)."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait({task})
        raise


def text_content(text: str) -> list[ContentToolCallContent]:
    """A tool call's ``content``: one text block (``{"type": "content", "content": ...}``)."""
    return [
        ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=text))
    ]
