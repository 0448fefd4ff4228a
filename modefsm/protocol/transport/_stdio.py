"""The JSON-RPC frames on ``modefsm serve``'s stdio: strict frames in, an answer for each request.

The SDK's stdio transport trusts its peer. Fuzzing ``modefsm serve`` showed that one bad
line could stop the agent or leave a request unanswered:

- a frame that is JSON but not an object (``[1]``, ``5``) killed the agent with a traceback,
  and ``null`` was read as end of input, so the agent exited silently;
- a request with ``"method": null`` got no answer, and one with an array as method got
  ``-32603`` where JSON-RPC says ``-32600``;
- ``NaN`` or ``1e400`` as an id were echoed as ``NaN``/``Infinity``, which is not JSON, and
  ids of the wrong type (objects, arrays, booleans) were served like valid ones;
- bad JSON got no answer at all (JSON-RPC: ``-32700`` with id ``null``).

:class:`CheckedTransport` sits between the pipe and the SDK's connection (it implements the
SDK's message-level ``Transport``): every line is parsed strictly (UTF-8, standard JSON, no
lone surrogates, bounded size and depth) and checked as a JSON-RPC 2.0 frame before the
SDK sees it. A bad request is answered here, with id ``null`` when its id cannot be known;
a bad notification or response is dropped (JSON-RPC never answers those). Every frame
written is standard JSON; a response that cannot be encoded becomes an error response for
the same id, so no request is left unanswered.

It also tracks the agent's own requests, so that a second answer to a
``session/request_permission`` (which the SDK drops without a word) reaches the agent's
:meth:`~modefsm.protocol.ModeAgent.stray_answer` and is logged.

Flow control (:func:`run_agent`): at most :data:`MAX_IN_FLIGHT` requests are handled at
once (not counting those waiting for the client's answer to one of the agent's own
requests); more are held, read but not started. At most :data:`MAX_OPEN` are open in all
(handled, held, or waiting for the client): one more is answered at once with an error
naming the limit. Reading stdin never waits for the agent's work, so the client's answers
to the agent's requests and its cancels are always read; it stops only while the output
is not drained, so a client that stops reading stdout stops the agent's reading, not its
memory.
At the end of input every request already read is answered (within :data:`EOF_GRACE`
seconds) before the agent stops; a closed stdout stops it at once
(:class:`OutputClosedError`). Diagnostics never block: :class:`Diagnostics` writes them
to stderr only when the pipe has room, at a bounded rate, and counts what it drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import math
import os
import re
import select
import stat
import sys
import threading
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson
from acp.agent.connection import AgentSideConnection
from acp.meta import AGENT_METHODS

from modefsm.errors import (
    ERROR_MESSAGES,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    FrameError,
)
from modefsm.protocol._sdk import CANCEL_REQUEST, ROUTES_CANCEL_REQUEST
from modefsm.protocol.errors import error_object, error_response, frame_refusal

__all__ = [
    "EOF_GRACE",
    "ID_SCAN_BYTES",
    "MAX_DEPTH",
    "MAX_ECHO_CHARS",
    "MAX_ECHO_ITEMS",
    "MAX_FRAME_BYTES",
    "MAX_ID_CHARS",
    "MAX_IN_FLIGHT",
    "MAX_OPEN",
    "MAX_VALUES",
    "BoundedPipeWriter",
    "CheckedTransport",
    "Diagnostics",
    "OutputClosedError",
    "PermissionRequest",
    "check_frame",
    "run_agent",
]

MAX_FRAME_BYTES = 50 * 1024 * 1024
"""The largest frame read, in bytes; longer lines are answered ``-32600`` and skipped."""

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects accepted in a frame."""

MAX_VALUES = 1_000_000
"""The most values (array elements and object members) in a frame; more is ``-32600``."""

MAX_ID_CHARS = 1024
"""The longest string id served; a longer one is answered ``-32600`` with id ``null``."""

MAX_ECHO_CHARS = 256
"""A string of the request that an error response echoes (in ``message`` or ``data``,
as given or as Python's ``repr`` shows it) is cut to this many characters, followed by
``...[+N chars]``; an error response still over 4 KiB then has every string cut so, and
every array and object cut to :data:`MAX_ECHO_ITEMS` items. The id is echoed whole (a
string id is at most :data:`MAX_ID_CHARS`)."""

MAX_ECHO_ITEMS = 64
"""In an error response over 4 KiB, an array keeps its first this many elements, followed
by the string ``...[+N items]``; an object its first this many members, followed by the
member ``"...[+N members]": null``."""

MAX_IN_FLIGHT = 64
"""Requests handled at once, not counting those that wait for the client's answer to a
request of the agent (``session/request_permission``); a request read beyond them is held
(read, not started) until one is answered or starts waiting for the client."""

MAX_OPEN = 1024
"""Requests read and not answered yet, in all (handled, held, or waiting for the client's
answer to the agent); one more is answered at once with ``-32600`` (``limit``: ``open``),
on stdio as over HTTP (``429``)."""

EOF_GRACE = 5.0
"""Seconds the agent keeps answering the requests already read after the end of input."""

_ANSWERED_KEPT = 1024
"""How many answered ``session/request_permission`` ids are remembered, to spot a second
answer."""

_READ_LIMIT = 1024 * 1024
"""The input buffer's limit, in bytes: stdin is not read while twice this is buffered."""

_ERROR_BYTES = 4096
"""An error response longer than this, encoded, once its echoes are cut, has every string,
array and object cut (an echo no longer in its original form, a long text of the
agent's own, an echo of many values such as pydantic's ``input``)."""

_ECHO_TEXTS = 16
"""A request with more long strings than this has every string of an error answer cut
(finding each echo costs time in their number)."""

_NOTIFICATIONS = frozenset(
    {AGENT_METHODS["session_cancel"], *([CANCEL_REQUEST] if ROUTES_CANCEL_REQUEST else [])}
)
"""The notifications the SDK routes to an agent (besides ``_``-prefixed extensions);
``$/cancel_request`` cancels the handler of the request it names (SDK 1.0; 0.12 has no
handler for it, and it is dropped as any other notification nobody handles)."""

