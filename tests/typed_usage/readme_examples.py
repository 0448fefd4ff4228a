"""The documentation's Python examples as a user writes them, typed: checked by ``mypy --strict``.

Everything is imported from ``modefsm`` (and ``acp.schema`` for the wire models), as the
documentation shows. The ``assert_type`` lines hold only when modefsm's own annotations reach
the user (``py.typed``): were ``ModeAgent`` or ``ModeEngine`` ``Any``, they would fail.
Examples that write files are functions, so that importing this module does nothing.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, assert_type

from acp.schema import AgentMessageChunk, PromptResponse, TextContentBlock

from modefsm import (
    ChangeRefused,
    FileStore,
    HostOption,
    LogStore,
    MemoryStore,
    ModeAgent,
    ModeEngine,
    OptionChange,
    ReplayReport,
    RestoreIndex,
    RestorePoint,
    Session,
    SessionStore,
    SharedEngine,
    SwitchOffer,
    SwitchResult,
    ToolCall,
    ToolDecision,
    ToolResult,
    TransitionLog,
    Violation,
    new_token,
    open_store,
    preset,
    replay,
    run_agent,
    serve_http,
)

# -- Embedding modefsm in an agent ---------------------------------------------------------


class MyAgent(ModeAgent):
    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        mode = (await self.refresh(session_id)).state  # decide tools and permissions by mode
        assert_type(await self.refresh(session_id), Session)
        assert_type(self.session(session_id), Session)
        assert_type(mode, str)
        if mode == "architect":  # the model decided the plan is ready
            result = await self.propose_switch(session_id, plan="## Plan\n1. ...")
            assert_type(result, SwitchResult)
            if result.reason == "cancelled":  # session/cancel while the user was deciding
                return PromptResponse(stop_reason="cancelled")
            mode = self.session(session_id).state
            reply = f"switched to {mode}" if result.approved else f"still in {mode}"
        else:
            reply = f"working in {mode} mode"
        assert_type(self.engine, ModeEngine)
        await self.engine.notify(
            session_id,
            AgentMessageChunk(
                session_update="agent_message_chunk",
                content=TextContentBlock(type="text", text=reply),
            ),
        )
        return PromptResponse(stop_reason="end_turn")


def serve(argv: list[str]) -> None:
    """The README's ``if __name__ == "__main__":`` block."""
    log_path = argv[1] if len(argv) > 1 else "modes.jsonl"
    agent = MyAgent(preset("seed"), store=FileStore(log_path), unstable=True)
    asyncio.run(run_agent(agent))  # acp.run_agent behind modefsm's frame checks


async def a_switch_of_your_own() -> None:
    """**Embedding.** A permission dialog the host shows: an offer, settled once."""
    engine = ModeEngine(preset("seed"))
    engine.new_session("sess_1")
    await engine.set_mode("sess_1", "architect")
    offer = await engine.offer_switch("sess_1")  # show offer.title and offer.options
    assert_type(offer, SwitchOffer)
    assert_type(offer.options[0].target, str | None)
    result = await engine.settle_switch(offer, "code")  # the optionId the user selected
    assert_type(result, SwitchResult)
    assert_type(result.approved, bool)
    again = await engine.settle_switch(offer, "ask")  # an offer is settled once
    reason: str | None = again.reason  # "duplicate_answer"
    assert reason is not None


# -- A host's own config options ------------------------------------------------------------


def smart_needs_code(change: OptionChange) -> None:  # optional: a veto
    if change.value == "smart" and change.mode_id != "code":
        raise ChangeRefused("the smart model is for code mode")


MODEL = HostOption(
    id="model",
    name="Model",
    category="model",
    choices=[("fast", "Fast"), ("smart", "Smart")],
    default="fast",
    on_change=smart_needs_code,
)


def host_options_agent(store: FileStore) -> ModeAgent:
    agent = ModeAgent(preset("seed"), store=store, config_options=[MODEL])
    assert_type(agent.engine.config_options("sess_1")[1].current_value, str)
    return agent


# -- Replay and restore --------------------------------------------------------------------


def restore_from_the_index() -> None:
    """**Restore.** Open the log with an index, and answer ``session/load`` from it."""
    index = RestoreIndex("modes.index")  # caught up with the log, closed with it
    log = TransitionLog.to_file("modes.jsonl", index=index, close_index=True)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    session_id = "sess_1"  # the sessionId of the session/load request
    point = index.restore_point(session_id)  # RestorePoint(session_id, mode, seq, previous)
    assert_type(point, RestorePoint | None)
    if point is not None:
        engine.restore_session(session_id, point.mode, point.seq, previous=point.previous)


def check_a_log(path: str) -> int:
    """Replay a log and list its violations (``modefsm replay --verify``, from Python)."""
    report = replay([path], verify=True)
    assert_type(report, ReplayReport)
    violations: tuple[Violation, ...] = report.violations
    for violation in violations:
        sys.stderr.write(f"{violation}\n")
    return report.exit_status


def share_a_store() -> None:
    """**Session store.** Every process given the same log shares one history."""
    store = open_store("modes.jsonl")  # the index is modes.jsonl.index
    assert_type(store, SessionStore)
    engine = ModeEngine(preset("seed"), store=store)
    session = engine.new_session()
    point = store.restore_point(session.session_id)  # never stale, whoever wrote last
    assert_type(point, RestorePoint | None)
    store.close()


def serve_over_http() -> None:
    """**Transports.** One agent per connection, one engine for all of them."""
    engine = SharedEngine(preset("seed"), store=FileStore("modes.jsonl"))

    def factory(conn: Any) -> ModeAgent:  # one agent per connection, one engine
        agent = ModeAgent(preset("seed"), engine=engine)
        agent.on_connect(conn)
        return agent

    token = new_token()  # clients send it: Authorization: Bearer TOKEN
    asyncio.run(serve_http(factory, "127.0.0.1", 8000, token=token, ready=print))


def keep_sessions_in_memory() -> None:
    """**Session store.** A store with no files: tests, benchmarks, hosts that need none."""
    store = MemoryStore()
    agent = ModeAgent(preset("seed"), store=store)
    assert_type(agent.engine.store, SessionStore | None)


# -- Specs and mode rules: deciding tool calls -------------------------------------------


async def decide_tool_calls() -> None:
    engine = ModeEngine(preset("permission"), store=MemoryStore())
    await engine.new_session_async("sess_1")
    edit = ToolCall("call_1", kind="edit", name="Edit", title="Edit README.md")
    asked = await engine.decide_async("sess_1", edit)
    assert_type(asked, ToolDecision)
    assert_type(engine.decide("sess_1", edit), ToolDecision)
    assert_type(await engine.outcome_of(asked), ToolDecision)
    assert_type(await engine.settle(asked, "allow_always"), ToolDecision)
    assert_type(asked.runs, bool)
    assert_type(engine.prompt_for("sess_1"), str | None)


# -- Embedding: tool calls over ACP ------------------------------------------------------


async def run_tool_calls(agent: ModeAgent, session_id: str) -> None:
    async def read() -> str:
        return "contents"

    call = ToolCall("call_2", kind="read", name="read_file", title="Read notes.txt")
    result = await agent.run_tool(session_id, call, read)
    assert_type(result, ToolResult[str])
    assert_type(result.value, str | None)
    assert_type(result.decision, ToolDecision | None)
    assert_type(result.ran, bool)
    assert_type(agent.prompt_for(session_id), str | None)
