"""ACP over streamable HTTP and WebSocket: the SDK's transports with modefsm's frame checks.

:func:`create_app` builds an ASGI application serving one path (``/acp``) the way the SDK's
``acp.http.asgi.create_asgi_app`` does (``POST``/``GET``/``DELETE`` streamable HTTP, and a
WebSocket on the same path, one agent per connection), with what the SDK leaves out:

- every request and WebSocket upgrade passes :class:`~modefsm.protocol.transport._access.Access`
  first: its ``Host``, its ``Origin`` and its bearer token (``403`` or ``401`` with a
  JSON-RPC error body whose ``data.rule`` is ``"host"``, ``"origin"`` or ``"token"``; a
  WebSocket is refused before it is accepted, with the same status and body);
- each connection negotiates ACP v1 or v2 with the stdio code
  (:mod:`modefsm.protocol.transport._negotiate`): an ``initialize`` below the versions served gets
  ``400`` with the ``-32022`` error and makes no connection (a WebSocket client may
  initialize again); a v2 client's agent is a :class:`~modefsm.protocol.ModeAgentV2` over
  the factory's agent, behind the same raw-param checks as on stdio;
- agents built on one :class:`~modefsm.protocol.SharedEngine` share their sessions: the
  transport tells the engine which connection holds which session (``session/new``,
  ``load``, ``resume``, ``close``) and runs each connection in its own context, so that
  a connection acts only on the sessions it holds (see
  :meth:`SharedEngine.holds <modefsm.protocol.SharedEngine.holds>`);
- every ``POST`` body is read with a bound (:data:`MAX_BODY_BYTES`; more: ``413``, nothing
  reaches the agent) and within :data:`BODY_SECONDS` (else ``408``), and checked as a
  JSON-RPC frame by :func:`~modefsm.protocol.check_frame` (bad JSON, ``NaN``, a scalar, an
  array, a wrong envelope: ``400`` whose body is the JSON-RPC error response, ``-32700`` or
  ``INVALID_REQUEST``, with the request's id when it can be known);
- at most :data:`MAX_CONNECTIONS` connections are served at once (HTTP connections, from
  their ``initialize``, and WebSockets, from their first message, together): a new one
  when all places are taken ends the connection idle the longest (an HTTP connection is
  deleted as by a ``DELETE``, a WebSocket closed with ``1001``); when every connection has
  a request open, the new ``initialize`` gets ``503`` (on a WebSocket: that error as the
  answer, then close ``1013``) with a ``INVALID_REQUEST`` error naming the limit;
- a WebSocket that sends no message within :data:`FIRST_FRAME_SECONDS` of its upgrade is
  closed (``1008``); an HTTP connection with no request and no open stream, or a
  WebSocket with no message either way and no request open, for :data:`IDLE_SECONDS` is
  closed (an HTTP connection as a ``DELETE`` would; its id then gets ``404`` like any
  unknown connection id; a WebSocket with ``1001``);
- at most :data:`~modefsm.protocol.MAX_OPEN` requests per connection are unanswered at once
  (more: ``429``, a ``INVALID_REQUEST`` error naming the limit; on a WebSocket that error
  is the request's answer), and at most as many frames ``POST``ed on a connection wait to
  be read by its agent (more: ``429`` too), so a connection whose reading stopped holds a
  bounded queue;
- at most :data:`~modefsm.protocol.MAX_IN_FLIGHT` requests per connection are handled at
  once, as on stdio (those waiting for the client's answer to a permission request not
  counted): one more is held, read and not started, until one ends or starts waiting
  (a ``$/cancel_request`` of a held request is answered ``-32800``);
- what the agent sends is checked as on stdio: an answer that cannot be encoded becomes an
  error answer for the same id, and second or late answers to a permission request reach
  the agent's ``stray_answer``/``late_answer``;
- WebSocket text frames are checked the same way (a bad request is answered over the socket,
  as on stdio); the socket's frame size is bounded by the ASGI server (``ws_max_size``, set
  to :data:`MAX_BODY_BYTES` by :func:`serve_http`).

Errors the SDK itself answers keep its bodies (``{"error": "..."}``): ``415`` for a wrong
``Content-Type``, ``404`` for an unknown connection id, or for an ``Acp-Session-Id`` header
naming a session the connection has not created, loaded or resumed, ``400`` for a missing
one, ``406`` for a ``GET`` without ``text/event-stream``.

:func:`serve_http` runs the application on uvicorn, whose HTTP/1.1 protocol it bounds
too: a TCP connection must send a request's line and headers within
:data:`HEADER_SECONDS` of connecting or of its first byte (else ``408`` and closed), and
sockets beyond ``max_sockets`` (the file descriptor limit less
:data:`RESERVED_DESCRIPTORS`) are answered ``503`` and closed at once. Both need the
``http`` extra (``pip install 'modefsm[http]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import socket
import time
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from modefsm.errors import INVALID_REQUEST, FrameError
from modefsm.protocol._sdk import require_v2
from modefsm.protocol.errors import error_response, frame_refusal
from modefsm.protocol.transport._access import Access, Refusal, is_loopback
from modefsm.protocol.transport._batch import MAX_BATCH, Batches, http_deliver, http_stream
from modefsm.protocol.transport._negotiate import (
    SUPPORTED_PROTOCOLS,
    _first_frame,
    chosen_version,
    negotiated_connection,
    unsupported,
)
from modefsm.protocol.transport._shared import Peer, SharedEngine, connection_context, use_peer
from modefsm.protocol.transport._stdio import (
    ID_SCAN_BYTES,
    MAX_OPEN,
    _encode,
    _Ledger,
    _over_open,
    _readable_id,
    admitted,
    check_frame,
    check_message,
    drain_notes,
    read_or_room,
)

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = [
    "ACP_PATH",
    "BODY_SECONDS",
    "FIRST_FRAME_SECONDS",
    "HEADER_SECONDS",
    "IDLE_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "RESERVED_DESCRIPTORS",
    "AgentFactory",
    "create_app",
    "raise_descriptor_limit",
    "serve_http",
]

ACP_PATH = "/acp"
"""The path the application serves (HTTP and WebSocket)."""
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest ``POST`` body (and WebSocket message) accepted, in bytes."""
MAX_CONNECTIONS = 64
"""Connections (HTTP and WebSocket together) served at once."""
IDLE_SECONDS = 600.0
"""Seconds an HTTP connection may go without a request or an open stream (a WebSocket
without a message either way and no request open) before it is closed."""
FIRST_FRAME_SECONDS = 10.0
"""Seconds a WebSocket has, from its upgrade, to send its first message."""
HEADER_SECONDS = 10.0
"""Seconds a TCP connection has to send a request's line and headers, from connecting (or
from the first byte after a previous request)."""
BODY_SECONDS = 10.0
"""Seconds a ``POST`` body may take to arrive, once its headers have."""
RESERVED_DESCRIPTORS = 64
"""File descriptors :func:`serve_http` keeps for other uses than sockets (log, journal,
index, pipes, the listening socket)."""

