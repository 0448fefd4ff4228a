"""Integers out of range in a log line: reported as bad records, never a crash."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.cli import main
from modefsm.log._reader import LogProblem, read_log
from modefsm.log._records import record_digest
from modefsm.store._restore import RestoreIndex

from .harness import raw_serve

pytestmark = [pytest.mark.reliability]

LIMIT = "less than or equal to 9223372036854775807"
CASES = {
    "seq-2^63": ("seq", 1 << 63, f"seq: Input should be {LIMIT} (got 9223372036854775808)"),
    "seq-0": ("seq", 0, "seq: Input should be greater than or equal to 1 (got 0)"),
    "seq-negative": ("seq", -5, "seq: Input should be greater than or equal to 1 (got -5)"),
    "seq-2^64": (
        "seq",
        1 << 64,
        (
            "seq: Unable to parse input string as an integer, exceeded maximum size "
            "(got 1.8446744073709552e+19)"
        ),
    ),
    "request_id-2^64": (
        "request_id",
        1 << 64,
        (
            "request_id.str: Input should be a valid string (got 1.8446744073709552e+19); "
            "request_id.constrained-int: Unable to parse input string as an integer, exceeded "
            "maximum size (got 1.8446744073709552e+19)"
        ),
    ),
}


def a_log(path: Path, field: str, value: int) -> None:
    """Header, s1 created in ask, then a re-chained change to code whose *field* is *value*."""
    log = TransitionLog.to_file(path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session("s1")
    engine.change("s1", "code", "set_mode")
    log.close()
    header, first, second = path.read_bytes().splitlines()
    assert orjson.loads(header)["event"] == "modefsm.spec"
    data = orjson.loads(second)
    del data["digest"], data["level"]
    text = orjson.dumps(data).replace(b'"seq":2', b'"seq":' + str(value).encode())
    if field == "request_id":
        text = orjson.dumps(data).replace(
            b'"seq":2', b'"seq":2,"request_id":' + str(value).encode()
        )
    data = orjson.loads(text)
    if isinstance(data.get(field), int):
        data["digest"] = record_digest(data)
        text = orjson.dumps(data)
    path.write_bytes(header + b"\n" + first + b"\n" + text + b"\n")


@pytest.mark.parametrize("case", CASES)
def test_reported_as_a_bad_record(tmp_path: Path, case: str):
    field, value, message = CASES[case]
    path = tmp_path / "log.jsonl"
    a_log(path, field, value)
    problems = [item for item in read_log([path]) if isinstance(item, LogProblem)]
    assert [(p.kind, p.message) for p in problems] == [
        (
            "not_a_record",
            f"a modefsm.mode_changed record that does not fit the record model: {message}",
        )
    ]
    index = tmp_path / "log.index"
    assert RestoreIndex.rebuild(index, [path]) == 1
    restored = RestoreIndex(index)
    assert restored.restore_point("s1") == ("s1", "ask", 1, None, None, None)
    restored.close()


def test_rebuild_index_and_replay_do_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "log.jsonl"
    a_log(path, "seq", 1 << 63)
    index = tmp_path / "x.index"
    assert main(["replay", str(path), "--rebuild-index", str(index)]) == 0
    assert capsys.readouterr() == (f"rebuilt {index}: 1 session from 1 log(s)\n", "")
    assert main(["replay", str(path), "--verify", "--summary"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "RESULT  1 violation"


async def test_serve_starts_and_restores_the_last_good_record(tmp_path: Path):
    path = tmp_path / "log.jsonl"
    a_log(path, "seq", 1 << 63)
    async with raw_serve(path) as peer:
        assert await peer.current_mode("s1") == "ask"
        assert "result" in await peer.set_mode("s1", "architect")
    assert orjson.loads(path.read_bytes().splitlines()[-1])["seq"] == 2
