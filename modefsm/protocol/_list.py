"""``session/list``: the sessions the log or store knows, a page at a time, for v1 and v2.

A page holds at most :data:`LIST_PAGE` sessions, newest last activity first (the
``timestamp`` of the session's last committed record), then by ``sessionId``. Where they
come from, by what the agent has:

- a :class:`~modefsm.store.SessionStore` (``modefsm serve --log``/``--store``): every
  session of the store, whichever process made it (the file store's SQLite index, or one
  PostgreSQL query; the ``cwd`` filter runs there);
- a :class:`~modefsm.store._restore.RestoreIndex` as the restore source: the sessions of its log;
- neither: the sessions live in this process (no ``updatedAt``; ordered by ``sessionId``).

A session is listed with the ``cwd`` its ``session/new`` gave (kept in its
``session_created`` record); sessions without one (made by an older modefsm, or by a host
calling the engine directly) are not listed. Closed sessions are listed: a ``session/load``
or ``session/resume`` brings them back. No title is given: the log holds modes, not the
conversation.

The cursor is opaque to clients: base64url of ``["l1", updatedAt, sessionId]`` of the
page's last session, so a page follows the previous one across restarts and processes
(a session whose activity moves it above the cursor meanwhile is not listed again).
"""

from __future__ import annotations

import base64
import binascii
import heapq
from typing import TYPE_CHECKING

import orjson

from modefsm.protocol.errors import invalid_params
from modefsm.store import ListAfter, ListedSession

if TYPE_CHECKING:
    from modefsm.engine import ModeEngine

__all__ = ["LIST_PAGE"]
# Also for the agents of this package (not re-exported): MAX_CURSOR_CHARS, decode_cursor,
# encode_cursor, list_page.

LIST_PAGE = 100
"""The most sessions one ``session/list`` answer holds."""

MAX_CURSOR_CHARS = 4096
"""The longest ``cursor`` read; a longer one is ``-32602``."""

_MARK = "l1"


def encode_cursor(last: ListedSession) -> str:
    """The ``nextCursor`` of a page whose last session is *last*."""
    data = orjson.dumps([_MARK, last.updated_at, last.session_id])
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None) -> ListAfter:
    """Where the page of *cursor* starts (``None``: the first page).

    Raises:
        RequestError: ``-32602`` with ``data.field`` ``"cursor"`` for a cursor this agent
            did not give (one holding a NUL too: no timestamp or ``sessionId`` has one).
    """
    if cursor is None:
        return None
    value = None
    if len(cursor) <= MAX_CURSOR_CHARS:
        try:
            value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except (ValueError, binascii.Error, orjson.JSONDecodeError):
            value = None
    if (
        isinstance(value, list)
        and len(value) == 3  # noqa: PLR2004 - mark, updatedAt, sessionId
        and value[0] == _MARK
        and all(isinstance(item, str) and "\x00" not in item for item in value[1:])
    ):
        return value[1], value[2]
    shown = cursor if len(cursor) <= 64 else f"{cursor[:64]}..."  # noqa: PLR2004
    text = f"cursor: {shown!r} is not a cursor of this agent (pass a nextCursor it gave)"
    raise invalid_params(text, {"field": "cursor"})


def _live(engine: ModeEngine, cwd: str | None, after: ListAfter, limit: int) -> list[ListedSession]:
    """A page of the sessions live in *engine* that have a ``cwd`` (by ``sessionId``)."""
    start = after[1] if after is not None else None
    found = (
        ListedSession(session.session_id, session.cwd, "")
        for session in engine.live_sessions()
        if session.cwd is not None
        and (cwd is None or session.cwd == cwd)
        and (start is None or session.session_id > start)
    )
    return heapq.nsmallest(limit, found, key=lambda listed: listed.session_id)


async def _rows(
    engine: ModeEngine, cwd: str | None, after: ListAfter, limit: int
) -> list[ListedSession]:
    """The sessions of *engine*: its store's (awaited), else its live ones."""
    if engine.store is not None:
        return await engine.store.list_sessions_async(cwd, after, limit)
    return _live(engine, cwd, after, limit)


async def list_page(
    engine: ModeEngine, cwd: str | None, cursor: str | None
) -> tuple[list[ListedSession], str | None]:
    """One ``session/list`` page and its ``nextCursor`` (``None`` on the last page).

    Raises:
        RequestError: ``-32602`` naming ``cursor``.
        StoreBusy, LogError: the store or index cannot be read now.
    """
    after = decode_cursor(cursor)
    rows = await _rows(engine, cwd, after, LIST_PAGE + 1)
    if len(rows) <= LIST_PAGE:
        return rows, None
    page = rows[:LIST_PAGE]
    return page, encode_cursor(page[-1])
