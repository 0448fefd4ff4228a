"""N `modefsm serve --store postgresql://...` workers on one database (issue 13, fleets).

Real processes, each driven by the official SDK client, each writing its own JSON-lines
file, sharing one real PostgreSQL database. Seeded random schedules (tests/store/schedule.py)
of new/load/resume/set_mode/set_config_option/switch approvals/close, the same session
taken up and changed in several workers. Checked: every acknowledged change is in the
database exactly once, in order, chained (``session_prev``); every worker restores every
session to its latest mode; ``modefsm replay --verify`` over all workers' files (and over
the database's export) is clean. With SIGKILLs of random workers in the middle of changes:
nothing a client was told is lost, the restarted and the surviving workers keep serving.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from tests.store.schedule import Schedule, reproduce, run_schedule, seeds, soak_factor
from tests.store.two_processes import export_store, replay

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

import psycopg

from modefsm import TransitionLog
from modefsm.store._postgres import PgStore

pytestmark = pytest.mark.e2e

THIS = "tests/store/test_pg_processes.py"


class PgBackend:
    """PostgreSQL at *url*; worker *n* writes ``w{n+1}.jsonl`` in *folder*."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.store = PgStore(url, log=TransitionLog.to_stream(io.BytesIO()))

    def file(self, slot: int) -> Path:
        return self.folder / f"w{slot + 1}.jsonl"

    def command(self, slot: int) -> tuple[Path, tuple[str, ...]]:
        return self.file(slot), ("--store", self.url)

    def committed(self, session_id: str) -> list[str]:
        records = list(self.store.history(session_id))
        assert [r.seq for r in records] == list(range(1, len(records) + 1)), session_id
        assert [r.session_prev for r in records] == [None, *(r.digest for r in records[:-1])]
        return [r.to_mode for r in records if r.to_mode is not None]

    def ended(self, pid: int) -> bool:
        """Whether the database connection of worker *pid* has ended (its last statement
        sent before a SIGKILL has then committed or rolled back)."""
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(query, (f"modefsm/{pid}",)).fetchone()
        return row is not None and row[0] == 0

    def files(self) -> list[Path]:
        """Every worker's file, an empty one too (a worker that changed nothing)."""
        return sorted(self.folder.glob("w*.jsonl"))

    def close(self) -> None:
        self.store.close()


def committed_lines(path: Path) -> dict[int, str]:
    """gseq -> digest of the committed records of a worker's file or an export."""
    out = {}
    for line in path.read_bytes().splitlines():
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:  # a torn last line of a killed worker
            continue
        if isinstance(data, dict) and "gseq" in data:
            assert data["gseq"] not in out, data  # never twice
            out[data["gseq"]] = data["digest"]
    return out


def check_files(backend: PgBackend, schedule: Schedule, *, killed: bool) -> None:
    """Replay the export (clean); the workers' files agree with it, and replay clean."""
    folder = backend.folder
    export = folder / "export.jsonl"
    export_store(backend.url, export)
    records = sum(len(modes) for modes in schedule.truth.values())
    report = replay(folder, export.name)
    assert report[-1] == "RESULT  clean", report
    merged = "1 files merged by gseq"
    assert report[-3] == f"CHAIN  {records} records verified, 0 without a digest; {merged}"
    in_database = committed_lines(export)
    in_files: dict[int, str] = {}
    for path in backend.files():
        for gseq, digest in committed_lines(path).items():
            assert in_database[gseq] == digest, (path.name, gseq)
            assert gseq not in in_files
            in_files[gseq] = digest
    names = [p.name for p in backend.files()]
    if not killed:
        assert in_files == in_database
    if in_files == in_database:  # a worker killed between its commit and its line: not so
        report = replay(folder, *names)
        assert report[-1] == "RESULT  clean", report
        chained = sum(b'"digest"' in path.read_bytes() for path in backend.files())
        heads = f"{chained} files merged by gseq"
        rejected = schedule.switches["reject"]  # a rejected switch: a line in the file only
        assert report[-2 - chained] == (
            f"CHAIN  {records + rejected} records verified, 0 without a digest; {heads}"
        )


@pytest.mark.parametrize("workers", [2, 4, 8])
@pytest.mark.parametrize("seed", seeds(1))
async def test_workers_share_one_history(
    postgres_url: str, tmp_path: Path, workers: int, seed: int
) -> None:
    backend = PgBackend(postgres_url, tmp_path)
    schedule = Schedule(backend, workers, seed)
    test = f"{THIS}::test_workers_share_one_history[{seed}-{workers}]"
    try:
        await run_schedule(schedule, steps=16 * soak_factor(), kills=0)
        assert len(schedule.truth) >= 2
        assert sum(schedule.switches.values()) >= 1
        check_files(backend, schedule, killed=False)
    except AssertionError as exc:
        raise AssertionError(reproduce(test, seed)) from exc
    finally:
        backend.close()


@pytest.mark.parametrize("seed", seeds(1))
async def test_sigkill_of_random_workers_loses_nothing_acknowledged(
    postgres_url: str, tmp_path: Path, seed: int
) -> None:
    backend = PgBackend(postgres_url, tmp_path)
    kills = 20 * soak_factor()
    schedule = Schedule(backend, 4, seed + 100)
    test = f"{THIS}::test_sigkill_of_random_workers_loses_nothing_acknowledged"
    try:
        await run_schedule(schedule, steps=kills, kills=kills)
        assert schedule.kills == kills
        check_files(backend, schedule, killed=True)
    except AssertionError as exc:
        raise AssertionError(reproduce(test, seed)) from exc
    finally:
        backend.close()
