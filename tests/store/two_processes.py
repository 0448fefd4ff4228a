"""The two stores two `modefsm serve` processes can share, as the multi-process tests use them.

:class:`FileBackend`: one ``--log`` file for both (the embedded store). :class:`PgBackend`:
a PostgreSQL database (``--store URL``), each process with its own ``--log`` file.
:func:`backend` picks one by name for a parametrized test.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.reliability.harness import read_log

KINDS = ["file", "postgresql"]


class FileBackend:
    """The embedded store: every process serves with ``--log modes.jsonl``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = folder / "modes.jsonl"

    def command(self, index: int) -> tuple[Path, tuple[str, ...]]:
        """Process *index*'s ``--log`` file and its other arguments to ``modefsm serve``."""
        del index
        return self.log, ()

    def committed(self, session_id: str) -> list[str]:
        """The session's committed modes, ``seq`` 1 to n."""
        commits = read_log(self.log).commits(session_id)
        assert [r["seq"] for r in commits] == list(range(1, len(commits) + 1)), commits
        return [r["to_mode"] for r in commits]

    def lines(self) -> list[dict[str, Any]]:
        """Every line written, records and rejections."""
        return read_log(self.log).records

    def replay(self) -> list[str]:
        """``modefsm replay --verify --summary`` of what the processes wrote."""
        return replay(self.folder, self.log.name)


class PgBackend:
    """PostgreSQL at *url*; process *n* writes ``w{n+1}.jsonl``."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder

    def command(self, index: int) -> tuple[Path, tuple[str, ...]]:
        """Process *index*'s ``--log`` file and its other arguments to ``modefsm serve``."""
        return self.folder / f"w{index + 1}.jsonl", ("--store", self.url)

    def committed(self, session_id: str) -> list[str]:
        """The session's committed modes in the database, ``seq`` 1 to n."""
        from modefsm import TransitionLog
        from modefsm.store._postgres import PgStore

        store = PgStore(self.url, log=TransitionLog.to_stream(io.BytesIO()))
        try:
            records = list(store.history(session_id))
        finally:
            store.close()
        assert [r.seq for r in records] == list(range(1, len(records) + 1)), records
        return [r.to_mode or "" for r in records]

    def lines(self) -> list[dict[str, Any]]:
        """Every line the processes wrote to their files (records and rejections)."""
        return [
            orjson.loads(line)
            for path in sorted(self.folder.glob("w*.jsonl"))
            for line in path.read_bytes().splitlines()
        ]

    def replay(self) -> list[str]:
        """Replay of the database's export (must be clean), then of the workers' files."""
        export = self.folder / "export.jsonl"
        export.unlink(missing_ok=True)
        export_store(self.url, export)
        report = replay(self.folder, export.name)
        assert report[-1] == "RESULT  clean", report
        names = sorted(p.name for p in self.folder.glob("w*.jsonl") if p.stat().st_size)
        return replay(self.folder, *names)


def export_store(url: str, path: Path) -> None:
    """``modefsm store export URL`` into the new file *path* (it must succeed)."""
    with path.open("xb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "modefsm", "store", "export", url],
            stdout=out, stderr=subprocess.PIPE, check=False, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr


def replay(folder: Path, *names: str) -> list[str]:
    """The lines ``modefsm replay NAMES --verify --summary`` prints (run in *folder*)."""
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", *names, "--verify", "--summary"],
        capture_output=True, text=True, check=False, cwd=folder, timeout=120,
    )  # fmt: skip
    assert done.stderr == "", done.stderr
    return done.stdout.splitlines()


def backend(request: pytest.FixtureRequest, kind: str, folder: Path) -> FileBackend | PgBackend:
    """The store of kind *kind* (``file`` or ``postgresql``, which needs a server)."""
    if kind == "file":
        return FileBackend(folder)
    pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")
    return PgBackend(request.getfixturevalue("postgres_url"), folder)
