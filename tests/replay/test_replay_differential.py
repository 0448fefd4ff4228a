"""Differential: replay's fast path (``Replayer.take``) and slow path (``feed``) agree.

Random logs written by the real engine (every origin, rejections, switches, restores,
under every preset), and golden logs, are mutated (fields edited or removed, lines
deleted, repeated, swapped, torn, spliced in from another log, the digest chain redone
as a forger would) and replayed both ways: :func:`~modefsm.replay.replay`, which hands
each record to ``take`` first, and ``feed`` alone. The reports must be equal, field for
field, with and without ``--verify``, for all sessions and for one.
``MODEFSM_SOAK=N`` runs N times more examples.
"""

from __future__ import annotations

import contextlib
import io
import json

import msgspec
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modefsm import LogStore, ModeEngine, TransitionLog, preset, preset_names
from modefsm.errors import ModefsmError
from modefsm.log import Origin, Outcome, read_log, record_digest
from modefsm.replay import Replayer, ReplayReport, replay
from modefsm.spec import TOOL_KINDS, ModeSpec
from tests.conftest import offer_now, settle_now
from tests.reliability.harness import soak_factor
from tests.replay.tools_support import Decider

from .golden_logs import CASES, HOST_JSON, fixed_clock

SPECS = [preset(n) for n in preset_names()]
SESSIONS = ("a", "b", "c")
GOLDEN = {name: make() for name, make in CASES.items()}

DIFFERENTIAL = settings(
    max_examples=100 * soak_factor(),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ANSWERS: tuple[Outcome, ...] = ("allow_once", "allow_always", "reject_once", "cancelled")
"""How the decider answers an ask, by the script's numbers."""

Op = tuple[str, int, int, int]
"""``(operation, session, mode or option index, origin index)``."""

ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["new", "change", "change", "change", "restore", "switch", "reject", "decide"]
        ),
        st.integers(0, len(SESSIONS) - 1),
        st.integers(0, 7),
        st.integers(0, 1),
    ),
    max_size=25,
)


def run_engine(spec: ModeSpec, script: list[Op]) -> list[bytes]:
    """The log the engine writes for *script* (a failing step writes a rejection or nothing)."""
    buffer = io.BytesIO()
    with fixed_clock():
        log = TransitionLog.to_stream(buffer)
        engine = ModeEngine(spec, store=LogStore(log))
        decider = Decider(engine, log)
        modes = spec.mode_ids
        for step, (op, who, pick, origin) in enumerate(script):
            sid = SESSIONS[who]
            with contextlib.suppress(ModefsmError):
                if op == "new":
                    engine.new_session(sid, request_id=step)
                elif op == "change":
                    how: Origin = "set_mode" if origin == 0 else "set_config_option"
                    engine.change(sid, modes[pick % len(modes)], how, request_id=f"r{step}")
                elif op == "decide":  # a tool call decided by the mode: a decision record
                    tool = ("Bash", "write_plan", None)[pick % 3]
                    kind = TOOL_KINDS[(pick + 3 * origin) % len(TOOL_KINDS)]
                    decider.decide(sid, kind, tool, ANSWERS[origin + pick % 3])
                elif op == "restore":
                    seq = engine.get(sid).seq
                    engine.close_session(sid)
                    engine.restore_session(sid, modes[pick % len(modes)], seq + origin)
                else:
                    _switch(engine, sid, op, pick, step)
    return buffer.getvalue().splitlines()


def _switch(engine: ModeEngine, sid: str, op: str, pick: int, step: int) -> None:
    switch = engine.spec.switch_from(engine.get(sid).state)
    if switch is None:
        return
    option = switch.options[pick % len(switch.options)]
    offer = offer_now(engine, sid, f"t{step}")
    settle_now(engine, offer, option.option_id if op == "switch" else None)


FIELDS = ["event", "session_id", "seq", "from_mode", "to_mode", "origin", "reason",
          "option_id", "proposed_in", "tool_call_id", "request_id", "spec", "spec_hash",
          "prev", "digest", "timestamp", "session_prev", "cwd", "protocol", "gseq", "level",
          "host", "kind", "tool", "rule", "decision", "outcome", "mode", "mode_seq"]  # fmt: skip
SAMPLES: list[object] = [
    None, 0, 1, 2, 3, -1, True, 1.5, "", [], {}, "a", "b", "default", "plan", "ask", "code",
    "architect", "new", "set_mode", "set_config_option", "switch_mode", "restore",
    "modefsm.mode_changed", "modefsm.session_created", "modefsm.change_rejected",
]  # fmt: skip
VALUES: st.SearchStrategy[object] = st.one_of(
    st.sampled_from(
        [
            None,
            0,
            1,
            2,
            3,
            -1,
            True,
            1.5,
            "",
            [],
            {},
            "a",
            "b",
            "default",
            "plan",
            "ask",
            "code",
            "architect",
            "new",
            "set_mode",
            "set_config_option",
            "switch_mode",
            "restore",
            "modefsm.mode_changed",
            "modefsm.session_created",
            "modefsm.change_rejected",
            "modefsm.tool_decided",
            "allow",
            "deny",
            "granted",
        ]
    ),
    st.integers(-(2**64), 2**64),
    st.text(max_size=4),
)
Mutation = tuple[str, int, str, object]

mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "set", "drop", "delete", "repeat", "swap", "torn", "splice"]),
        st.integers(0, 10_000),
        st.sampled_from(FIELDS),
        VALUES,
    ),
    max_size=4,
)


def _edit(line: bytes, kind: str, key: str, value: object) -> bytes:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if not isinstance(data, dict):
        return line
    if kind == "set":
        data[key] = value
    else:
        data.pop(key, None)
    return json.dumps(data, separators=(",", ":")).encode()  # any integer, as a writer might


def forge(lines: list[bytes]) -> list[bytes]:
    """Every record's ``prev``/``digest`` recomputed, as a forger would; other lines kept."""
    out, head = [], None
    for line in lines:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "digest" in data:
            data["prev"] = head
            data.pop("digest")
            data["digest"] = head = record_digest(data)
            out.append(orjson.dumps(data))
        else:
            out.append(line)
    return out


def mutate(lines: list[bytes], changes: list[Mutation]) -> list[bytes]:
    lines = list(lines)
    donors = [line for log in GOLDEN.values() for line in log]
    for kind, where, key, value in changes:
        if not lines:
            break
        i = where % len(lines)
        if kind in {"set", "drop"}:
            lines[i] = _edit(lines[i], kind, key, value)
        elif kind == "delete":
            del lines[i]
        elif kind == "repeat":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = (i + 1) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "torn":
            lines[i] = lines[i][: len(lines[i]) // 2]
        else:
            lines.insert(i, donors[where % len(donors)])
    return lines


def by_feed(data: bytes, *, verify: bool, session_id: str | None) -> ReplayReport:
    """The report of ``feed`` alone: every record parsed into its model first."""
    replayer = Replayer(SPECS, verify=verify, session_id=session_id, keep_timeline=False)
    stdin = io.BufferedReader(io.BytesIO(data))
    for item in read_log(["-"], check_digests=verify, stdin=stdin, decisions=True, headers=True):
        replayer.feed(item)
    return replayer.report()


def by_fields(data: bytes, *, verify: bool, session_id: str | None) -> ReplayReport:
    """The report of ``take`` checking every line field by field (a host's key in each)."""
    replayer = Replayer(SPECS, verify=verify, session_id=session_id, keep_timeline=False)
    replayer._decode = never_decoded  # the fast path's second way, alone
    stdin = io.BufferedReader(io.BytesIO(data))
    items = read_log(
        ["-"], check_digests=verify, stdin=stdin, take=replayer.take, decisions=True, headers=True
    )
    for item in items:
        replayer.feed(item)
    return replayer.report()


def never_decoded(line: bytes) -> object:
    raise msgspec.ValidationError(line[:10].decode(errors="replace"))


def assert_same(lines: list[bytes]) -> int:
    """Replay *lines* three ways; return how many lines there are.

    ``replay`` (the fast path, each line decoded as a whole first), the fast path checking
    each line field by field, and ``feed`` alone.
    """
    data = b"".join(line + b"\n" for line in lines)
    for verify in (False, True):
        for session_id in (None, "a"):
            stdin = io.BufferedReader(io.BytesIO(data))
            fast = replay(
                ["-"], SPECS, verify=verify, session_id=session_id, keep_timeline=False, stdin=stdin
            )
            slow = by_feed(data, verify=verify, session_id=session_id)
            assert fast == slow, (verify, session_id)
            assert by_fields(data, verify=verify, session_id=session_id) == slow, (verify, "fields")
    return len(lines)


@DIFFERENTIAL
@given(
    spec=st.sampled_from(SPECS),
    script=ops,
    changes=mutations,
    forged=st.booleans(),
    host=st.booleans(),
)
def test_engine_logs_mutated_report_the_same_both_ways(spec, script, changes, forged, host):
    lines = run_engine(spec, script)
    if host:
        lines.insert(len(lines) // 2, HOST_JSON)
    lines = mutate(lines, changes)
    assert_same(forge(lines) if forged else lines)


@DIFFERENTIAL
@given(
    name=st.sampled_from(sorted(GOLDEN)),
    changes=mutations,
    forged=st.booleans(),
)
def test_golden_logs_mutated_report_the_same_both_ways(name, changes, forged):
    lines = mutate(GOLDEN[name], changes)
    assert_same(forge(lines) if forged else lines)


def test_the_fast_path_takes_most_of_an_engine_log():
    """The comparison is worth something: take() does apply the records it can."""
    script: list[Op] = [("new", 0, 0, 0), ("new", 1, 0, 0)]
    script += [("change", i % 2, i, i % 2) for i in range(1, 9)]
    lines = run_engine(preset("seed"), script)
    taken: list[int] = []
    replayer = Replayer(SPECS, verify=True)

    def take(path: str, line: int, lines: list[bytes], start: int, offset: int) -> int:
        stop = replayer.take(path, line, lines, start, offset)
        taken.extend(range(line, line + stop - start))
        return stop

    stdin = io.BufferedReader(io.BytesIO(b"".join(x + b"\n" for x in lines)))
    for item in read_log(["-"], check_digests=True, stdin=stdin, take=take, headers=True):
        replayer.feed(item)
    assert replayer.report().violations == ()
    assert len(lines) == 11  # the header, then 10 records
    assert taken == list(range(2, 12))  # the header anchors the chain through feed


def test_the_fast_path_goes_on_after_each_decision():
    """A decision line is left to ``feed`` (its ledger, the chain through it), and the
    fast path takes the records after it again: the chain head the decision moved."""
    script: list[Op] = [("new", 0, 0, 0), ("new", 1, 0, 0)]
    for i in range(1, 5):
        script += [("change", i % 2, i, i % 2), ("decide", i % 2, i, 0)]
    lines = run_engine(preset("seed"), script)
    events = [orjson.loads(line)["event"] for line in lines]
    decided = [n for n, event in enumerate(events, 1) if event == "modefsm.tool_decided"]
    taken: list[int] = []
    replayer = Replayer(SPECS, verify=True)

    def take(path: str, line: int, lines: list[bytes], start: int, offset: int) -> int:
        stop = replayer.take(path, line, lines, start, offset)
        taken.extend(range(line, line + stop - start))
        return stop

    stdin = io.BufferedReader(io.BytesIO(b"".join(x + b"\n" for x in lines)))
    items = read_log(
        ["-"], check_digests=True, stdin=stdin, take=take, decisions=True, headers=True
    )
    for item in items:
        replayer.feed(item)
    report = replayer.report()
    assert report.violations == ()
    assert report.chain is not None
    assert (report.chain.verified, report.chain.unverifiable) == (len(lines) - 1, 0)  # no header
    assert len(decided) == 4
    assert taken == [n for n in range(2, len(lines) + 1) if n not in decided]
    assert sum(t.allow + t.ask + t.deny for s in report.sessions for t in s.tools) == 4
    assert_same(lines)


def test_a_torn_record_before_a_declined_one_reads_the_same_both_ways():
    """Found by the tests above: the reader's fast path resolved a torn record with the
    ``prev``/``digest`` of the next line even when that line was not a usable record."""
    lines = mutate(
        GOLDEN["illegal_edge"], [("set", 2, "session_id", None), ("torn", 1, "event", None)]
    )
    assert assert_same(lines) == len(GOLDEN["illegal_edge"])
    report = replay(["-"], SPECS, stdin=io.BufferedReader(io.BytesIO(b"\n".join(lines) + b"\n")))
    torn = [v.message for v in report.violations if v.kind == "torn"]
    assert torn == [
        (
            "a record cut short inside the log (no chained record follows it; the log cannot "
            "tell whether its change was acknowledged), skipped"
        )
    ]


def test_the_scripts_write_every_kind_of_record():
    """The random engine runs reach switches, rejections, restores and tool call decisions,
    not only changes."""
    script: list[Op] = [
        ("new", 0, 0, 0),
        ("change", 0, 2, 0),  # default -> plan
        ("change", 0, 1, 0),  # plan -> acceptEdits: not allowed
        ("reject", 0, 3, 0),  # keep_planning
        ("switch", 0, 0, 0),  # exit_plan_accept_edits
        ("change", 0, 3, 1),  # -> bypassPermissions
        ("restore", 0, 3, 1),  # falls back to default
        ("decide", 0, 1, 0),  # an edit in default: asked, allowed always
    ]
    lines = run_engine(preset("permission"), script)
    kinds = [(r["event"].rsplit(".")[-1], r.get("origin")) for r in map(orjson.loads, lines)]
    assert kinds == [
        ("spec", None),
        ("session_created", "new"),
        ("mode_changed", "set_mode"),
        ("change_rejected", "set_mode"),
        ("change_rejected", "switch_mode"),
        ("mode_changed", "switch_mode"),
        ("mode_changed", "set_config_option"),
        ("mode_changed", "restore"),
        ("tool_decided", None),
    ]
    assert orjson.loads(lines[-1])["outcome"] == "allow_always"
    assert_same(lines)
