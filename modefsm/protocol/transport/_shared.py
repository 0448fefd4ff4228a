"""One engine for every connection of a server: sessions shared, notifications routed.

A :class:`SharedEngine` is a :class:`~modefsm.engine.ModeEngine` that several client
connections use at once (``modefsm serve --http``: every HTTP and WebSocket connection of
the process). A session created on one connection can be loaded or resumed on another and
changed there; its records form one chained history, as with one connection.

Each connection runs in its own :class:`Peer` context (:func:`connection_context`). The
connection's agent sets the engine's ``sink`` and ``protocol`` as it would on an engine of
its own; a shared engine keeps both per connection. Then:

- a record of a change says the ACP protocol version of the connection that made it;
- a ``session/update`` of a session goes to every connection holding the session, in
  commit order, each rendered by its own agent (a v1 connection never gets a v2-only
  update such as ``state_update``). A connection holds a session once its
  ``session/new`` answer names it, or from its ``session/load``/``session/resume``
  request on (dropped again if that fails), until its ``session/close`` succeeds or the
  connection closes;
- a connection acts only on the sessions it holds: a :class:`~modefsm.protocol.ModeAgent`
  answers its ``session/set_mode``, ``session/set_config_option``, ``session/prompt``
  (through :meth:`ModeAgent.session <modefsm.protocol.ModeAgent.session>`) and v1
  ``session/close`` of any other session ``-32002`` as for an unknown session, changing
  nothing (:meth:`SharedEngine.holds`); a v2 ``session/close`` of one succeeds and changes
  nothing, as v2 answers the close of an unknown session; a ``session/cancel`` of one
  has nothing to cancel (each connection's agent cancels only its own turns);
- a ``session/close`` from a connection while another connection holds the session ends
  only the closing connection's hold (:meth:`SharedEngine.leave`): its agent cancels its
  own turns on the session, the session stays live and unchanged for the other holders
  (nothing recorded, nothing sent about the close), and a later ``session/load`` or
  ``session/resume`` on the closing connection holds it again. The close of the last
  holder ends the session, as on a plain engine;
- what a ``session/load``/``session/resume`` sends while it runs (the replayed
  conversation, v2's ``state_update``) goes to the loading connection only; mode changes
  committed meanwhile (a restore fallback, a change made on another connection) go to
  every holder;
- the engine never waits for a connection: each connection has a bounded queue
  (:data:`OUTBOX_SIZE` updates) drained by a task of its own, in commit order; the
  engine's flush only appends to the queues. The answer to a connection's request (and
  a request of its agent, such as a permission request) goes out after the updates
  queued for that connection before it (:meth:`SharedEngine.handed_over`), so a
  request's notifications still precede its response. A connection whose transport has
  not taken one update within :data:`SEND_WAIT` seconds (an HTTP client that stopped
  reading its stream), or within :data:`FULL_WAIT` seconds while its queue is full, is
  let go at once: it stops holding every session it holds and its queue is dropped (a
  later ``session/load``/``session/resume`` holds one again); the failure is logged as
  ``modefsm.notify_failed``. No other connection waits for it. What a connection's own
  request sends to it (a load's replay, a turn's messages) waits while its queue is over
  half full, so a long replay is paced by the client that asked for it;
- a session whose last holder's connection closed (or was let go) is forgotten from memory
  :data:`FORGET_AFTER` seconds later if no connection holds it again by then (no record:
  as at the end of a stdio agent's process); a later ``session/load``/``session/resume``
  restores it from the log as after a restart (a mode the spec marks not restorable comes
  back as its fallback). Memory thus holds the sessions of live connections, not every
  session the server ever served.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modefsm.engine import HostOption, ModeChange, ModeEngine, notification_kind

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec
    from modefsm.store import SessionStore

__all__ = ["FORGET_AFTER", "FULL_WAIT", "OUTBOX_SIZE", "SEND_WAIT", "SharedEngine"]

FORGET_AFTER = 60.0
"""Seconds a session with no connection left stays live before it is forgotten."""

SEND_WAIT = 1.0
"""Seconds a connection's transport may take to accept one ``session/update`` before the
connection is let go (its queue is drained by a task of its own: nobody else waits)."""

OUTBOX_SIZE = 1024
"""``session/update``s queued for one connection and not yet taken by its transport; one
more lets the connection go if its transport has been taking none for
:data:`FULL_WAIT` seconds (else, a burst committed before its queue could be drained,
up to four times as many are queued, then it is let go)."""

FULL_WAIT = 0.1
"""Seconds a connection with a full queue may spend on one update before it is let go."""

Sink = Callable[[str, Any], Awaitable[None]]


class _Outbox:
    """A connection's ``session/update``s not yet taken by its transport, in commit order.

    ``queued`` counts every update appended, ``taken`` every update handed to the
    transport (or dropped); :meth:`reached` waits until ``taken`` reaches a count.
    """

    __slots__ = ("drainer", "drops", "items", "queued", "sending", "taken", "waiters")

    def __init__(self) -> None:
        self.items: deque[tuple[str, Any]] = deque()
        self.queued = 0
        self.taken = 0
        self.drops = 0  # how many times the queue was dropped
        self.sending: float | None = None  # when the update being sent was handed over
        self.drainer: asyncio.Task[None] | None = None
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []

    def full(self) -> bool:
        """Whether one more update is one too many (see :data:`OUTBOX_SIZE`)."""
        count = len(self.items)
        if count < OUTBOX_SIZE:
            return False
        if count >= 4 * OUTBOX_SIZE:
            return True
        return self.sending is not None and time.monotonic() - self.sending >= FULL_WAIT

    def took(self, count: int = 1) -> None:
        """*count* updates were handed over (or dropped): wake the waiters they satisfy."""
        self.taken += count
        if not self.waiters:
            return
        waiting = []
        for mark, waiter in self.waiters:
            if mark <= self.taken:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                waiting.append((mark, waiter))
        self.waiters = waiting

    def drop(self) -> None:
        """Forget every queued update (the connection was let go or closed)."""
        self.items.clear()
        self.drops += 1
        self.took(self.queued - self.taken)

    async def reached(self, mark: int) -> None:
        """Return once ``taken`` is at least *mark*."""
        if self.taken >= mark:
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append((mark, waiter))
        await waiter


@dataclass(eq=False)
class Peer:
    """One client connection of a :class:`SharedEngine`.

    Attributes:
        protocol: the ACP version its agent set (``None``: v1, not written in records).
        sink: its agent's ``session/update`` sender.
        attaching: ``{request id: sessionId}`` of its ``session/load``/``session/resume``
            requests not answered yet.
        sessions: the sessions it holds.
        closed: the connection is closed; it gets nothing more.
    """

    protocol: int | None = None
    sink: Sink | None = None
    attaching: dict[Any, str] = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)
    closed: bool = False
    _asked: dict[Any, tuple[str, str | None, bool]] = field(default_factory=dict)
    _outbox: _Outbox = field(default_factory=_Outbox)


_CURRENT: contextvars.ContextVar[Peer | None] = contextvars.ContextVar("modefsm_peer", default=None)


def connection_context(peer: Peer) -> contextvars.Context:
    """A context to run a connection in: the tasks started in it belong to *peer*."""
    context = contextvars.copy_context()
    context.run(_CURRENT.set, peer)
    return context


@contextlib.contextmanager
def use_peer(peer: Peer) -> Iterator[None]:
    """Run the block (and the tasks it starts) as *peer*'s."""
    token = _CURRENT.set(peer)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@dataclass(frozen=True, slots=True)
