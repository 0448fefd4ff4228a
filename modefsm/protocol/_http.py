"""ACP over streamable HTTP and WebSocket: the SDK's transports with modefsm's frame checks.

:func:`create_app` builds an ASGI application serving one path (``/acp``) the way the SDK's
``acp.http.asgi.create_asgi_app`` does (``POST``/``GET``/``DELETE`` streamable HTTP, and a
WebSocket on the same path, one agent per connection), with what the SDK leaves out:

- each connection negotiates ACP v1 or v2 with the stdio code
  (:mod:`modefsm.protocol._negotiate`): an ``initialize`` below the versions served gets
  ``400`` with the ``-32022`` error and makes no connection (a WebSocket client may
  initialize again); a v2 client's agent is a :class:`~modefsm.protocol.ModeAgentV2` over
  the factory's agent, behind the same raw-param checks as on stdio;
- agents built on one :class:`~modefsm.protocol.SharedEngine` share their sessions: the
  transport tells the engine which connection holds which session (``session/new``,
  ``load``, ``resume``, ``close``) and runs each connection in its own context;
- every ``POST`` body is read with a bound (:data:`MAX_BODY_BYTES`; more: ``413``, nothing
  reaches the agent) and checked as a JSON-RPC frame by :func:`~modefsm.protocol.check_frame`
  (bad JSON, ``NaN``, a scalar, an array, a wrong envelope: ``400`` whose body is the JSON-RPC
  error response, ``-32700`` or ``-32600``, with the request's id when it can be known);
- at most :data:`MAX_CONNECTIONS` connections (HTTP and WebSocket together): one more
  ``initialize`` gets ``503`` with a ``-32600`` error naming the limit; a WebSocket over the
  limit is refused before it is accepted (HTTP ``403``);
- an HTTP connection with no request and no open stream for :data:`IDLE_SECONDS` is closed
  (as a ``DELETE`` would); its id then gets ``404`` like any unknown connection id;
- at most :data:`~modefsm.protocol.MAX_OPEN` requests per connection are unanswered at once
  (more: ``429``, a ``-32600`` error naming the limit);
- what the agent sends is checked as on stdio: an answer that cannot be encoded becomes an
  error answer for the same id, and second or late answers to a permission request reach
  the agent's ``stray_answer``/``late_answer``;
- WebSocket text frames are checked the same way (a bad request is answered over the socket,
  as on stdio); the socket's frame size is bounded by the ASGI server (``ws_max_size``, set
  to :data:`MAX_BODY_BYTES` by :func:`serve_http`).

Errors the SDK itself answers keep its bodies (``{"error": "..."}``): ``415`` for a wrong
``Content-Type``, ``404`` for an unknown connection or session id, ``400`` for a missing one,
``406`` for a ``GET`` without ``text/event-stream``.

:func:`serve_http` runs the application on uvicorn. Both need the ``http`` extra
(``pip install 'modefsm[http]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from modefsm.errors import FrameError
from modefsm.protocol._batch import MAX_BATCH, Batches, http_deliver, http_stream
from modefsm.protocol._negotiate import (
    SUPPORTED_PROTOCOLS,
    _first_frame,
    chosen_version,
    negotiated_connection,
    unsupported,
)
from modefsm.protocol._shared import Peer, SharedEngine, connection_context, use_peer
from modefsm.protocol._transport import (
    MAX_OPEN,
    _encode,
    _Ledger,
    check_frame,
    check_message,
)

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = [
    "ACP_PATH",
    "IDLE_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "AgentFactory",
    "create_app",
    "serve_http",
]

ACP_PATH = "/acp"
"""The path the application serves (HTTP and WebSocket)."""
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest ``POST`` body (and WebSocket message) accepted, in bytes."""
MAX_CONNECTIONS = 64
"""Connections (HTTP and WebSocket together) served at once."""
IDLE_SECONDS = 600.0
"""Seconds an HTTP connection may go without a request or an open stream before it is closed."""

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
        self.ledger = _Ledger()
        self.batches: Batches | None = None  # a v2 connection's JSON-RPC batches
        self._queued: deque[dict[str, Any]] = deque()  # a batch's entries still to serve

    def bind(self, agent: Any) -> None:
        self.ledger.stray = getattr(agent, "stray_answer", None)
        self.ledger.late = getattr(agent, "late_answer", None)
        base = getattr(agent, "base", agent)  # a v2 agent serves its v1 agent's engine
        engine = getattr(base, "engine", None)
        self.engine = engine if isinstance(engine, SharedEngine) else None

    def serve_batches(self) -> None:
        """From now on (a v2 connection), arrays are JSON-RPC batches."""
        self.batches = Batches()
        if isinstance(self.inner, _WebSocketMessages):
            self.inner.arrays = True

    async def receive(self) -> dict[str, Any] | None:
        while True:
            frame = self._queued.popleft() if self._queued else await self.inner.receive()
            if frame is None:
                return None
            if isinstance(frame, list):  # a batch (a v2 connection's)
                await self._split(frame)
                continue
            request = "id" in frame and "method" in frame
            if not self.ledger.admit(frame):
                if request and self.batches is not None:
                    self.batches.dropped(frame)
                continue
            if request and self.batches is not None:
                self.batches.opened(frame)
            if self.engine is not None and request:
                self.engine.request_seen(self.peer, frame)
            return frame

    async def _split(self, value: list[Any]) -> None:
        assert self.batches is not None  # noqa: S101 - arrays reach here on v2 only
        try:
            frames, batch = self.batches.split(value)
        except FrameError as bad:
            await self._send_raw(bad.to_response(), None)
            return
        self._queued.extend(frames)
        if batch is not None and not batch.waiting:
            await self._send_raw(batch.array(), batch)

    async def send(self, message: dict[str, Any]) -> None:
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
        await self.inner.close()

    def release(self) -> None:
        if self.engine is not None:
            self.engine.release(self.peer)
        self.peer.closed = True


