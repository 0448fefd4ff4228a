"""The replayer's fast path (:meth:`Replayer.take`) only saves time: it never changes a report.

:func:`~modefsm.replay.replay` hands each well-formed record to ``Replayer.take`` before any
model is built; whatever ``take`` declines comes back through ``Replayer.feed``. Here the
same logs, clean and damaged, are replayed both ways (``feed`` alone, and ``replay``) and
the reports must be equal, field for field.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.errors import ModefsmError
from modefsm.log._reader import MAX_LINE, read_log
from modefsm.replay._replayer import Replayer, ReplayReport, replay
from modefsm.spec._model import ModeSpec
from tests.conftest import offer_now, settle_now

from .golden_logs import CASES, HOST_JSON, fixed_clock, render

SPECS = [preset("permission"), preset("seed")]


def _permission_log() -> list[bytes]:
    """Every kind of record of the permission spec, and a host line.

    Lines: 1 a created, 2 b created, 3 a default->plan (set_mode, int id),
    4 b default->acceptEdits (set_config_option, str id), 5 the host's, 6 a rejected
    (not_allowed), 7 a switch plan->default (restoring a in plan wrote nothing; its
    ``$previous``, default too, is not offered), 8 b set_mode ->bypassPermissions,
    9 b restore bypassPermissions->default (fallback), 10 b switch rejected, 11 c created,
    12 c rejected (unknown_mode).
    """
    buffer = io.BytesIO()
    with fixed_clock():
        engine = ModeEngine(preset("permission"), store=LogStore(TransitionLog.to_stream(buffer)))
        engine.new_session("a", request_id=0)
        engine.new_session("b")
        engine.change("a", "plan", "set_mode", request_id=1)
        engine.change("b", "acceptEdits", "set_config_option", request_id="r-2")
        with contextlib.suppress(ModefsmError):
            engine.change("a", "acceptEdits", "set_mode", request_id=3)
        engine.close_session("a")
        engine.restore_session("a", "plan", 2, previous="default")
        assert settle_now(engine, "a", "exit_plan_default", tool_call_id="t1").change is not None
        engine.change("b", "bypassPermissions", "set_mode")
        engine.close_session("b")
        engine.restore_session("b", "bypassPermissions", 3)
        engine.reject_switch("b", "option_rejected", tool_call_id="t2", option_id="keep_planning")
        engine.new_session("c")
        with contextlib.suppress(ModefsmError):
            engine.change("c", "bogus", "set_mode")
    header, *lines = buffer.getvalue().splitlines()
    return [header, *lines[:4], HOST_JSON, *lines[4:]]


PERMISSION_HEADER, *PERMISSION = _permission_log()
"""The permission log without its header (as logs written before headers were), and it."""


def _write(tmp_path: Path, lines: list[bytes], name: str = "log.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def by_feed(
    paths: list[Path],
    specs: list[ModeSpec] | None,
    *,
    verify: bool,
    session_id: str | None = None,
    keep_timeline: bool = False,
) -> ReplayReport:
    """The report of ``feed`` alone: every record parsed into its model first."""
    replayer = Replayer(specs, verify=verify, session_id=session_id, keep_timeline=keep_timeline)
    for item in read_log(paths, check_digests=verify, decisions=True, headers=True):
        replayer.feed(item)
    return replayer.report()


def assert_same(paths: list[Path], specs: list[ModeSpec] | None = SPECS) -> None:
    for verify in (False, True):
        for session_id in (None, "a"):
            fast = replay(paths, specs, verify=verify, session_id=session_id, keep_timeline=False)
            slow = by_feed(paths, specs, verify=verify, session_id=session_id)
            assert fast == slow, (verify, session_id)


def test_the_permission_log_is_clean_and_taken(tmp_path):
    path = _write(tmp_path, PERMISSION)
    taken: list[int] = []
    replayer = Replayer(SPECS, verify=True)

    def take(name: str, line: int, lines: list[bytes], start: int, offset: int) -> int:
        stop = replayer.take(name, line, lines, start, offset)
        taken.extend(range(line, line + stop - start))
        return stop

    for item in read_log([path], check_digests=True, take=take):
        replayer.feed(item)
    report = replayer.report()
    assert (report.violations, report.records) == ((), 11)
    assert [(s.session_id, s.mode, s.seq, s.records, s.rejections) for s in report.sessions] == [
        ("a", "default", 3, 3, 1),
        ("b", "default", 4, 4, 1),
        ("c", "default", 1, 1, 1),
    ]
    # The first record anchors the chain and the switch is checked against its options:
    # those go through feed; every other record is taken (line 5 is the host's).
    assert taken == [2, 3, 4, 6, 8, 9, 10, 11, 12]


def test_a_restore_keeps_the_previous_mode_a_switch_returns_to(tmp_path):
    """A restore that falls back is not a move: ``$previous`` still means the mode before.

    The engine keeps ``previous`` over a restore (see ``previous_of``); replay must too, or
    the ``$previous`` switch right after it is reported as going to the wrong mode.
    """
    spec = ModeSpec.from_data(
        {
            "name": "fallback",
            "initial": "ask",
            "modes": [
                {"id": "ask", "name": "Ask"},
                {"id": "yolo", "name": "Yolo", "restorable": False, "fallback": "plan"},
                {"id": "plan", "name": "Plan"},
            ],
            "switches": [
                {
                    "source": ["plan"],
                    "title": "Leave plan",
                    "options": [
                        {"option_id": "back", "name": "Back", "kind": "allow_once",
                         "target": "$previous"},
                    ],
                }
            ],
        }
    )  # fmt: skip
    buffer = io.BytesIO()
    engine = ModeEngine(spec, store=LogStore(TransitionLog.to_stream(buffer)))
    engine.new_session("s")
    engine.change("s", "yolo", "set_mode")
    engine.close_session("s")
    engine.restore_session("s", "yolo", 2, previous="ask")
    offer = offer_now(engine, "s", "t1")
    assert offer.targets == {"back": "ask"}
    assert settle_now(engine, offer, "back").reason is None
    path = _write(tmp_path, buffer.getvalue().splitlines())
    fast = replay([path], [spec], verify=True)
    assert fast == replay([path], verify=True)  # the header's spec: the same
    for report in (fast, by_feed([path], [spec], verify=True, keep_timeline=True)):
        assert report.violations == ()
        assert [(r.origin, r.from_mode, r.to_mode) for r in report.session("s").changes] == [
            ("new", None, "ask"),
            ("set_mode", "ask", "yolo"),
            ("restore", "yolo", "plan"),
            ("switch_mode", "plan", "ask"),
        ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_logs_report_the_same_both_ways(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(render(name))
    assert_same([path], None)


@pytest.mark.parametrize("specs", [SPECS, None], ids=["specs given", "the header's"])
def test_a_log_with_its_header_reports_the_same_both_ways(tmp_path, specs):
    """The header is the file's first line: the reader's (never taken), one model built."""
    path = _write(tmp_path, [PERMISSION_HEADER, *PERMISSION])
    assert_same([path], specs)
    report = replay([path], specs, verify=True, keep_timeline=False)
    assert (report.violations, report.records, report.chain.verified) == ((), 11, 11)
    again = _write(tmp_path, [*PERMISSION[:6], PERMISSION_HEADER, *PERMISSION[6:]], "again.jsonl")
    assert_same([again], specs)  # a header among the records (the chain breaks there)


def test_logs_read_one_after_the_other_report_the_same(tmp_path):
    first = _write(tmp_path, PERMISSION[:6], "1.jsonl")
    second = _write(tmp_path, PERMISSION[6:], "2.jsonl")
    assert_same([first, second])
    assert_same([second, first])


FIELDS = [
    "event", "timestamp", "session_id", "seq", "from_mode", "to_mode", "origin",
    "request_id", "tool_call_id", "option_id", "proposed_in", "reason", "spec",
    "spec_hash", "level", "prev", "digest", "session_prev", "cwd", "protocol", "gseq", "pid",
]  # fmt: skip
VALUES: list[object] = [
    None, 0, 1, 2, 3, True, 1.5, "", "default", "plan", "set_mode", "restore", [], {},
]  # fmt: skip
MISSING = object()
FIELD_EDITS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FIELD_EDITS
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, len(PERMISSION) - 1),
            st.sampled_from(FIELDS),
            st.sampled_from([MISSING, *VALUES]),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_edited_fields_report_the_same_both_ways(tmp_path, edits):
    """Any field of any record given another value or type, or removed, or a key added."""
    lines = list(PERMISSION)
    for index, key, value in edits:
        data = orjson.loads(lines[index])
        if value is MISSING:
            data.pop(key, None)
        else:
            data[key] = value
        lines[index] = orjson.dumps(data)
    assert_same([_write(tmp_path, lines)])


@FIELD_EDITS
@given(order=st.permutations(range(len(PERMISSION))), cut=st.integers(1, len(PERMISSION)))
def test_reordered_and_cut_logs_report_the_same_both_ways(tmp_path, order, cut):
    lines = [PERMISSION[i] for i in order[:cut]]
    assert_same([_write(tmp_path, lines)])


def test_a_timeline_and_on_entry_see_every_record(tmp_path):
    """Kept timelines and ``on_entry`` get every record of the replayed sessions."""
    path = _write(tmp_path, PERMISSION)
    seen: list[tuple[str, int | None]] = []
    report = replay(
        [path],
        SPECS,
        session_id="b",
        on_entry=lambda e: seen.append((e.record.session_id, e.record.seq)),
    )
    assert seen == [("b", 1), ("b", 2), ("b", 3), ("b", 4), ("b", None)]
    assert [r.seq for r in report.session("b").changes] == [1, 2, 3, 4]
    assert report.records == 11


@pytest.mark.parametrize(
    ("key", "value"),
    [("session_prev", 5), ("session_prev", []), ("cwd", 5), ("protocol", 3), ("level", 1)],
)
def test_a_field_of_the_wrong_type_is_a_bad_record_both_ways(tmp_path, key, value):
    """Every field of the record model is checked on the fast path too."""
    lines = list(PERMISSION)
    data = orjson.loads(lines[2])
    data[key] = value
    lines[2] = orjson.dumps(data)
    path = _write(tmp_path, lines)
    report = replay([path], SPECS, keep_timeline=False)
    assert [(v.kind, v.location.line) for v in report.violations] == [
        ("bad_record", 3),
        ("from_mode", 6),
        ("gap", 7),
        ("from_mode", 7),
    ]
    assert_same([path])


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda line: b" " + line, id="leading space"),
        pytest.param(lambda line: b"\t" + line, id="leading tab"),
        pytest.param(lambda line: line.replace(b'_changed"', b'_change\\u0064"'), id="escaped"),
        pytest.param(lambda line: line + b"\r", id="carriage return"),
        pytest.param(lambda line: line + b"  ", id="trailing spaces"),
        pytest.param(lambda line: line[:-1] + b',"event":[]}', id="event a list"),
        pytest.param(lambda line: line[:-1] + b',"event":{}}', id="event an object"),
    ],
)
def test_raw_line_edits_report_the_same_both_ways(tmp_path, edit):
    lines = list(PERMISSION)
    lines[2] = edit(lines[2])
    assert_same([_write(tmp_path, lines)])


@pytest.mark.parametrize("where", [1, 5, 11])
def test_a_record_longer_than_max_line_is_skipped_both_ways(tmp_path, where):
    """A record padded past MAX_LINE is ``too_long`` on the fast path too, wherever the
    reader's blocks happen to cut the file."""
    lines = list(PERMISSION)
    data = orjson.loads(lines[where])
    data["pad"] = "x" * MAX_LINE
    lines[where] = orjson.dumps(data)
    path = _write(tmp_path, lines)
    report = replay([path], SPECS, keep_timeline=False)
    long = [n.location.line for n in report.notes if n.kind == "too_long"]
    assert (long, report.records) == ([where + 1], 10)
    assert_same([path])