_CLOSE_WAIT = 2.0
"""Seconds to wait for the output to flush when the agent stops."""


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A ``session/request_permission`` the agent sent, as the transport saw it.

    Attributes:
        request_id: its JSON-RPC id.
        session_id: ACP ``sessionId``.
        tool_call_id: ACP ``toolCall.toolCallId``.
        asker: what sent it, as the agent's ``permission_sent(request)`` hook answered when
            it went out (:class:`~modefsm.protocol.ModeAgent`: ``"switch"`` or ``"tool"``),
            or ``None``; kept with the request for as long as the transport remembers it,
            so a late or second answer is matched to what asked.
    """

    request_id: Any
    session_id: str
    tool_call_id: str
    asker: str | None = None


StrayAnswer = Callable[[PermissionRequest, dict[str, Any]], None]
"""``stray(request, response)``: a response to a permission request that was already answered."""


class OutputClosedError(ConnectionError):
    """stdout was closed or broke while the agent was serving: no answer can reach the client.

    Attributes:
        unanswered: requests read and not answered when it happened.
    """

    def __init__(self, unanswered: int) -> None:
        """Build the error; *unanswered* requests were read and not answered."""
        self.unanswered = unanswered
        noun = "request" if unanswered == 1 else "requests"
        super().__init__(f"stdout was closed by the client; {unanswered} {noun} unanswered")


# -- frame checks ------------------------------------------------------------------------

_LONG_NUMBER = re.compile(rb"\d{19}")
"""A run of 19 digits: maybe an integer beyond 64 bits, which only the exact parser keeps."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _count_values(line: bytes) -> int:
    """The values in *line*: separators plus containers, outside strings when it matters.

    The count over the raw bytes is an upper bound; only when it is over
    :data:`MAX_VALUES` are the strings left out, a piece at a time (escapes removed first,
    a string is then what lies between two quotes), in bounded extra memory.
    """
    bound = line.count(b",") + line.count(b"[") + line.count(b"{")
    if bound <= MAX_VALUES:
        return bound
    if b"\\" in line:
        line = line.replace(b"\\\\", b"").replace(b'\\"', b"")
    count = 0
    inside = 0
    for start in range(0, len(line), _COUNT_PIECE):
        pieces = line[start : start + _COUNT_PIECE].split(b'"')
        outside = b"".join(pieces[inside::2])
        count += outside.count(b",") + outside.count(b"[") + outside.count(b"{")
        inside ^= (len(pieces) - 1) & 1
    return count


_COUNT_PIECE = 256 * 1024
"""Bytes counted at a time by :func:`_count_values` past its first bound."""


def _check_text(value: Any, *, strings: bool) -> None:
    """Raise if *value* nests deeper than :data:`MAX_DEPTH` or (*strings*) holds a lone surrogate.

    Iterative; visits each value once (only containers when *strings* is false).
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    containers = (dict, list)
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                item.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif isinstance(item, containers):
            if depth > MAX_DEPTH:
                raise RecursionError
            children = item.values() if isinstance(item, dict) else item
            if strings:
                if isinstance(item, dict):
                    stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in children)
            else:
                stack.extend((v, depth + 1) for v in children if isinstance(v, containers))


def _valid_id(value: Any) -> bool:
    """ACP: an id is a string (here: of a bounded length), an integer or null.

    JSON-RPC allows any number; the ACP schemas (v1 and v2) allow integers only, so an
    answer echoing ``1.5`` would break them.
    """
    if isinstance(value, str):
        return len(value) <= MAX_ID_CHARS
    return value is None or type(value) is int


def _answerable_id(value: Any) -> bool:
    """Whether *value* can be the id of an answer: valid, and encodable (no lone surrogate)."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return _valid_id(value)


ID_SCAN_BYTES = 64 * 1024
"""Bytes at each end of a frame refused for its size or shape that are searched for its
``"id"`` member (:func:`_readable_id`)."""

_TOKEN = re.compile(
    rb'[ \t\r\n]*(?:("(?:[^"\\]|\\.)*")|(-?[0-9][-+.0-9eE]*|true|false|null)|([][{}:,]))'
)
"""One JSON token after blanks: a string (group 1), a scalar (2) or a mark (3)."""

_TAIL_ID = re.compile(
    rb'[{,][ \t\r\n]*"id"[ \t\r\n]*:[ \t\r\n]*("(?:[^"\\]|\\.)*"|-?[0-9][-+.0-9eE]*|null)'
    rb"[ \t\r\n]*}[ \t\r\n]*\Z"
)
"""An ``"id"`` member that ends the frame's outermost object (its last bytes)."""


def _readable_id(head: bytes, tail: bytes = b"") -> Any:
    """The ``"id"`` of a frame refused unparsed, read from its first and last bytes.

    *head* is the start of the frame, *tail* its end (each at most
    :data:`ID_SCAN_BYTES`; the caller keeps them while it skips the rest). The id is
    the outermost object's ``"id"`` member: read from *head* by following the tokens of
    the members before it (a value that does not end within *head* stops the search),
    or from *tail* when it is the last member. Time is linear in the bytes searched.

    Returns:
        The id, or ``None`` when it cannot be read or is not one JSON-RPC allows.

    >>> _readable_id(b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"p":"aaa')
    7
    >>> _readable_id(b'{"jsonrpc":"2.0","method":"x","params":{"id":3,"p":"a', b'a"},"id":"r"}')
    'r'
    >>> _readable_id(b'{"params":{"id":3,"p":"aaa', b'aaa"}}') is None
    True
    """
    found = _head_id(head[:ID_SCAN_BYTES])
    if found is _UNREAD and tail:
        match = _TAIL_ID.search(tail[-ID_SCAN_BYTES:])
        found = _UNREAD if match is None else _id_value(match.group(1))
    return None if found is _UNREAD else found


_UNREAD = object()


