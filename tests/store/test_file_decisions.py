"""Decision records through the file store: one chain, whichever store wrote each line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from modefsm import preset
from modefsm.log import EVENT_CHANGED, EVENT_CREATED, EVENT_DECIDED
from modefsm.replay import replay
from modefsm.store import FileStore

SPEC = preset("seed")


def record(seq: int, source: str | None, dest: str) -> dict[str, Any]:
    return {
        "timestamp": "2026-12-01T00:00:00.000000Z",
        "session_id": "s1",
        "seq": seq,
        "from_mode": source,
        "to_mode": dest,
        "origin": "new" if source is None else "set_mode",
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
    }


def decision(call: str, mode: str, seq: int, kind: str) -> dict[str, Any]:
    verdict = SPEC.rules.judge(mode, kind)
    return {
        "timestamp": "2026-12-01T00:00:00.000000Z",
        "session_id": "s1",
        "tool_call_id": call,
        "kind": kind,
        "tool": None,
        "title_digest": None,
        "rule": verdict.rule_index,
        "decision": verdict.decision,
        "outcome": "allow_once" if verdict.decision == "ask" else None,
        "mode": mode,
        "mode_seq": seq,
        "spec": SPEC.name,
        "spec_hash": SPEC.content_hash,
    }


class TestFileStoreDecisions:
    """Decisions written by one store are the chain's head for every other."""

    def test_stores_on_one_file_chain_through_decisions(self, tmp_path: Path):
        path = tmp_path / "modes.jsonl"
        first, second = FileStore(path), FileStore(path)
        first.append(EVENT_CREATED, record(1, None, "ask"), None)
        second.note(EVENT_DECIDED, decision("c1", "ask", 1, "edit"))
        first.append(EVENT_CHANGED, record(2, "ask", "code"), None)
        third = FileStore(path)  # opened after: finds the head in the file
        third.note(EVENT_DECIDED, decision("c2", "code", 2, "execute"))
        for store in (first, second, third):
            store.close()
        fourth = FileStore(path)  # the last line is a decision
        fourth.note(EVENT_DECIDED, decision("c3", "code", 2, "read"))
        fourth.close()
        rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        assert [(r["event"], r.get("tool_call_id")) for r in rows] == [
            ("modefsm.session_created", None),
            ("modefsm.tool_decided", "c1"),
            ("modefsm.mode_changed", None),
            ("modefsm.tool_decided", "c2"),
            ("modefsm.tool_decided", "c3"),
        ]
        assert [r["prev"] for r in rows] == [None, *(r["digest"] for r in rows[:-1])]
        report = replay([path], verify=True)
        assert (report.violations, report.records) == ((), 5)
        session = report.session("s1")
        assert session is not None
        assert [(t.mode, t.kind, t.allow, t.ask, t.ran) for t in session.tools] == [
            ("ask", "edit", 0, 1, 1),
            ("code", "execute", 1, 0, 1),
            ("code", "read", 1, 0, 1),
        ]