_ROOM: Any = object()
"""What :meth:`_Checked._next_frame` gives when a held request may start before a frame."""

AgentFactory = Callable[[Any], Any]
"""Builds one agent for a new connection; called with the SDK's ``AgentSideConnection``."""


class _Checked:
    """A message transport wrapping the SDK's HTTP or WebSocket one with modefsm's checks.

    The bookkeeping is stdio's (:class:`~modefsm.protocol.CheckedTransport`'s ledger):
    the same frames reach the SDK, the same answers go out.
    """

    def __init__(self, inner: Any, peer: Peer) -> None:
        self.inner = inner
        self.peer = peer
        self.engine: SharedEngine | None = None
        self._changed = asyncio.Event()  # a request opened or closed
        self.ledger = _Ledger(changed=self._changed.set)
        self._reading: asyncio.Future[Any] | None = None  # the inner transport's next frame
        self.batches: Batches | None = None  # a v2 connection's JSON-RPC batches
        self._queued: deque[dict[str, Any]] = deque()  # a batch's entries still to serve
        self.waiting = 0  # frames POSTed (batch entries one by one) the SDK has not read yet

    def posted(self, count: int = 1) -> None:
        """*count* frames were handed to the SDK's HTTP transport (its unbounded queue)."""
        self.waiting += count

    def refusal(self, requests: int, frames: int, request_id: Any = None) -> FrameError | None:
        """The refusal of a POST over :data:`~modefsm.protocol.MAX_OPEN`, or ``None``.

        The POST holds *frames* frames, *requests* of them requests; the refusal answers
        *request_id*.

        Requests count against the open ones and those queued; every frame (a cancel or an
        answer to the agent too) against those queued, so that a connection whose reading
        has stopped (its own stream unread) holds at most :data:`MAX_OPEN` frames.
        """
        if self.waiting + frames > MAX_OPEN or (
            requests and self.ledger.open + self.waiting + requests > MAX_OPEN
        ):
            return _over_open(request_id)
        return None

    def bind(self, agent: Any) -> None:
        self.ledger.stray = getattr(agent, "stray_answer", None)
        self.ledger.late = getattr(agent, "late_answer", None)
        self.ledger.sent = getattr(agent, "permission_sent", None)
        base = getattr(agent, "base", agent)  # a v2 agent serves its v1 agent's engine
        engine = getattr(base, "engine", None)
        self.engine = engine if isinstance(engine, SharedEngine) else None

    def serve_batches(self) -> None:
        """From now on (a v2 connection), arrays are JSON-RPC batches."""
        self.batches = Batches()
        if isinstance(self.inner, _WebSocketMessages):
            self.inner.arrays = True

    async def receive(self) -> dict[str, Any] | None:
        """The next frame for the SDK; flow control as on stdio (see :class:`_Ledger`).

        A request over :data:`~modefsm.protocol.MAX_OPEN` open is refused; one read while
        :data:`~modefsm.protocol.MAX_IN_FLIGHT` are being handled is held, and handed over
        when one of them is answered or starts waiting for the client, before the next
        frame is read if none comes first.
        """
        while True:
            held = self.ledger.next_held()
            if held is not None:
                return self._handed(held)
            if self._queued:
                frame = self._queued.popleft()
            else:
                frame = await self._next_frame()
                if frame is _ROOM:
                    continue
            if frame is None:
                return None
            if isinstance(frame, list):  # a batch (a v2 connection's)
                await self._split(frame)
            elif await self._admitted(frame):
                return self._handed(frame)

    async def _admitted(self, frame: dict[str, Any]) -> bool:
        """Whether *frame* goes to the SDK now (stdio's rule: :func:`admitted`)."""
        return await admitted(self.ledger, self.batches, frame, self._refuse, self.send)

    async def _next_frame(self) -> Any:
        """The inner transport's next frame (``None`` at its end), or :data:`_ROOM`.

        :data:`_ROOM`: with requests held, one may be handed over before a frame came;
        the read goes on at the next call.
        """
        if self._reading is None:
            self._reading = asyncio.ensure_future(self.inner.receive())
        reading = self._reading
        if self.ledger.held and not await read_or_room(reading, self._changed):
            return _ROOM
        self._reading = None
        frame = await reading
        # (nothing is POSTed before the initialize, the first frame read)
        self.waiting -= min(self.waiting, len(frame) if isinstance(frame, list) else 1)
        return frame

    def _handed(self, frame: dict[str, Any]) -> dict[str, Any]:
        """*frame*, handed over to the SDK now (a shared engine sees the requests)."""
        if self.engine is not None and "id" in frame and "method" in frame:
            self.engine.request_seen(self.peer, frame)
        return frame

    async def _split(self, value: list[Any]) -> None:
        assert self.batches is not None  # noqa: S101 - arrays reach here on v2 only
        try:
            frames, batch = self.batches.split(value)
        except FrameError as bad:
            await self._send_raw(frame_refusal(bad), None)
            return
        self._queued.extend(frames)
        if batch is not None and not batch.waiting:
            await self._send_raw(batch.array(), batch)

    async def _refuse(self, request: dict[str, Any], answer: dict[str, Any]) -> None:
        """Send *answer* to *request*, not admitted: alone, or in its batch's array.

        Over HTTP it takes the stream the SDK's transport routes the request's answer to.
        """
        batch = self.batches.refused(request, answer) if self.batches is not None else None
        if batch is None:
            await self.inner.send(answer)
            return
        if not isinstance(self.inner, _WebSocketMessages):
            batch.route[batch.last] = http_stream(self.inner, answer)
        if not batch.waiting:
            await self._send_raw(batch.array(), batch)

    async def send(self, message: dict[str, Any]) -> None:
        if self.engine is not None and ("id" in message or "method" not in message):
            # an answer, or a request of the agent: after the updates queued before it
            await self.engine.handed_over(self.peer)
        message, _line = self.ledger.outgoing(message)
        if self.engine is not None and "method" not in message:
            self.engine.answer_sent(self.peer, message)
        batch = self.batches.take(message) if self.batches is not None else None
        if batch is not None:  # held for its batch's array
            if not isinstance(self.inner, _WebSocketMessages):
                batch.route[batch.last] = http_stream(self.inner, message)
            self.ledger.answered(message)
            if not batch.waiting:
                await self._send_raw(batch.array(), batch)
            return
        await self.inner.send(message)
        self.ledger.answered(message)

    async def _send_raw(self, message: Any, batch: Any) -> None:
        """Send a batch's array (or its refusal) where the connection's answers go."""
        if isinstance(self.inner, _WebSocketMessages):
            await self.inner.send(message)
            return
        stream = batch.first_route() if batch is not None else None
        await (stream or self.inner.connection_stream).push(message)

    async def close(self) -> None:
        self.release()
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reading
            self._reading = None
        await self.inner.close()

    def release(self) -> None:
        if self.engine is not None:
            self.engine.release(self.peer)
        self.peer.closed = True


