"""One stdio agent for ACP v1 and v2 clients, chosen by ``initialize.protocolVersion``.

:func:`serve_negotiated` reads frames through :class:`~modefsm.protocol.CheckedTransport`
(every frame check applies to both versions) and looks at the first ``initialize``:

- ``protocolVersion`` 2 or more (and v2 served): the SDK's v2 agent connection takes it
  (:func:`~modefsm.protocol.v2._agent.connect_v2`), with
  :class:`~modefsm.protocol.ModeAgentV2` as its agent, the ``initialize`` asking for 2;
  the v2 schema is imported only then;
- anything else: the v1 agent, exactly as :func:`~modefsm.protocol.run_agent` serves it;
- an integer below 1: ``-32022`` with ``data: {"requested": N, "supported": [1, 2]}``
  (the router would answer ``-32600``), and the client may initialize again.

On SDK 0.12, which has no ACP v2, :data:`SUPPORTED_PROTOCOLS` is ``(1,)``: every client
is served v1 (``"supported": [1]``).

A v2 connection serves JSON-RPC batches from then on (:mod:`modefsm.protocol.transport._batch`); an
array read before the version is chosen, or on a v1 connection, is one ``-32600``.

On a v2 connection two checks the SDK's models skip are made on the raw params, before
the agent sees the request (which then changes nothing): ``session/set_config_option``
must carry ``"type": "id"`` (``-32602``, ``data.field`` ``"type"``; the model defaults a
missing one), and ``session/resume``'s ``replayFrom``, when present, must be a cursor
:func:`~modefsm.protocol.v2._agent.replay_cursor` serves (``-32602`` naming
``replayFrom``; the model turns a malformed one into ``null``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp.agent.connection import AgentSideConnection

from modefsm.errors import INVALID_PARAMS, UNSUPPORTED_PROTOCOL
from modefsm.protocol._sdk import HAS_V2
from modefsm.protocol.errors import error_response
from modefsm.protocol.transport._batch import Batches
from modefsm.protocol.transport._stdio import (
    CheckedTransport,
    OutputClosedError,
    _serve_connection,
    _Stdio,
    _stdio,
    drain_notes,
)

__all__ = ["SUPPORTED_PROTOCOLS", "serve_negotiated"]

SUPPORTED_PROTOCOLS: tuple[int, ...] = (1, 2) if HAS_V2 else (1,)
"""The ACP protocol versions ``modefsm serve`` speaks: ``(1, 2)``; ``(1,)`` on SDK 0.12,
which has no ACP v2 (a v2 client's ``initialize`` is then answered ``protocolVersion`` 1)."""


def _v2_params_error(frame: dict[str, Any]) -> dict[str, Any] | None:
    """The ``-32602`` answer to a v2 request whose raw params the models would accept."""
    method = frame.get("method")
    params = frame.get("params")
    if not isinstance(params, dict):
        return None
    if method == "session/set_config_option":
        kind = params.get("type", None)
        if kind != "id":
            shown = kind if isinstance(kind, str | int | float | bool) or kind is None else "?"
            text = "type: missing" if "type" not in params else f"type: {shown!r} is not 'id'"
            data = {"field": "type", "value": shown, "valid": ["id"], "message": text}
            return error_response(frame["id"], INVALID_PARAMS, text, data)
    elif method == "session/resume" and params.get("replayFrom") is not None:
        from acp import RequestError  # noqa: PLC0415 - a v2 connection has imported it

        from modefsm.protocol.v2._agent import replay_cursor  # noqa: PLC0415

        try:
            replay_cursor(params["replayFrom"])
        except RequestError as error:
            return error_response(frame["id"], error.code, str(error), dict(error.data or {}))
    return None


def _as_v2(first: dict[str, Any]) -> dict[str, Any]:
    """The first ``initialize`` as the v2 connection takes it: ``protocolVersion`` 2.

    (A client asking for a higher version gets 2, the highest served.)
    """
    params = first.get("params")
    if first.get("method") != "initialize" or not isinstance(params, dict):
        return first
    return {**first, "params": {**params, "protocolVersion": 2}}


class _Gate:
    """A message transport in front of :class:`CheckedTransport`: the v2 raw-param checks."""

    def __init__(self, inner: CheckedTransport, first: dict[str, Any] | None) -> None:
        self.inner = inner
        self.first = first
        self.v2 = False

    async def receive(self) -> dict[str, Any] | None:
        if self.first is not None:
            first, self.first = self.first, None
            return _as_v2(first) if self.v2 else first
        while True:
            frame = await self.inner.receive()
            if frame is None or not self.v2 or "id" not in frame or "method" not in frame:
                return frame
            if frame["method"] == "initialize":
                return _as_v2(frame)
            answer = _v2_params_error(frame)
            if answer is None:
                return frame
            await self.inner.send(answer)

    async def send(self, message: dict[str, Any]) -> None:
        await self.inner.send(message)

    async def close(self) -> None:
        await self.inner.close()


def unsupported(frame: dict[str, Any], protocols: tuple[int, ...]) -> dict[str, Any] | None:
    """The ``-32022`` answer to an ``initialize`` request asking for a version below *protocols*."""
    params = frame.get("params")
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    if type(version) is int and 0 <= version < min(protocols):
        text = f"protocolVersion: {version} is not supported"
        data = {"requested": version, "supported": list(protocols)}
        return error_response(frame["id"], UNSUPPORTED_PROTOCOL, text, data)
    return None


def chosen_version(frame: dict[str, Any], protocols: tuple[int, ...]) -> int:
    """The version served to the client whose first request is *frame* (an ``initialize``)."""
    params = frame.get("params") if frame.get("method") == "initialize" else None
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    if type(version) is int and version >= 2 and 2 in protocols:  # noqa: PLR2004
        return 2
    return 1 if 1 in protocols else 2


async def _first_frame(transport: Any, protocols: tuple[int, ...]) -> Any:
    """The first frame the agent gets, and its version; ``-32022`` answered meanwhile."""
    while True:
        frame = await transport.receive()
        if frame is None or frame.get("method") != "initialize" or "id" not in frame:
            return frame, 1 if 1 in protocols else 2
        answer = unsupported(frame, protocols)
        if answer is None:
            return frame, chosen_version(frame, protocols)
        await transport.send(answer)


def negotiated_connection(
    transport: Any,
    version: int,
    v1_agent: Any,
    v2_agent: Any,
    *,
    first: dict[str, Any] | None = None,
    listening: bool = False,
) -> Any:
    """The SDK connection serving *transport* to a client of ACP *version*.

    Args:
        transport: a message transport (``receive``/``send``/``close``) whose frames are
            already checked.
        version: ``1``: the v1 agent on the SDK's ``AgentSideConnection``; ``2``: the
            SDK's v2 ``AgentSideConnection`` with *v2_agent*
            (:func:`~modefsm.protocol.v2._agent.connect_v2`), behind the v2 raw-param
            checks, its ``initialize`` asking for ``protocolVersion`` 2.
        v1_agent: the v1 agent, or a factory called with the SDK's connection.
        v2_agent: called with the SDK's v2 connection; returns the v2 agent.
        first: a frame already read, given to the connection first.
        listening: start reading at once (the HTTP transport) rather than on ``listen()``.
    """
    gate = _Gate(transport, first)
    if version == 2:  # noqa: PLR2004
        from modefsm.protocol.v2._agent import connect_v2  # noqa: PLC0415 - v2 only when asked

        gate.v2 = True
        return connect_v2(v2_agent, gate, listening=listening)
    return AgentSideConnection(v1_agent, gate, listening=listening, use_unstable_protocol=True)


async def serve_negotiated(
    agent: Any, *, protocols: tuple[int, ...] = SUPPORTED_PROTOCOLS
) -> CheckedTransport:
    """Serve *agent* (a :class:`~modefsm.protocol.ModeAgent`) to a v1 or v2 client on stdio.

    As :func:`~modefsm.protocol.run_agent` (same frame checks, same end of input), with the
    version chosen by the first ``initialize`` (see the module).

    Args:
        agent: the v1 agent; a v2 client gets a :class:`~modefsm.protocol.ModeAgentV2`
            over it (same engine, log and restore source).
        protocols: the versions served, ``(1, 2)`` or ``(1,)``.

    Returns:
        The transport, for its counts.

    Raises:
        OutputClosedError: the client closed stdout.
    """
    async with _stdio() as stdio:
        return await _serve_stdio(agent, protocols, stdio)


async def _serve_stdio(agent: Any, protocols: tuple[int, ...], stdio: _Stdio) -> CheckedTransport:
    """:func:`serve_negotiated` on *stdio*."""
    reader, writer, output = stdio.reader, stdio.writer, stdio.output
    holder: dict[str, Any] = {"agent": agent}

    def stray(request: Any, response: dict[str, Any]) -> None:
        holder["agent"].stray_answer(request, response)

    def late(request: Any, response: dict[str, Any]) -> None:
        holder["agent"].late_answer(request, response)

    def sent(request: Any) -> str | None:
        hook = getattr(holder["agent"], "permission_sent", None)
        return hook(request) if hook is not None else None

    transport = CheckedTransport(
        reader, writer, stray=stray, late=late, sent=sent, paced=stdio.paced
    )
    first_task = asyncio.ensure_future(_first_frame(transport, protocols))
    await asyncio.wait({first_task, output.closed}, return_when=asyncio.FIRST_COMPLETED)
    if not first_task.done():
        first_task.cancel()
        raise OutputClosedError(transport.open_requests)
    first, version = first_task.result()
    if first is None:
        return transport
    if version == 2:  # noqa: PLR2004 - ACP v2 adopts JSON-RPC batches; v1 has none
        transport.batches = Batches()

    def v2_agent(connection: Any) -> Any:
        from modefsm.protocol.v2._agent import ModeAgentV2  # noqa: PLC0415 - v2 only when asked

        holder["agent"] = ModeAgentV2(agent, connection)
        return holder["agent"]

    conn = negotiated_connection(transport, version, agent, v2_agent, first=first)
    try:
        await _serve_connection(conn, transport, output.closed)
    finally:
        await drain_notes(agent)
    return transport
