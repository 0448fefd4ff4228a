"""JSON-RPC 2.0 batches on an ACP v2 connection: one array in, one array of answers out.

The ACP v2 transports text adopts JSON-RPC 2.0 batches; v1 says nothing of them, so a v1
connection (and any connection before its ``initialize`` chose v2) answers an array with
one ``-32600``, as before. On a v2 connection (stdio, an HTTP ``POST`` body, a WebSocket
message) a :class:`Batches` wraps the connection's one-frame path:

- an empty array gets one ``-32600`` with ``id: null`` (not an array); an array of more
  than :data:`MAX_BATCH` entries the same, naming the limit, and nothing of it is served;
  the frame limits (bytes, values, depth) apply to the array as a whole;
- the entries are served in order, each as if sent alone: a request is dispatched (its
  handler starts) in the order of the array, a notification is delivered and never
  answered, a response (an answer to a request of the agent's) is taken as one; an entry
  that is not a valid frame is answered ``-32600`` in the array (with its id when known);
- the answers are held until every request of the batch is answered, then written as one
  array, in the order of the requests (each with its id exactly as sent); a batch with no
  request (only notifications) gets no output at all. A ``session/prompt`` in a batch
  holds the array until its turn ends (the permission requests of the turn still go out
  and must be answered meanwhile);
- the caps count the entries one by one: at most :data:`~modefsm.protocol.MAX_IN_FLIGHT`
  requests are handled at once (on stdio the others are held, read but not started), a
  request over :data:`~modefsm.protocol.MAX_OPEN` open ones gets its refusal in the array
  (on stdio; an HTTP ``POST`` whose batch would pass it is refused whole, ``429``), and a
  held answer counts as answered (the array is bounded by :data:`MAX_BATCH`).

Answers are matched to requests by id, oldest first, as JSON-RPC does: a client that
reuses an id still in flight cannot tell the answers apart either way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from modefsm.errors import INVALID_REQUEST, FrameError
from modefsm.protocol.errors import frame_refusal
from modefsm.protocol.transport._stdio import MAX_OPEN, check_entry

__all__ = ["MAX_BATCH"]
# Also for the transports of this package (not re-exported): Batch, Batches, http_deliver,
# http_stream.

MAX_BATCH = MAX_OPEN
"""The most entries a batch may hold; a longer one is refused whole (``-32600``)."""


def _key(request_id: Any) -> tuple[str, Any]:
    """A request id as a dictionary key: ``1``, ``1.0`` and ``"1"`` stay apart."""
    return type(request_id).__name__, request_id


@dataclass(eq=False)
class Batch:
    """One batch being answered.

    Attributes:
        entries: the answers in order: an error dict, or ``None`` until the request at that
            place is answered (then its answer).
        waiting: how many requests are not answered yet.
        last: the place of the answer taken last.
        route: transport-specific, by place: where each answer would go alone (HTTP:
            its stream); the array goes where the first would.
    """

    entries: list[dict[str, Any] | None] = field(default_factory=list)
    waiting: int = 0
    route: dict[int, Any] = field(default_factory=dict)
    last: int = -1

    def first_route(self) -> Any:
        """The route noted for the batch's first answered place (see :attr:`route`)."""
        return self.route[min(self.route)] if self.route else None

    def array(self) -> list[dict[str, Any]]:
        """The answers, once every request is answered."""
        return [entry for entry in self.entries if entry is not None]


@dataclass(eq=False)
class _Slot:
    batch: Batch
    index: int


