"""Tool calls decided by the committed mode: ``ModeEngine.decide``, asks and their settling.

Real stores (a file, memory, a PostgreSQL server); every record the engine writes is read
back and compared whole, and the file logs are replayed with ``--verify``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from modefsm import (
    AskClosedError,
    AskLimitError,
    FileStore,
    InvalidParamsError,
    LogStore,
    MemoryStore,
    ModeEngine,
    ModeSpec,
    SessionStore,
    ToolCall,
    ToolDecision,
    TransitionLog,
    UnknownSessionError,
    preset,
    replay,
)
from modefsm.engine import ASK_OPTIONS, MAX_OPEN_ASKS, AskOption
from modefsm.log import EVENT_DECIDED, title_digest
from modefsm.store import export_store

PERMISSION = preset("permission")
ASKS_EDITS = "Default mode asks before edits and commands"
PLAN_DENIES = "Plan mode: no edits and no commands"
ACCEPT_ASKS = "Accept Edits mode asks before deleting files and before commands"

EDIT = ToolCall("call_edit", "edit", "Edit", "Edit README.md")
READ = ToolCall("call_read", "read", "Read", "Read README.md")
BASH = ToolCall("call_bash", "execute", "Bash", "Run make")


def spec_granting(*, persist: bool, scope: str = "mode") -> ModeSpec:
    """The permission preset with its grants remembered as given."""
    data = PERMISSION.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["grants"] = {"scope": scope, "persist": persist}
    return ModeSpec.model_validate(data)


def decision(  # noqa: PLR0917 - a ToolDecision's fields, in order
    call: ToolCall,
    verdict: str,
    rule: int | None,
    reason: str | None,
    mode: str,
    seq: int,
    outcome: str | None = None,
) -> ToolDecision:
    options = ASK_OPTIONS if verdict == "ask" and outcome is None else ()
    return ToolDecision(call, verdict, rule, reason, mode, seq, outcome, options)  # type: ignore[arg-type]


def record(  # noqa: PLR0917 - a record's fields, in order
    sid: str,
    call: ToolCall,
    verdict: str,
    rule: int | None,
    mode: str,
    seq: int,
    outcome: str | None = None,
    spec: ModeSpec = PERMISSION,
) -> dict[str, Any]:
    """A decision record as the engine writes it (without timestamp and chain fields)."""
    return {
        "session_id": sid,
        "tool_call_id": call.tool_call_id,
        "kind": call.kind or "other",
        "tool": call.name,
        "title_digest": title_digest(call.title),
        "rule": rule,
        "decision": verdict,
        "outcome": outcome,
        "mode": mode,
        "mode_seq": seq,
        "spec": spec.name,
        "spec_hash": spec.content_hash,
        "event": EVENT_DECIDED,
    }


def strip(line: dict[str, Any]) -> dict[str, Any]:
    skip = {"timestamp", "prev", "digest", "level", "gseq", "at_gseq"}  # PostgreSQL: places
    return {k: v for k, v in line.items() if k not in skip}


# -- the stores ------------------------------------------------------------------------------


class Backing:
    """One store backing several engines (processes) can open; reads back what was written."""

    def __init__(self, kind: str, tmp_path: Path, url: str | None = None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.url = url
        self.path = tmp_path / "modes.jsonl"
        self.memory = MemoryStore()
        self.opened: list[SessionStore] = []

    def open(self) -> SessionStore:
        store: SessionStore
        if self.kind == "file":
            store = FileStore(self.path)
        elif self.kind == "memory":
            store = self.memory
        else:
            from modefsm.store._postgres import PgStore

            log = TransitionLog.to_file(self.tmp_path / f"worker{len(self.opened)}.jsonl")
            assert self.url is not None
            store = PgStore(self.url, log=log)
        self.opened.append(store)
        return store

    def engine(self, spec: ModeSpec = PERMISSION) -> ModeEngine:
        return ModeEngine(spec, store=self.open())

    def lines(self) -> list[dict[str, Any]]:
        """Every line written, in order (for PostgreSQL: each worker's log in turn)."""
        if self.kind == "memory":
            return [strip(line) for line in self.memory.lines]
        paths = [self.path] if self.kind == "file" else sorted(self.tmp_path.glob("worker*.jsonl"))
        return [strip(orjson.loads(x)) for p in paths for x in p.read_bytes().splitlines()]

    def decisions(self) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["event"] == EVENT_DECIDED]

    def verify(self, spec: ModeSpec = PERMISSION) -> None:
        """Replay with --verify is clean: the file store's one log, every writer; for
        PostgreSQL the database's export, and the workers' logs read together."""
        if self.kind == "memory":
            return
        if self.kind == "file":
            assert replay([self.path], [spec], verify=True).violations == ()
            return
        assert self.url is not None
        export = self.tmp_path / "export.jsonl"
        with export.open("wb") as out:
            export_store(self.url, out)
        assert replay([export], [spec], verify=True).violations == ()
        logs = sorted(self.tmp_path.glob("worker*.jsonl"))
        assert replay(logs, [spec], verify=True).violations == ()

    def close(self) -> None:
        for store in self.opened:
            store.close()