def _add(text: bytes):
    return lambda line: line[:-1] + b"," + text + b"}"


def _sub(old: bytes, new: bytes):
    def edit(line: bytes) -> bytes:
        assert old in line
        return line.replace(old, new, 1)

    return edit


# Where JSON parsers are known to differ (a value the line's first decoder skips or reads
# otherwise than orjson and the model): each line must read the same both ways.
JSON_EDGES = {
    "invalid UTF-8 in a host's value": _add(b'"host":"\xff"'),
    "invalid UTF-8 in a host's key": _add(b'"\xff":1'),
    "invalid UTF-8 in a field": _sub(b'"to_mode":"plan"', b'"to_mode":"pl\xffan"'),
    "a lone surrogate in a host's value": _add(b'"host":"\\ud800"'),
    "a lone surrogate in a field": _sub(b'"to_mode":"plan"', b'"to_mode":"\\ud800"'),
    "an escaped field name": _sub(b'"seq":2', b'"\\u0073eq":2'),
    "an escaped mode": _sub(b'"to_mode":"plan"', b'"to_mode":"\\u0070lan"'),
    "a NUL in a mode": _sub(b'"to_mode":"plan"', b'"to_mode":"pl\\u0000an"'),
    "a float beyond range in a host's value": _add(b'"host":1e400'),
    "a float for an integer": _sub(b'"seq":2', b'"seq":2.0'),
    "an exponent for an integer": _sub(b'"seq":2', b'"seq":2E0'),
    "a negative zero request_id": _sub(b'"request_id":1', b'"request_id":-0'),
    "request_id 2**63": _sub(b'"request_id":1', b'"request_id":9223372036854775808'),
    "request_id 2**64 - 1": _sub(b'"request_id":1', b'"request_id":18446744073709551615'),
    "request_id 2**64": _sub(b'"request_id":1', b'"request_id":18446744073709551616'),
    "request_id -2**63 - 1": _sub(b'"request_id":1', b'"request_id":-9223372036854775809'),
    "request_id true": _sub(b'"request_id":1', b'"request_id":true'),
    "seq twice, the last wrong": _add(b'"seq":"2"'),
    "seq twice, the first wrong": _sub(b'"seq":2', b'"seq":"2","seq":2'),
    "seq twice, both right": _add(b'"seq":2'),
    "a host's value nested deep": _add(b'"host":' + b"[" * 600 + b"]" * 600),
    "a host's value, an object": _add(b'"host":{"a":[1,2.5,null,true]}'),
    "a tab before the record": lambda line: b"\t" + line,
    "spaces around the colons": _sub(b'"seq":2', b'"seq" : 2'),
}