class _WebSocketMessages:
    """The SDK's WebSocket transport, but each text frame checked by ``check_frame``."""

    def __init__(self, websocket: Any) -> None:
        self._ws = websocket
        self.arrays = False  # a v2 connection: a text frame may be a batch

    async def send(self, message: Any) -> None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415 - the http extra

        if self._ws.client_state == WebSocketState.DISCONNECTED:
            raise ConnectionError("Transport closed")
        await self._ws.send_text(_encode(message).decode("utf-8").rstrip("\n"))

    async def receive(self) -> dict[str, Any] | None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415

        while self._ws.client_state != WebSocketState.DISCONNECTED:
            event = await self._ws.receive()
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
                    await self.send(bad.to_response())
        return None

    async def close(self) -> None:
        from starlette.websockets import WebSocketState  # noqa: PLC0415

        if self._ws.client_state == self._ws.application_state == WebSocketState.CONNECTED:
            await self._ws.close()


def _error(status: int, code: int, details: str, request_id: Any = None, **data: Any) -> Response:
    from starlette.responses import JSONResponse  # noqa: PLC0415

    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": code,
            "message": FrameError.MESSAGES.get(code, "Server error"),
            "data": {"details": details, **data},
        },
    }
    return JSONResponse(body, status_code=status)


def create_app(  # noqa: C901, PLR0915 - the routes share the server's state
    agent_factory: AgentFactory,
    *,
    path: str = ACP_PATH,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    idle_seconds: float = IDLE_SECONDS,
    protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS,
) -> Any:
    """An ASGI application serving ACP v1 and v2 over streamable HTTP and WebSocket at *path*.

    Args:
        agent_factory: called once per connection with the SDK's ``AgentSideConnection``;
            returns the agent (e.g. a :class:`~modefsm.protocol.ModeAgent`, whose
            ``on_connect`` it should call).
        path: the endpoint path.
        max_body_bytes: the largest ``POST`` body, in bytes (``413`` beyond).
        max_connections: connections served at once (``503`` beyond).
        idle_seconds: an HTTP connection idle that long (no request, no open stream) is
            closed.
        protocols: the ACP versions served, ``(1, 2)``, ``(1,)`` or ``(2,)``; each
            connection's first ``initialize`` chooses, as on stdio
            (:func:`~modefsm.protocol.serve_negotiated`): a v2 client's agent is a
            :class:`~modefsm.protocol.ModeAgentV2` over the factory's agent.

    Returns:
        A Starlette application (its lifespan closes every connection on shutdown).
    """
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

    checked: dict[int, _Checked] = {}  # id(SDK transport) -> its checks
    seen: dict[str, float] = {}  # connection id -> last activity (monotonic)
    streams: dict[str, int] = {}  # connection id -> open SSE streams
    sockets = 0

    def connect(wrapper: _Checked, version: int, first: dict[str, Any] | None = None) -> Any:
        """The SDK connection of *wrapper* for *version*; in the peer's context."""

        def v1_agent(conn: Any) -> Any:
            agent = agent_factory(conn)
            wrapper.bind(agent)
            return agent

        def v2_agent(conn: Any) -> Any:
            from modefsm.protocol._agent_v2 import ModeAgentV2  # noqa: PLC0415 - v2 only

            agent = ModeAgentV2(agent_factory(conn), conn)
            wrapper.bind(agent)
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
                seen.pop(connection_id, None)
            return await super().handle_delete(connection_id=connection_id)

    server = _Server(agent_factory)

    def connections() -> int:
        return len(server._connections) + sockets  # noqa: SLF001 - the SDK keeps them there

    async def read_body(request: Request) -> bytes | Response:
        length = request.headers.get("content-length")
        too_big = f"a request body is at most {max_body_bytes} bytes"
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            return _error(
                413, -32600, f"{too_big}, not {length}", limit="bytes", max=max_body_bytes
            )
        body = bytearray()
        with contextlib.suppress(ClientDisconnect):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body_bytes:
                    return _error(413, -32600, too_big, limit="bytes", max=max_body_bytes)
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
            return JSONResponse(bad.to_response(), status_code=400)
        if isinstance(frame, list):
            return await post_batch(frame, connection_id, request.headers.get(SESSION_ID_HEADER))
        is_request = "id" in frame and "method" in frame
        if is_initialize_request(frame):
            refused = unsupported(frame, protocols)
            if refused is not None:
                return JSONResponse(refused, status_code=400)
            if connections() >= max_connections:
                details = f"at most {max_connections} connections are served at once"
                return _error(
                    503, -32600, details, frame.get("id"), limit="connections", max=max_connections
                )
        elif connection_id is not None and connection_id in server._connections:  # noqa: SLF001
            seen[connection_id] = time.monotonic()
            wrapper = checked.get(id(server._connections[connection_id][1]))  # noqa: SLF001
            if is_request and wrapper is not None and wrapper.ledger.open >= MAX_OPEN:
                details = f"at most {MAX_OPEN} requests of a connection are answered at once"
                return _error(429, -32600, details, frame["id"], limit="open", max=MAX_OPEN)
        response = await server.handle_post(
            frame,
            content_type=content_type,
            connection_id=connection_id,
            session_id=request.headers.get(SESSION_ID_HEADER),
        )
        minted = response.headers.get(CONNECTION_ID_HEADER)
        if minted is not None:
            seen[minted] = time.monotonic()
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
        seen[connection_id] = time.monotonic()
        if len(frames) > MAX_BATCH:
            details = f"a batch holds at most {MAX_BATCH} entries, not {len(frames)}"
            return _error(400, -32600, details, limit="batch", max=MAX_BATCH)
        methods = [f.get("method") for f in frames if isinstance(f, dict)]
        requests = sum(1 for f in frames if isinstance(f, dict) and "id" in f and "method" in f)
        if any(method_requires_session_header(m) for m in methods) and session_id is None:
            return JSONResponse({"error": "Missing session id header"}, status_code=400)
        if session_id is not None and session_id not in transport.session_streams:
            return JSONResponse({"error": "Unknown session id"}, status_code=404)
        if requests and wrapper.ledger.open + requests > MAX_OPEN:
            details = f"at most {MAX_OPEN} requests of a connection are answered at once"
            return _error(429, -32600, details, limit="open", max=MAX_OPEN)
        http_deliver(transport, frames)
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
            streams[connection_id] = streams.get(connection_id, 0) + 1
            try:
                async for event in server.open_stream(
                    connection_id=connection_id, session_id=session_id
                ):
                    seen[connection_id] = time.monotonic()
                    yield event
            finally:
                streams[connection_id] -= 1
                if not streams[connection_id]:
                    del streams[connection_id]
                if connection_id in seen:
                    seen[connection_id] = time.monotonic()

        return StreamingResponse(
            events(), media_type=CONTENT_TYPE_SSE, headers={"Cache-Control": "no-cache"}
        )

    async def delete(request: Request) -> Response:
        return await server.handle_delete(connection_id=request.headers.get(CONNECTION_ID_HEADER))

    async def websocket(ws: WebSocket) -> None:
        nonlocal sockets
        if connections() >= max_connections:
            await ws.close(code=1013)  # before accept: the server answers HTTP 403
            return
        sockets += 1
        try:
            await ws.accept(
                headers=[(CONNECTION_ID_HEADER.lower().encode(), uuid.uuid4().hex.encode())]
            )
            peer = Peer()
            wrapper = _Checked(_WebSocketMessages(ws), peer)
            with use_peer(peer):
                first, version = await _first_frame(wrapper, protocols)
                if first is None:
                    return
                conn = connect(wrapper, version, first)
                try:
                    await conn.listen()
                finally:
                    wrapper.release()
                    await conn.close()
        finally:
            sockets -= 1

    async def reap() -> None:
        period = max(min(idle_seconds / 4, 5.0), 0.05)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for connection_id, last in list(seen.items()):
                if connection_id not in streams and now - last >= idle_seconds:
                    await server.handle_delete(connection_id=connection_id)

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
            await server.close()

    return Starlette(
        routes=[
            Route(path, post, methods=["POST"]),
            Route(path, get, methods=["GET"]),
            Route(path, delete, methods=["DELETE"]),
            WebSocketRoute(path, websocket),
        ],
        lifespan=lifespan,
    )


