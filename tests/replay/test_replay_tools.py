"""Decision records: written chained, read back, and verified by replay (``tool_policy``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modefsm import (
    FileStore,
    LogStore,
    ModeEngine,
    ModeSpec,
    ToolCall,
    TransitionLog,
    preset,
    preset_names,
)
from modefsm.cli import main
from modefsm.log import EVENT_DECIDED, DecisionEntry, DecisionRecord, LogEntry, read_log
from modefsm.log._records import record_digest
from modefsm.replay import JsonReport, TableReport, ToolTally
from modefsm.replay._replayer import ReplayReport, replay
from modefsm.spec import DECISIONS, TOOL_KINDS, GrantMemory
from tests.replay.tools_support import Decider

KEYS = ("session_id", "tool_call_id", "kind", "tool", "rule", "decision", "outcome", "mode")


def start(path: Path, spec: ModeSpec | None = None) -> tuple[ModeEngine, Decider]:
    log = TransitionLog.to_file(path)
    engine = ModeEngine(spec or preset("permission"), store=LogStore(log))
    return engine, Decider(engine, log)


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def rewrite(path: Path, index: int, **edits: Any) -> None:
    """Edit line *index* and chain it and every line after it again: a forger's edit, that
    the digest chain cannot show."""
    rows = lines(path)
    rows[index] = {**rows[index], **edits}
    for i in range(index, len(rows)):
        row = rows[i]
        level = row.pop("level")
        row.pop("digest")
        row["prev"] = rows[i - 1]["digest"] if i else None
        row["digest"] = record_digest(row)
        row["level"] = level
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def policy(report: ReplayReport) -> list[str]:
    return [str(v) for v in report.violations]


class TestRecords:
    """A decision is a chained line that the reader yields when asked."""

    def test_written_chained_and_read_back(self, tmp_path: Path):
        path = tmp_path / "modes.jsonl"
        engine, decider = start(path)
        engine.new_session("s1")
        decider.decide("s1", "edit", "Edit", "allow_always")
        engine.change("s1", "acceptEdits", "set_mode")
        decider.decide("s1", "execute", "Bash", "reject_once")
        header, *rows = lines(path)
        assert [r["event"] for r in rows] == [
            "modefsm.session_created",
            "modefsm.tool_decided",
            "modefsm.mode_changed",
            "modefsm.tool_decided",
        ]
        assert [r["prev"] for r in rows] == [r["digest"] for r in [header, *rows[:-1]]]
        assert {k: rows[1][k] for k in (*KEYS, "mode_seq", "level")} == {
            "session_id": "s1",
            "tool_call_id": "call_1",
            "kind": "edit",
            "tool": "Edit",
            "rule": 1,
            "decision": "ask",
            "outcome": "allow_always",
            "mode": "default",
            "mode_seq": 1,
            "level": "info",
        }
        items = list(read_log([path], check_digests=True, decisions=True))  # not the header
        assert [type(i) for i in items] == [LogEntry, DecisionEntry, LogEntry, DecisionEntry]
        assert all(i.intact for i in items if isinstance(i, (LogEntry, DecisionEntry)))
        decision = items[3]
        assert isinstance(decision, DecisionEntry)
        assert decision.record == DecisionRecord.model_validate(rows[3])
        assert (decision.record.ran, items[1].record.ran) == (False, True)
        assert [type(i) for i in read_log([path])] == [LogEntry, LogEntry]

    def test_a_host_context_key_is_not_covered(self):
        row = {"event": "modefsm.tool_decided", "kind": "read", "mode": "plan", "pid": 7}
        assert record_digest(row) == record_digest({k: v for k, v in row.items() if k != "pid"})
        # a transition record does not cover the decision's keys: a host may bind "mode"
        record = {"event": "modefsm.mode_changed", "seq": 2, "mode": "plan"}
        assert record_digest(record) == record_digest({"event": "modefsm.mode_changed", "seq": 2})

    def test_a_decision_that_does_not_fit_is_a_bad_record(self, tmp_path: Path):
        path = tmp_path / "modes.jsonl"
        engine, decider = start(path)
        engine.new_session("s1")
        decider.decide("s1", "read", "Read")
        rewrite(path, 2, kind="write")  # line 1: the header
        report = replay([path], verify=True)
        assert policy(report) == [
            (
                f"{path}:3: session 's1': bad_record: a modefsm.tool_decided record that does not "
                "fit the record model: kind: Input should be 'read', 'edit', 'delete', 'move', "
                "'search', 'execute', 'think', 'fetch', 'switch_mode' or 'other' (got 'write')"
            ),
        ]

    def test_grants_rebuilt_from_the_records(self, tmp_path: Path):
        spec = ModeSpec.from_data(
            {
                "name": "g",
                "initial": "a",
                "grants": {"persist": True},
                "modes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
            }
        )
        path = tmp_path / "modes.jsonl"
        engine, decider = start(path, spec)
        engine.new_session("s1")
        decider.decide("s1", "execute", "Bash", "allow_always")
        decider.decide("s1", "edit", "Edit", "allow_once")
        records = [
            i.record for i in read_log([path], decisions=True) if isinstance(i, DecisionEntry)
        ]
        grants = GrantMemory.rebuild(spec, records)
        assert (len(grants), grants.covers("a", "execute", "Bash")) == (1, True)
        assert not grants.covers("b", "execute", "Bash")


class TestReplay:
    """Replay checks every decision against the committed mode and the rules."""

    def run(self, tmp_path: Path) -> tuple[Path, ModeEngine, Decider]:
        """A log as written before headers (its header dropped): line 1 is the creation."""
        path = tmp_path / "modes.jsonl"
        engine, decider = start(path)
        engine.new_session("s1")
        path.write_bytes(path.read_bytes().split(b"\n", 1)[1])
        decider.decide("s1", "read", "Read")  # line 2: allow
        decider.decide("s1", "execute", "Bash", "allow_always")  # line 3: ask, granted after
        decider.decide("s1", "execute", "Bash")  # line 4: granted
        engine.change("s1", "plan", "set_mode")  # line 5
        decider.decide("s1", "edit", "Edit")  # line 6: deny
        decider.decide("s1", "execute", "Bash")  # line 7: deny (a grant never lifts a deny)
        return path, engine, decider

    def test_a_clean_log(self, tmp_path: Path):
        path, _, decider = self.run(tmp_path)
        assert [(w["decision"], w["outcome"]) for w in decider.written] == [
            ("allow", None),
            ("ask", "allow_always"),
            ("ask", "granted"),
            ("deny", None),
            ("deny", None),
        ]
        report = replay([path], verify=True)
        assert (policy(report), report.records, report.exit_status) == ([], 7, 0)
        assert report.chain is not None
        assert (report.chain.verified, report.chain.unverifiable) == (7, 0)
        session = report.session("s1")
        assert session is not None
        assert session.tools == (
            ToolTally("default", "read", 1, 0, 0, 1),
            ToolTally("default", "execute", 0, 2, 0, 2),
            ToolTally("plan", "edit", 0, 0, 1, 0),
            ToolTally("plan", "execute", 0, 0, 1, 0),
        )
        assert (session.mode, session.seq, str(session.last)) == ("plan", 2, f"{path}:7")

    def test_summary_says_which_tools_ran_in_which_mode(self, tmp_path: Path):
        path, _, _ = self.run(tmp_path)
        report = replay([path], verify=True, keep_timeline=False)
        out = io.StringIO()
        TableReport(out).finish(report)
        assert out.getvalue().splitlines()[:6] == [
            "SESSIONS (1)",
            "  s1  plan  (seq 2, spec permission, 2 records)",
            "    read in default: 1 allowed, 0 asked, 0 denied; 1 ran",
            "    execute in default: 0 allowed, 2 asked, 0 denied; 2 ran",
            "    edit in plan: 0 allowed, 0 asked, 1 denied; 0 ran",
            "    execute in plan: 0 allowed, 0 asked, 1 denied; 0 ran",
        ]
        out = io.StringIO()
        JsonReport(out).finish(report)
        document = orjson.loads(out.getvalue())
        assert document["sessions"][0]["tools"][2] == {
            "mode": "plan",
            "kind": "edit",
            "allow": 0,
            "ask": 0,
            "deny": 1,
            "ran": 0,
        }

    @pytest.mark.parametrize(
        ("index", "edits", "expected"),
        [
            pytest.param(
                5,
                {"decision": "allow", "rule": 1},
                [("6: a edit call of 'Edit' in mode 'plan': the rules give deny (rule 0), the "
                 "record says allow (rule 1)")],
                id="allow-where-deny",
            ),
            pytest.param(
                5,
                {"mode": "default", "mode_seq": 1, "decision": "ask", "rule": 1,
                 "outcome": "allow_once"},
                [("6: a edit call of 'Edit' decided in mode 'default' (seq 1), but the "
                 "session's committed mode was 'plan' (seq 2)")],
                id="stale-mode",
            ),
            pytest.param(
                6,
                {"mode_seq": 1},
                [("7: a execute call of 'Bash' decided in mode 'plan' (seq 1), but the "
                 "session's committed mode was 'plan' (seq 2)")],
                id="stale-seq",
            ),
            pytest.param(
                2,
                {"outcome": "allow_once"},
                [("4: a execute call of 'Bash' ran as granted in mode 'default', but no "
                 "allow_always given before it covers it there")],
                id="granted-without-grant",
            ),
            pytest.param(
                3,
                {"outcome": None},
                ["4: a execute call of 'Bash' asked about without its outcome"],
                id="ask-without-outcome",
            ),
            pytest.param(
                1,
                {"outcome": "allow_once"},
                [("2: a read call of 'Read' with decision 'allow' and outcome 'allow_once': "
                 "only an ask has an outcome")],
                id="allow-with-outcome",
            ),
            pytest.param(
                5,
                {"mode": "nowhere"},
                [("6: a edit call of 'Edit' decided in mode 'nowhere' (seq 2), but the "
                 "session's committed mode was 'plan' (seq 2)"),
                 ("6: a edit call of 'Edit' decided in mode 'nowhere', not a mode of spec "
                 "'permission'")],
                id="unknown-mode",
            ),
            pytest.param(
                5,
                {"spec_hash": "sha256:0000000000000000"},
                [("6: a edit call of 'Edit' decided under spec sha256:0000000000000000, but "
                 f"the session's records have {preset('permission').content_hash}")],
                id="other-spec",
            ),
        ],
    )  # fmt: skip
    def test_a_seeded_decision_is_a_tool_policy_violation(
        self, tmp_path: Path, index: int, edits: dict[str, Any], expected: list[str]
    ):
        path, _, _ = self.run(tmp_path)
        rewrite(path, index, **edits)
        report = replay([path], verify=True)
        tag = ": session 's1': tool_policy: "
        assert policy(report) == [f"{path}:{line.replace(': ', tag, 1)}" for line in expected]
        assert report.exit_status == 1

    def test_an_edited_decision_is_tampered(self, tmp_path: Path):
        path, _, _ = self.run(tmp_path)
        rows = path.read_bytes().splitlines()
        rows[5] = rows[5].replace(b'"decision":"deny"', b'"decision":"allow"')
        path.write_bytes(b"\n".join(rows) + b"\n")
        assert policy(replay([path], verify=True)) == [
            (
                f"{path}:6: session 's1': tampered: the record was changed after it was written: "
                "its digest does not match"
            ),
            (
                f"{path}:6: session 's1': tool_policy: a edit call of 'Edit' in mode 'plan': the "
                "rules give deny (rule 0), the record says allow (rule 0)"
            ),
        ]

    def test_a_deleted_decision_breaks_the_chain(self, tmp_path: Path):
        path, _, _ = self.run(tmp_path)
        rows = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(rows[:3] + rows[4:]))
        assert [v.kind for v in replay([path], verify=True).violations] == ["chain"]

    def test_a_decision_before_the_session(self, tmp_path: Path):
        path, _, _ = self.run(tmp_path)
        rows = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(rows[1:2]))
        assert policy(replay([path])) == [
            (
                f"{path}:1: session 's1': tool_policy: a read call of 'Read' decided in a session "
                "with no committed record before it"
            ),
        ]

    def test_only_the_session_asked_for(self, tmp_path: Path):
        path, engine, decider = self.run(tmp_path)
        engine.new_session("s2")
        decider.decide("s2", "edit", "Edit", mode_seq=9)
        report = replay([path], verify=True, session_id="s1")
        assert (policy(report), [s.session_id for s in report.sessions]) == ([], ["s1"])
        assert len(policy(replay([path], verify=True, session_id="s2"))) == 1


_CALLS = st.tuples(
    st.none() | st.sampled_from(TOOL_KINDS),
    st.sampled_from([None, "Bash", "Edit", "write_plan", "Read"]),
    st.sampled_from(["allow_once", "allow_always", "reject_once", "reject_always", "cancelled"]),
)
_STEPS = st.lists(
    st.tuples(st.sampled_from(["s1", "s2"]), st.integers(0, 3) | _CALLS), min_size=1, max_size=30
)


def _generate(path: Path, name: str, steps: list[Any]) -> tuple[ModeEngine, Decider]:
    engine, decider = start(path, preset(name))
    for session_id in ("s1", "s2"):
        engine.new_session(session_id)
    for session_id, step in steps:
        if isinstance(step, int):
            current = engine.get(session_id).state
            targets = engine.spec.client_targets(current)
            if targets:
                engine.change(session_id, targets[step % len(targets)], "set_mode")
        else:
            decider.decide(session_id, *step)
    return engine, decider


class TestReplayProperty:
    """Generated logs with decisions replay clean; a seeded decision is always caught."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(name=st.sampled_from(preset_names()), steps=_STEPS, data=st.data())
    def test_clean_and_seeded(
        self, tmp_path_factory: pytest.TempPathFactory, name: str, steps: list[Any], data: Any
    ):
        path = tmp_path_factory.mktemp("log") / "modes.jsonl"
        engine, decider = _generate(path, name, steps)
        fast = replay([path], verify=True, keep_timeline=False)
        slow = replay([path], verify=True, keep_timeline=True)
        assert (policy(fast), fast.exit_status) == ([], 0)
        assert (policy(slow), [s.tools for s in slow.sessions]) == (
            [],
            [s.tools for s in fast.sessions],
        )
        ran = sum(t.ran for s in fast.sessions for t in s.tools)
        assert ran == sum(
            w["decision"] == "allow" or w["outcome"] in ("allow_once", "allow_always", "granted")
            for w in decider.written
        )
        rows = lines(path)
        decided = [i for i, r in enumerate(rows) if r["event"] == "modefsm.tool_decided"]
        if not decided:
            return
        index = data.draw(st.sampled_from(decided))
        row = rows[index]
        spec = engine.spec
        kind = data.draw(st.sampled_from(["decision", "mode"]))
        if kind == "decision":  # claim another verdict than the rules give
            wrong = data.draw(st.sampled_from([d for d in DECISIONS if d != row["decision"]]))
            edits = {"decision": wrong, "outcome": "allow_once" if wrong == "ask" else None}
        else:  # claim another mode than the committed one
            others = [m for m in spec.mode_ids if m != row["mode"]]
            other = data.draw(st.sampled_from(others))
            verdict = spec.rules.judge(other, row["kind"], row["tool"])
            outcome = "allow_once" if verdict.decision == "ask" else None
            edits = {"mode": other, "decision": verdict.decision, "rule": verdict.rule_index,
                     "outcome": outcome}  # fmt: skip
        rewrite(path, index, **edits)
        seeded = replay([path], verify=True)
        found = {(v.kind, v.location.line) for v in seeded.violations}
        assert ("tool_policy", index + 1) in found
        assert {kind for kind, _ in found} == {"tool_policy"}


