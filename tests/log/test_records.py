"""The transition log's digest chain: what TransitionLog writes and how a reopened log goes on."""

from __future__ import annotations

import io

import orjson
import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.errors import LogError
from modefsm.log._records import RECORD_EVENTS, canonical_record, record_digest


def _lines(data: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in data.splitlines()]


def _engine(log: TransitionLog) -> ModeEngine:
    return ModeEngine(preset("seed"), store=LogStore(log))


class TestChain:
    """Every record carries the digest of the one before it and its own."""

    def test_the_header_of_a_fresh_log_has_no_prev_and_the_first_record_follows_it(self):
        buffer = io.BytesIO()
        _engine(TransitionLog.to_stream(buffer)).new_session("s1")
        header, record = _lines(buffer.getvalue())
        assert (header["event"], header["prev"], record["prev"]) == (
            "modefsm.spec",
            None,
            header["digest"],
        )

    def test_each_prev_is_the_digest_before_it(self):
        buffer = io.BytesIO()
        engine = _engine(TransitionLog.to_stream(buffer))
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        engine.reject_switch("s1", "cancelled", tool_call_id="t1")
        lines = _lines(buffer.getvalue())
        assert [None, *(x["digest"] for x in lines[:3])] == [x["prev"] for x in lines]

    def test_digest_is_sha256_of_the_canonical_record(self):
        buffer = io.BytesIO()
        _engine(TransitionLog.to_stream(buffer)).new_session("s1")
        for line in _lines(buffer.getvalue()):  # the header, then the record
            assert line["digest"] == record_digest(line)
            assert len(line["digest"]) == 64

    def test_canonical_record_leaves_out_level_digest_and_host_keys(self):
        data = {"event": "modefsm.mode_changed", "seq": 2, "level": "info", "digest": "x"}
        assert b'{"event":"modefsm.mode_changed","seq":2}' == canonical_record(
            {**data, "host_pid": 7}
        )

    def test_diagnostics_are_not_chained(self):
        buffer = io.BytesIO()
        log = TransitionLog.to_stream(buffer, head="abc")
        log.write("modefsm.notify_failed", {"session_id": "s1", "error": "boom"})
        (line,) = _lines(buffer.getvalue())
        assert ("abc", "prev" in line, "digest" in line) == (log.head, False, False)
        assert "modefsm.notify_failed" not in RECORD_EVENTS

    def test_to_stream_continues_a_given_head(self):
        buffer = io.BytesIO()
        _engine(TransitionLog.to_stream(buffer, head="f" * 64)).new_session("s1")
        assert "f" * 64 == _lines(buffer.getvalue())[0]["prev"]

    def test_head_is_the_last_digest_written(self):
        buffer = io.BytesIO()
        log = TransitionLog.to_stream(buffer)
        _engine(log).new_session("s1")
        assert _lines(buffer.getvalue())[-1]["digest"] == log.head


class TestReopen:
    """A log file opened again continues the chain of its last record."""

    def test_restart_continues_from_the_last_record(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        _engine(log).new_session("s1")
        log.close()
        with path.open("ab") as file:
            file.write(b'{"event":"host line"}\n')
        log = TransitionLog.to_file(path)
        _engine(log).new_session("s2")
        log.close()
        lines = [x for x in _lines(path.read_bytes()) if "digest" in x]
        assert lines[0]["digest"] == lines[1]["prev"]

    def test_torn_last_line_is_ended_before_the_next_record(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        path.write_bytes(b'{"event":"modefsm.mode_changed","seq":')
        log = TransitionLog.to_file(path)
        _engine(log).new_session("s1")
        log.close()
        lines = path.read_bytes().split(b"\n")
        repair = orjson.loads(lines[1])
        del repair["timestamp"]
        assert (
            b'{"event":"modefsm.mode_changed","seq":',
            {"event": "modefsm.log_repaired", "torn_bytes": 38, "level": "warning"},
            None,
        ) == (lines[0], repair, orjson.loads(lines[2])["prev"])

    def test_reopen_after_rotation_continues_the_chain_in_the_new_file(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        engine = _engine(log)
        engine.new_session("s1")
        path.rename(tmp_path / "modes.jsonl.1")
        log.reopen()
        engine.change("s1", "code", "set_mode")
        log.close()
        old = _lines((tmp_path / "modes.jsonl.1").read_bytes())
        new = _lines(path.read_bytes())
        assert [x["event"] for x in old + new] == [
            "modefsm.spec",
            "modefsm.session_created",
            "modefsm.spec",  # the new file names its spec too
            "modefsm.mode_changed",
        ]
        assert (old[-1]["digest"], new[0]["definition"]) == (new[0]["prev"], old[0]["definition"])

    def test_only_file_logs_reopen(self):
        with pytest.raises(LogError, match="only a log opened with to_file can be reopened"):
            TransitionLog.to_stream(io.BytesIO()).reopen()

    def test_unopenable_file_is_a_log_error(self, tmp_path):
        with pytest.raises(LogError, match="cannot open the transition log"):
            TransitionLog.to_file(tmp_path / "missing" / "modes.jsonl")

    def test_fsync_log_chains_too(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path, fsync=True)
        engine = _engine(log)
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        log.close()
        lines = _lines(path.read_bytes())
        assert lines[0]["digest"] == lines[1]["prev"]


class TestChainHeadAfterLongLines:
    """A restart finds the last record's digest past long lines, in bounded memory."""

    @pytest.mark.parametrize(
        "after",
        [
            b"x" * 3_000_000 + b"\n",  # a host line longer than any record
            b'{"event":"host"}\n' * 100_000,  # many short host lines
            b"\n".join([b"y" * 70_000] * 40) + b"\n",  # lines across chunk boundaries
            b"z" * 2_000_000,  # a torn last line, no newline
        ],
        ids=["long-line", "many-lines", "chunk-edges", "torn"],
    )
    def test_the_chain_continues_from_the_last_record(self, tmp_path, after):
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        engine = _engine(log)
        engine.new_session("s1")
        engine.change("s1", "code", "set_mode")
        head = log.head
        log.close()
        with path.open("ab") as file:
            file.write(after)
        log = TransitionLog.to_file(path)
        assert log.head == head
        _engine(log).new_session("s2")
        log.close()
        assert orjson.loads(path.read_bytes().splitlines()[-1])["prev"] == head

    def test_a_record_longer_than_the_line_limit_is_not_the_head(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        log = TransitionLog.to_file(path)
        _engine(log).new_session("s1")
        head = log.head
        log.close()
        record = {"event": "modefsm.mode_changed", "digest": "f" * 64, "pad": "p" * (1 << 20)}
        with path.open("ab") as file:
            file.write(orjson.dumps(record) + b"\n")
        log = TransitionLog.to_file(path)
        assert log.head == head  # readers skip such a line; so does the writer
        log.close()


class TestDigestKeys:
    """The digest covers every field of the record models but ``level`` and ``digest``."""

    def test_the_record_keys_are_the_models_fields(self):
        from modefsm.log import DecisionRecord, SpecRecord, TransitionRecord
        from modefsm.log._records import _DECISION_KEYS, _DIGEST_KEYS, _SPEC_KEYS

        assert (_DIGEST_KEYS, _DECISION_KEYS, _SPEC_KEYS) == (
            frozenset(TransitionRecord.model_fields) - {"level", "digest"},
            frozenset(DecisionRecord.model_fields) - {"level", "digest"},
            frozenset(SpecRecord.model_fields) - {"level", "digest"},
        )