class _Targeted:
    """An update for one connection only (sent while it loads or resumes the session)."""

    update: Any
    peer: Peer

    @property
    def session_update(self) -> str:
        """What the update is, for the log (see :func:`~modefsm.engine.notification_kind`)."""
        return notification_kind(self.update)


_ATTACHING = frozenset({"session/load", "session/resume"})
_TRACKED = frozenset({"session/new", "session/close", *_ATTACHING})


def _is_v2(update: Any) -> bool:
    return type(update).__module__.startswith("acp.experimental.v2")


class SharedEngine(ModeEngine):
    """A :class:`~modefsm.engine.ModeEngine` for several connections at once (see module).

    Takes the arguments of :class:`~modefsm.engine.ModeEngine` but ``sink``: each
    connection's agent sets its own (``engine.sink = ...`` inside the connection's
    context). Outside any connection context, ``sink`` and ``protocol`` behave as on a
    plain engine. ``forget_after`` (seconds, default :data:`FORGET_AFTER`): how long a
    session whose last connection closed stays live.
    """

    def __init__(
        self,
        spec: ModeSpec,
        *,
        store: SessionStore | None = None,
        before_change: Iterable[Callable[[ModeChange], None]] = (),
        after_change: Iterable[Callable[[ModeChange], None]] = (),
        config_options: Iterable[HostOption] = (),
        forget_after: float = FORGET_AFTER,
    ) -> None:
        """Build the engine; the holders of each session start empty."""
        self._own_sink: Sink | None = None
        self._own_protocol: int | None = None
        self._holders: dict[str, list[Peer]] = {}
        self.forget_after = forget_after
        super().__init__(
            spec,
            store=store,
            before_change=before_change,
            after_change=after_change,
            config_options=config_options,
        )

    # -- per connection ------------------------------------------------------------------

    @property
    def sink(self) -> Sink:
        """The fan-out to the holders (what :meth:`flush` sends through)."""
        return self._fan_out

    @sink.setter
    def sink(self, value: Sink | None) -> None:
        peer = _CURRENT.get()
        if peer is None:
            self._own_sink = value
        else:
            peer.sink = value

    @property
    def protocol(self) -> int | None:
        """The ACP version of the connection making the change (records carry it)."""
        peer = _CURRENT.get()
        return self._own_protocol if peer is None else peer.protocol

    @protocol.setter
    def protocol(self, value: int | None) -> None:
        peer = _CURRENT.get()
        if peer is None:
            self._own_protocol = value
        else:
            peer.protocol = value

    # -- holders -------------------------------------------------------------------------

    def attach(self, session_id: str, peer: Peer) -> bool:
        """Make *peer* a holder of *session_id*; whether it was not one already."""
        if peer.closed or session_id in peer.sessions:
            return False
        self._holders.setdefault(session_id, []).append(peer)
        peer.sessions.add(session_id)
        return True

    def detach(self, session_id: str, peer: Peer) -> None:
        """*peer* no longer holds *session_id*."""
        if session_id not in peer.sessions:
            return
        peer.sessions.discard(session_id)
        holders = self._holders[session_id]
        holders.remove(peer)
        if not holders:
            del self._holders[session_id]

    def release(self, peer: Peer) -> None:
        """*peer*'s connection closed: it holds nothing and gets nothing more.

        Each session it was the last holder of is forgotten ``forget_after`` seconds later
        unless a connection holds it again by then.
        """
        peer.closed = True
        self._let_go(peer)
        peer.attaching.clear()
        peer._asked.clear()  # noqa: SLF001 - the peer's bookkeeping is the engine's
        outbox = peer._outbox  # noqa: SLF001
        if outbox.drainer is not None:
            outbox.drainer.cancel()
        outbox.drop()

    def _let_go(self, peer: Peer) -> None:
        """*peer* holds nothing; the sessions it held last are forgotten later."""
        orphans = []
        for session_id in list(peer.sessions):
            self.detach(session_id, peer)
            if session_id not in self._holders:
                orphans.append(session_id)
        if not orphans:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: nothing can hold them again
            for session_id in orphans:
                ModeEngine.close_session(self, session_id)
        else:
            loop.call_later(self.forget_after, self._forget, orphans)

    def _forget(self, session_ids: list[str]) -> None:
        """Forget the sessions of *session_ids* that no connection holds then.

        Nothing is recorded but the cancellation of an open ask of a tool call, written
        off the event loop's path by the engine's backlog; a full backlog puts the
        forgetting off by :attr:`forget_after` seconds.
        """
        if len(self._backlog) >= self._backlog.limit:
            asyncio.get_running_loop().call_later(self.forget_after, self._forget, session_ids)
            return
        self._backlog.put(lambda: self._forget_async(session_ids))

    async def _forget_async(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            if session_id not in self._holders and session_id in self:
                await ModeEngine.close_session_async(self, session_id)

    def holders(self, session_id: str) -> list[Peer]:
        """The connections holding *session_id*, oldest first."""
        return list(self._holders.get(session_id, ()))

    def holds(self, session_id: str) -> bool:
        """Whether the connection running this call holds *session_id*.

        ``True`` outside any connection context: the host's own calls act on every session.
        """
        peer = _CURRENT.get()
        return peer is None or session_id in peer.sessions

    def request_seen(self, peer: Peer, frame: dict[str, Any]) -> None:
        """A request *peer*'s client sent: ``session/new``, ``load``, ``resume``, ``close``."""
        method = frame.get("method")
        if method not in _TRACKED or peer.closed:
            return
        params = frame.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str):
            session_id = None
        request_id = frame["id"]
        new = False
        if method in _ATTACHING and session_id is not None:
            peer.attaching[request_id] = session_id
            new = self.attach(session_id, peer)
        peer._asked[request_id] = (method, session_id, new)  # noqa: SLF001

    def answer_sent(self, peer: Peer, message: dict[str, Any]) -> None:
        """The answer to a request of *peer*: hold or let go of the session it names."""
        asked = peer._asked.pop(message.get("id"), None)  # noqa: SLF001
        if asked is None:
            return
        method, session_id, new = asked
        peer.attaching.pop(message.get("id"), None)
        result = message.get("result")
        if method == "session/new":
            created = result.get("sessionId") if isinstance(result, dict) else None
            if isinstance(created, str):
                self.attach(created, peer)
        elif session_id is None:
            return
        elif method == "session/close":
            if "result" in message:
                self.detach(session_id, peer)
        elif "result" not in message and new:
            self.detach(session_id, peer)

    def leave(self, session_id: str) -> bool:
        """The current connection's ``session/close`` of *session_id*, if others hold it.

        When a connection other than the one running this call holds the live session,
        the calling connection stops holding it (if it did) and ``True`` is returned:
        the session stays live for the others, nothing is recorded or sent. Otherwise
        (no other holder, no connection context, or no such live session) nothing
        changes and ``False`` is returned: the caller closes the session
        (:meth:`close_session`).
        """
        peer = _CURRENT.get()
        if peer is None or session_id not in self:
            return False
        if all(holder is peer for holder in self._holders.get(session_id, ())):
            return False
        self.detach(session_id, peer)
        return True

    def close_session(self, session_id: str) -> None:
        """As :meth:`ModeEngine.close_session`; the session then has no holders."""
        super().close_session(session_id)
        self._unhold(session_id)

    async def close_session_async(self, session_id: str) -> None:
        """As :meth:`ModeEngine.close_session_async`; the session then has no holders."""
        await super().close_session_async(session_id)
        if session_id not in self:
            self._unhold(session_id)

    def _unhold(self, session_id: str) -> None:
        for peer in self._holders.pop(session_id, ()):
            peer.sessions.discard(session_id)

    # -- routing -------------------------------------------------------------------------

    def _route(self, session_id: str, update: Any) -> Any:
        peer = _CURRENT.get()
        if peer is not None and session_id in peer.attaching.values():
            return _Targeted(update, peer)
        return update

    async def notify(self, session_id: str, update: Any) -> None:
        """As :meth:`ModeEngine.notify`; during a load or resume, to the loader only.

        Within a connection's context, it then waits while that connection's queue is
        over half full (a long replay is paced by its own client, never let go for it).
        """
        await super().notify(session_id, self._route(session_id, update))
        peer = _CURRENT.get()
        if peer is not None:
            outbox = peer._outbox  # noqa: SLF001 - the peer's bookkeeping is the engine's
            if len(outbox.items) > OUTBOX_SIZE // 2:
                await outbox.reached(outbox.queued - OUTBOX_SIZE // 2)

    async def handed_over(self, peer: Peer) -> None:
        """Return once every update queued for *peer* so far was handed to its transport.

        Or dropped (*peer* was let go or closed meanwhile). What a connection sends itself
        (its answers, its agent's requests) waits for this first, so that it follows the
        updates committed before it. Waits at most about :data:`SEND_WAIT` seconds per
        update still queued, as a transport that takes none within that is let go.
        """
        outbox = peer._outbox  # noqa: SLF001 - the peer's bookkeeping is the engine's
        await outbox.reached(outbox.queued)

    def enqueue(self, session_id: str, update: Any) -> None:
        """As :meth:`ModeEngine.enqueue`; during a load or resume, to the loader only."""
        super().enqueue(session_id, self._route(session_id, update))

    async def _fan_out(self, session_id: str, update: Any) -> None:
        """The engine's sink: queue *update* for each holder (never waits for one)."""
        if isinstance(update, _Targeted):
            peers = [update.peer] if not update.peer.closed else []
            update = update.update
        else:
            peers = self.holders(session_id)
        if not peers and self._own_sink is not None:  # a session of no connection
            await self._own_sink(session_id, update)
            return
        v2_only = _is_v2(update)
        for peer in peers:
            if peer.sink is None or (v2_only and peer.protocol != 2):  # noqa: PLR2004
                continue
            outbox = peer._outbox  # noqa: SLF001 - the peer's bookkeeping is the engine's
            if outbox.full():
                full = f"{len(outbox.items)} updates queued and not taken by its transport"
                self._give_up(peer, session_id, update, ConnectionError(full))
                continue
            outbox.items.append((session_id, update))
            outbox.queued += 1
            if outbox.drainer is None:
                outbox.drainer = asyncio.get_running_loop().create_task(
                    self._drain(peer), context=connection_context(peer)
                )

    async def _drain(self, peer: Peer) -> None:
        """Hand *peer*'s queued updates to its transport, in order, one at a time."""
        outbox = peer._outbox  # noqa: SLF001 - the peer's bookkeeping is the engine's
        try:
            while outbox.items and peer.sink is not None:
                session_id, update = outbox.items[0]
                drops = outbox.drops
                outbox.sending = time.monotonic()
                try:
                    await asyncio.wait_for(peer.sink(session_id, update), SEND_WAIT)
                except (TimeoutError, ConnectionError) as exc:
                    if drops == outbox.drops:  # else let go meanwhile (its queue was full)
                        self._give_up(peer, session_id, update, exc)
                    continue
                except Exception as exc:  # noqa: BLE001 - one bad update must not stop the rest
                    kind = notification_kind(update)
                    self._log_failure("modefsm.notify_failed", session_id, exc, update=kind)
                finally:
                    outbox.sending = None
                if drops == outbox.drops:
                    outbox.items.popleft()
                    outbox.took()
            outbox.drop()  # nothing left, or no transport to take it
        finally:
            outbox.drainer = None

    def _give_up(self, peer: Peer, session_id: str, update: Any, exc: BaseException) -> None:
        """Let *peer* go (its transport is stuck for every session it holds), drop its queue."""
        self._let_go(peer)
        peer._outbox.drop()  # noqa: SLF001 - the peer's bookkeeping is the engine's
        kind = notification_kind(update)
        self._log_failure("modefsm.notify_failed", session_id, exc, update=kind)