class _WebSocketMessages:
    """The SDK's WebSocket transport, but each text frame checked by ``check_frame``.

    Attributes:
        last: when a message last went either way (monotonic seconds).
    """

    def __init__(self, websocket: Any) -> None:
        self._ws = websocket
        self.last = time.monotonic()
        self.arrays = False  # a v2 connection: a text frame may be a batch

    async def send(self, message: Any) -> None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415 - the http extra

        if self._ws.client_state == WebSocketState.DISCONNECTED:
            raise ConnectionError("Transport closed")
        self.last = time.monotonic()
        await self._ws.send_text(_encode(message).decode("utf-8").rstrip("\n"))

    async def receive(self) -> dict[str, Any] | None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415

        while self._ws.client_state != WebSocketState.DISCONNECTED:
            event = await self._ws.receive()
            self.last = time.monotonic()
            if event["type"] == "websocket.disconnect":
                return None
            data = event.get("text")
            raw = data.encode("utf-8", "surrogatepass") if data is not None else event.get("bytes")
            if raw is None:
                continue
            try:
                return check_message(raw) if self.arrays else check_frame(raw)  # type: ignore[return-value]
            except FrameError as bad:
                if bad.answer:
                    await self.send(frame_refusal(bad))
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415

        if self._ws.client_state == self._ws.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, OSError):  # the peer went at the same time
                await self._ws.close(code, reason)


@dataclass(eq=False)
class _Live:
    """A connection counted against the cap: an HTTP connection or a WebSocket.

    Attributes:
        wrapper: its checks (whose ledger counts its open requests).
        end: ends it (a ``DELETE`` of the HTTP connection, a close of the WebSocket).
        last: its last activity (monotonic seconds), unless *messages* keeps it.
        messages: a WebSocket's messages (their ``last`` is the connection's).
        streams: an HTTP connection's open SSE streams.
    """

    wrapper: _Checked | None
    end: Callable[[str], Awaitable[None]]
    last: float = 0.0
    messages: _WebSocketMessages | None = None
    streams: int = 0

    def idle_since(self) -> float:
        return self.messages.last if self.messages is not None else self.last

    def busy(self) -> bool:
        return self.wrapper is not None and self.wrapper.ledger.open > 0


def _error_body(code: int, details: str, request_id: Any = None, **data: Any) -> dict[str, Any]:
    """A JSON-RPC error response whose ``data`` has *details* and *data*."""
    return error_response(request_id, code, None, {"details": details, **data})