def _backing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backing]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    made = Backing(request.param, tmp_path, url)
    yield made
    made.close()


backing = pytest.fixture(params=["memory", "file", "postgres"], name="backing")(_backing)
shared = pytest.fixture(params=["file", "postgres"], name="shared")(_backing)
"""Stores several processes share."""


def restore(engine: ModeEngine, sid: str) -> None:
    """Bring *sid* back in *engine* from the store (what session/load does)."""
    assert engine.store is not None
    point = engine.store.restore_point(sid)
    assert point is not None
    engine.restore_session(sid, point.mode, point.seq, previous=point.previous, digest=point.digest)


# -- deciding --------------------------------------------------------------------------------


class TestDecide:
    """``decide``: the committed mode's rules, exact values, no I/O."""

    @pytest.mark.parametrize(
        ("mode", "call", "expected"),
        [
            ("plan", EDIT, ("deny", 0, PLAN_DENIES)),
            ("plan", READ, ("allow", 1, None)),
            ("plan", BASH, ("deny", 0, PLAN_DENIES)),
            ("default", EDIT, ("ask", 1, ASKS_EDITS)),
            ("default", READ, ("allow", 0, None)),
            ("acceptEdits", EDIT, ("allow", 0, None)),
            ("acceptEdits", BASH, ("ask", 1, ACCEPT_ASKS)),
            ("bypassPermissions", BASH, ("allow", None, None)),
            ("bypassPermissions", EDIT, ("allow", None, None)),
        ],
    )
    def test_each_preset_mode_decides_as_its_rules_say(
        self, mode: str, call: ToolCall, expected: tuple[str, int | None, str | None]
    ) -> None:
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        seq = 1
        if mode != "default":
            change = engine.change("s", mode, "set_mode")
            assert change is not None
            seq = change.seq
        assert engine.decide("s", call) == decision(call, *expected, mode, seq)

    def test_an_ask_offers_the_three_options(self) -> None:
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        asked = engine.decide("s", EDIT)
        assert asked.options == (
            AskOption("allow_once", "Allow", "allow_once"),
            AskOption("allow_always", "Always allow", "allow_always"),
            AskOption("reject_once", "Reject", "reject_once"),
        )
        assert (asked.runs, engine.decide("s", READ).runs) == (False, True)

    def test_a_call_without_kind_is_other(self) -> None:
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        engine.change("s", "plan", "set_mode")
        call = ToolCall("c", None, "mystery")
        # plan's rules name no "other": its tools_default (ask) decides
        assert engine.decide("s", call) == decision(call, "ask", None, None, "plan", 2)

    def test_unknown_session_and_bad_kind_are_clear_errors(self) -> None:
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        with pytest.raises(UnknownSessionError, match="unknown sessionId 'nope'"):
            engine.decide("nope", READ)
        bad = ToolCall("c", "write", "Write")  # type: ignore[arg-type]
        with pytest.raises(InvalidParamsError) as caught:
            engine.decide("s", bad)
        assert (caught.value.field, caught.value.value) == ("kind", "write")
        assert str(caught.value).startswith("kind: 'write' is not an ACP ToolKind (read, edit,")

    def test_prompt_for_is_the_committed_modes_prompt(self) -> None:
        data = PERMISSION.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["modes"][2]["prompt"] = "You are planning. Do not edit."
        engine = ModeEngine(ModeSpec.model_validate(data))
        engine.new_session("s")
        assert engine.prompt_for("s") is None
        engine.change("s", "plan", "set_mode")
        assert engine.prompt_for("s") == "You are planning. Do not edit."
        with pytest.raises(UnknownSessionError):
            engine.prompt_for("nope")


