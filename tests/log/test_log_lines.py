"""Reading back the line that ends at a byte offset of a log (the writer and the index share it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from modefsm import LogStore, ModeEngine, preset
from modefsm.errors import LogError
from modefsm.log import MAX_LINE
from modefsm.log._writer import _line_ending_at, _line_start
from modefsm.store import EVENT_INDEX_MISMATCH, RestoreIndex, RestorePoint


@pytest.fixture
def fd_of(tmp_path):
    opened: list[int] = []

    def open_with(data: bytes) -> int:
        path = tmp_path / "log.jsonl"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        opened.append(fd)
        return fd

    yield open_with
    for fd in opened:
        os.close(fd)


class TestLineEndingAt:
    def test_each_line_is_read_back_from_its_end(self, fd_of):
        fd = fd_of(b"first\nsecond line\n\nlast\n")
        assert [_line_ending_at(fd, end) for end in (6, 18, 19, 24)] == [
            b"first",
            b"second line",
            b"",
            b"last",
        ]

    def test_an_offset_that_ends_no_line_reads_nothing(self, fd_of):
        fd = fd_of(b"first\nsecond\n")
        assert [_line_ending_at(fd, end) for end in (0, 3, 7, 12, 14, 99)] == [None] * 6

    def test_a_line_longer_than_a_chunk_is_read_whole(self, fd_of):
        long = b"x" * (200 * 1024)
        fd = fd_of(b"a\n" + long + b"\nb\n")
        assert _line_ending_at(fd, 2 + len(long) + 1) == long

    def test_a_line_over_max_line_is_not_read(self, fd_of):
        fd = fd_of(b"a\n" + b"y" * (MAX_LINE + 1) + b"\n")
        assert _line_ending_at(fd, 2 + MAX_LINE + 2) is None
        fd = fd_of(b"a\n" + b"y" * MAX_LINE + b"\n")
        assert _line_ending_at(fd, 2 + MAX_LINE + 1) == b"y" * MAX_LINE


class TestLineStart:
    @pytest.mark.parametrize(
        ("end", "start"), [(0, 0), (3, 0), (4, 0), (5, 5), (6, 5), (8, 5), (9, 9), (12, 9)]
    )
    def test_start_is_just_past_the_last_newline_before_end(self, fd_of, end, start):
        fd = fd_of(b"abcd\nefg\nhij")
        assert _line_start(fd, end) == start

    def test_a_limit_stops_the_scan(self, fd_of):
        fd = fd_of(b"a\n" + b"z" * 300_000)
        assert _line_start(fd, 2 + 300_000) == 2
        assert _line_start(fd, 2 + 300_000, limit=300_000) == 2
        assert _line_start(fd, 2 + 300_000, limit=299_999) is None

    def test_a_line_of_exactly_the_limit_or_one_chunk_is_found(self, fd_of):
        fd = fd_of(b"a\n" + b"x" * 65536)
        assert _line_start(fd, 2 + 65536, limit=65536) == 2
        assert _line_start(fd, 2 + 65536, limit=65535) is None
        assert _line_start(fd, 2 + 65536) == 2


def test_an_index_row_naming_a_line_over_64_kib_is_checked_and_used(tmp_path):
    """A record line longer than 64 KiB (a long sessionId) is read back whole by the check."""
    log_path, index_path = tmp_path / "modes.jsonl", tmp_path / "modes.index"
    session_id = "s" * (70 * 1024)
    log = RestoreIndex.open_log(log_path, index_path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session(session_id)
    engine.change(session_id, "code", "set_mode")
    log.close()
    assert max(len(line) for line in log_path.read_bytes().splitlines()) > 70 * 1024

    log = RestoreIndex.open_log(log_path, index_path)
    assert log.index is not None
    assert log.index.restore_point(session_id) == RestorePoint(session_id, "code", 2, "ask")
    log.close()
    events = [orjson.loads(line)["event"] for line in log_path.read_bytes().splitlines()]
    assert EVENT_INDEX_MISMATCH not in events
    assert events == ["modefsm.spec", "modefsm.session_created", "modefsm.mode_changed"]


def demo(folder: Path) -> subprocess.CompletedProcess[str]:
    """``modefsm demo --log log.jsonl`` in *folder*, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "modefsm", "demo", "--log", "log.jsonl"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=folder,
    )


class TestIndexPathChecks:
    """``serve``/``demo --log`` and ``RestoreIndex.rebuild`` refuse the same index paths alike."""

    def test_a_directory_at_the_index_path_is_named_as_one(self, tmp_path):
        (tmp_path / "log.jsonl.index").mkdir()
        done = demo(tmp_path)
        expected = (
            "modefsm demo: log.jsonl.index: is a directory: give the restore index file's path\n"
        )
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)
        assert not (tmp_path / "log.jsonl").exists()

    def test_rebuild_names_a_directory_the_same_way(self, tmp_path):
        (tmp_path / "idx").mkdir()
        with pytest.raises(LogError) as raised:
            RestoreIndex.rebuild(tmp_path / "idx", [])
        expected = f"{tmp_path / 'idx'}: is a directory: give the restore index file's path"
        assert str(raised.value) == expected

    def test_a_file_that_is_not_an_index_is_refused_by_both(self, tmp_path):
        (tmp_path / "log.jsonl.index").write_bytes(b"not an index\n")
        done = demo(tmp_path)
        message = "exists and is not a restore index: not overwritten"
        assert (done.returncode, done.stderr) == (
            2,
            f"modefsm demo: log.jsonl.index: {message}\n",
        )
        with pytest.raises(LogError, match=f": {message}$"):
            RestoreIndex.rebuild(tmp_path / "log.jsonl.index", [])
        assert (tmp_path / "log.jsonl.index").read_bytes() == b"not an index\n"
