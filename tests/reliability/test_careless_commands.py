"""Careless commands: a log path that is not a regular file or not a transition log, and a
restore index aimed at a file it must not replace. Each is refused with one line on stderr
and exit status 2, before anything is written; nothing hangs."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.cli import main
from modefsm.cli._serve import check_log_path
from modefsm.errors import LogError
from modefsm.store._restore import RestoreIndex

pytestmark = [pytest.mark.reliability]

LIMIT = 30.0  # seconds: a refusal that takes longer is a hang


def run(*args: str, cwd: Path) -> tuple[int, str, str]:
    """``modefsm ARGS`` in *cwd*: ``serve`` in a process of its own with pipes for stdin and
    stdout (as a client spawns it), other commands through :func:`modefsm.cli.main` here."""
    if args[0] != "serve" and args[1:2] != ("fifo",):
        return _in_process(args, cwd)
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=LIMIT,
        cwd=cwd,
        input="",
    )
    return done.returncode, done.stdout, done.stderr


def _in_process(args: tuple[str, ...], cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def a_log(path: Path) -> bytes:
    log = TransitionLog.to_file(path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session("s1")
    engine.change("s1", "code", "set_mode")
    log.close()
    return path.read_bytes()


NOT_REGULAR = "not a regular file: the transition log must be a regular file"


class TestNonRegularLogPaths:
    @pytest.mark.parametrize("command", ["serve", "demo"])
    def test_a_fifo(self, tmp_path: Path, command: str):
        os.mkfifo(tmp_path / "fifo")
        assert run(command, "--log", "fifo", cwd=tmp_path) == (
            2,
            "",
            f"modefsm {command}: fifo: a FIFO, {NOT_REGULAR}\n",
        )

    @pytest.mark.parametrize("command", ["demo"])
    def test_a_directory(self, tmp_path: Path, command: str):
        (tmp_path / "logs").mkdir()
        assert run(command, "--log", "logs", cwd=tmp_path) == (
            2,
            "",
            f"modefsm {command}: logs: a directory, {NOT_REGULAR}\n",
        )

    @pytest.mark.parametrize(
        "args", [("serve", "--log"), ("serve", "--store"), ("demo", "--log")], ids=" ".join
    )
    def test_the_current_directory(self, tmp_path: Path, args: tuple[str, str]):
        """``.`` has no file name to put the index and the journal beside: refused as a
        directory, as ``logs`` is."""
        assert run(*args, ".", cwd=tmp_path) == (
            2,
            "",
            f"modefsm {args[0]}: .: a directory, {NOT_REGULAR}\n",
        )
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize("command", ["demo"])
    def test_a_character_device(self, tmp_path: Path, command: str):
        assert run(command, "--log", "/dev/zero", cwd=tmp_path) == (
            2,
            "",
            f"modefsm {command}: /dev/zero: a character device, {NOT_REGULAR}\n",
        )

    def test_replay_reads_a_fifo_like_standard_input(self, tmp_path: Path):
        data = a_log(tmp_path / "log.jsonl")
        os.mkfifo(tmp_path / "fifo")

        def feed() -> None:
            with (tmp_path / "fifo").open("wb") as fifo:
                fifo.write(data)

        writer = threading.Thread(target=feed)
        writer.start()
        code, out, err = run("replay", "fifo", "--summary", cwd=tmp_path)
        writer.join(LIMIT)
        assert (code, err, out.splitlines()[-1]) == (0, "", "RESULT  clean")


NOT_A_LOG = (
    "exists and is not a transition log (its first line is not a modefsm record): not appended to"
)


class TestFilesThatAreNotTransitionLogs:
    @pytest.mark.parametrize(
        ("command", "content"),
        [
            ("serve", b"my notes\nsecond line\n"),
            ("demo", b"my notes\nsecond line\n"),
            ("demo", bytes(range(256)) * 4),
            ("demo", b'{"event": "request"}\n'),
        ],
        ids=["serve-text", "demo-text", "demo-binary", "demo-json"],
    )
    def test_refused_and_untouched(self, tmp_path: Path, command: str, content: bytes):
        notes = tmp_path / "notes.txt"
        notes.write_bytes(content)
        assert run(command, "--log", "notes.txt", cwd=tmp_path) == (
            2,
            "",
            f"modefsm {command}: notes.txt: {NOT_A_LOG}\n",
        )
        assert notes.read_bytes() == content
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no index either

    def test_a_transition_log_and_a_first_record_torn_by_a_crash_are_accepted(self, tmp_path):
        path = tmp_path / "log.jsonl"
        data = a_log(path)
        check_log_path(path)
        path.write_bytes(data[:30])
        check_log_path(path)
        path.write_bytes(b"")
        check_log_path(path)


class TestRebuildIndexTargets:
    def test_the_input_log_is_never_overwritten(self, tmp_path: Path):
        data = a_log(tmp_path / "log.jsonl")
        assert run("replay", "log.jsonl", "--rebuild-index", "log.jsonl", cwd=tmp_path) == (
            2,
            "",
            (
                "modefsm replay: log.jsonl: is one of the logs read: the restore index "
                "needs a file of its own\n"
            ),
        )
        os.link(tmp_path / "log.jsonl", tmp_path / "hardlink")
        other = tmp_path / "sub" / ".." / "log.jsonl"
        (tmp_path / "sub").mkdir()
        for target in (tmp_path / "hardlink", other):
            with pytest.raises(LogError, match="is one of the logs read"):
                RestoreIndex.rebuild(target, [tmp_path / "log.jsonl"])
        assert (tmp_path / "log.jsonl").read_bytes() == data

    def test_a_directory(self, tmp_path: Path):
        a_log(tmp_path / "log.jsonl")
        (tmp_path / "idx").mkdir()
        assert run("replay", "log.jsonl", "--rebuild-index", "idx", cwd=tmp_path) == (
            2,
            "",
            "modefsm replay: idx: is a directory: give the restore index file's path\n",
        )

    def test_an_existing_file_that_is_not_an_index(self, tmp_path: Path):
        a_log(tmp_path / "log.jsonl")
        other = tmp_path / "other.db"
        other.write_bytes(b"precious data\n")
        assert run("replay", "log.jsonl", "--rebuild-index", "other.db", cwd=tmp_path) == (
            2,
            "",
            "modefsm replay: other.db: exists and is not a restore index: not overwritten\n",
        )
        assert other.read_bytes() == b"precious data\n"

    @pytest.mark.parametrize("journal", [None, b"", b'{"session_id":"s","part":"host"}\n'])
    def test_the_conversation_journal_is_refused(self, tmp_path: Path, journal: bytes | None):
        """Rebuilt there, the index would stop the next `serve --log log.jsonl` from starting."""
        a_log(tmp_path / "log.jsonl")
        path = tmp_path / "log.jsonl.conversation"
        if journal is not None:
            path.write_bytes(journal)
        assert run(
            "replay", "log.jsonl", "--rebuild-index", "log.jsonl.conversation", cwd=tmp_path
        ) == (
            2,
            "",
            (
                "modefsm replay: log.jsonl.conversation: is the conversation journal of "
                "log.jsonl: the restore index needs a file of its own\n"
            ),
        )
        assert (path.read_bytes() if path.exists() else None) == journal
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["log.jsonl", *([] if journal is None else ["log.jsonl.conversation"])]
        )

    def test_a_file_named_like_a_journal_is_refused(self, tmp_path: Path):
        a_log(tmp_path / "log.jsonl")
        assert run("replay", "log.jsonl", "--rebuild-index", "old.conversation", cwd=tmp_path) == (
            2,
            "",
            (
                "modefsm replay: old.conversation: is named like a conversation journal "
                "(*.conversation): the restore index needs a file of its own\n"
            ),
        )
        assert not (tmp_path / "old.conversation").exists()

    def test_an_existing_index_is_rebuilt(self, tmp_path: Path):
        a_log(tmp_path / "log.jsonl")
        expected = (0, "rebuilt log.index: 1 session from 1 log(s)\n", "")
        assert run("replay", "log.jsonl", "--rebuild-index", "log.index", cwd=tmp_path) == expected
        assert run("replay", "log.jsonl", "--rebuild-index", "log.index", cwd=tmp_path) == expected


class TestIndexBesideTheLog:
    def test_an_index_path_holding_something_else_is_refused(self, tmp_path: Path):
        data = a_log(tmp_path / "log.jsonl")
        index = tmp_path / "log.jsonl.index"
        index.write_bytes(b"not an index\n")
        assert run("demo", "--log", "log.jsonl", cwd=tmp_path) == (
            2,
            "",
            "modefsm demo: log.jsonl.index: exists and is not a restore index: not overwritten\n",
        )
        assert (index.read_bytes(), (tmp_path / "log.jsonl").read_bytes()) == (
            b"not an index\n",
            data,
        )

    def test_a_fifo_as_the_index_is_refused_without_blocking(self, tmp_path: Path):
        os.mkfifo(tmp_path / "fifo.index")
        with pytest.raises(LogError, match="not a regular file: the restore index must be one"):
            RestoreIndex(tmp_path / "fifo.index")
