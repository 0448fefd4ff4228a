"""The switch as one object: an offer built once from the committed mode, settled once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from modefsm import ModeChange, ModeEngine, SwitchResult, preset
from modefsm.engine import OfferedOption, SwitchOffer
from modefsm.store import FileStore
from tests.conftest import read_log
from tests.engine.test_awaited_store import elsewhere

SEED = preset("seed")
SPEC = {"spec": "seed", "spec_hash": SEED.content_hash}
SEED_OFFER = (
    OfferedOption("code", "Yes, and auto-accept all actions", "allow_always", "code"),
    OfferedOption("ask", "Yes, and manually accept actions", "allow_once", "ask"),
    OfferedOption("reject", "No, stay in architect mode", "reject_once", None),
)


def rejection(reason: str, **fields: Any) -> dict[str, Any]:
    """The ``change_rejected`` record of a switch of session ``s1`` from architect."""
    return {
        "session_id": "s1",
        "seq": None,
        "from_mode": "architect",
        "to_mode": None,
        "origin": "switch_mode",
        **fields,
        **SPEC,
        "reason": reason,
        "event": "modefsm.change_rejected",
        "level": "warning",
    }


async def in_architect(make_engine: Any) -> ModeEngine:
    engine: ModeEngine = make_engine()
    engine.new_session("s1")
    await engine.set_mode("s1", "architect")
    return engine


class TestOffer:
    """An offer is the permission request as shown: built once, from the committed mode."""

    async def test_offer_from_the_committed_mode(self, make_engine):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="call_1")
        assert offer == SwitchOffer(
            "s1", "call_1", "architect", 2, "Ready for implementation", SEED_OFFER
        )
        assert (offer.approvable, offer.settled) == (True, False)

    async def test_a_fresh_tool_call_id_when_none_is_given(self, make_engine):
        engine = await in_architect(make_engine)
        first = await engine.offer_switch("s1")
        second = await engine.offer_switch("s1")
        assert first.tool_call_id.startswith("call_switch_mode_")
        assert len({first.tool_call_id, second.tool_call_id}) == 2

    async def test_the_offer_catches_up_with_another_process(self, tmp_path: Path):
        log = tmp_path / "modes.jsonl"
        store = FileStore(log)
        try:
            engine = ModeEngine(SEED, store=store)
            await engine.new_session_async("s1")
            with elsewhere(log, SEED, "s1") as other:  # another process: ask -> architect
                await other.set_mode("s1", "architect")
            offer = await engine.offer_switch("s1", tool_call_id="t")
        finally:
            store.close()
        assert (offer.proposed_in, offer.seq, offer.options) == ("architect", 2, SEED_OFFER)


class TestSettle:
    """An answer is judged once, against the committed mode; the result says what happened."""

    async def test_an_offer_is_settled_once(self, make_engine, log_path):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        first = await engine.settle_switch(offer, "code")
        second = await engine.settle_switch(offer, "ask")
        change = ModeChange("s1", 3, "architect", "code", "switch_mode", None, "t1", "code")
        assert first == SwitchResult("t1", "code", change, None, None)
        assert second == SwitchResult("t1", "ask", None, "duplicate_answer", None)
        assert (offer.settled, engine.get("s1").state, engine.get("s1").seq) == (
            True,
            "code",
            3,
        )
        assert read_log(log_path)[-1] == {
            **rejection(
                "duplicate_answer",
                tool_call_id="t1",
                option_id="ask",
                proposed_in="architect",
            ),
            "from_mode": "code",
            "to_mode": "ask",
        }

    async def test_a_reason_given_is_logged_as_given(self, make_engine, log_path):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        result = await engine.settle_switch(offer, None, reason="invalid_answer", request_id=7)
        assert result == SwitchResult("t1", None, None, "invalid_answer", None)
        assert read_log(log_path)[-1] == rejection(
            "invalid_answer", request_id=7, tool_call_id="t1", proposed_in="architect"
        )

    async def test_no_option_is_cancelled(self, make_engine, log_path):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        result = await engine.settle_switch(offer, None)
        assert result == SwitchResult("t1", None, None, "cancelled", None)
        assert read_log(log_path)[-1] == rejection(
            "cancelled", tool_call_id="t1", proposed_in="architect"
        )

    async def test_an_answer_after_the_session_closed_changes_nothing(self, make_engine, log_path):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        engine.close_session("s1")
        result = await engine.settle_switch(offer, "code")
        assert result == SwitchResult("t1", "code", None, "session_closed", None)
        assert "s1" not in engine
        assert read_log(log_path)[-1] == {
            **rejection(
                "session_closed", tool_call_id="t1", option_id="code", proposed_in="architect"
            ),
            "from_mode": None,
            "to_mode": "code",
        }

    async def test_a_session_closed_while_the_approval_waits_for_its_turn(
        self, make_engine, log_path
    ):
        engine = await in_architect(make_engine)
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        async with engine._turn("s1"):  # a change of the session is in progress
            settling = asyncio.create_task(engine.settle_switch(offer, "code"))
            await asyncio.sleep(0)  # judged (the session is live), now waiting for the turn
            assert not settling.done()
            engine.close_session("s1")
        result = await settling
        assert result == SwitchResult("t1", "code", None, "session_closed", None)
        assert read_log(log_path)[-1] == {
            **rejection(
                "session_closed", tool_call_id="t1", option_id="code", proposed_in="architect"
            ),
            "from_mode": None,
            "to_mode": "code",
        }

    async def test_an_answer_after_another_process_moved_the_session_is_stale(self, tmp_path: Path):
        """This process still sees the mode of the offer; the store's answer makes the
        approval stale: it applies from the committed mode, recording where it was offered."""
        log = tmp_path / "modes.jsonl"
        store = FileStore(log)
        try:
            engine = ModeEngine(SEED, store=store)
            await engine.new_session_async("s1")
            await engine.set_mode("s1", "architect")
            offer = await engine.offer_switch("s1", tool_call_id="t1")
            with elsewhere(log, SEED, "s1") as other:  # another process: architect -> ask
                await other.set_mode("s1", "ask")
            result = await engine.settle_switch(offer, "code")
        finally:
            store.close()
        change = ModeChange("s1", 4, "ask", "code", "switch_mode", None, "t1", "code", "architect")
        assert result == SwitchResult("t1", "code", change, None, None)
        assert [(r["seq"], r["from_mode"], r["to_mode"], r.get("proposed_in")) for r in
                read_log(log)] == [
            (1, None, "ask", None),
            (2, "ask", "architect", None),
            (3, "architect", "ask", None),
            (4, "ask", "code", "architect"),
        ]  # fmt: skip
