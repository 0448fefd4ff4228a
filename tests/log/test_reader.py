"""The streaming reader: files in order, gzip, stdin, host lines, and every kind of bad line."""

from __future__ import annotations

import gzip
import io

import orjson
import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.log._reader import MAX_LINE, Location, LogEntry, LogProblem, SpecEntry, read_log


def _log(path, *sessions: str) -> bytes:
    """The records of *sessions*, without the file's header (line 1: the first record)."""
    log = TransitionLog.to_file(path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    for session_id in sessions:
        engine.new_session(session_id)
    log.close()
    header, _, records = path.read_bytes().partition(b"\n")
    assert not sessions or orjson.loads(header)["event"] == "modefsm.spec"
    path.write_bytes(records)
    return bytes(records)


def _problems(items) -> list[LogProblem]:
    listed = list(items)
    problems = [i for i in listed if isinstance(i, LogProblem)]
    assert len(listed) == len(problems)
    return problems


def _summary(items) -> list[tuple[str, str]]:
    """Each item as (location, session id or problem kind)."""
    return [
        (str(i.location), i.record.session_id if isinstance(i, LogEntry) else i.kind) for i in items
    ]


class TestHeaders:
    """A file's header (``modefsm.spec``): yielded when asked for, else skipped."""

    def test_the_header_is_line_1_and_yielded_with_headers(self, tmp_path):
        path = tmp_path / "a.jsonl"
        log = TransitionLog.to_file(path)
        ModeEngine(preset("seed"), store=LogStore(log)).new_session("s1")
        log.close()
        items = list(read_log([path], check_digests=True, headers=True))
        assert [type(i) for i in items] == [SpecEntry, LogEntry]
        header = items[0]
        assert isinstance(header, SpecEntry)
        assert (str(header.location), header.intact, header.record.spec) == (
            f"{path}:1",
            True,
            "seed",
        )
        assert (header.record.spec_hash, header.record.definition) == (
            preset("seed").content_hash,
            preset("seed").definition,
        )
        assert items[1].record.prev == header.record.digest
        assert _summary(read_log([path])) == [(f"{path}:2", "s1")]

    def test_a_header_that_does_not_fit_is_a_bad_record(self, tmp_path):
        path = tmp_path / "a.jsonl"
        path.write_bytes(b'{"event":"modefsm.spec","spec":"x","timestamp":"t"}\n')
        assert [(p.kind, p.message) for p in _problems(read_log([path], headers=True))] == [
            (
                "not_a_record",
                (
                    "a modefsm.spec header that does not fit the header model: "
                    "spec_hash: Field required"
                ),
            ),
        ]


class TestInputs:
    """Several files in order, gzip, standard input."""

    def test_files_are_read_in_the_order_given(self, tmp_path):
        _log(tmp_path / "a.jsonl", "s1", "s2")
        _log(tmp_path / "b.jsonl", "s3")
        paths = [tmp_path / "b.jsonl", tmp_path / "a.jsonl"]
        assert [
            (f"{tmp_path}/b.jsonl:1", "s3"),
            (f"{tmp_path}/a.jsonl:1", "s1"),
            (f"{tmp_path}/a.jsonl:2", "s2"),
        ] == _summary(read_log(paths))

    def test_gzip_is_recognised_by_its_first_bytes(self, tmp_path):
        data = _log(tmp_path / "a.jsonl", "s1")
        (tmp_path / "a.log").write_bytes(gzip.compress(data))
        assert [(f"{tmp_path}/a.log:1", "s1")] == _summary(read_log([tmp_path / "a.log"]))

    def test_truncated_gzip_is_torn_not_fatal(self, tmp_path):
        data = _log(tmp_path / "a.jsonl", "s1", "s2", "s3")
        (tmp_path / "a.gz").write_bytes(gzip.compress(data)[:-12])
        *_, problem = read_log([tmp_path / "a.gz"])
        assert isinstance(problem, LogProblem)
        assert ("torn", False) == (problem.kind, problem.fatal)
        assert "the gzip data ends early" in problem.message

    def test_dash_reads_standard_input(self, tmp_path):
        data = _log(tmp_path / "a.jsonl", "s1")
        stdin = io.BufferedReader(io.BytesIO(data))
        assert [("-:1", "s1")] == _summary(read_log(["-"], stdin=stdin))

    def test_start_skips_to_an_offset(self, tmp_path):
        data = _log(tmp_path / "a.jsonl", "s1", "s2")
        start = data.index(b"\n") + 1
        entries = [
            e for e in read_log([tmp_path / "a.jsonl"], start=start) if isinstance(e, LogEntry)
        ]
        assert (["s2"], [len(data)]) == (
            [e.record.session_id for e in entries],
            [e.end for e in entries],
        )

    def test_progress_reports_bytes_read(self, tmp_path):
        path = tmp_path / "big.jsonl"
        path.write_bytes(b'{"event":"host"}\n' * 200_000)
        seen: list[int] = []
        list(read_log([path], progress=seen.append))
        assert seen == sorted(seen)
        assert 3 == len(seen)


class TestLines:
    """Which lines are records, which are skipped, which are reported."""

    def test_host_lines_are_skipped_silently(self, tmp_path):
        path = tmp_path / "mixed.log"
        records = _log(tmp_path / "a.jsonl", "s1", "s2")
        path.write_bytes(
            b"plain text from the host, mentioning modefsm.cli._serve\n"
            b'{"event":"request","path":"/"}\n'
            b'["modefsm.mode_changed"]\n'
            b'{"event":"modefsm.notify_failed","session_id":"s1"}\n' + records
        )
        assert [(f"{path}:5", "s1"), (f"{path}:6", "s2")] == _summary(read_log([path]))

    @pytest.mark.parametrize(
        ("text", "sessions", "message"),
        [
            (
                [b"# A Markdown file\n", b"quoting a record:\n", b"\n"],
                ["s1"],
                "2 of its 3 lines are not JSON objects, more than its 1 modefsm record",
            ),
            (
                [b"INFO one\n", b"INFO two\n", b"INFO three\n"],
                ["s1", "s2"],
                "3 of its 5 lines are not JSON objects, more than its 2 modefsm records",
            ),
            (
                [b"[1, 2]\n", b"plain\n"],
                [],
                "2 of its 2 lines are not JSON objects, more than its 0 modefsm records",
            ),
        ],
        ids=["markdown-quoting-a-record", "host-text-log", "no-records"],
    )
    def test_more_text_lines_than_records_is_not_a_log(self, tmp_path, text, sessions, message):
        path = tmp_path / "notes.md"
        records = _log(tmp_path / "a.jsonl", *sessions).splitlines(keepends=True)
        path.write_bytes(b"".join([*text[:2], *records, *text[2:]]))
        items = list(read_log([path]))
        lines = [(f"{path}:{3 + n}", s) for n, s in enumerate(sessions)]
        assert [*lines, (str(path), "not_a_log")] == _summary(items)
        problem = items[-1]
        assert isinstance(problem, LogProblem)
        assert (True, f"{message}: not a transition log") == (problem.fatal, problem.message)

    def test_torn_last_line_is_reported_and_skipped(self, tmp_path):
        path = tmp_path / "a.jsonl"
        data = _log(path, "s1", "s2")
        path.write_bytes(data[:-40])
        assert [(f"{path}:1", "s1"), (f"{path}:2", "torn")] == _summary(read_log([path]))

    def test_record_cut_short_inside_the_file_is_torn(self, tmp_path):
        path = tmp_path / "a.jsonl"
        lines = _log(path, "s1", "s2").splitlines()
        path.write_bytes(lines[0][:-1] + b"\n" + lines[1] + b"\n")
        items = list(read_log([path]))
        assert [(f"{path}:1", "torn"), (f"{path}:2", "s2")] == _summary(items)
        assert "a record cut short" in _problems(items[:1])[0].message

    def test_record_that_is_not_json_is_a_bad_record(self, tmp_path):
        path = tmp_path / "a.jsonl"
        data = _log(path, "s1").replace(b'"seq":1', b'"seq":1,,')
        path.write_bytes(data)
        (problem,) = _problems(read_log([path]))
        assert ("not_json", True) == (problem.kind, problem.bad_record)
        assert problem.message.startswith("a modefsm record that is not JSON: ")

    def test_record_of_the_wrong_shape_names_the_field(self, tmp_path):
        path = tmp_path / "a.jsonl"
        data = (
            _log(path, "s1")
            .replace(b'"seq":1', b'"seq":"one"')
            .replace(b'"origin":"new"', b'"origin":"telepathy"')
        )
        path.write_bytes(data)
        (problem,) = _problems(read_log([path]))
        assert (
            LogProblem(
                Location(str(path), 1),
                "not_a_record",
                "a modefsm.session_created record that does not fit the record model: "
                "seq: Input should be a valid integer, unable to parse string as an integer "
                "(got 'one'); origin: Input should be 'new', 'set_mode', 'set_config_option', "
                "'switch_mode' or 'restore' (got 'telepathy')",
                "s1",
                None,
            )
            == problem
        )

    def test_binary_first_line_makes_the_file_unusable(self, tmp_path):
        path = tmp_path / "garbage.bin"
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
        (problem,) = _problems(read_log([path]))
        assert (f"{path}:1", "not_text", True) == (
            str(problem.location),
            problem.kind,
            problem.fatal,
        )

    def test_binary_line_among_text_is_skipped_with_a_note(self, tmp_path):
        path = tmp_path / "a.jsonl"
        data = _log(path, "s1")
        path.write_bytes(data + b"\x00\x00\x00\x00\n" + data)
        assert [(f"{path}:1", "s1"), (f"{path}:2", "binary"), (f"{path}:3", "s1")] == (
            _summary(read_log([path]))
        )

    def test_overlong_line_is_skipped_in_bounded_memory(self, tmp_path):
        path = tmp_path / "a.jsonl"
        data = _log(path, "s1")
        path.write_bytes(b"x" * (3 * MAX_LINE) + b"\n" + data)
        assert [(f"{path}:1", "too_long"), (f"{path}:2", "s1")] == _summary(read_log([path]))

    def test_empty_file_is_noted(self, tmp_path):
        path = tmp_path / "empty.log"
        path.write_bytes(b"")
        assert [(str(path), "empty")] == _summary(read_log([path]))

    def test_file_without_records_is_noted(self, tmp_path):
        path = tmp_path / "host.log"
        path.write_bytes(b'{"event":"one"}\n{"event":"two"}\n')
        (problem,) = _problems(read_log([path]))
        assert ("no_records", "2 lines, none a modefsm record") == (problem.kind, problem.message)

    def test_missing_file_is_unreadable(self, tmp_path):
        (problem,) = _problems(read_log([tmp_path / "nope.log"]))
        assert isinstance(problem, LogProblem)
        assert ("unreadable", "cannot read: No such file or directory", True) == (
            problem.kind,
            problem.message,
            problem.fatal,
        )

    @pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
    def test_intact_says_whether_the_digest_matches(self, tmp_path, check):
        path = tmp_path / "a.jsonl"
        data = _log(path, "s1", "s2")
        path.write_bytes(data.replace(b'"session_id":"s2"', b'"session_id":"s9"'))
        expected = [True, False] if check else [None, None]
        entries = [e for e in read_log([path], check_digests=check) if isinstance(e, LogEntry)]
        assert expected == [e.intact for e in entries]