async def serve_http(
    agent_factory: AgentFactory,
    host: str,
    port: int,
    *,
    ready: Callable[[str], None] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    idle_seconds: float = IDLE_SECONDS,
    protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS,
) -> None:
    """Serve :func:`create_app` on uvicorn at *host*:*port* until SIGINT or SIGTERM.

    Args:
        agent_factory: see :func:`create_app`.
        host: the address to bind (no authentication is done: keep it on loopback, or put
            an authenticating proxy in front).
        port: the TCP port; ``0`` picks a free one.
        ready: called with the endpoint URL (``http://HOST:PORT/acp``) once it listens.
        max_body_bytes: see :func:`create_app`; also the largest WebSocket message.
        max_connections: see :func:`create_app`.
        idle_seconds: see :func:`create_app`.
        protocols: see :func:`create_app`.

    Raises:
        OSError: the address cannot be bound.
    """
    import uvicorn  # noqa: PLC0415 - the http extra

    app = create_app(
        agent_factory,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
        idle_seconds=idle_seconds,
        protocols=protocols,
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, reuse_port=False)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        ws_max_size=max_body_bytes,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = _stoppable(config) if _main_thread() else uvicorn.Server(config)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
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


def _main_thread() -> bool:
    import threading  # noqa: PLC0415

    return threading.current_thread() is threading.main_thread()


def _stoppable(config: Any) -> Any:
    """Uvicorn's server, stopped by SIGINT/SIGTERM without re-raising the signal at the end.

    (uvicorn re-raises a caught signal once it has shut down, which would kill the process
    before the caller closes its log.)
    """
    import uvicorn  # noqa: PLC0415 - the http extra

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            signals = (signal.SIGINT, signal.SIGTERM)
            for number in signals:
                loop.add_signal_handler(number, self._stop, number)
            try:
                yield
            finally:
                for number in signals:
                    loop.remove_signal_handler(number)

        def _stop(self, number: int) -> None:
            if self.should_exit and number == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    return Server(config)


async def _when_started(server: Any, then: Callable[[], None]) -> None:
    while not server.started:  # noqa: ASYNC110 - uvicorn offers only this flag
        await asyncio.sleep(0.01)
    then()