class TestDecideAsync:
    """``decide_async``: the decision recorded before it returns; asks held open."""

    async def test_allow_deny_recorded_ask_not_yet(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        assert await engine.decide_async("s", READ) == decision(
            READ, "allow", 0, None, "default", 1
        )
        assert backing.decisions() == [record("s", READ, "allow", 0, "default", 1)]
        asked = await engine.decide_async("s", EDIT)
        assert asked == decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1)
        assert engine.open_asks("s") == (asked,)
        await engine.set_mode("s", "acceptEdits")  # allows edits: the ask is settled at once
        allowed = decision(EDIT, "allow", 0, None, "acceptEdits", 2)
        assert await asyncio.wait_for(engine.outcome_of(asked), 5) == allowed
        await engine.set_mode("s", "plan")
        denied = await engine.decide_async("s", BASH)
        assert denied == decision(BASH, "deny", 0, PLAN_DENIES, "plan", 3)
        assert not denied.runs
        assert backing.decisions() == [
            record("s", READ, "allow", 0, "default", 1),
            record("s", EDIT, "allow", 0, "acceptEdits", 2),
            record("s", BASH, "deny", 0, "plan", 3),
        ]
        backing.verify()

    async def test_a_change_mid_turn_governs_the_next_call(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        await engine.set_mode("s", "acceptEdits")
        first = await engine.decide_async("s", EDIT)
        await engine.set_mode("s", "plan")  # mid-turn: the next call is decided in plan
        second = await engine.decide_async("s", ToolCall("call_edit2", "edit", "Edit"))
        assert (first.decision, first.mode, first.mode_seq) == ("allow", "acceptEdits", 2)
        assert (second.decision, second.mode, second.mode_seq) == ("deny", "plan", 3)
        assert [(d["tool_call_id"], d["decision"], d["mode_seq"]) for d in backing.decisions()] == [
            ("call_edit", "allow", 2),
            ("call_edit2", "deny", 3),
        ]
        backing.verify()

    async def test_unknown_session_writes_nothing(self, backing: Backing) -> None:
        engine = backing.engine()
        with pytest.raises(UnknownSessionError):
            await engine.decide_async("nope", READ)
        assert backing.decisions() == []


class TestAsks:
    """An ask: settled by the user, re-judged by a mode change, cancelled by a close."""

    async def test_settled_answers_are_recorded_with_their_outcome(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", EDIT)
        waiter = asyncio.ensure_future(engine.outcome_of(asked))
        settled = await engine.settle(asked, "reject_once")
        assert settled == decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1, "reject_once")
        assert not settled.runs
        assert await asyncio.wait_for(waiter, 5) == settled
        other = await engine.decide_async("s", BASH)
        ran = await engine.settle(other, "allow_once")
        assert ran.runs
        cancelled = await engine.settle(await engine.decide_async("s", EDIT), None)
        assert (cancelled.outcome, cancelled.runs) == ("cancelled", False)
        assert backing.decisions() == [
            record("s", EDIT, "ask", 1, "default", 1, "reject_once"),
            record("s", BASH, "ask", 1, "default", 1, "allow_once"),
            record("s", EDIT, "ask", 1, "default", 1, "cancelled"),
        ]
        backing.verify()

    async def test_an_answer_for_an_ask_not_open_changes_nothing(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", EDIT)
        with pytest.raises(InvalidParamsError) as caught:
            await engine.settle(asked, "allow_sometimes")
        assert (caught.value.field, caught.value.value) == ("optionId", "allow_sometimes")
        assert engine.open_asks("s") == (asked,)  # still open
        settled = await engine.settle(asked, "allow_once")
        with pytest.raises(AskClosedError, match="'call_edit' has no open permission request"):
            await engine.settle(asked, "allow_always")
        assert await engine.outcome_of(asked) == settled  # an ended ask answers at once
        never = decision(BASH, "ask", 1, ASKS_EDITS, "default", 1)
        with pytest.raises(AskClosedError):
            await engine.settle(never, "allow_once")
        assert [d["outcome"] for d in backing.decisions()] == ["allow_once"]
        assert engine.open_asks("s") == ()

    async def test_an_open_ask_is_withdrawn_when_the_new_mode_denies(
        self, backing: Backing
    ) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", EDIT)
        waiter = asyncio.ensure_future(engine.outcome_of(asked))
        await engine.set_mode("s", "plan")
        withdrawn = decision(EDIT, "deny", 0, PLAN_DENIES, "plan", 2)
        assert await asyncio.wait_for(waiter, 5) == withdrawn
        # the user's answer, arriving after: nothing changes
        with pytest.raises(AskClosedError):
            await engine.settle(asked, "allow_once")
        assert backing.decisions() == [record("s", EDIT, "deny", 0, "plan", 2)]
        backing.verify()

    async def test_an_answer_racing_the_change_gets_the_rejudged_decision(
        self, backing: Backing
    ) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", EDIT)
        change = asyncio.ensure_future(engine.set_mode("s", "plan"))
        answer = asyncio.ensure_future(engine.settle(asked, "allow_once"))
        await change
        withdrawn = decision(EDIT, "deny", 0, PLAN_DENIES, "plan", 2)
        assert await asyncio.wait_for(answer, 5) == withdrawn
        assert backing.decisions() == [record("s", EDIT, "deny", 0, "plan", 2)]
        backing.verify()

    async def test_an_ask_the_new_mode_asks_stays_open_against_it(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", BASH)
        await engine.set_mode("s", "acceptEdits")  # execute: still ask, by acceptEdits' rule 1
        await engine.decide_async("s", READ)  # the session's turn: the re-judge is done
        still = decision(BASH, "ask", 1, ACCEPT_ASKS, "acceptEdits", 2)
        assert engine.open_asks("s") == (still,)
        settled = await engine.settle(asked, "allow_once")
        assert settled == decision(BASH, "ask", 1, ACCEPT_ASKS, "acceptEdits", 2, "allow_once")
        assert backing.decisions() == [
            record("s", READ, "allow", 0, "acceptEdits", 2),
            record("s", BASH, "ask", 1, "acceptEdits", 2, "allow_once"),
        ]
        backing.verify()

    async def test_closing_the_session_cancels_its_asks(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", EDIT)
        waiter = asyncio.ensure_future(engine.outcome_of(asked))
        await asyncio.sleep(0)  # the waiter waits
        engine.close_session("s")
        cancelled = decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1, "cancelled")
        assert await asyncio.wait_for(waiter, 5) == cancelled
        with pytest.raises(AskClosedError):
            await engine.settle(asked, "allow_once")
        assert backing.decisions() == [record("s", EDIT, "ask", 1, "default", 1, "cancelled")]
        backing.verify()

    async def test_a_call_asked_again_ends_with_its_own_answer(self, backing: Backing) -> None:
        """One ``ToolCall`` object asked twice: the second ask is not the first one's outcome."""
        engine = backing.engine()
        await engine.new_session_async("s")
        first = await engine.decide_async("s", EDIT)
        assert (await engine.settle(first, "allow_once")).runs
        again = await engine.decide_async("s", EDIT)
        waiter = asyncio.ensure_future(engine.outcome_of(again))
        await asyncio.sleep(0)  # the waiter waits
        assert (waiter.done(), engine.open_asks("s")) == (False, (again,))
        rejected = await engine.settle(again, "reject_once")
        assert rejected == decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1, "reject_once")
        assert await asyncio.wait_for(waiter, 5) == rejected
        assert await engine.outcome_of(first) == decision(
            EDIT, "ask", 1, ASKS_EDITS, "default", 1, "allow_once"
        )
        assert backing.decisions() == [
            record("s", EDIT, "ask", 1, "default", 1, "allow_once"),
            record("s", EDIT, "ask", 1, "default", 1, "reject_once"),
        ]
        backing.verify()

    async def test_one_call_asked_in_two_sessions_is_answered_in_its_own(
        self, backing: Backing
    ) -> None:
        """The answer to session a's ask settles a's, never b's (same ``ToolCall`` object)."""
        engine = backing.engine()
        await engine.new_session_async("a")
        await engine.new_session_async("b")
        in_a = await engine.decide_async("a", EDIT)
        in_b = await engine.decide_async("b", EDIT)
        settled = await engine.settle(in_a, "allow_always")
        assert settled == decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1, "allow_always")
        assert (engine.open_asks("a"), engine.open_asks("b")) == ((), (in_b,))
        assert engine.decide("b", EDIT) == decision(EDIT, "ask", 1, ASKS_EDITS, "default", 1)
        assert (await engine.settle(in_b, "reject_once")).outcome == "reject_once"
        assert backing.decisions() == [
            record("a", EDIT, "ask", 1, "default", 1, "allow_always"),
            record("b", EDIT, "ask", 1, "default", 1, "reject_once"),
        ]
        backing.verify()

    async def test_open_asks_are_bounded_and_unique(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        for n in range(MAX_OPEN_ASKS):
            await engine.decide_async("s", ToolCall(f"c{n}", "edit", "Edit"))
        with pytest.raises(InvalidParamsError) as caught:
            await engine.decide_async("s", ToolCall("c0", "edit", "Edit"))
        assert str(caught.value) == "toolCallId: 'c0' already has an open permission request"
        with pytest.raises(AskLimitError, match=f"already has {MAX_OPEN_ASKS} open"):
            await engine.decide_async("s", ToolCall("one_more", "edit", "Edit"))
        assert len(engine.open_asks("s")) == MAX_OPEN_ASKS
        # an allowed call is not an ask: it is decided whatever the asks
        assert (await engine.decide_async("s", READ)).runs
        assert backing.decisions() == [record("s", READ, "allow", 0, "default", 1)]


class TestGrants:
    """``allow_always``: remembered as the mode's ``grants`` say."""

    async def test_a_grant_is_scoped_to_its_mode(self, backing: Backing) -> None:
        engine = backing.engine()
        await engine.new_session_async("s")
        asked = await engine.decide_async("s", BASH)
        await engine.settle(asked, "allow_always")
        again = ToolCall("call_bash2", "execute", "Bash")
        granted = decision(again, "allow", 1, ASKS_EDITS, "default", 1, "granted")
        assert await engine.decide_async("s", again) == granted
        assert granted.runs
        await engine.set_mode("s", "acceptEdits")
        elsewhere = await engine.decide_async("s", ToolCall("call_bash3", "execute", "Bash"))
        assert elsewhere.decision == "ask"  # not granted in acceptEdits; left open
        other_tool = ToolCall("call_sh", "execute", "Shell")
        await engine.set_mode("s", "default")
        # back in default, the open ask is judged again: the grant covers it there
        assert await asyncio.wait_for(engine.outcome_of(elsewhere), 5) == decision(
            elsewhere.call, "allow", 1, ASKS_EDITS, "default", 3, "granted"
        )
        assert (await engine.decide_async("s", other_tool)).decision == "ask"
        back = ToolCall("call_bash4", "execute", "Bash")
        assert (await engine.decide_async("s", back)).outcome == "granted"
        assert [
            (d["tool_call_id"], d["decision"], d["outcome"], d["mode"], d["mode_seq"])
            for d in backing.decisions()
        ] == [
            ("call_bash", "ask", "allow_always", "default", 1),
            ("call_bash2", "ask", "granted", "default", 1),
            ("call_bash3", "ask", "granted", "default", 3),
            ("call_bash4", "ask", "granted", "default", 3),
        ]
        backing.verify()

    async def test_a_session_scoped_grant_holds_in_every_mode(self, backing: Backing) -> None:
        spec = spec_granting(persist=False, scope="session")
        engine = backing.engine(spec)
        await engine.new_session_async("s")
        await engine.settle(await engine.decide_async("s", BASH), "allow_always")
        await engine.set_mode("s", "acceptEdits")
        assert (await engine.decide_async("s", ToolCall("c2", "execute", "Bash"))).outcome == (
            "granted"
        )
        backing.verify(spec)

    @pytest.mark.parametrize("persist", [True, False])
    async def test_a_persistent_grant_survives_a_restart(
        self, tmp_path: Path, persist: bool
    ) -> None:
        spec = spec_granting(persist=persist)
        made = Backing("file", tmp_path)
        first = made.engine(spec)
        await first.new_session_async("s")
        await first.settle(await first.decide_async("s", BASH), "allow_always")
        made.close()
        made.opened.clear()
        second = made.engine(spec)  # a restarted process on the same file
        restore(second, "s")
        after = await second.decide_async("s", ToolCall("c2", "execute", "Bash"))
        assert (after.decision, after.outcome) == (
            ("allow", "granted") if persist else ("ask", None)
        )
        if not persist:
            await second.settle(after, "reject_once")
        await second.set_mode("s", "acceptEdits")  # a mode-scoped grant: not here
        assert (await second.decide_async("s", ToolCall("c3", "execute", "Bash"))).decision == "ask"
        made.close()
        made.verify(spec)


class TestTwoProcesses:
    """Two engines on one store: a change in one governs the other's next decision."""

    async def test_the_other_engines_change_governs_the_next_decision(
        self, shared: Backing
    ) -> None:
        backing = shared
        first, second = backing.engine(), backing.engine()
        await first.new_session_async("s")
        restore(second, "s")
        assert (await second.decide_async("s", EDIT)).decision == "ask"
        asked = second.open_asks("s")[0]
        await first.set_mode("s", "plan")
        # the second engine has not caught up; its next decision does first
        edit2 = ToolCall("call_edit2", "edit", "Edit")
        assert second.decide("s", edit2).mode == "default"  # sync: as last seen
        decided = await second.decide_async("s", edit2)
        assert decided == decision(edit2, "deny", 0, PLAN_DENIES, "plan", 2)
        # its open ask was judged again against plan: withdrawn
        withdrawn = decision(EDIT, "deny", 0, PLAN_DENIES, "plan", 2)
        assert await asyncio.wait_for(second.outcome_of(asked), 5) == withdrawn
        assert sorted(
            (d["tool_call_id"], d["decision"], d["mode"], d["mode_seq"])
            for d in backing.decisions()
        ) == [("call_edit", "deny", "plan", 2), ("call_edit2", "deny", "plan", 2)]
        backing.verify()

    async def test_two_engines_on_one_memory_store(self) -> None:
        store = MemoryStore()
        first, second = ModeEngine(PERMISSION, store=store), ModeEngine(PERMISSION, store=store)
        await first.new_session_async("s")
        second.restore_session("s", "default", 1)
        await first.set_mode("s", "acceptEdits")
        decided = await second.decide_async("s", EDIT)
        assert decided == decision(EDIT, "allow", 0, None, "acceptEdits", 2)


def test_records_need_no_store(tmp_path: Path) -> None:
    """A LogStore (a log nothing restores from) gets the records too; no store: decided,
    not written."""
    path = tmp_path / "log.jsonl"
    log = TransitionLog.to_file(path)
    engine = ModeEngine(PERMISSION, store=LogStore(log))
    bare = ModeEngine(PERMISSION)

    async def run(on: ModeEngine) -> ToolDecision:
        on.new_session("s")
        return await on.decide_async("s", READ)

    assert asyncio.run(run(engine)) == asyncio.run(run(bare))
    log.close()
    lines = [strip(orjson.loads(x)) for x in path.read_bytes().splitlines()]
    assert [line["event"] for line in lines] == [
        "modefsm.spec",
        "modefsm.session_created",
        EVENT_DECIDED,
    ]
    assert lines[2] == record("s", READ, "allow", 0, "default", 1)
    assert replay([path], [PERMISSION], verify=True).violations == ()


class TestGrantsAcrossProcesses:
    """A grant made in one process reaches the other's next decision after it catches up."""

    async def test_a_grant_in_one_engine_holds_in_the_other(self, shared: Backing) -> None:
        made = shared
        first, second = made.engine(), made.engine()
        await first.new_session_async("s")
        restore(second, "s")
        await first.settle(await first.decide_async("s", BASH), "allow_always")
        again = ToolCall("call_bash2", "execute", "Bash")
        assert second.decide("s", again).decision == "ask"  # not caught up yet
        granted = decision(again, "allow", 1, ASKS_EDITS, "default", 1, "granted")
        assert await second.decide_async("s", again) == granted
        await second.set_mode("s", "acceptEdits")  # mode-scoped: not in another mode
        other = ToolCall("call_bash3", "execute", "Bash")
        assert (await second.decide_async("s", other)).decision == "ask"
        made.close()
        made.verify()