def _id_value(token: bytes) -> Any:
    """The id a JSON scalar *token* holds, or :data:`_UNREAD` if it is not a valid id."""
    try:
        value = json.loads(token, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return _UNREAD
    return value if type(value) is not bool and _answerable_id(value) else _UNREAD


def _head_id(data: bytes) -> Any:  # noqa: C901, PLR0911, PLR0912 - one token kind per branch
    """The outermost object's ``"id"`` read from the start *data* of a frame, or :data:`_UNREAD`."""
    position, depth, want, key = 0, 0, "object", None
    while True:
        match = _TOKEN.match(data, position)
        if match is None:
            return _UNREAD
        position = match.end()
        text, scalar, mark = match.groups()
        if depth == 0:
            if mark != b"{":
                return _UNREAD
            depth, want = 1, "key"
        elif depth > 1:  # inside a member's value: only its nesting counts
            if mark in (b"{", b"["):
                depth += 1
            elif mark in (b"}", b"]"):
                depth -= 1
        elif want == "key":
            if text is None:
                return _UNREAD
            try:
                key = orjson.loads(text)
            except orjson.JSONDecodeError:
                return _UNREAD
            want = "colon"
        elif want == "colon":
            if mark != b":":
                return _UNREAD
            want = "value"
        elif want == "value":
            if key == "id":
                return _UNREAD if text is None and scalar is None else _id_value(text or scalar)
            if mark in (b"{", b"["):
                depth += 1
            elif mark is not None:
                return _UNREAD
            want = "comma"
        elif mark != b",":  # want == "comma": the object ends, or is not JSON
            return _UNREAD
        else:
            want = "key"


def check_frame(line: bytes) -> dict[str, Any]:
    """Parse and check one incoming line as a JSON-RPC 2.0 frame.

    Args:
        line: one line of input, without or with its newline.

    Returns:
        The frame (a request, a notification or a response), ready for the SDK.

    Raises:
        FrameError: the frame is bad; it says the code, the id to answer with and
            whether to answer at all.

    >>> check_frame(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}')["id"]
    1
    >>> try:
    ...     check_frame(b'{"jsonrpc":"2.0","id":7,"method":null}')
    ... except FrameError as exc:
    ...     print(exc.code, exc.request_id, exc.answer, exc)
    -32600 7 True Invalid request: method: a string
    """
    frame = _parse(line)
    assert isinstance(frame, dict)  # noqa: S101 - _parse refuses arrays unless asked
    _check_envelope(frame)
    return frame


def check_message(line: bytes) -> dict[str, Any] | list[Any]:
    """As :func:`check_frame`, but a non-empty array (an ACP v2 batch) is returned as it is.

    The frame limits apply to the whole array; its entries are not checked yet (see
    :func:`check_entry`). An object is checked as by :func:`check_frame`.

    Raises:
        FrameError: bad JSON, a scalar, a limit exceeded, or a bad frame object.
    """
    frame = _parse(line, arrays=True)
    if isinstance(frame, dict):
        _check_envelope(frame)
    return frame


def check_entry(entry: Any) -> dict[str, Any]:
    """Check one entry of a batch as a JSON-RPC 2.0 frame (limits were checked whole).

    Raises:
        FrameError: the entry is not an object, or not a valid frame.
    """
    if not isinstance(entry, dict):
        what = "an array" if isinstance(entry, list) else "a scalar"
        raise FrameError(INVALID_REQUEST, f"a batch entry is an object, not {what}")
    _check_envelope(entry)
    return entry


def _loads_exactly(line: bytes) -> Any:
    """The standard library's parse: integers of any size, lone surrogates kept for the check."""
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        request_id = _readable_id(line[:ID_SCAN_BYTES], line[-ID_SCAN_BYTES:])
        raise FrameError(PARSE_ERROR, "nested too deeply", request_id=request_id) from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FrameError(PARSE_ERROR, str(exc)) from None


def _parse(line: bytes, *, arrays: bool = False) -> dict[str, Any] | list[Any]:
    values = _count_values(line)
    if values > MAX_VALUES:
        details = f"a frame holds at most {MAX_VALUES} values, not {values}"
        request_id = _readable_id(line[:ID_SCAN_BYTES], line[-ID_SCAN_BYTES:])
        raise FrameError(
            INVALID_REQUEST, details, request_id=request_id, limit=("values", MAX_VALUES)
        )
    exact = _LONG_NUMBER.search(line) is not None
    if exact:
        frame = _loads_exactly(line)
    else:
        try:  # orjson: no NaN, no infinities, no lone surrogates, 1024 levels at most
            frame = orjson.loads(line)
        except orjson.JSONDecodeError:
            exact = True  # the standard parser says why, or parses what orjson refuses
            frame = _loads_exactly(line)
    if not isinstance(frame, dict) and not (arrays and isinstance(frame, list) and frame):
        if arrays and isinstance(frame, list):
            raise FrameError(INVALID_REQUEST, "a batch is a non-empty array")
        what = "an array (ACP has no batches)" if isinstance(frame, list) else "a scalar"
        raise FrameError(INVALID_REQUEST, f"a frame is an object, not {what}")
    if not exact and line.count(b"[") + line.count(b"{") <= MAX_DEPTH:
        return frame  # valid text, and too few containers to nest too deeply
    if isinstance(frame, list):  # a batch: its entries are checked one by one later
        answer, request_id = True, None
    else:
        answer = _answers(frame)
        request_id = frame.get("id") if answer and _answerable_id(frame.get("id")) else None
    try:
        _check_text(frame, strings=exact)
    except RecursionError:
        details = f"nested deeper than {MAX_DEPTH} levels"
        raise FrameError(
            INVALID_REQUEST,
            details,
            request_id=request_id,
            answer=answer,
            limit=("depth", MAX_DEPTH),
        ) from None
    except UnicodeEncodeError:
        details = "a string holds a lone surrogate: not Unicode text"
        raise FrameError(PARSE_ERROR, details, request_id=request_id, answer=answer) from None
    return frame


def _answers(frame: dict[str, Any]) -> bool:
    """Whether a bad *frame* gets an answer: a request, or a frame of no known kind."""
    if "method" in frame:
        return "id" in frame
    return "result" not in frame and "error" not in frame


def _check_envelope(frame: dict[str, Any]) -> None:
    answer = _answers(frame)
    if "id" in frame and not _valid_id(frame["id"]):
        if isinstance(frame["id"], str):
            details = f"id: a string of at most {MAX_ID_CHARS} characters, not {len(frame['id'])}"
            raise FrameError(
                INVALID_REQUEST, details, answer=answer, limit=("id_chars", MAX_ID_CHARS)
            )
        raise FrameError(INVALID_REQUEST, "id: a string, an integer or null", answer=answer)
    request_id = frame.get("id") if answer else None  # a request, or a frame of no known kind

    def bad(details: str) -> FrameError:
        return FrameError(INVALID_REQUEST, details, request_id=request_id, answer=answer)

    if frame.get("jsonrpc") != "2.0":
        raise bad('jsonrpc: must be "2.0"')
    if "method" in frame:
        if not isinstance(frame["method"], str):
            raise bad("method: a string")
        if "params" in frame and not isinstance(frame["params"], dict | list):
            raise bad("params: an object or an array")
        return
    if "id" not in frame or ("result" in frame) == ("error" in frame):
        raise bad("neither a request, a notification nor a response")
    error = frame.get("error")
    if error is not None and not (isinstance(error, dict) and type(error.get("code")) is int):
        raise bad("error: an object with an integer code")


def _map_strings(value: Any, cut: Callable[[str], str], items: int | None = None) -> Any:
    """A copy of *value* with *cut* applied to every string and object key.

    With *items*, each array and object keeps its first *items* items and a marker.
    """
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = cut(item)
        elif isinstance(item, dict):
            members = list(item.items())
            kept = members if items is None else members[:items]
            parent[key] = copy = {cut(k) if isinstance(k, str) else k: v for k, v in kept}
            stack.extend((copy, k) for k in copy)
            if len(kept) < len(members):
                copy[f"...[+{len(members) - len(kept)} members]"] = None
        elif isinstance(item, list):
            parent[key] = elements = list(item if items is None else item[:items])
            stack.extend((elements, i) for i in range(len(elements)))
            if len(elements) < len(item):
                elements.append(f"...[+{len(item) - len(elements)} items]")
    return root[0]


def _cut(value: Any) -> Any:
    """A copy of *value* with long strings, arrays and objects cut.

    Strings over :data:`MAX_ECHO_CHARS` characters, arrays and objects over
    :data:`MAX_ECHO_ITEMS` items.
    """
    return _map_strings(value, _cut_text, MAX_ECHO_ITEMS)


def _long_texts(requests: list[tuple[Any, Any]]) -> list[str] | None:
    """The long strings of *requests* (``(method, params)`` pairs), longest first.

    Every string (object keys too) longer than :data:`MAX_ECHO_CHARS`, and each also as
    Python's ``repr`` writes it between its quotes; ``None`` when there are more than
    :data:`_ECHO_TEXTS` of them.
    """
    found: set[str] = set()
    stack: list[Any] = [item for request in requests for item in request]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_ECHO_CHARS:
                found.add(item)
                if len(found) > _ECHO_TEXTS:
                    return None
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    texts = found | {repr(text)[1:-1] for text in found}
    return sorted(texts, key=len, reverse=True)


def _cut_echoes(value: Any, texts: list[str]) -> Any:
    """A copy of *value* with each of *texts* cut wherever it occurs in a string or key."""

    def cut(item: str) -> str:
        if len(item) <= MAX_ECHO_CHARS:
            return item
        for text in texts:
            if len(text) <= len(item) and text in item:
                item = item.replace(text, _cut_text(text))
        return item

    return _map_strings(value, cut)


def _cut_text(text: str) -> str:
    """*text*, or its first :data:`MAX_ECHO_CHARS` characters and the count of the rest."""
    if len(text) <= MAX_ECHO_CHARS:
        return text
    return f"{text[:MAX_ECHO_CHARS]}...[+{len(text) - MAX_ECHO_CHARS} chars]"


# -- stderr: never blocking the event loop -----------------------------------------------


def _poll_out(fd: int, timeout: float) -> int:
    """The ``poll`` events of *fd* for writing within *timeout* seconds (0: none ready)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(max(0, math.ceil(timeout * 1000)))
    except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
        return 0
    return events[0][1] if events else 0


_PIPE_BUF = 4096
"""Writes of at most this many bytes to a pipe are atomic, and fit once it polls writable."""


class BoundedPipeWriter:
    """A binary stream over a file descriptor (a pipe, usually stderr) whose writes wait boundedly.

    A write waits at most *wait* seconds for the reader to make room, then raises
    ``TimeoutError`` and writes nothing; while the reader stays behind, later writes fail
    at once instead of waiting again. Writes go out in pieces of at most
    :data:`_PIPE_BUF` bytes, each of which a pipe takes whole; a write that stalls after
    its first piece leaves a cut line, and every later write then fails (``OSError``):
    a record appended to a cut line would be lost with it.

    Args:
        fd: the descriptor (``2`` for stderr); it stays blocking.
        wait: seconds a write may wait for room.
    """

    def __init__(self, fd: int, wait: float) -> None:
        """Write to *fd*, waiting at most *wait* seconds for room."""
        self._fd = fd
        self._wait = wait
        self._stalled = False
        self._cut = False

    def write(self, data: bytes) -> int:
        """Write all of *data*, or raise.

        Raises:
            TimeoutError: the reader made no room in time; nothing was written.
            OSError: the reader went away (``EPIPE``), or a line was cut before.
        """
        if self._cut:
            raise OSError(errno.EIO, "an earlier line was cut short: the stream is unusable")
        view = memoryview(data)
        done = 0
        deadline = time.monotonic() + self._wait
        while done < len(view):
            wait = 0.0 if self._stalled and done == 0 else deadline - time.monotonic()
            if not _poll_out(self._fd, wait):
                self._stalled = True
                if done:
                    self._cut = True
                msg = f"the reader of the stream made no room for {self._wait:g} s"
                raise TimeoutError(errno.ETIMEDOUT, msg)
            try:
                done += os.write(self._fd, view[done : done + _PIPE_BUF])
            except OSError:
                if done:
                    self._cut = True
                raise
        self._stalled = False
        return done

    def flush(self) -> None:
        """Nothing to flush: :meth:`write` writes through."""


class Diagnostics(logging.Handler):
    """A logging handler writing one line per record to *fd* (stderr), never blocking.

    A line is written only when the pipe has room right now and within a rate
    (*burst* lines at once, *per_second* on average); other lines are dropped and counted,
    and the count is reported with the next line written (and by :meth:`close`).
    Tracebacks are reduced to the exception and the line that raised it.

    Args:
        fd: the descriptor to write to.
        prefix: the start of every line (``modefsm serve``).
        burst: lines that may be written at once.
        per_second: lines per second on average.
    """

    def __init__(
        self, fd: int = 2, *, prefix: str = "modefsm", burst: int = 20, per_second: float = 2.0
    ) -> None:
        """Write diagnostics to *fd*, each line starting with *prefix*."""
        super().__init__(logging.WARNING)
        self._fd = fd
        self._prefix = prefix
        self._burst = float(burst)
        self._rate = per_second
        self._tokens = float(burst)
        self._last = time.monotonic()
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Write *record* as one line, or count it as dropped.

        A record of an :class:`OutputClosedError` (a request task that could not send
        its answer) is left out: the agent reports the closed output once, as it stops.
        """
        if record.exc_info and isinstance(record.exc_info[1], OutputClosedError):
            return
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {_one_exception(record.exc_info[1])}"
        except Exception:  # noqa: BLE001 - a diagnostic must never fail its caller
            self.dropped += 1
            return
        self.say(text)

    def say(self, text: str, *, force: bool = False) -> bool:
        """Write ``prefix: text`` as one line if the rate and the pipe allow; return whether.

        *force* skips the rate (the pipe must still have room).
        """
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1 and not force:
            self.dropped += 1
            return False
        if self.dropped:
            noun = "diagnostic" if self.dropped == 1 else "diagnostics"
            text += f" ({self.dropped} earlier {noun} dropped)"
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"{self._prefix}: {text}")
        data = line.encode("utf-8", "backslashreplace")[: _PIPE_BUF - 1] + b"\n"
        events = _poll_out(self._fd, 0)
        if not events & select.POLLOUT or events & select.POLLERR:
            self.dropped += 1
            return False
        try:
            os.write(self._fd, data)
        except OSError:
            self.dropped += 1
            return False
        self._tokens -= 1
        self.dropped = 0
        return True

    def close(self) -> None:
        """Report the diagnostics dropped since the last line written, if any."""
        dropped, self.dropped = self.dropped, 0
        if dropped:
            noun = "diagnostic" if dropped == 1 else "diagnostics"
            self.say(f"{dropped} {noun} dropped", force=True)
        super().close()


