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
:meth:`~modefsm.agent.ModeAgent.stray_answer` and is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp import stdio_streams
from acp.agent.connection import AgentSideConnection

from modefsm.errors import FrameError

__all__ = [
    "MAX_DEPTH",
    "MAX_FRAME_BYTES",
    "CheckedTransport",
    "PermissionRequest",
    "check_frame",
    "run_agent",
]

MAX_FRAME_BYTES = 50 * 1024 * 1024
"""The largest frame read, in bytes (the SDK's own stdio buffer limit); longer lines are
answered ``-32600`` and skipped."""

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects accepted in a frame."""

_ANSWERED_KEPT = 1024
"""How many answered ``session/request_permission`` ids are remembered, to spot a second
answer."""

ANSWER_AT_END_SECONDS = 10.0
"""How long, at the end of input, :func:`run_agent` waits for the answers to the requests
already read before it closes the connection."""


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A ``session/request_permission`` the agent sent, as the transport saw it.

    Attributes:
        request_id: its JSON-RPC id.
        session_id: ACP ``sessionId``.
        tool_call_id: ACP ``toolCall.toolCallId``.
    """

    request_id: Any
    session_id: str
    tool_call_id: str


StrayAnswer = Callable[[PermissionRequest, dict[str, Any]], None]
"""``stray(request, response)``: a response to a permission request that was already answered."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _check_text(value: Any) -> None:
    """Raise if *value* nests deeper than :data:`MAX_DEPTH` or holds a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                item.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise RecursionError
            if isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def _valid_id(value: Any) -> bool:
    """JSON-RPC: an id is a string, a number or null."""
    return value is None or isinstance(value, str | float) or type(value) is int


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
    _check_envelope(frame)
    return frame


