"""Logs with tool call decisions: the engine writes the records, a decider writes decisions.

:class:`Decider` decides a tool call the way a host must: by the session's committed mode
(``engine.get``), the spec's rules (``spec.rules.judge``) and the session's grants, and
writes the ``modefsm.tool_decided`` record on the engine's own log, so that the chain runs
through both.
"""

from __future__ import annotations

from typing import Any

from modefsm import ModeEngine, TransitionLog
from modefsm.log._records import EVENT_DECIDED, Outcome, title_digest
from modefsm.spec import GrantMemory


class Decider:
    """Decides tool calls of *engine*'s sessions and logs each decision on *log*."""

    def __init__(self, engine: ModeEngine, log: TransitionLog) -> None:
        self.engine = engine
        self.log = log
        self.grants: dict[str, GrantMemory] = {}
        self.calls = 0
        self.written: list[dict[str, Any]] = []

    def decide(
        self,
        session_id: str,
        kind: str | None,
        tool: str | None,
        answer: Outcome = "allow_once",
        **edits: Any,
    ) -> dict[str, Any]:
        """Decide one call; an ask is answered with *answer* unless a grant covers it.

        *edits* replace fields of the record before it is written (to seed faults).
        """
        spec = self.engine.spec
        session = self.engine.get(session_id)
        verdict = spec.rules.judge(session.state, kind, tool)
        grants = self.grants.setdefault(session_id, GrantMemory(spec))
        outcome: Outcome | None = None
        if verdict.decision == "ask":
            if grants.covers(session.state, kind or "other", tool):
                outcome = "granted"
            else:
                outcome = answer
                if answer == "allow_always":
                    grants.remember(session.state, kind or "other", tool)
        self.calls += 1
        fields: dict[str, Any] = {
            "timestamp": f"2026-01-01T00:00:{self.calls % 60:02d}.000000Z",
            "session_id": session_id,
            "tool_call_id": f"call_{self.calls}",
            "kind": kind or "other",
            "tool": tool,
            "title_digest": title_digest(f"{tool} #{self.calls}"),
            "rule": verdict.rule_index,
            "decision": verdict.decision,
            "outcome": outcome,
            "mode": session.state,
            "mode_seq": session.seq,
            "spec": spec.name,
            "spec_hash": spec.content_hash,
            **edits,
        }
        self.log.write(EVENT_DECIDED, fields)
        self.written.append(fields)
        return fields