def _error(status: int, code: int, details: str, request_id: Any = None, **data: Any) -> Response:
    from starlette.responses import JSONResponse  # noqa: PLC0415

    return JSONResponse(_error_body(code, details, request_id, **data), status_code=status)


class _Guard:
    """The ASGI application in front of the routes: :class:`Access` on every request."""

    def __init__(
        self, app: Any, access: Access, close: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.app = app
        self.access = access
        self.close = close
        """Ends every connection: event streams, WebSockets (at shutdown, before waiting)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        websocket = kind == "websocket"
        preflight = not websocket and scope["method"] == "OPTIONS"
        verdict = self.access.check(headers, scope.get("subprotocols") if websocket else None)
        if isinstance(verdict, Refusal) and not (preflight and verdict.rule == "token"):
            await self._refuse(scope, send, verdict)
            return
        origin = None if isinstance(verdict, Refusal) else verdict.origin
        if preflight and any(name == b"access-control-request-method" for name, _ in headers):
            allowed = dict(headers).get(b"origin")
            if allowed is not None:
                extra = self.access.preflight(allowed)
                await send({"type": "http.response.start", "status": 204, "headers": extra})
                await send({"type": "http.response.body", "body": b""})
                return
        if isinstance(verdict, Refusal):  # an OPTIONS that is not a preflight
            await self._refuse(scope, send, verdict)
            return
        if origin is None and verdict.subprotocol is None:
            await self.app(scope, receive, send)
            return
        cors = Access.cors(dict(headers)[b"origin"]) if origin is not None else []
        subprotocol = verdict.subprotocol

        async def marked(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *cors]}
            elif message["type"] == "websocket.accept" and subprotocol is not None:
                message = {**message, "subprotocol": subprotocol}
            await send(message)

        await self.app(scope, receive, marked)

    @staticmethod
    async def _refuse(scope: Any, send: Any, refusal: Refusal) -> None:
        body = orjson.dumps(_error_body(refusal.code, refusal.details, rule=refusal.rule))
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if refusal.rule == "token":
            headers.append((b"www-authenticate", b'Bearer realm="modefsm"'))
        if refusal.origin is not None:
            headers += Access.cors(refusal.origin)
        if scope["type"] == "websocket":
            if "websocket.http.response" not in scope.get("extensions", {}):
                await send({"type": "websocket.close", "code": 1008})  # the server answers 403
                return
            prefix = "websocket."
        else:
            prefix = ""
        start = {"type": f"{prefix}http.response.start", "status": refusal.status}
        await send({**start, "headers": headers})
        await send({"type": f"{prefix}http.response.body", "body": body})


def create_app(  # noqa: C901, PLR0915 - the routes share the server's state
    agent_factory: AgentFactory,
    *,
    token: str | None,
    allow_hosts: tuple[str, ...] = (),
    allow_origins: tuple[str, ...] = (),
    path: str = ACP_PATH,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    idle_seconds: float = IDLE_SECONDS,
    first_frame_seconds: float = FIRST_FRAME_SECONDS,
    body_seconds: float = BODY_SECONDS,
    protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS,
) -> Any:
    """An ASGI application serving ACP v1 and v2 over streamable HTTP and WebSocket at *path*.

    Args:
        agent_factory: called once per connection with the SDK's ``AgentSideConnection``;
            returns the agent (e.g. a :class:`~modefsm.protocol.ModeAgent`, whose
            ``on_connect`` it should call).
        token: the bearer token every request and WebSocket upgrade must carry (at least
            32 characters of ``A-Z a-z 0-9 . _ ~ -``); ``None`` turns authentication off
            (only for a server that no other local user, process or web page can reach).
        allow_hosts: ``Host`` values accepted besides the loopback names (``localhost``,
            ``127.0.0.1``, ``[::1]``, any port): ``host`` (any port) or ``host:port``, e.g.
            the name a reverse proxy forwards.
        allow_origins: ``Origin`` values accepted besides loopback ones, each exactly
            ``scheme://host[:port]``.
        path: the endpoint path.
        max_body_bytes: the largest ``POST`` body, in bytes (``413`` beyond).
        max_connections: connections served at once (the longest idle is ended for a new
            one; ``503`` when all have a request open).
        idle_seconds: an HTTP connection idle that long (no request, no open stream), or
            a WebSocket (no message either way, no request open), is closed.
        first_frame_seconds: a WebSocket that sends nothing that long after its upgrade is
            closed (``1008``).
        body_seconds: a ``POST`` body not complete that long after its headers is
            answered ``408``.
        protocols: the ACP versions served, ``(1, 2)``, ``(1,)`` or ``(2,)``; each
            connection's first ``initialize`` chooses, as on stdio
            (:func:`~modefsm.protocol.serve_negotiated`): a v2 client's agent is a
            :class:`~modefsm.protocol.ModeAgentV2` over the factory's agent.

    Returns:
        An ASGI application (its lifespan closes every connection on shutdown).

    Raises:
        ValueError: *token* is not a usable token, or a host or origin is malformed.
        SdkFeatureError: the installed ACP SDK is 0.12 (the transport needs 1.0).
    """
    require_v2("the HTTP transport (create_app, serve_http)", "http")
    from acp.http.protocol import (  # noqa: PLC0415 - the http extra
        CONNECTION_ID_HEADER,
        CONTENT_TYPE_SSE,
        SESSION_ID_HEADER,
        is_initialize_request,
        method_requires_session_header,
    )
    from acp.http.server import AcpServer  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import ClientDisconnect, Request  # noqa: PLC0415
    from starlette.responses import JSONResponse, StreamingResponse  # noqa: PLC0415
    from starlette.routing import Route, WebSocketRoute  # noqa: PLC0415
    from starlette.websockets import WebSocket  # noqa: PLC0415

    access = Access(token, hosts=allow_hosts, origins=allow_origins)
    checked: dict[int, _Checked] = {}  # id(SDK transport) -> its checks
    http_live: dict[str, _Live] = {}  # HTTP connection id -> its place
    ws_live: dict[str, _Live] = {}  # WebSocket id -> its place
    agents: weakref.WeakSet[Any] = weakref.WeakSet()  # their records drained at the end

    def connect(wrapper: _Checked, version: int, first: dict[str, Any] | None = None) -> Any:
        """The SDK connection of *wrapper* for *version*; in the peer's context."""

        def v1_agent(conn: Any) -> Any:
            agent = agent_factory(conn)
            wrapper.bind(agent)
            agents.add(agent)
            return agent

        def v2_agent(conn: Any) -> Any:
            from modefsm.protocol.v2._agent import ModeAgentV2  # noqa: PLC0415 - v2 only

            agent = ModeAgentV2(agent_factory(conn), conn)
            wrapper.bind(agent)
            agents.add(agent)
            wrapper.serve_batches()
            return agent

        return negotiated_connection(
            wrapper, version, v1_agent, v2_agent, first=first, listening=first is None
        )

    class _Server(AcpServer):
        version = 1

        async def _handle_initialize(self, message: dict[str, Any]) -> Response:
            self.version = chosen_version(message, protocols)
            return await super()._handle_initialize(message)

        def _connect(self, transport: Any) -> Any:
            peer = Peer()
            wrapper = _Checked(transport, peer)
            checked[id(transport)] = wrapper
            return connection_context(peer).run(connect, wrapper, self.version)

        async def handle_delete(self, *, connection_id: str | None) -> Response:
            entry = self._connections.get(connection_id) if connection_id else None
            if entry is not None:
                wrapper = checked.pop(id(entry[1]), None)
                if wrapper is not None:
                    wrapper.release()
            if connection_id is not None:
                http_live.pop(connection_id, None)
            return await super().handle_delete(connection_id=connection_id)

    server = _Server(agent_factory)

    def connections() -> int:
        return len(server._connections) + len(ws_live)  # noqa: SLF001 - the SDK keeps them

    async def make_room() -> bool:
        """Whether a new connection fits, once the longest idle one is ended if need be."""
        if connections() < max_connections:
            return True
        places = [(e.idle_since(), k, e) for k, e in (*http_live.items(), *ws_live.items())]
        idle = [place for place in places if not place[2].busy()]
        if not idle:
            return False
        _since, key, entry = min(idle, key=lambda place: place[0])
        http_live.pop(key, None)
        ws_live.pop(key, None)
        await entry.end(key)
        return connections() < max_connections

    async def delete(connection_id: str) -> None:
        await server.handle_delete(connection_id=connection_id)

    def full(request_id: Any) -> dict[str, Any]:
        details = f"at most {max_connections} connections are served at once"
        return _error_body(
            INVALID_REQUEST, details, request_id, limit="connections", max=max_connections
        )

    async def read_body(request: Request) -> bytes | Response:
        """The body, or ``413`` past *max_body_bytes* (with the request's id if readable).

        A body announced too long is not read beyond its first :data:`ID_SCAN_BYTES`
        (where its id is looked for); one that grows too long, not beyond the limit.
        """
        length = request.headers.get("content-length")
        too_big = f"a request body is at most {max_body_bytes} bytes"
        announced = length is not None and length.isdigit() and int(length) > max_body_bytes
        if announced:
            too_big += f", not {length}"
        body = bytearray()
        try:
            async with asyncio.timeout(body_seconds):
                with contextlib.suppress(ClientDisconnect):
                    async for chunk in request.stream():
                        body += chunk
                        if len(body) > max_body_bytes or (announced and len(body) >= ID_SCAN_BYTES):
                            break
        except TimeoutError:
            slow = _error(
                408,
                INVALID_REQUEST,
                f"a request body must arrive within {body_seconds:g} s",
                limit="seconds",
                max=body_seconds,
            )
            slow.headers["connection"] = "close"
            return slow
        if announced or len(body) > max_body_bytes:
            request_id = _readable_id(bytes(body[:ID_SCAN_BYTES]))
            return _error(
                413, INVALID_REQUEST, too_big, request_id, limit="bytes", max=max_body_bytes
            )
        return bytes(body)

    async def post(request: Request) -> Response:  # noqa: C901, PLR0911 - one answer per check
        content_type = request.headers.get("content-type")
        if content_type is None or not content_type.lower().startswith("application/json"):
            return JSONResponse({"error": "Content-Type must be application/json"}, 415)
        body = await read_body(request)
        if not isinstance(body, bytes):
            return body
        connection_id = request.headers.get(CONNECTION_ID_HEADER)
        try:
            frame = check_message(body) if batching(connection_id) else check_frame(body)
        except FrameError as bad:
            return JSONResponse(frame_refusal(bad), status_code=400)
        if isinstance(frame, list):
            return await post_batch(frame, connection_id, request.headers.get(SESSION_ID_HEADER))
        is_request = "id" in frame and "method" in frame
        if is_initialize_request(frame):
            refused = unsupported(frame, protocols)
            if refused is not None:
                return JSONResponse(refused, status_code=400)
            if not await make_room():
                return JSONResponse(full(frame.get("id")), status_code=503)
        elif connection_id is not None and connection_id in http_live:
            entry = http_live[connection_id]
            entry.last = time.monotonic()
            wrapper = entry.wrapper
            request_id = frame["id"] if is_request else None
            over = wrapper.refusal(int(is_request), 1, request_id) if wrapper else None
            if over is not None:
                return JSONResponse(frame_refusal(over), status_code=429)
        response = await server.handle_post(
            frame,
            content_type=content_type,
            connection_id=connection_id,
            session_id=request.headers.get(SESSION_ID_HEADER),
        )
        if response.status_code == 202 and connection_id in http_live:  # noqa: PLR2004
            wrapper = http_live[connection_id].wrapper
            if wrapper is not None:
                wrapper.posted()
        minted = response.headers.get(CONNECTION_ID_HEADER)
        if minted is not None and minted in server._connections:  # noqa: SLF001
            wrapper = checked.get(id(server._connections[minted][1]))  # noqa: SLF001
            http_live[minted] = _Live(wrapper, delete, time.monotonic())
        return response

    def batching(connection_id: str | None) -> bool:
        """Whether the connection *connection_id* serves batches (a v2 connection)."""
        connection = server._connections.get(connection_id) if connection_id else None  # noqa: SLF001
        wrapper = checked.get(id(connection[1])) if connection is not None else None
        return wrapper is not None and wrapper.batches is not None

    async def post_batch(
        frames: list[Any], connection_id: str | None, session_id: str | None
    ) -> Response:
        """A batch ``POST`` on a v2 connection: ``202``, its answers as one array on the stream."""
        assert connection_id is not None  # noqa: S101 - batching() found the connection
        transport = server._connections[connection_id][1]  # noqa: SLF001
        wrapper = checked[id(transport)]
        entry = http_live.get(connection_id)
        if entry is not None:
            entry.last = time.monotonic()
        if len(frames) > MAX_BATCH:
            details = f"a batch holds at most {MAX_BATCH} entries, not {len(frames)}"
            return _error(400, INVALID_REQUEST, details, limit="batch", max=MAX_BATCH)
        methods = [f.get("method") for f in frames if isinstance(f, dict)]
        requests = sum(1 for f in frames if isinstance(f, dict) and "id" in f and "method" in f)
        if any(method_requires_session_header(m) for m in methods) and session_id is None:
            return JSONResponse({"error": "Missing session id header"}, status_code=400)
        if session_id is not None and session_id not in transport.session_streams:
            return JSONResponse({"error": "Unknown session id"}, status_code=404)
        refused = wrapper.refusal(requests, len(frames))
        if refused is not None:
            return JSONResponse(frame_refusal(refused), status_code=429)
        http_deliver(transport, frames)
        wrapper.posted(len(frames))
        from starlette.responses import Response as Plain  # noqa: PLC0415

        return Plain(status_code=202)

    async def get(request: Request) -> Response:
        accept = request.headers.get("accept", "")
        if CONTENT_TYPE_SSE not in accept and "*/*" not in accept:
            return JSONResponse({"error": "Accept must include text/event-stream"}, 406)
        connection_id = request.headers.get(CONNECTION_ID_HEADER)
        session_id = request.headers.get(SESSION_ID_HEADER)
        error = server.validate_stream(connection_id=connection_id, session_id=session_id)
        if error is not None:
            return error
        assert connection_id is not None  # noqa: S101 - validate_stream checked it

        async def events() -> AsyncIterator[bytes]:
            entry = http_live.get(connection_id)
            if entry is not None:
                entry.streams += 1
            try:
                async for event in server.open_stream(
                    connection_id=connection_id, session_id=session_id
                ):
                    if entry is not None:
                        entry.last = time.monotonic()
                    yield event
            finally:
                if entry is not None:
                    entry.streams -= 1
                    entry.last = time.monotonic()

        return StreamingResponse(
            events(), media_type=CONTENT_TYPE_SSE, headers={"Cache-Control": "no-cache"}
        )

    async def delete_route(request: Request) -> Response:
        return await server.handle_delete(connection_id=request.headers.get(CONNECTION_ID_HEADER))

    async def websocket(ws: WebSocket) -> None:
        key = uuid.uuid4().hex
        await ws.accept(headers=[(CONNECTION_ID_HEADER.lower().encode(), key.encode())])
        messages = _WebSocketMessages(ws)
        peer = Peer()
        wrapper = _Checked(messages, peer)
        with use_peer(peer):
            try:
                first, version = await asyncio.wait_for(
                    _first_frame(wrapper, protocols), first_frame_seconds
                )
            except TimeoutError:
                reason = f"no message within {first_frame_seconds:g} s"
                await messages.close(1008, reason)
                return
            if first is None:
                return
            if not await make_room():
                await messages.send(full(first.get("id")))
                await messages.close(1013, f"at most {max_connections} connections")
                return

            async def end(_key: str) -> None:
                await messages.close(1001, "idle the longest while the server was full")

            ws_live[key] = _Live(wrapper, end, messages=messages)
            conn = connect(wrapper, version, first)
            try:
                await conn.listen()
            finally:
                ws_live.pop(key, None)
                wrapper.release()
                await conn.close()

    async def reap() -> None:
        period = max(min(idle_seconds / 4, 5.0), 0.05)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for connection_id, entry in list(http_live.items()):
                if not entry.streams and now - entry.last >= idle_seconds:
                    await server.handle_delete(connection_id=connection_id)
            for key, entry in list(ws_live.items()):
                if now - entry.idle_since() >= idle_seconds and not entry.busy():
                    ws_live.pop(key, None)
                    assert entry.messages is not None  # noqa: S101 - a WebSocket's place
                    await entry.messages.close(1001, f"idle for {idle_seconds:g} s")

    async def close_all() -> None:
        for entry in list(ws_live.values()):
            assert entry.messages is not None  # noqa: S101 - a WebSocket's place
            await entry.messages.close(1001, "the server is stopping")
        await server.close()  # every HTTP connection, its event streams ended

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        del app
        reaper = asyncio.ensure_future(reap())
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await close_all()
            for agent in list(agents):  # the records written after their callback
                await drain_notes(agent)

    routes = Starlette(
        routes=[
            Route(path, post, methods=["POST"]),
            Route(path, get, methods=["GET"]),
            Route(path, delete_route, methods=["DELETE"]),
            WebSocketRoute(path, websocket),
        ],
        lifespan=lifespan,
    )
    return _Guard(routes, access, close_all)


async def serve_http(
    agent_factory: AgentFactory,
    host: str,
    port: int,
    *,
    token: str | None,
    allow_hosts: tuple[str, ...] = (),
    allow_origins: tuple[str, ...] = (),
    ready: Callable[[str], None] | None = None,
    stopping: Callable[[str], None] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    idle_seconds: float = IDLE_SECONDS,
    first_frame_seconds: float = FIRST_FRAME_SECONDS,
    header_seconds: float = HEADER_SECONDS,
    body_seconds: float = BODY_SECONDS,
    max_sockets: int | None = None,
    protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS,
) -> None:
    """Serve :func:`create_app` on uvicorn at *host*:*port* until SIGINT or SIGTERM.

    Args:
        agent_factory: see :func:`create_app`.
        host: the address to bind; one that is not loopback needs a *token* (the traffic
            is plain HTTP: put a TLS proxy in front of it).
        port: the TCP port; ``0`` picks a free one.
        token: see :func:`create_app`.
        allow_hosts: see :func:`create_app`; the bound ``host:port`` is always accepted.
        allow_origins: see :func:`create_app`.
        ready: called with the endpoint URL (``http://HOST:PORT/acp``) once it listens;
            if it raises, the server stops at once and this raises that error.
        stopping: called with the signal's name (``SIGINT``, ``SIGTERM``) when one stops
            it (run from the main thread only: elsewhere signals are not caught). Stopping
            ends every connection at once (event streams, WebSockets with ``1001``), then
            the requests under way get the rest of 2 s to be answered.
        max_body_bytes: see :func:`create_app`; also the largest WebSocket message.
        max_connections: see :func:`create_app`.
        idle_seconds: see :func:`create_app`.
        first_frame_seconds: see :func:`create_app`.
        header_seconds: a TCP connection that has not sent a request's line and headers
            this long after connecting (or after its first byte of a later request) is
            answered ``408`` and closed.
        body_seconds: see :func:`create_app`; also, a request answered without its body
            being read (a refusal) whose body is not complete that long after its headers
            has its connection closed.
        max_sockets: sockets open at once (HTTP and WebSocket, idle ones too); one more is
            answered ``503`` and closed at once. ``None``: the soft ``RLIMIT_NOFILE`` less
            :data:`RESERVED_DESCRIPTORS`.
        protocols: see :func:`create_app`.

    uvicorn's own log records (a malformed request, a failed handshake) go to the handlers
    of the :mod:`logging` module the host configured (``modefsm serve``'s write to stderr
    only when it has room, at a bounded rate); no handler of uvicorn's is installed, so no
    peer can make the server wait on a full stderr.

    Raises:
        OSError: the address cannot be bound.
        ValueError: *token* is ``None`` and *host* is not a loopback address, or an
            argument of :func:`create_app` is malformed.
    """
    import uvicorn  # noqa: PLC0415 - the http extra

    if token is None and not is_loopback(host):
        msg = f"{host} is not a loopback address: serving it needs a token"
        raise ValueError(msg)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    sock = socket.create_server((host, port), family=family, reuse_port=False)
    bound = sock.getsockname()[1]
    try:
        app = create_app(
            agent_factory,
            token=token,
            allow_hosts=(*allow_hosts, f"{shown}:{bound}"),
            allow_origins=allow_origins,
            max_body_bytes=max_body_bytes,
            max_connections=max_connections,
            idle_seconds=idle_seconds,
            first_frame_seconds=first_frame_seconds,
            body_seconds=body_seconds,
            protocols=protocols,
        )
    except BaseException:
        sock.close()
        raise
    if max_sockets is None:
        max_sockets = _socket_limit()
    config = uvicorn.Config(
        app,
        log_level="warning",
        log_config=None,  # uvicorn's records go to the host's handlers, not straight to stderr
        ws_max_size=max_body_bytes,
        lifespan="on",
        timeout_graceful_shutdown=2,
        http=_bounded_http(header_seconds, body_seconds, max_sockets),
        ws=_denying_websockets(),
    )
    server = _stoppable(config, app.close, stopping, signals=_main_thread())
    if ready is not None:
        started = asyncio.ensure_future(
            _when_started(server, lambda: ready(f"http://{shown}:{bound}{ACP_PATH}"))
        )
    try:
        await server.serve(sockets=[sock])
    finally:
        if ready is not None:
            started.cancel()
        sock.close()
    if ready is not None and started.done() and not started.cancelled():
        failed = started.exception()
        if failed is not None:  # ready raised: the server stopped at once
            raise failed


def _socket_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` less :data:`RESERVED_DESCRIPTORS` (at least 1)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(soft - RESERVED_DESCRIPTORS, 1)


def raise_descriptor_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _raw_answer(status: int, reason: str, body: dict[str, Any]) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, with a JSON *body*."""
    data = orjson.dumps(body)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + data


def _bounded_http(  # noqa: C901
    header_seconds: float, body_seconds: float, max_sockets: int
) -> type[Any]:
    """Uvicorn's h11 protocol with deadlines for a request's headers and body; a socket cap.

    uvicorn bounds the wait between requests (``timeout_keep_alive``) but not a request
    whose headers arrive slowly, nor a connection that never sends a byte, nor a body
    that trickles in after the request was answered without reading it (a refusal: each
    byte restarts the keep-alive wait). A body not complete *body_seconds* after its
    headers ends the connection once the request is answered (the application answers
    ``408`` at that deadline when it reads the body itself).
    """
    import h11  # noqa: PLC0415 - uvicorn's HTTP/1.1 parser
    from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415

    slow = _raw_answer(
        408,
        "Request Timeout",
        _error_body(
            INVALID_REQUEST,
            f"a request's headers must arrive within {header_seconds:g} s",
            limit="seconds",
            max=header_seconds,
        ),
    )
    crowded = _raw_answer(
        503,
        "Service Unavailable",
        _error_body(
            INVALID_REQUEST,
            f"at most {max_sockets} sockets are open at once",
            limit="sockets",
            max=max_sockets,
        ),
    )

    class BoundedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _body: asyncio.TimerHandle | None = None  # the request body's deadline

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_sockets:
                self.connections.discard(self)
                transport.write(crowded)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of a later request
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # its headers are in

        def handle_events(self) -> None:
            super().handle_events()
            if self.transport.get_protocol() is not self:
                return  # upgraded to a WebSocket: its own deadlines apply
            if self.conn.their_state is h11.SEND_BODY:
                if self._body is None:
                    self._body = self.loop.call_later(body_seconds, self._body_late)
            elif self._body is not None:
                self._body.cancel()
                self._body = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._body is not None:
                self._body.cancel()
                self._body = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.write(slow)
                self.transport.close()

        def _body_late(self) -> None:
            self._body = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_started:
                # the application reads the body: it answers 408 at its own deadline
                self._body = self.loop.call_later(body_seconds, self._body_late)
                return
            self.transport.close()

    return BoundedH11Protocol


def _denying_websockets() -> Any:
    """Uvicorn's WebSocket protocol, quiet when a handshake is answered with a refusal.

    uvicorn 0.54's ``websockets`` (sans-I/O) protocol logs an error ("ASGI callable
    returned without completing handshake") after every upgrade answered through the
    ``websocket.http.response`` extension, as each refusal of :class:`Access` is: one
    error line per unauthenticated peer (uvicorn pull request 3138 fixes it upstream).
    The refusal is marked as the end of the handshake once it is written, as uvicorn's
    ``wsproto`` protocol does. ``"auto"`` (uvicorn's choice) when ``websockets`` is not
    installed.
    """
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import (  # noqa: PLC0415
            WebSocketsSansIOProtocol,
        )
    except ImportError:  # no websockets: uvicorn picks wsproto, which does this itself
        return "auto"

    class DenyingProtocol(WebSocketsSansIOProtocol):
        async def send(self, message: Any) -> None:
            await super().send(message)
            if message["type"] == "websocket.http.response.body" and self.close_sent:
                self.handshake_complete = True

    return DenyingProtocol


def _main_thread() -> bool:
    import threading  # noqa: PLC0415

    return threading.current_thread() is threading.main_thread()


def _stoppable(
    config: Any,
    close: Callable[[], Awaitable[None]],
    stopping: Callable[[str], None] | None,
    *,
    signals: bool,
) -> Any:
    """Uvicorn's server, ending every connection (*close*) before it waits for them.

    uvicorn waits up to ``timeout_graceful_shutdown`` for open responses to finish, and an
    event stream or a WebSocket never does: *close* ends them first. With *signals* (the
    main thread), SIGINT and SIGTERM stop it, *stopping* (if given) is called with the
    signal's name, and the signal is not re-raised at the end (uvicorn re-raises a caught
    signal once it has shut down, which would kill the process before the caller closes
    its log).
    """
    import uvicorn  # noqa: PLC0415 - the http extra

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if not signals:  # not the main thread: the caller stops it (should_exit)
                yield
                return
            loop = asyncio.get_running_loop()
            caught = (signal.SIGINT, signal.SIGTERM)
            for number in caught:
                loop.add_signal_handler(number, self._stop, number)
            try:
                yield
            finally:
                for number in caught:
                    loop.remove_signal_handler(number)

        def _stop(self, number: int) -> None:
            if self.should_exit and number == signal.SIGINT:
                self.force_exit = True
            elif not self.should_exit and stopping is not None:
                stopping(signal.Signals(number).name)
            self.should_exit = True

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            for listener in self.servers:
                listener.close()  # no new connection while the open ones end
            await close()
            await super().shutdown(sockets)

    return Server(config)


async def _when_started(server: Any, then: Callable[[], None]) -> None:
    """Call *then* once *server* listens; if it raises, stop the server (and re-raise)."""
    while not server.started:  # noqa: ASYNC110 - uvicorn offers only this flag
        await asyncio.sleep(0.01)
    try:
        then()
    except BaseException:
        server.should_exit = True
        raise