def _one_exception(exc: BaseException) -> str:
    """``Type: message (at file:line)``, on one line."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {os.path.basename(last.filename)}:{last.lineno})"  # noqa: PTH119
    return f"{type(exc).__name__}: {_cut_text(str(exc))}{where}"


# -- the transport -----------------------------------------------------------------------


class _Output(asyncio.BaseProtocol):
    """The protocol of stdout's pipe: flow control, and whether the client closed it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._paused = False
        self._waiters: list[asyncio.Future[None]] = []
        self.closed: asyncio.Future[None] = loop.create_future()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        del exc
        if not self.closed.done():
            self.closed.set_result(None)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _drain_helper(self) -> None:
        if not self._paused or self.closed.done():
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter

    def _get_close_waiter(self, stream: Any) -> asyncio.Future[None]:
        del stream
        return self.closed


class _Ledger:
    """The frame bookkeeping both transports share (stdio here, HTTP and WebSocket in _http).

    Which checked frames reach the SDK (:meth:`admit`), the requests read and not answered
    (:attr:`open`), the agent's own requests awaiting an answer, and what each frame
    written is on the wire (:meth:`outgoing`).

    Flow control is the same on every transport: a request admitted while
    :data:`MAX_IN_FLIGHT` are being handled is held (:meth:`request`), counted as open,
    and handed over (:meth:`next_held`) when one of them is answered or starts waiting
    for the client; a ``$/cancel_request`` of a held request is answered here
    (:meth:`cancel_held`).

    Attributes:
        stray: called with a second answer to a ``session/request_permission``.
        late: called with the first answer to a ``session/request_permission``.
        sent: called with each ``session/request_permission`` as it goes out (its
            JSON-RPC id is known from then on: a late answer is matched to it by id); what
            it returns, if not ``None``, is kept as the request's
            :attr:`~PermissionRequest.asker`.
        open: requests admitted and not answered yet (held ones included).
        held: requests admitted and not handed over yet, oldest first.
        unrouted: notifications of methods the SDK does not route, dropped.
        awaiting: the agent's requests (by id) the client has not answered.
    """

    def __init__(
        self,
        stray: StrayAnswer | None = None,
        late: StrayAnswer | None = None,
        changed: Callable[[], None] | None = None,
        sent: Callable[[PermissionRequest], str | None] | None = None,
    ) -> None:
        """Start empty; *changed* is called whenever a request opens or closes."""
        self.stray = stray
        self.late = late
        self.sent = sent
        self._changed = changed or (lambda: None)
        self.open = 0
        self.held: deque[dict[str, Any]] = deque()
        self.unrouted = 0
        self.awaiting: dict[int, PermissionRequest | None] = {}
        self._answered: OrderedDict[int, PermissionRequest] = OrderedDict()
        self._asked: dict[Any, list[tuple[Any, Any]]] = {}  # open id -> (method, params)

    def admit(self, frame: dict[str, Any]) -> bool:
        """Whether the SDK gets *frame*: requests, routed notifications, awaited responses.

        An admitted request counts as open until :meth:`outgoing` sees its answer.
        """
        if "method" not in frame:
            return self._is_expected(frame)
        if "id" in frame:
            self._asked.setdefault(frame["id"], []).append((frame["method"], frame.get("params")))
            self.open += 1
            self._changed()
            return True
        method = frame["method"]
        if method in _NOTIFICATIONS or method.startswith("_"):
            return True
        self.unrouted += 1  # JSON-RPC: a notification is never answered
        return False

    def request(self, frame: dict[str, Any]) -> bool:
        """Admit the request *frame* (under :data:`MAX_OPEN`); whether it is handed over now.

        ``False``: :data:`MAX_IN_FLIGHT` are being handled, so it is held (see
        :meth:`next_held`).
        """
        self.admit(frame)
        if self.open - len(self.awaiting) - len(self.held) > MAX_IN_FLIGHT:
            self.held.append(frame)
            return False
        return True

    def busy(self) -> bool:
        """Whether :data:`MAX_IN_FLIGHT` requests are being handled (held ones not counted)."""
        return self.open - len(self.awaiting) - len(self.held) >= MAX_IN_FLIGHT

    def next_held(self) -> dict[str, Any] | None:
        """The oldest held request, to hand over now, if one is held and there is room."""
        if self.held and not self.busy():
            return self.held.popleft()
        return None

    def cancel_held(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        """The ``-32800`` answer to a held request *frame* (a ``$/cancel_request``) cancels.

        The request is no longer held (its answer, once sent, closes it); ``None`` when
        *frame* is not a cancel of a held request.
        """
        if frame.get("method") != CANCEL_REQUEST or not self.held:
            return None
        params = frame.get("params")
        held = params.get("requestId", _UNREAD) if isinstance(params, dict) else _UNREAD
        for request in self.held:
            if request["id"] == held and type(request["id"]) is type(held):
                self.held.remove(request)
                return {"jsonrpc": "2.0", "id": held, "error": _CANCELLED}
        return None

    def _is_expected(self, response: dict[str, Any]) -> bool:
        """Whether *response* answers a request the agent is still waiting for."""
        request_id = response["id"]
        if type(request_id) is not int:
            return False  # the agent's requests have integer ids
        if request_id in self.awaiting:
            request = self.awaiting.pop(request_id)
            self._changed()
            if request is not None:
                self._answered[request_id] = request
                while len(self._answered) > _ANSWERED_KEPT:
                    self._answered.popitem(last=False)
                if self.late is not None:
                    self.late(request, response)
            return True
        request = self._answered.get(request_id)
        if request is not None and self.stray is not None:
            self.stray(request, response)
        return False

    def outgoing(self, message: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """*message* as it goes out, and its line of standard JSON.

        A response that cannot be encoded becomes an error answer for the same id. In an
        error answer, each string of the request it answers (method, params) that is
        longer than :data:`MAX_ECHO_CHARS` is cut wherever it is echoed; one still longer
        than 4 KiB has every string, array and object cut (:data:`MAX_ECHO_ITEMS`), as has
        the answer to a request with many long strings (stdio, HTTP and WebSocket answers
        all pass here). A request of the agent's is then awaited.

        Raises:
            ValueError, TypeError: a request or notification that cannot be encoded.
        """
        response = "method" not in message
        try:
            data = _encode(message)
        except (ValueError, TypeError, RecursionError):
            if not response or "id" not in message:
                raise
            message = _unencodable(message)
            data = _encode(message)
        asked = self._asked_by(message) if response and "id" in message else []
        if response and "error" in message and len(data) > MAX_ECHO_CHARS:
            texts = _long_texts(asked)
            if texts:
                message = {**message, "error": _cut_echoes(message["error"], texts)}
                data = _encode(message)
            if texts is None or len(data) > _ERROR_BYTES:
                message = {**message, "error": _cut(message["error"])}
                data = _encode(message)
        if not response and type(message.get("id")) is int:
            request = _permission_request(message)
            if request is not None and self.sent is not None:
                asker = self.sent(request)
                if asker is not None:
                    request = replace(request, asker=asker)
            self.awaiting[message["id"]] = request
            self._changed()
        return message, data

    def _asked_by(self, response: dict[str, Any]) -> list[tuple[Any, Any]]:
        """``(method, params)`` of the open requests with *response*'s id; one is answered."""
        asked = self._asked.get(response["id"])
        if asked is None:
            return []
        found = list(asked)
        del asked[0]
        if not asked:
            del self._asked[response["id"]]
        return found

    def answered(self, message: dict[str, Any]) -> None:
        """*message* was written: if it is an answer, one request less is open."""
        if "method" not in message and self.open:
            self.open -= 1
            self._changed()


async def admitted(
    ledger: _Ledger,
    batches: Any,
    frame: dict[str, Any],
    refuse: Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> bool:
    """Whether *frame*, read from the client, goes to the SDK now (every transport's rule).

    A request read while :data:`MAX_OPEN` are open is refused (``await refuse(request,
    answer)``, ``-32600`` naming the limit); one read while :data:`MAX_IN_FLIGHT` are
    handled is held by *ledger*; a ``$/cancel_request`` of a held request is answered
    ``-32800`` (``await send(answer)``); a notification the SDK does not route is dropped.
    *batches* (a v2 connection's :class:`~modefsm.protocol.transport._batch.Batches`, or
    ``None``) sees each request opened.
    """
    if "method" in frame and "id" in frame:
        if ledger.open >= MAX_OPEN:
            await refuse(frame, frame_refusal(_over_open(frame["id"])))
            return False
        if batches is not None:
            batches.opened(frame)
        return ledger.request(frame)
    cancelled = ledger.cancel_held(frame)
    if cancelled is not None:
        await send(cancelled)
        return False
    return ledger.admit(frame)


async def read_or_room(reading: asyncio.Future[Any], changed: asyncio.Event) -> bool:
    """Wait until *reading* is done (``True``) or a request opens or closes (``False``).

    *changed* is the event a :class:`_Ledger` sets whenever a request opens or closes:
    with requests held, one may then be handed over before the next frame is read.
    """
    changed.clear()
    waiting = asyncio.ensure_future(changed.wait())
    try:
        await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    return reading.done()


class CheckedTransport:
    """A message transport over newline-delimited JSON that checks every frame both ways.

    Args:
        reader: the agent's stdin.
        writer: the agent's stdout.
        stray: called with a second answer to a ``session/request_permission``.
        late: called with the first answer to a ``session/request_permission``; the agent
            logs it if it had stopped waiting (``session/cancel``), as the SDK drops it.
        sent: called with each ``session/request_permission`` the agent sends, as it
            goes out (so that the agent knows which request id a ``toolCallId`` has).
        paced: read each line only once every request read before it is answered or
            waits for the client's answer to one of the agent's requests (a recorded
            script in a regular file: its requests run in order, each after the answer
            of the one before, as the client that recorded it saw them).

    Attributes:
        unrouted: notifications of methods the SDK does not route (unknown names),
            dropped unanswered as JSON-RPC says.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        stray: StrayAnswer | None = None,
        late: StrayAnswer | None = None,
        sent: Callable[[PermissionRequest], str | None] | None = None,
        paced: bool = False,
    ) -> None:
        """Read frames from *reader* and write them to *writer*."""
        self._paced = paced
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._ledger = _Ledger(stray, late, self._changed.set, sent)
        self.batches: Any = None
        """A :class:`~modefsm.protocol.transport._batch.Batches` once batches are served (v2)."""
        self._queued: deque[dict[str, Any]] = deque()  # the entries of a batch still to serve
        self._reading: asyncio.Task[bytes | FrameError | None] | None = None
        self._ended = False
        self._deadline = 0.0  # the end of input's grace, once it came (monotonic)

    @property
    def open_requests(self) -> int:
        """Requests read and not answered yet."""
        return self._ledger.open

    @property
    def unrouted(self) -> int:
        """Notifications of methods the SDK does not route, dropped unanswered."""
        return self._ledger.unrouted

    def _settled_but_awaiting(self) -> bool:
        """Every request read is answered, or waits for the client's answer to the agent."""
        return self._ledger.open <= len(self._ledger.awaiting)

    async def _until(self, ready: Callable[[], bool], limit: float | None = None) -> bool:
        """Wait until *ready()* (re-checked whenever requests open or close); whether it is."""
        deadline = None if limit is None else time.monotonic() + limit
        while not ready():
            self._changed.clear()
            if deadline is None:
                await self._changed.wait()
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True

    async def settle(self, limit: float) -> bool:
        """Wait up to *limit* seconds until every request read is answered; whether it is."""
        return await self._until(lambda: self._ledger.open == 0, limit)

    async def receive(self) -> dict[str, Any] | None:
        """The next good frame; bad ones are answered (requests) or dropped, and skipped.

        Reading never waits for the agent's work: a request read while
        :data:`MAX_IN_FLIGHT` are being handled is held here (it counts as open) and
        handed over when one of them is answered or starts waiting for the client; one
        read while :data:`MAX_OPEN` are open is answered at once with ``-32600`` naming
        the limit; the client's answers to the agent's requests and its cancels are
        handed over as they come (a ``$/cancel_request`` of a request still held is
        answered ``-32800`` here). Nothing is read while the output is not drained. At
        the end of input, the requests held are handed over and it waits (up to
        :data:`EOF_GRACE` seconds in all) until every request read is answered or waits
        for the client, then returns ``None``.

        Returns:
            A frame, or ``None`` at the end of input.
        """
        while True:
            held = self._ledger.next_held()
            if held is not None:
                return held
            if self._ended:
                return await self._end()
            # a batch's entries are served each as if read alone
            frame = self._queued.popleft() if self._queued else await self._read_frame()
            if frame is None:
                self._ended = True
                self._deadline = time.monotonic() + EOF_GRACE
                continue
            if frame and await self._admitted(frame):
                return frame

    async def _read_frame(self) -> dict[str, Any] | None:
        """The next line's frame; ``None`` at the end; ``{}`` when it has none to serve now.

        ``{}``: a blank or bad line (answered if a request), a batch (its entries queued),
        or room for a held request came before the line.
        """
        if self._reading is None:
            if self._paced:
                await self._until(self._settled_but_awaiting)
            if self._writer.transport.get_write_buffer_size():
                await self._writer.drain()
            self._reading = asyncio.ensure_future(self._read_line())
        reading = self._reading
        if self._ledger.held and not await read_or_room(reading, self._changed):
            return {}  # room for a held request, no line yet
        self._reading = None
        line = await reading  # CancelledError once close() stopped the read
        if line is None:
            return None
        checked = await self._checked(line)
        if isinstance(checked, list):
            await self._split(checked)
            return {}
        return checked if checked is not None else {}

    async def _admitted(self, frame: dict[str, Any]) -> bool:
        """Whether *frame* goes to the SDK now (see :func:`admitted`)."""
        return await admitted(self._ledger, self.batches, frame, self._refuse, self.send)

    async def _refuse(self, request: dict[str, Any], answer: dict[str, Any]) -> None:
        """Write *answer* to *request*, not admitted: alone, or in its batch's array."""
        batch = self.batches.refused(request, answer) if self.batches is not None else None
        if batch is None:
            await self._write(_encode(answer))
        elif not batch.waiting:
            await self._write(_encode_array(batch.array()))

    async def _end(self) -> dict[str, Any] | None:
        """After the end of input: the next held request, or ``None`` once all is settled."""
        remaining = self._deadline - time.monotonic()
        ledger = self._ledger
        if ledger.held and await self._until(lambda: not ledger.busy(), remaining):
            return ledger.next_held()
        await self._until(self._settled_but_awaiting, max(0.0, self._deadline - time.monotonic()))
        return None

    async def _split(self, value: list[Any]) -> None:
        """Queue the entries of a batch; write its answer now if it has nothing to wait for."""
        try:
            frames, batch = self.batches.split(value)
        except FrameError as bad:
            await self._write(_encode(frame_refusal(bad)))
            return
        self._queued.extend(frames)
        if batch is not None and not batch.waiting:
            await self._write(_encode_array(batch.array()))

    async def _checked(self, line: bytes | FrameError) -> dict[str, Any] | list[Any] | None:
        """The frame in *line*; ``None`` for a blank or bad one (answered if a request).

        Once the connection serves batches, an array is returned as it is.
        """
        try:
            if isinstance(line, FrameError):
                raise line
            if not line.strip():
                return None
            if self.batches is not None:
                return check_message(line)
            return check_frame(line)
        except FrameError as bad:
            if bad.answer:
                await self._write(_encode(frame_refusal(bad)))
            return None

    async def send(self, message: dict[str, Any]) -> None:
        """Write *message* as one line; a response that is not JSON-encodable becomes an error.

        A string of the request that an error response echoes (a huge method name or
        value) is cut to :data:`MAX_ECHO_CHARS` characters.

        Raises:
            ValueError, TypeError: a request or notification that cannot be encoded.
            OutputClosedError: stdout is closed.
        """
        message, data = self._ledger.outgoing(message)
        batch = self.batches.take(message) if self.batches is not None else None
        if batch is not None:  # an answer held for its batch's array
            self._ledger.answered(message)
            if not batch.waiting:
                await self._write(_encode_array(batch.array()))
            return
        await self._write(data)
        self._ledger.answered(message)

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            if self._writer.transport.is_closing():
                raise OutputClosedError(self._ledger.open)
            self._writer.write(data)
            await self._writer.drain()

    async def close(self) -> None:
        """Close the output, waiting (boundedly) for what is buffered to be written."""
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reading
            self._reading = None
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), _CLOSE_WAIT)
        if not self._writer.transport.is_closing():  # pragma: no cover - close() started it
            self._writer.transport.abort()

    async def _read_line(self) -> bytes | FrameError | None:
        """The next line; a :class:`FrameError` for one too long; ``None`` at the end.

        Of a line too long, only its first and last :data:`ID_SCAN_BYTES` are kept, for
        its id (:func:`_readable_id`).
        """
        chunks: list[bytes] = []
        size = 0
        head = tail = b""
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError as exc:  # the end, maybe without a newline
                if not exc.partial and not chunks and not head:
                    return None
                chunk = exc.partial + b"\n"
            size += len(chunk)
            if size <= MAX_FRAME_BYTES:
                chunks.append(chunk)
            else:
                if not head:
                    head = b"".join(chunks)[:ID_SCAN_BYTES] if chunks else chunk[:ID_SCAN_BYTES]
                    chunks.clear()
                tail = (tail + chunk)[-ID_SCAN_BYTES:]
            if chunk.endswith(b"\n"):
                break
        if size > MAX_FRAME_BYTES:
            details = f"a frame is at most {MAX_FRAME_BYTES} bytes, not {size}"
            request_id = _readable_id(head, tail)
            return FrameError(
                INVALID_REQUEST, details, request_id=request_id, limit=("bytes", MAX_FRAME_BYTES)
            )
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _over_open(request_id: Any) -> FrameError:
    """The refusal of a request read while :data:`MAX_OPEN` of its connection are open."""
    details = f"at most {MAX_OPEN} requests of a connection are answered at once"
    return FrameError(INVALID_REQUEST, details, request_id=request_id, limit=("open", MAX_OPEN))


_CANCELLED = {**error_object(REQUEST_CANCELLED), "data": None}
"""The error the SDK answers a request cancelled by ``$/cancel_request`` with (-32800),
``data`` null as the SDK's own ``RequestError`` writes it: a held request and one the
agent was handling are answered alike."""


def _encode(message: dict[str, Any]) -> bytes:
    """One line of standard JSON (``ValueError`` for NaN or infinities)."""
    text = json.dumps(message, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


def _encode_array(messages: list[dict[str, Any]]) -> bytes:
    """One line of standard JSON: the array of *messages* (a batch's answers)."""
    return _encode(messages)  # type: ignore[arg-type]


def _unencodable(response: dict[str, Any]) -> dict[str, Any]:
    """The error answer for a *response* that cannot be encoded: same id, same code."""
    error = response.get("error")
    error = error if isinstance(error, dict) else {}
    code = error.get("code", INTERNAL_ERROR)
    message = str(error.get("message", ERROR_MESSAGES[INTERNAL_ERROR]))
    details = {"details": "the answer could not be encoded as JSON"}
    return error_response(response["id"], code, message, details)


def _permission_request(message: dict[str, Any]) -> PermissionRequest | None:
    if message.get("method") != "session/request_permission":
        return None
    params = message.get("params") or {}
    tool_call = params.get("toolCall") or (params.get("subject") or {}).get("toolCall") or {}
    return PermissionRequest(
        message["id"], params.get("sessionId", ""), tool_call.get("toolCallId", "")
    )


@dataclass
class _Stdio:
    """This process's stdin and stdout as streams, and stdout's protocol.

    Attributes:
        paced: stdin is a regular file or a device (a recorded script): each line is read
            once every request before it is answered or waits for the client's answer to
            one of the agent's requests.
    """

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    output: _Output
    paced: bool


@contextlib.asynccontextmanager
async def _stdio() -> AsyncIterator[_Stdio]:
    """This process's stdin and stdout (see :class:`_Stdio`), for the time of the block.

    A pipe, a socket or a terminal is served as it is. A regular file or another device
    (``/dev/null``), which asyncio's pipe transports cannot wait on, is copied by a thread
    through a pipe: stdin's into it, stdout's out of it; at the end of the block every
    byte written to stdout is in the file (or the copy failed: one line on stderr).
    """
    loop = asyncio.get_running_loop()
    stdin: Any = sys.stdin
    stdout: Any = sys.stdout
    paced = _copied(sys.stdin.fileno())
    if paced:
        stdin = _copied_in(sys.stdin.fileno())
    copy_out = None
    if _copied(sys.stdout.fileno()):
        sys.stdout.flush()
        stdout, copy_out = _copied_out(sys.stdout.fileno())
    reader = asyncio.StreamReader(limit=_READ_LIMIT)
    read, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    output = _Output(loop)
    transport, _ = await loop.connect_write_pipe(lambda: output, stdout)
    writer = asyncio.StreamWriter(transport, output, None, loop)
    try:
        yield _Stdio(reader, writer, output, paced)
    finally:
        if paced:
            read.close()  # a copy still writing into the pipe gets EPIPE and ends
        if copy_out is not None:
            if not transport.is_closing():
                transport.close()  # what is buffered is written first
            await asyncio.shield(output.closed)
            await asyncio.to_thread(copy_out.join)


def _copied(fd: int) -> bool:
    """Whether *fd* is served through a copy: not a pipe, a socket or a terminal.

    A regular file, and a device such as ``/dev/null``, cannot be watched by epoll, on
    which asyncio's pipe transports wait.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd))


def _copied_in(source: int) -> Any:
    """A pipe a daemon thread fills with the regular file *source*; its read end."""
    read_end, write_end = os.pipe()

    def copy() -> None:
        try:
            while chunk := os.read(source, _COPY_BYTES):
                _write_all(write_end, chunk)
        except OSError:  # the reading end closed (serving ended), or the file failed
            pass
        finally:
            os.close(write_end)

    threading.Thread(target=copy, name="modefsm-stdin", daemon=True).start()
    return os.fdopen(read_end, "rb", buffering=0)


def _copied_out(target: int) -> tuple[Any, threading.Thread]:
    """A pipe whose bytes a thread writes, whole, to the regular file *target*.

    Returns its write end and the thread, which ends once the write end is closed and
    every byte is written (or at the first failed write, said on stderr; the pipe's
    reader then closes, so further writes fail as on a closed stdout).
    """
    read_end, write_end = os.pipe()

    def copy() -> None:
        try:
            while chunk := os.read(read_end, _COPY_BYTES):
                _write_all(target, chunk)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.write(2, f"modefsm: cannot write stdout: {exc.strerror or exc}\n".encode())
        finally:
            os.close(read_end)

    thread = threading.Thread(target=copy, name="modefsm-stdout", daemon=True)
    thread.start()
    return os.fdopen(write_end, "wb", buffering=0), thread


_COPY_BYTES = 64 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def run_agent(agent: Any, *, use_unstable_protocol: bool = True) -> CheckedTransport:
    """Serve *agent* over this process's stdin and stdout through a :class:`CheckedTransport`.

    The drop-in for ``acp.run_agent(agent)``; an agent with ``stray_answer(request,
    response)`` and ``late_answer(request, response)`` methods (``ModeAgent`` has both)
    hears of second answers to its permission requests, and of the first answers, which
    it logs when it had stopped waiting for them.

    It returns at the end of input, once every request read is answered (or after
    :data:`EOF_GRACE` seconds more).

    Returns:
        The transport, for its counts (:attr:`CheckedTransport.open_requests`: requests
        left unanswered; :attr:`CheckedTransport.unrouted`).

    Raises:
        OutputClosedError: the client closed stdout; the requests in flight are cancelled.
    """
    async with _stdio() as stdio:
        transport = CheckedTransport(
            stdio.reader,
            stdio.writer,
            stray=getattr(agent, "stray_answer", None),
            late=getattr(agent, "late_answer", None),
            sent=getattr(agent, "permission_sent", None),
            paced=stdio.paced,
        )
        conn = AgentSideConnection(
            agent, transport, listening=False, use_unstable_protocol=use_unstable_protocol
        )
        try:
            await _serve_connection(conn, transport, stdio.output.closed)
        finally:
            await drain_notes(agent)
    return transport


async def drain_notes(agent: Any) -> None:
    """Wait until the records *agent*'s engine writes after their callback are written.

    *agent* is a :class:`~modefsm.protocol.ModeAgent` (a v2 agent's ``base``), or any
    agent: one without an engine has nothing to wait for. See
    :meth:`ModeEngine.drain_notes <modefsm.engine.ModeEngine.drain_notes>`.
    """
    engine = getattr(getattr(agent, "base", agent), "engine", None)
    drain = getattr(engine, "drain_notes", None)
    if drain is not None:
        await drain()


async def _serve_connection(
    conn: Any, transport: CheckedTransport, output_closed: asyncio.Future[Any]
) -> None:
    """Let the SDK connection *conn* read *transport* until the input ends, then close it.

    At the end of input, requests still in flight get :data:`EOF_GRACE` seconds to be
    answered (:meth:`CheckedTransport.settle`).

    Raises:
        OutputClosedError: *output_closed* completed first (the client closed stdout); the
            requests in flight are cancelled.
    """
    listen = asyncio.ensure_future(conn.listen())
    try:
        await asyncio.wait({listen, output_closed}, return_when=asyncio.FIRST_COMPLETED)
        if output_closed.done():
            raise OutputClosedError(transport.open_requests)
        listen.result()
        await transport.settle(EOF_GRACE)
    finally:
        if not listen.done():
            listen.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listen
        await asyncio.shield(conn.close())