class TestCommandLine:
    """``modefsm replay --summary`` says which tools ran in which mode, and fails on a
    tool_policy violation."""

    def test_summary_and_exit_status(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
        path, _, _ = TestReplay().run(tmp_path)
        assert main(["replay", str(path), "--verify", "--summary"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[:6] == [
            "SESSIONS (1)",
            "  s1  plan  (seq 2, spec permission, 2 records)",
            "    read in default: 1 allowed, 0 asked, 0 denied; 1 ran",
            "    execute in default: 0 allowed, 2 asked, 0 denied; 2 ran",
            "    edit in plan: 0 allowed, 0 asked, 1 denied; 0 ran",
            "    execute in plan: 0 allowed, 0 asked, 1 denied; 0 ran",
        ]
        rewrite(path, 5, decision="allow", rule=1)
        assert main(["replay", str(path), "--verify", "--summary"]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out[6:8] == [
            "VIOLATIONS (1)",
            (
                f"  {path}:6: session 's1': tool_policy: a edit call of 'Edit' in mode 'plan': the "
                "rules give deny (rule 0), the record says allow (rule 1)"
            ),
        ]

    def test_answers_dropped_are_neither_changes_nor_decisions(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ):
        """A tool call's late and second answers (``modefsm.answer_dropped``) change no
        summary, no count and no verdict: the same output with them as without."""
        path, engine, _ = TestReplay().run(tmp_path)
        assert main(["replay", str(path), "--verify", "--summary"]) == 0
        without = capsys.readouterr()
        before = lines(path)
        engine.drop_answer_soon(
            "s1", "late_answer", tool_call_id="call_3", option_id="allow_once", request_id=4
        )
        engine.drop_answer_soon(
            "s1", "duplicate_answer", tool_call_id="call_3", option_id=None, request_id=4
        )
        added = lines(path)[len(before) :]
        for line in added:
            assert line.pop("timestamp")
        spec = preset("permission")
        assert added == [
            {
                "session_id": "s1",
                "request_id": 4,
                "tool_call_id": "call_3",
                "option_id": "allow_once",
                "reason": "late_answer",
                "spec": "permission",
                "spec_hash": spec.content_hash,
                "event": "modefsm.answer_dropped",
                "level": "warning",
            },
            {
                "session_id": "s1",
                "request_id": 4,
                "tool_call_id": "call_3",
                "reason": "duplicate_answer",
                "spec": "permission",
                "spec_hash": spec.content_hash,
                "event": "modefsm.answer_dropped",
                "level": "warning",
            },
        ]
        assert main(["replay", str(path), "--verify", "--summary"]) == 0
        assert capsys.readouterr() == without
        report = replay([path], verify=True)
        assert (policy(report), report.records, report.exit_status) == ([], 7, 0)
        assert report.chain is not None
        assert (report.chain.verified, report.chain.unverifiable) == (7, 0)


class TestSpecChanged:
    """A server restarted on the same log with another spec: its sessions go on under it."""

    async def test_grants_under_the_new_spec_replay_clean(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ):
        path = tmp_path / "modes.jsonl"
        first = ModeEngine(preset("permission"), store=FileStore(path))
        await first.new_session_async("s1")
        await first.set_mode("s1", "acceptEdits")
        assert (await first.decide_async("s1", ToolCall("c0", "edit", "Edit"))).runs
        assert first.store is not None
        first.store.close()
        second = ModeEngine(preset("seed"), store=FileStore(path))
        assert second.store is not None
        point = second.store.restore_point("s1")
        assert point is not None
        second.restore_session("s1", point.mode, point.seq, previous=point.previous)
        edit = ToolCall("c1", "edit", "Edit", "Edit README.md")
        asked = await second.decide_async("s1", edit)
        assert (await second.settle(asked, "allow_always")).outcome == "allow_always"
        granted = await second.decide_async("s1", ToolCall("c2", "edit", "Edit"))
        assert (granted.mode, granted.outcome) == ("ask", "granted")
        second.store.close()
        assert main(["replay", str(path), "--verify", "--summary"]) == 0
        assert capsys.readouterr().out.splitlines()[:6] == [
            "SESSIONS (1)",
            "  s1  ask  (seq 3, spec seed, 3 records)",
            "    edit in acceptEdits: 1 allowed, 0 asked, 0 denied; 1 ran",
            "    edit in ask: 0 allowed, 2 asked, 0 denied; 2 ran",
            ("CHAIN  6 records verified, 0 without a digest; head " + lines(path)[-1]["digest"]),
            "RESULT  clean",
        ]


class TestWorkers:
    """Decisions in PostgreSQL workers' files: merged by the gseq of the record before
    them, each file's chain followed through them, checked like any other."""

    def copy_with_decision(self, tmp_path: Path, **edits: Any) -> list[Path]:
        source = Path(__file__).resolve().parent / "golden_workers" / "clean"
        files = []
        for name in ("w1.jsonl", "w2.jsonl", "w3.jsonl"):
            files.append(tmp_path / name)
            files[-1].write_bytes((source / name).read_bytes())
        last = lines(files[0])[-1]  # a committed record: its session is where it left it
        spec = preset(last["spec"])
        verdict = spec.rules.judge(last["to_mode"], "read", "Read")
        fields = {
            "timestamp": "2026-01-01T00:01:00.000000Z",
            "session_id": last["session_id"],
            "tool_call_id": "call_read",
            "kind": "read",
            "tool": "Read",
            "title_digest": None,
            "rule": verdict.rule_index,
            "decision": verdict.decision,
            "outcome": None,
            "mode": last["to_mode"],
            "mode_seq": last["seq"],
            "spec": spec.name,
            "spec_hash": spec.content_hash,
            **edits,
        }
        with files[0].open("ab") as out:
            TransitionLog.to_stream(out, head=last["digest"]).write(EVENT_DECIDED, fields)
        return files

    def test_clean(self, tmp_path: Path):
        report = replay(self.copy_with_decision(tmp_path), verify=True)
        assert policy(report) == []
        assert [t for s in report.sessions for t in s.tools] == [
            ToolTally("ask", "read", 1, 0, 0, 1)
        ]

    def test_stale(self, tmp_path: Path):
        files = self.copy_with_decision(tmp_path, mode_seq=3)
        assert policy(replay(files, verify=True)) == [
            (
                f"{files[0]}:5: session 'sess_a': tool_policy: a read call of 'Read' decided in "
                "mode 'ask' (seq 3), but the session's committed mode was 'ask' (seq 4)"
            )
        ]