def _parse(line: bytes) -> dict[str, Any]:
    try:
        frame = json.loads(line.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise FrameError(-32700, "nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise FrameError(-32700, str(exc)) from None
    if not isinstance(frame, dict):
        what = "an array (ACP has no batches)" if isinstance(frame, list) else "a scalar"
        raise FrameError(-32600, f"a frame is an object, not {what}")
    answer = _answers(frame)
    request_id = frame.get("id") if "method" in frame and _valid_id(frame.get("id")) else None
    try:
        _check_text(frame)
    except RecursionError:
        details = f"nested deeper than {MAX_DEPTH} levels"
        raise FrameError(-32600, details, request_id=request_id, answer=answer) from None
    except UnicodeEncodeError:
        details = "a string holds a lone surrogate: not Unicode text"
        raise FrameError(-32700, details, answer=answer) from None
    return frame


def _answers(frame: dict[str, Any]) -> bool:
    """Whether a bad *frame* gets an answer: a request, or a frame of no known kind."""
    if "method" in frame:
        return "id" in frame
    return "result" not in frame and "error" not in frame


def _check_envelope(frame: dict[str, Any]) -> None:
    is_request = "method" in frame and "id" in frame
    answer = _answers(frame)
    if "id" in frame and not _valid_id(frame["id"]):
        raise FrameError(-32600, "id: a string, a number or null", answer=answer)
    request_id = frame.get("id") if is_request else None

    def bad(details: str) -> FrameError:
        return FrameError(-32600, details, request_id=request_id, answer=answer)

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


class CheckedTransport:
    """A message transport over newline-delimited JSON that checks every frame both ways.

    Args:
        reader: the agent's stdin.
        writer: the agent's stdout.
        stray: called with a second answer to a ``session/request_permission``.
        late: called with the first answer to a ``session/request_permission``; the agent
            logs it if it had stopped waiting (``session/cancel``), as the SDK drops it.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        stray: StrayAnswer | None = None,
        late: StrayAnswer | None = None,
    ) -> None:
        """Read frames from *reader* and write them to *writer*."""
        self._reader = reader
        self._writer = writer
        self._stray = stray
        self._late = late
        self._lock = asyncio.Lock()
        self._awaiting: dict[int, PermissionRequest | None] = {}
        self._answered: OrderedDict[int, PermissionRequest] = OrderedDict()
        self._unanswered: Counter[Any] = Counter()  # ids of requests read, not answered yet
        self._all_answered = asyncio.Event()

    async def receive(self) -> dict[str, Any] | None:
        """The next good frame; bad ones are answered (requests) or dropped, and skipped.

        Returns:
            A frame, or ``None`` at the end of input.
        """
        while True:
            line = await self._read_line()
            if line is None:
                return None
            try:
                if isinstance(line, FrameError):
                    raise line
                if not line.strip():
                    continue
                frame = check_frame(line)
            except FrameError as bad:
                if bad.answer:
                    await self.send(bad.to_response())
                continue
            if "method" in frame and "id" in frame:
                self._unanswered[_id_key(frame["id"])] += 1
                self._all_answered.clear()
            if "method" in frame or self._is_expected(frame):
                return frame

    def _is_expected(self, response: dict[str, Any]) -> bool:
        """Whether *response* answers a request the agent is still waiting for."""
        request_id = response["id"]
        if type(request_id) is not int:
            return False  # the agent's requests have integer ids
        if request_id in self._awaiting:
            request = self._awaiting.pop(request_id)
            if request is not None:
                self._answered[request_id] = request
                while len(self._answered) > _ANSWERED_KEPT:
                    self._answered.popitem(last=False)
                if self._late is not None:
                    self._late(request, response)
            return True
        request = self._answered.get(request_id)
        if request is not None and self._stray is not None:
            self._stray(request, response)
        return False

    async def send(self, message: dict[str, Any]) -> None:
        """Write *message* as one line; a response that is not JSON-encodable becomes an error.

        Raises:
            ValueError, TypeError: a request or notification that cannot be encoded.
        """
        try:
            data = json.dumps(message, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError, RecursionError):
            if "method" in message or "id" not in message:
                raise
            data = json.dumps(_unencodable(message), separators=(",", ":"))
        if "method" in message and type(message.get("id")) is int:
            self._awaiting[message["id"]] = _permission_request(message)
        elif "method" not in message and "id" in message:
            self._answer(_id_key(message["id"]))
        async with self._lock:
            self._writer.write(data.encode("utf-8") + b"\n")
            await self._writer.drain()

    def _answer(self, key: Any) -> None:
        if self._unanswered[key] > 1:
            self._unanswered[key] -= 1
        else:
            self._unanswered.pop(key, None)
        if not self._unanswered:
            self._all_answered.set()

    async def answered(self) -> None:
        """Return once every request read so far has been answered."""
        while self._unanswered:
            await self._all_answered.wait()

    async def close(self) -> None:
        """Close the output."""
        self._writer.close()

    async def _read_line(self) -> bytes | FrameError | None:
        """The next line; a :class:`FrameError` for one too long; ``None`` at the end."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError as exc:  # the end, maybe without a newline
                if not exc.partial and not chunks:
                    return None
                chunk = exc.partial + b"\n"
            size += len(chunk)
            if size <= MAX_FRAME_BYTES:
                chunks.append(chunk)
            else:
                chunks.clear()
            if chunk.endswith(b"\n"):
                break
        if size > MAX_FRAME_BYTES:
            return FrameError(-32600, f"a frame is at most {MAX_FRAME_BYTES} bytes, not {size}")
        return b"".join(chunks)


def _unencodable(response: dict[str, Any]) -> dict[str, Any]:
    """The error answer for a *response* that cannot be encoded: same id, same code."""
    error = response.get("error")
    error = error if isinstance(error, dict) else {"code": -32603, "message": "Internal error"}
    return {
        "jsonrpc": "2.0",
        "id": response["id"],
        "error": {
            "code": error.get("code", -32603),
            "message": str(error.get("message", "Internal error")),
            "data": {"details": "the answer could not be encoded as JSON"},
        },
    }


def _id_key(request_id: Any) -> tuple[str, Any]:
    """A JSON-RPC id as a dictionary key that keeps ``1``, ``1.0`` and ``"1"`` apart."""
    return (type(request_id).__name__, request_id)


def _permission_request(message: dict[str, Any]) -> PermissionRequest | None:
    if message.get("method") != "session/request_permission":
        return None
    params = message.get("params") or {}
    tool_call = params.get("toolCall") or {}
    return PermissionRequest(
        message["id"], params.get("sessionId", ""), tool_call.get("toolCallId", "")
    )


async def run_agent(agent: Any, *, use_unstable_protocol: bool = True) -> None:
    """Serve *agent* over this process's stdin and stdout through a :class:`CheckedTransport`.

    The drop-in for ``acp.run_agent(agent)``; an agent with ``stray_answer(request,
    response)`` and ``late_answer(request, response)`` methods (``ModeAgent`` has both)
    hears of second answers to its permission requests, and of the first answers, which
    it logs when it had stopped waiting for them.
    """
    reader, writer = await stdio_streams(limit=MAX_FRAME_BYTES)
    transport = CheckedTransport(
        reader,
        writer,
        stray=getattr(agent, "stray_answer", None),
        late=getattr(agent, "late_answer", None),
    )
    conn = AgentSideConnection(
        agent, transport, listening=False, use_unstable_protocol=use_unstable_protocol
    )
    try:
        await conn.listen()
        # The SDK cancels the requests still running when the connection closes: at the
        # end of input, let those already read (``cat requests.jsonl | modefsm serve``) answer.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ANSWER_AT_END_SECONDS):
                await transport.answered()
    finally:
        await asyncio.shield(conn.close())
