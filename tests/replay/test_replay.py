"""Replay checks record by record: sequence, legality per origin, switches, restores, chain."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog, preset
from modefsm.replay._replayer import Replayer, iter_records, last_points, replay
from modefsm.store import RestorePoint
from tests.replay.golden_logs import rechain
from tests.replay.test_replay_fast import by_feed

SEED = preset("seed")
PERMISSION = preset("permission")


def _line(spec: ModeSpec, **fields: object) -> bytes:
    event = {
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "session_id": "s1",
        "spec": spec.name,
        "spec_hash": spec.content_hash,
        "prev": None,
        "digest": "",
        **fields,
    }
    if "event" not in event:
        event["event"] = (
            "modefsm.session_created" if event.get("origin") == "new" else "modefsm.mode_changed"
        )
    return orjson.dumps(event)


def _created(spec: ModeSpec = SEED, **fields: object) -> bytes:
    return _line(spec, seq=1, from_mode=None, to_mode=spec.initial, origin="new", **fields)


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(rechain(lines)) + b"\n")
    return path


def _problems(path: Path, specs=None, **options) -> list[tuple[str, str]]:
    report = replay([path], specs, **options)
    return [(v.kind, v.message) for v in report.violations]


class TestSwitches:
    """An approved switch names its tool call and an offered option that leads where it went."""

    def _check(self, tmp_path, spec=SEED, source="architect", **fields):
        lines = [_created(spec)]
        if source != spec.initial:
            lines.append(
                _line(spec, seq=2, from_mode=spec.initial, to_mode=source, origin="set_mode")
            )
        seq = len(lines) + 1
        fields = {"tool_call_id": "t1", "from_mode": source, **fields}
        lines.append(_line(spec, seq=seq, origin="switch_mode", **fields))
        return _problems(_write(tmp_path / "log.jsonl", lines), [spec])

    def test_offered_option_is_clean(self, tmp_path):
        assert [] == self._check(tmp_path, to_mode="code", option_id="code")

    def test_missing_tool_call_id(self, tmp_path):
        assert [("switch", "an approved switch_mode without a tool_call_id")] == self._check(
            tmp_path, to_mode="code", option_id="code", tool_call_id=None
        )

    def test_missing_option_id(self, tmp_path):
        assert [("switch", "an approved switch_mode without an option_id")] == self._check(
            tmp_path, to_mode="code"
        )

    def test_option_not_offered(self, tmp_path):
        assert [
            (
                "switch",
                "option 'yolo' was not offered in mode 'architect' (offered: code, ask, reject)",
            )
        ] == self._check(tmp_path, to_mode="code", option_id="yolo")

    def test_reject_option_approves_nothing(self, tmp_path):
        assert [
            ("switch", "option 'reject' is a reject_once option: it approves nothing")
        ] == self._check(tmp_path, to_mode="code", option_id="reject")

    def test_option_leads_elsewhere(self, tmp_path):
        assert [("switch", "option 'ask' moves to 'ask', not 'code'")] == self._check(
            tmp_path, to_mode="code", option_id="ask"
        )

    def test_no_switch_in_that_mode(self, tmp_path):
        assert [("switch", "spec 'seed' offers no switch in mode 'code'")] == self._check(
            tmp_path, source="code", to_mode="ask", option_id="ask"
        )

    def test_option_checked_in_the_mode_it_was_proposed_in(self, tmp_path):
        assert [] == self._check(
            tmp_path, source="ask", proposed_in="architect", to_mode="code", option_id="code"
        )

    def test_previous_option_returns_to_the_previous_mode(self, tmp_path):
        lines = [
            _created(PERMISSION),
            _line(PERMISSION, seq=2, from_mode="default", to_mode="acceptEdits", origin="set_mode"),
            _line(PERMISSION, seq=3, from_mode="acceptEdits", to_mode="plan", origin="set_mode"),
            _line(
                PERMISSION,
                seq=4,
                from_mode="plan",
                to_mode="default",
                origin="switch_mode",
                tool_call_id="t1",
                option_id="exit_plan_previous",
            ),
        ]
        assert [
            (
                "switch",
                (
                    "option 'exit_plan_previous' returns to the previous mode 'acceptEdits', "
                    "not 'default'"
                ),
            )
        ] == _problems(_write(tmp_path / "log.jsonl", lines), [PERMISSION])

    def test_switch_to_a_mode_no_transition_reaches(self, tmp_path):
        spec = ModeSpec.from_data(
            {
                "name": "strict",
                "initial": "a",
                "modes": [
                    {"id": "a", "name": "A"},
                    {"id": "b", "name": "B"},
                    {"id": "c", "name": "C"},
                ],
                "client_changes": {"a": ["b"], "b": ["a"], "c": ["a"]},
                "switches": [
                    {
                        "source": ["b"],
                        "title": "t",
                        "options": [
                            {"option_id": "go", "name": "Go", "kind": "allow_once", "target": "c"}
                        ],
                    }
                ],
            }
        )
        lines = [
            _created(spec),
            _line(
                spec,
                seq=2,
                from_mode="a",
                to_mode="c",
                origin="switch_mode",
                tool_call_id="t",
                option_id="go",
                proposed_in="b",
            ),
        ]
        assert [
            (
                "illegal",
                (
                    "an approved switch_mode may not move from 'a' to 'c' under spec 'strict' "
                    "(allowed from 'a': b)"
                ),
            )
        ] == _problems(_write(tmp_path / "log.jsonl", lines), [spec])


class TestRestoreAndCreation:
    """Creations start in the initial mode; restores go where the restore policy says."""

    def test_fallback_restore_is_clean(self, tmp_path):
        lines = [
            _created(PERMISSION),
            _line(
                PERMISSION,
                seq=2,
                from_mode="default",
                to_mode="bypassPermissions",
                origin="set_mode",
            ),
            _line(
                PERMISSION,
                seq=3,
                from_mode="bypassPermissions",
                to_mode="default",
                origin="restore",
            ),
        ]
        assert [] == _problems(_write(tmp_path / "log.jsonl", lines), [PERMISSION])

    def test_restore_to_another_mode_is_illegal(self, tmp_path):
        lines = [
            _created(PERMISSION),
            _line(
                PERMISSION,
                seq=2,
                from_mode="default",
                to_mode="bypassPermissions",
                origin="set_mode",
            ),
            _line(
                PERMISSION, seq=3, from_mode="bypassPermissions", to_mode="plan", origin="restore"
            ),
        ]
        assert [
            (
                "illegal",
                (
                    "a restore from 'bypassPermissions' goes to 'default', not to 'plan' "
                    "(spec 'permission')"
                ),
            )
        ] == _problems(_write(tmp_path / "log.jsonl", lines), [PERMISSION])

    def test_restore_of_a_restorable_mode_is_illegal(self, tmp_path):
        lines = [
            _created(),
            _line(SEED, seq=2, from_mode="ask", to_mode="code", origin="restore"),
        ]
        assert [
            (
                "illegal",
                (
                    "a restore from 'ask' stays there (the mode is restorable), not to 'code' "
                    "(spec 'seed')"
                ),
            )
        ] == _problems(_write(tmp_path / "log.jsonl", lines), [SEED])

    def test_restore_from_a_mode_the_spec_lost_goes_to_initial(self, tmp_path):
        engine_log = tmp_path / "log.jsonl"
        log = TransitionLog.to_file(engine_log)
        ModeEngine(SEED, store=LogStore(log)).restore_session("s1", "debug", 7)
        log.close()
        report = replay([engine_log], [SEED])
        assert (
            [],
            [
                (
                    "partial",
                    "session 's1' starts at seq 8 here: its earlier records are in a log not given",
                )
            ],
        ) == (
            [(v.kind, v.message) for v in report.violations],
            [(n.kind, n.message) for n in report.notes],
        )

    def test_creation_in_another_mode(self, tmp_path):
        lines = [_line(SEED, seq=1, from_mode=None, to_mode="code", origin="new")]
        assert [
            ("creation", "created in mode 'code', but spec 'seed' starts sessions in 'ask'")
        ] == _problems(_write(tmp_path / "log.jsonl", lines), [SEED])

    def test_change_with_seq_one(self, tmp_path):
        lines = [_line(SEED, seq=1, from_mode="ask", to_mode="code", origin="set_mode")]
        assert [("creation", "seq 1 is the creation, not a change")] == _problems(
            _write(tmp_path / "log.jsonl", lines), [SEED]
        )

    def test_origin_new_on_a_change(self, tmp_path):
        lines = [
            _created(),
            _line(
                SEED,
                seq=2,
                from_mode="ask",
                to_mode="code",
                origin="new",
                event="modefsm.mode_changed",
            ),
        ]
        assert [("illegal", "origin 'new' on a mode_changed record (only a creation has it)")] == (
            _problems(_write(tmp_path / "log.jsonl", lines), [SEED])
        )

    def test_unknown_target_mode(self, tmp_path):
        lines = [
            _created(),
            _line(SEED, seq=2, from_mode="ask", to_mode="debug", origin="set_mode"),
        ]
        assert [
            ("illegal", "to_mode 'debug' is not a mode of spec 'seed' (ask, architect, code)")
        ] == (_problems(_write(tmp_path / "log.jsonl", lines), [SEED]))


class TestChainAcrossFiles:
    """Rotated files verify as one stream; a missing or misordered file does not."""

    def _rotated(self, tmp_path) -> list[Path]:
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        engine = ModeEngine(SEED, store=LogStore(log))
        engine.new_session("s1")
        path.rename(tmp_path / "modes.1.jsonl")
        log.reopen()
        engine.change("s1", "code", "set_mode")
        path.rename(tmp_path / "modes.2.jsonl")
        log.reopen()
        engine.change("s1", "ask", "set_mode")
        log.close()
        first = tmp_path / "modes.1.jsonl.gz"
        first.write_bytes(gzip.compress((tmp_path / "modes.1.jsonl").read_bytes()))
        return [first, tmp_path / "modes.2.jsonl", path]

    def test_rotated_files_verify(self, tmp_path):
        report = replay(self._rotated(tmp_path), verify=True)
        assert ((), 3, "ask") == (
            report.violations,
            report.chain.verified,
            report.session("s1").mode,
        )

    def test_missing_middle_file_breaks_the_chain(self, tmp_path):
        first, _, last = self._rotated(tmp_path)
        assert [
            (
                "chain",
                (
                    f"this file does not continue {first}: its first record continues no record "
                    "read before it (a file missing between them, or files out of order)"
                ),
            ),
            ("gap", f"seq 3 follows seq 1 ({first}:2): 1 record is missing"),
            ("from_mode", f"from_mode 'code', but seq 1 ({first}:2) left the session in 'ask'"),
        ] == [(v.kind, v.message) for v in replay([first, last], verify=True).violations]

    def test_files_out_of_order_are_reported_where_the_anchor_is_continued(self, tmp_path):
        """Each file holds other sessions, so only the chain can tell the order."""
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        engine = ModeEngine(SEED, store=LogStore(log))
        names = []
        for number, session_id in enumerate(("s1", "s2", "s3"), start=1):
            engine.new_session(session_id)
            names.append(tmp_path / f"modes.{number}.jsonl")
            path.rename(names[-1])
            log.reopen()
        engine.new_session("s4")
        log.close()
        oldest_first = [*names, path]
        assert replay(oldest_first, verify=True).violations == ()
        shuffled = [names[2], names[0], names[1], path]
        for report in (
            replay(shuffled, verify=True),
            by_feed(shuffled, None, verify=True),
        ):
            assert [(v.kind, str(v.location), v.message) for v in report.violations] == [
                (
                    "chain",
                    f"{names[1]}:2",  # line 1 of each file: its header
                    (
                        f"{names[2]}:1 continues this record, but was read before it: the "
                        "files are out of order (give them oldest first)"
                    ),
                )
            ]

    def test_first_two_records_swapped_in_one_file_is_one_violation(self, tmp_path):
        path = tmp_path / "log.jsonl"
        log = TransitionLog.to_file(path)
        engine = ModeEngine(SEED, store=LogStore(log))
        engine.new_session("s1")
        engine.new_session("s2")
        log.close()
        _header, first, second = path.read_bytes().splitlines()
        path.write_bytes(second + b"\n" + first + b"\n")  # the header is lost too
        assert [(v.kind, v.location.line) for v in replay([path], verify=True).violations] == [
            ("chain", 2)
        ]

    def test_later_file_alone_anchors_the_chain(self, tmp_path):
        *_, last = self._rotated(tmp_path)
        report = replay([last], verify=True)
        assert ((), 1) == (report.violations, report.chain.verified)

    def test_new_chain_inside_a_file_is_reported(self, tmp_path):
        lines = rechain([_created()]) + rechain([_created(session_id="s2")])
        path = tmp_path / "log.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        assert [
            (
                "chain",
                (
                    "a new chain starts in the middle of the file: another process began a fresh "
                    "log here, or the records before it were replaced"
                ),
            )
        ] == _problems(path, verify=True)

    def test_records_without_digest_cannot_be_verified(self, tmp_path):
        path = tmp_path / "old.jsonl"
        data = orjson.loads(_created())
        del data["prev"], data["digest"]
        path.write_bytes(orjson.dumps(data) + b"\n")
        assert [
            (
                "no_digest",
                (
                    f"1 record carries no digest in {path} (the first here): written before "
                    "records were chained, or by another writer; they cannot be verified"
                ),
            )
        ] == _problems(path, verify=True)
        assert [] == _problems(path)


class TestReport:
    """What the report holds, and the reading helpers kept from the first reader."""

    def test_session_filter_keeps_one_session(self, tmp_path):
        path = _write(tmp_path / "log.jsonl", [_created(), _created(session_id="s2")])
        report = replay([path], session_id="s2")
        assert (["s2"], 2) == ([s.session_id for s in report.sessions], report.records)

    def test_session_not_in_the_log_is_an_error(self, tmp_path):
        path = _write(tmp_path / "log.jsonl", [_created()])
        report = replay([path], session_id="nobody")
        assert (["no_session: the input holds no record of session 'nobody'"], 2) == (
            [str(e) for e in report.errors],
            report.exit_status,
        )

    def test_timeline_is_kept_only_when_asked(self, tmp_path):
        path = _write(tmp_path / "log.jsonl", [_created()])
        kept = replay([path]).session("s1")
        dropped = replay([path], keep_timeline=False).session("s1")
        assert (1, 0) == (len(kept.changes), len(dropped.changes))

    def test_replayer_can_be_fed_by_hand(self):
        replayer = Replayer([SEED])
        assert (0, ()) == (replayer.report().records, replayer.report().sessions)

    def test_iter_records_and_last_points(self, tmp_path):
        path = _write(
            tmp_path / "log.jsonl",
            [_created(), _line(SEED, seq=2, from_mode="ask", to_mode="code", origin="set_mode")],
        )
        assert ([1, 2], {"s1": RestorePoint("s1", "code", 2, "ask")}) == (
            [r.seq for r in iter_records([path])],
            last_points([path]),
        )

    @pytest.mark.parametrize(
        ("content", "errors"),
        [
            (b"", ["no_records: the input holds no modefsm record"]),
            (
                b"\x00\x01\x02garbage\xff\n",
                ["{path}:1: not_text: binary data, not a JSON-lines log: file skipped"],
            ),
            (None, ["{path}: unreadable: cannot read: No such file or directory"]),
        ],
        ids=["empty", "binary", "missing"],
    )
    def test_unusable_input_is_an_error_not_an_exception(self, tmp_path, content, errors):
        path = tmp_path / "input.log"
        if content is not None:
            path.write_bytes(content)
        report = replay([path])
        assert ([e.format(path=path) for e in errors], 2) == (
            [str(e) for e in report.errors],
            report.exit_status,
        )

    def test_valid_sessions_are_reported_beside_an_unusable_file(self, tmp_path):
        good = _write(tmp_path / "good.jsonl", [_created()])
        report = replay([tmp_path / "missing.jsonl", good])
        assert (["s1"], 2) == ([s.session_id for s in report.sessions], report.exit_status)
