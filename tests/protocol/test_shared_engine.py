"""SharedEngine in process: holders, per-connection versions, a stuck connection let go."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acp.experimental.v2 import schema as v2
from acp.schema import AgentMessageChunk, TextContentBlock

from modefsm import LogStore, preset
from modefsm.log import TransitionLog
from modefsm.protocol.transport import _shared
from modefsm.protocol.transport._shared import Peer, SharedEngine, use_peer
from modefsm.protocol.v1 import session_updates
from tests.conftest import read_log

SEED = preset("seed")


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []

    async def __call__(self, session_id: str, update: Any) -> None:
        self.got.append((session_id, update))


def kinds(recorder: Recorder) -> list[str]:
    """What the recorded notifications are as ACP v1 updates, in order."""
    return [u.session_update for _session_id, e in recorder.got for u in session_updates(e)]


def connected(engine: SharedEngine, protocol: int | None = None) -> tuple[Peer, Recorder]:
    peer = Peer()
    recorder = Recorder()
    with use_peer(peer):
        engine.sink = recorder
        engine.protocol = protocol
    return peer, recorder


async def test_updates_go_to_the_holders_each_in_its_version(log_path):
    log = TransitionLog.to_file(log_path)
    engine = SharedEngine(SEED, store=LogStore(log))
    a, got_a = connected(engine)
    b, got_b = connected(engine, 2)
    _c, got_c = connected(engine)
    with use_peer(a):
        session = engine.new_session()
    engine.attach(session.session_id, a)
    engine.attach(session.session_id, b)
    with use_peer(b):
        await engine.set_mode(session.session_id, "code")
        await engine.notify(session.session_id, v2.RunningSessionStateUpdate())
    with use_peer(a):
        await engine.set_mode(session.session_id, "ask")
    log.close()
    for peer in (a, b):
        await engine.handed_over(peer)  # what each connection's answer waits for
    assert kinds(got_a) == ["current_mode_update", "config_option_update"] * 2
    assert kinds(got_b) == [
        "current_mode_update",
        "config_option_update",
        "state_update",
        "current_mode_update",
        "config_option_update",
    ]
    assert got_c.got == []  # holds nothing
    assert [(r["to_mode"], r.get("protocol")) for r in read_log(log_path)] == [
        ("ask", None),
        ("code", 2),
        ("ask", None),
    ]


async def test_a_load_in_progress_sends_to_the_loader_only():
    engine = SharedEngine(SEED)
    a, got_a = connected(engine)
    b, got_b = connected(engine)
    with use_peer(a):
        session_id = engine.new_session().session_id
    engine.attach(session_id, a)
    engine.request_seen(b, {"id": 7, "method": "session/load", "params": {"sessionId": session_id}})
    with use_peer(b):
        replayed = AgentMessageChunk(
            session_update="agent_message_chunk",
            content=TextContentBlock(type="text", text="from the journal"),
        )
        await engine.notify(session_id, replayed)  # what a load replays
    await engine.handed_over(b)
    engine.answer_sent(b, {"id": 7, "error": {"code": -32603, "message": "x"}})
    with use_peer(a):
        await engine.set_mode(session_id, "code")
    await engine.handed_over(a)
    await engine.handed_over(b)
    assert kinds(got_b) == ["agent_message_chunk"]  # and nothing after the failed load
    assert kinds(got_a) == ["current_mode_update", "config_option_update"]


async def test_a_stuck_connection_is_let_go_and_the_others_keep_getting_updates(
    log_path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_shared, "SEND_WAIT", 0.05)
    log = TransitionLog.to_file(log_path)
    engine = SharedEngine(SEED, store=LogStore(log))
    stuck = Peer()

    async def never(session_id: str, update: Any) -> None:
        await asyncio.Event().wait()

    with use_peer(stuck):
        engine.sink = never
    a, got_a = connected(engine)
    session_id = engine.new_session().session_id
    engine.attach(session_id, stuck)
    engine.attach(session_id, a)
    await asyncio.wait_for(engine.set_mode(session_id, "code"), 5)
    await asyncio.wait_for(engine.set_mode(session_id, "ask"), 5)  # never waits for it
    await asyncio.wait_for(engine.handed_over(stuck), 5)  # let go after SEND_WAIT
    await engine.handed_over(a)
    log.close()
    assert engine.holders(session_id) == [a]
    assert kinds(got_a) == ["current_mode_update", "config_option_update"] * 2
    failed = [r for r in read_log(log_path) if r["event"] == "modefsm.notify_failed"]
    assert [(r["update"], r["error"]) for r in failed] == [("ModeChanged", "TimeoutError()")]


async def test_closing_a_session_or_a_connection_drops_its_holders():
    engine = SharedEngine(SEED)
    a, _ = connected(engine)
    b, _ = connected(engine)
    first = engine.new_session().session_id
    second = engine.new_session().session_id
    for peer in (a, b):
        engine.attach(first, peer)
        engine.attach(second, peer)
    engine.close_session(first)
    assert (engine.holders(first), a.sessions, b.sessions) == ([], {second}, {second})
    engine.release(a)
    assert (engine.holders(second), a.sessions, a.closed) == ([b], set(), True)
    assert engine.attach(second, a) is False  # a closed connection holds nothing again


async def test_leave_ends_one_connections_hold_while_another_holds_the_session():
    """What ``session/close`` asks of a shared engine: only the last holder's close (or a
    close outside any connection) ends the session."""
    engine = SharedEngine(SEED)
    a, _ = connected(engine)
    b, _ = connected(engine)
    stranger, _ = connected(engine)
    session_id = engine.new_session().session_id
    for peer in (a, b):
        engine.attach(session_id, peer)
    with use_peer(stranger):  # holds nothing: cannot end the session for A and B
        assert engine.leave(session_id) is True
    with use_peer(a):
        assert engine.leave(session_id) is True
        assert engine.leave("sess_unknown") is False
    assert (engine.holders(session_id), a.sessions, session_id in engine) == ([b], set(), True)
    assert engine.leave(session_id) is False  # no connection: the caller closes it
    with use_peer(b):
        assert engine.leave(session_id) is False  # the last holder: the caller closes it
    assert (engine.holders(session_id), b.sessions) == ([b], {session_id})
    with use_peer(a):
        assert engine.attach(session_id, a) is True  # a load holds it again


async def test_a_stuck_connection_is_let_go_of_every_session_it_holds_at_once(
    log_path, monkeypatch: pytest.MonkeyPatch
):
    """One timeout, not one per session: a client that stopped reading its stream and
    holds many sessions would otherwise hold every connection's answers up (one flush at
    a time) for SEND_WAIT seconds per session."""
    monkeypatch.setattr(_shared, "SEND_WAIT", 0.05)
    log = TransitionLog.to_file(log_path)
    engine = SharedEngine(SEED, store=LogStore(log))
    stuck = Peer()

    async def never(session_id: str, update: Any) -> None:
        await asyncio.Event().wait()

    with use_peer(stuck):
        engine.sink = never
    a, got_a = connected(engine)
    sessions = [engine.new_session().session_id for _ in range(4)]
    for session_id in sessions:
        engine.attach(session_id, stuck)
        engine.attach(session_id, a)
    for session_id in sessions:
        await asyncio.wait_for(engine.set_mode(session_id, "code"), 5)
    await asyncio.wait_for(engine.handed_over(stuck), 5)  # let go after SEND_WAIT
    await engine.handed_over(a)
    log.close()
    assert [engine.holders(s) for s in sessions] == [[a]] * 4
    assert (stuck.sessions, stuck.closed) == (set(), False)
    assert kinds(got_a) == ["current_mode_update", "config_option_update"] * 4
    failed = [r for r in read_log(log_path) if r["event"] == "modefsm.notify_failed"]
    assert [(r["session_id"], r["update"]) for r in failed] == [(sessions[0], "ModeChanged")]
    assert engine.attach(sessions[0], stuck) is True  # a later load holds it again


async def test_sessions_of_no_live_connection_are_forgotten_after_the_grace(log_path):
    """Memory holds the sessions of live connections: one a closed connection held last
    is forgotten (no record) unless a connection holds it again within forget_after; a
    later load restores it from the log, as after a restart."""
    permission = preset("permission")
    log = TransitionLog.to_file(log_path)
    engine = SharedEngine(permission, store=LogStore(log), forget_after=0.05)
    a, _ = connected(engine)
    b, _ = connected(engine)
    c, _ = connected(engine)
    alone, shared, taken_up = (engine.new_session().session_id for _ in range(3))
    await engine.set_mode(alone, "bypassPermissions")
    for session_id, peers in [(alone, [a]), (shared, [a, b]), (taken_up, [a])]:
        for peer in peers:
            engine.attach(session_id, peer)
    engine.release(a)
    engine.attach(taken_up, c)  # within the grace: held again
    assert (alone in engine, len(engine)) == (True, 3)
    await asyncio.sleep(0.2)
    assert (alone in engine, shared in engine, taken_up in engine) == (False, True, True)
    restored = engine.restore_session(alone, "bypassPermissions", 2)
    log.close()
    assert restored.state == "default"  # not restorable: its fallback, as after a restart
    records = [(r["session_id"], r.get("to_mode"), r["origin"]) for r in read_log(log_path)]
    assert records == [
        (alone, "default", "new"),
        (shared, "default", "new"),
        (taken_up, "default", "new"),
        (alone, "bypassPermissions", "set_mode"),
        (alone, "default", "restore"),
    ]


async def test_a_connection_whose_queue_fills_is_let_go_at_once(
    log_path, monkeypatch: pytest.MonkeyPatch
):
    """The engine never waits for a connection: its updates are queued; with OUTBOX_SIZE
    queued and its transport taking none for FULL_WAIT, the next update lets it go then
    and there, long before SEND_WAIT. A burst committed before its queue could be drained
    (nothing being sent yet) lets no one go."""
    monkeypatch.setattr(_shared, "SEND_WAIT", 30.0)
    monkeypatch.setattr(_shared, "FULL_WAIT", 0.05)
    monkeypatch.setattr(_shared, "OUTBOX_SIZE", 2)
    log = TransitionLog.to_file(log_path)
    engine = SharedEngine(SEED, store=LogStore(log))
    stuck = Peer()
    taken: list[str] = []

    async def one_then_never(session_id: str, update: Any) -> None:
        taken.append(type(update).__name__)
        await asyncio.Event().wait()

    with use_peer(stuck):
        engine.sink = one_then_never
    a, got_a = connected(engine)
    session_id = engine.new_session().session_id
    engine.attach(session_id, stuck)
    engine.attach(session_id, a)
    modes = ["code", "ask", "architect", "code", "ask", "code"]
    for mode in modes[:3]:  # a burst of 3 updates, over OUTBOX_SIZE before any is sent
        await asyncio.wait_for(engine.set_mode(session_id, mode), 1)
    await asyncio.sleep(0.1)  # the stuck connection's first update waits FULL_WAIT...
    assert engine.holders(session_id) == [stuck, a]
    for mode in modes[3:]:  # ... so the next one lets it go
        await asyncio.wait_for(engine.set_mode(session_id, mode), 1)
    await asyncio.wait_for(engine.handed_over(stuck), 1)
    await engine.handed_over(a)
    log.close()
    assert engine.holders(session_id) == [a]
    assert taken == ["ModeChanged"]
    assert kinds(got_a) == ["current_mode_update", "config_option_update"] * 6
    failed = [r for r in read_log(log_path) if r["event"] == "modefsm.notify_failed"]
    assert [(r["update"], r["error"]) for r in failed] == [
        ("ModeChanged", "ConnectionError('3 updates queued and not taken by its transport')")
    ]


async def test_a_connections_own_replay_is_paced_not_let_go(monkeypatch: pytest.MonkeyPatch):
    """What a connection's own request sends it (a load's replay) waits while its queue is
    over half full: a slow client gets all of a long replay, in order."""
    monkeypatch.setattr(_shared, "OUTBOX_SIZE", 8)
    engine = SharedEngine(SEED)
    slow = Peer()
    got: list[str] = []
    longest = [0]

    async def slowly(session_id: str, update: Any) -> None:
        longest[0] = max(longest[0], len(slow._outbox.items))
        await asyncio.sleep(0.001)
        got.append(update.content.text)

    with use_peer(slow):
        engine.sink = slowly
    session_id = engine.new_session().session_id
    engine.attach(session_id, slow)
    texts = [f"item {n}" for n in range(100)]
    with use_peer(slow):
        for text in texts:
            chunk = AgentMessageChunk(
                session_update="agent_message_chunk",
                content=TextContentBlock(type="text", text=text),
            )
            await asyncio.wait_for(engine.notify(session_id, chunk), 5)
        await asyncio.wait_for(engine.handed_over(slow), 5)
    assert got == texts
    assert longest[0] <= 5  # half of OUTBOX_SIZE, and the one just queued
    assert engine.holders(session_id) == [slow]