@pytest.mark.parametrize("edit", JSON_EDGES.values(), ids=JSON_EDGES.keys())
def test_json_edge_cases_report_the_same_both_ways(tmp_path, edit):
    lines = list(PERMISSION)
    lines[2] = edit(lines[2])
    assert_same([_write(tmp_path, lines)])


def test_a_record_whose_event_is_not_a_string_is_not_a_record(tmp_path):
    """``"event"`` twice, the last an object: orjson keeps the last; no traceback."""
    lines = list(PERMISSION)
    lines[2] = lines[2][:-1] + b',"event":{}}'
    report = replay([_write(tmp_path, lines)], SPECS)
    # line 3 (a's change to plan) is skipped: a's rejection in plan and its switch from
    # plan (seq 3 after seq 1) no longer follow
    assert (report.records, [(v.kind, v.location.line) for v in report.violations]) == (
        10,
        [("from_mode", 6), ("gap", 7), ("from_mode", 7)],
    )


def test_a_duplicated_record_keeps_its_age_among_the_recent_digests(tmp_path):
    """A copy of record 1501 of 5,000, in a log where every third record appears twice,
    forks record 1500: 3,500 distinct digests back but 4,666 lines; duplicates take no
    room among the 4,096 most recent distinct digests."""
    buffer = io.BytesIO()
    engine = ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(buffer)))
    for number in range(5000):
        engine.new_session(f"s{number}")
    lines, first_line = [], {}
    for number, line in enumerate(buffer.getvalue().splitlines()):
        lines.append(line)
        first_line[number] = len(lines)
        if number % 3 == 0:
            lines.append(line)
    copied = first_line[1501]
    lines.append(lines[copied - 1])
    path = _write(tmp_path, lines)
    report = replay([path], verify=True, keep_timeline=False)
    fork = [v for v in report.violations if v.kind == "chain"][-1]
    assert (str(fork.location), fork.message) == (
        f"{path}:{len(lines)}",
        # record 1500's digest was last read on its copy's line, the one after it
        (
            f"the chain forks here: this record continues {path}:{first_line[1500] + 1}, "
            f"which {path}:{copied} already continues (two processes writing one file, or "
            "an inserted or moved record)"
        ),
    )
    assert report == by_feed([path], None, verify=True)