class Batches:
    """The batches of one v2 connection (see the module).

    A transport calls :meth:`split` on an array it read, gives the SDK the frames it
    returns (calling :meth:`opened` for each request it admits), and passes every answer
    the SDK sends to :meth:`take`, which holds the ones that belong to a batch.
    """

    def __init__(self) -> None:
        """No batch open yet."""
        self._open: dict[tuple[str, Any], deque[_Slot | None]] = {}
        self._slots: dict[int, _Slot] = {}  # id(frame) -> its place, until opened

    def split(self, value: list[Any]) -> tuple[list[dict[str, Any]], Batch | None]:
        """The frames of the batch *value* to serve, in order, and its :class:`Batch`.

        Returns:
            The frames (requests, notifications, responses), and the batch, or ``None``
            when it gets no answer at all (notifications and responses only). A batch
            with nothing to wait for (only bad entries, or none served) is complete at
            once: write :meth:`Batch.array` now.

        Raises:
            FrameError: the batch is refused whole (empty, over :data:`MAX_BATCH`).
        """
        if not value:
            raise FrameError(INVALID_REQUEST, "a batch is a non-empty array")
        if len(value) > MAX_BATCH:
            details = f"a batch holds at most {MAX_BATCH} entries, not {len(value)}"
            raise FrameError(INVALID_REQUEST, details, limit=("batch", MAX_BATCH))
        batch = Batch()
        frames: list[dict[str, Any]] = []
        for entry in value:
            try:
                frame = check_entry(entry)
            except FrameError as bad:
                if bad.answer:
                    batch.entries.append(frame_refusal(bad))
                continue
            if "method" in frame and "id" in frame:
                self._slots[id(frame)] = _Slot(batch, len(batch.entries))
                batch.entries.append(None)
                batch.waiting += 1
            frames.append(frame)
        return frames, batch if batch.entries else None

    def opened(self, frame: dict[str, Any]) -> None:
        """The request *frame* was admitted (a batch's or one sent alone): its id is open."""
        slot = self._slots.pop(id(frame), None)
        self._open.setdefault(_key(frame["id"]), deque()).append(slot)

    def dropped(self, frame: dict[str, Any]) -> None:
        """The request *frame* of a batch was not admitted: its place gets no answer."""
        slot = self._slots.pop(id(frame), None)
        if slot is not None:
            slot.batch.waiting -= 1

    def refused(self, frame: dict[str, Any], answer: dict[str, Any]) -> Batch | None:
        """The request *frame* was not admitted but answered at once with *answer*.

        Returns:
            ``None`` when *frame* is not a batch's (write *answer* alone); else the batch,
            *answer* in its place, whose array is ready when its :attr:`Batch.waiting` is 0.
        """
        slot = self._slots.pop(id(frame), None)
        return None if slot is None else _answered(slot, answer)

    def take(self, message: dict[str, Any]) -> Batch | None:
        """Hold *message* if it answers a request of a batch; the batch it belongs to.

        Returns:
            ``None`` when *message* is not a batch's answer (send it as usual); else the
            batch, whose array is ready when its :attr:`Batch.waiting` is 0.
        """
        if "method" in message or "id" not in message:
            return None
        key = _key(message["id"])
        waiting = self._open.get(key)
        if not waiting:
            return None
        slot = waiting.popleft()
        if not waiting:
            del self._open[key]
        return None if slot is None else _answered(slot, message)


def _answered(slot: _Slot, answer: dict[str, Any]) -> Batch:
    """Put *answer* in its place *slot*; the batch, one request less waiting."""
    slot.batch.entries[slot.index] = answer
    slot.batch.waiting -= 1
    slot.batch.last = slot.index
    return slot.batch


def http_stream(transport: Any, answer: dict[str, Any]) -> Any:
    """Where the SDK's HTTP transport would put *answer* alone; its routing updated so.

    The answers of a batch go out as one array on the stream its first request's answer
    would take alone (the session's stream for a session's request, else the
    connection's); the SDK's own bookkeeping for each answer (the streams a
    ``session/new`` or ``session/resume`` opens) is done as for an answer sent alone.
    """
    from acp.http.protocol import message_id_key  # noqa: PLC0415 - the http extra

    key = message_id_key(answer.get("id"))
    session_id = transport._route_response(answer, key)  # noqa: SLF001 - the SDK's routing
    if session_id is None or session_id in transport._pending_loads.values():  # noqa: SLF001
        return transport.connection_stream
    return transport.session_streams.get(session_id, transport.connection_stream)


def http_deliver(transport: Any, frames: list[Any]) -> None:
    """Hand the batch *frames* to the connection of the SDK's HTTP *transport*, whole.

    The routing the SDK notes for a request delivered alone (``deliver_to_agent``) is
    noted for each request of the batch, so that its answer's stream is the same.
    """
    from acp.http.protocol import (  # noqa: PLC0415 - the http extra
        SESSION_ATTACH_METHODS,
        message_id_key,
        session_id_from_params,
    )
    from acp.http.server import OutboundStream  # noqa: PLC0415

    for frame in frames:
        if not (isinstance(frame, dict) and "id" in frame and "method" in frame):
            continue
        session_id = session_id_from_params(frame.get("params"))
        key = message_id_key(frame["id"])
        if session_id is None or key is None:
            continue
        if frame["method"] in SESSION_ATTACH_METHODS:
            transport._pending_loads[key] = session_id  # noqa: SLF001
            if session_id not in transport.session_streams:
                transport.session_streams[session_id] = OutboundStream()
                transport._provisional_sessions.add(session_id)  # noqa: SLF001
        else:
            transport._pending_routes[key] = session_id  # noqa: SLF001
    transport._incoming.put_nowait(frames)  # noqa: SLF001
