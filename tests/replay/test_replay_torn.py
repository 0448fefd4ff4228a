"""A record cut short inside a log: never clean; what the digest chain proves about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.cli import main
from modefsm.replay import replay

SEED = preset("seed")

NEVER = (
    "a record cut short inside the log (the next record continues the digest chain from "
    "the record before it: its writer never counted it, so its change was never "
    "acknowledged), skipped"
)
COUNTED = (
    "a record cut short inside the log (the next record continues the digest chain from "
    "it: its writer counted it as written, so its change may have been acknowledged, and "
    "its record is lost), skipped"
)
UNKNOWN = (
    "a record cut short inside the log (the next record continues neither it nor the "
    "record before it; the log cannot tell whether its change was acknowledged), skipped"
)
LAST = (
    "a record cut short inside the log (no chained record follows it; the log cannot "
    "tell whether its change was acknowledged), skipped"
)


def write(path: Path, modes: list[str]) -> None:
    log = TransitionLog.to_file(path)
    engine = ModeEngine(SEED, store=LogStore(log))
    if not path.stat().st_size:
        engine.new_session("s1")
    else:
        engine.restore_session("s1", "code", 3)
    for mode in modes:
        engine.change("s1", mode, "set_mode")
    log.close()


def violations(path: Path, *, verify: bool) -> list[tuple[str, str, str | None, int | None]]:
    report = replay([path], verify=verify)
    return [(str(v.location), v.kind, v.session_id, v.seq) for v in report.violations] + [
        ("", v.message, None, None) for v in report.violations if v.kind == "torn"
    ]


def test_a_crash_tear_repaired_at_restart_is_proven_never_acknowledged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "log.jsonl"
    write(path, ["architect", "code", "ask"])
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 80])  # `ask` torn by a crash
    write(path, ["architect"])  # the restart ends the torn line, then goes on from `code`
    for verify in (False, True):
        assert violations(path, verify=verify) == [
            (f"{path}:5", "torn", "s1", 4),  # line 1: the header
            ("", NEVER, None, None),
        ]
    assert main(["replay", str(path), "--verify", "--summary"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "RESULT  1 violation"


@pytest.mark.parametrize(
    ("keep", "message", "chain"),
    [(-40, COUNTED, 1), (-200, UNKNOWN, 1)],
    ids=["digest-kept", "digest-lost"],
)
def test_a_record_cut_short_that_the_next_continues_from(
    tmp_path: Path, keep: int, message: str, chain: int
):
    """What a writer that ignored short writes left: the next record chained to the torn one."""
    path = tmp_path / "log.jsonl"
    write(path, ["architect", "code", "ask"])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3][:keep] + b"\n"  # `code` cut short; `ask` follows it in the chain
    path.write_bytes(b"".join(lines))
    assert violations(path, verify=False) == [
        (f"{path}:4", "torn", "s1", 3),
        (f"{path}:5", "gap", "s1", 4),
        (f"{path}:5", "from_mode", "s1", 4),
        ("", message, None, None),
    ]
    report = replay([path], verify=True)
    assert [v.kind for v in report.violations].count("chain") == chain


def test_a_torn_record_followed_by_nothing_is_unknown(tmp_path: Path):
    path = tmp_path / "log.jsonl"
    write(path, ["architect"])
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + lines[2][:80] + b"\n" + b'{"event":"host line"}\n')
    assert violations(path, verify=True) == [
        (f"{path}:3", "torn", "s1", 2),
        ("", LAST, None, None),
    ]


def test_a_torn_last_line_stays_a_note(tmp_path: Path):
    path = tmp_path / "log.jsonl"
    write(path, ["architect"])
    path.write_bytes(path.read_bytes()[:-30])
    report = replay([path], verify=True)
    assert (report.violations, [n.kind for n in report.notes], report.exit_status) == (
        (),
        ["torn"],
        0,
    )


def test_a_torn_last_line_of_a_file_that_another_follows_is_inside(tmp_path: Path):
    first, second = tmp_path / "log.jsonl.1", tmp_path / "log.jsonl"
    write(first, ["architect", "code"])
    data = first.read_bytes()
    first.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 80])  # `code` torn, unrepaired
    write(second, [])  # a fresh log after a rotation: its chain starts anew
    report = replay([first, second], verify=True)
    torn = [(str(v.location), v.kind, v.message) for v in report.violations if v.kind == "torn"]
    assert torn == [(f"{first}:4", "torn", UNKNOWN)]
    alone = replay([first], verify=True)
    assert ([n.kind for n in alone.notes], alone.violations) == (["torn"], ())
