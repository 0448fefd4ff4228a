"""Benchmark 8: the session stores, against today's single-process file log.

- changes/s: P processes (1, 2, 4, 8; forked, each on its own sessions, started together)
  append ``mode_changed`` records through the embedded :class:`~modefsm.store.FileStore`
  (one shared file, each append under its ``flock``) and through
  :class:`~modefsm.store._postgres.PgStore` (each also writing its JSON line to its own
  file), awaiting ``append_async`` in an event loop as ``modefsm serve`` does (for
  PostgreSQL: ``BEGIN`` and the ``INSERT``, then ``COMMIT``); the baseline is one process
  writing the same records with
  ``TransitionLog.to_file`` (today's path, no restore index). Throughput is all changes
  over the wall time from the first start to the last end.
- ``restore_point``: the median time of one awaited ``restore_point_async`` (a psycopg
  round trip included; what a catch-up before acting or a load costs) on a database
  bulk-loaded with ``COPY`` (two records per session), at 100k and 1M sessions (1M in the
  full size only): size-independent when the primary key serves it.

The server is ``MODEFSM_TEST_POSTGRES_URL`` or a throwaway one started here with
``fsync=off`` (:mod:`benchmarks.pgserver`): the file rows do not sync either, so both sides
are CPU-bound on the same cores. Without a server the benchmark is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import pgserver
from benchmarks.harness import Result, Row, Size, benchmark
from modefsm.log import EVENT_CHANGED, EVENT_CREATED, TransitionLog

__all__ = ["run"]

TITLE = "8. Session stores (embedded file, PostgreSQL)"
PROCESSES = {"full": (1, 2, 4, 8), "quick": (1, 2, 4, 8), "tiny": (1, 2)}
CHANGES = {"full": 3_000, "quick": 1_000, "tiny": 20}
"""Changes per process."""
ROUNDS = {"full": 3, "quick": 2, "tiny": 1}
RESTORE_SIZES = {"full": (100_000, 1_000_000), "quick": (100_000,), "tiny": (1_000,)}
LOOKUPS = {"full": 3_000, "quick": 1_000, "tiny": 20}
OWN_SESSIONS = 50
MODES = ("ask", "architect", "code")
RESTORE_BOUND_MS = 1.0


def _fields(sid: str, seq: int, src: str | None, dst: str) -> dict[str, Any]:
    return {
        "timestamp": "2026-12-01T08:00:00.000000Z",
        "session_id": sid,
        "seq": seq,
        "from_mode": src,
        "to_mode": dst,
        "origin": "new" if src is None else "set_mode",
        "spec": "seed",
        "spec_hash": "sha256:0df565f236717a02",
    }


@contextmanager
def server() -> Iterator[str]:
    """A server's maintenance URL (see the module docstring).

    Raises:
        RuntimeError: no server can be started (the message says why).
    """
    import os  # noqa: PLC0415

    url = os.environ.get("MODEFSM_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    tmp = Path(tempfile.mkdtemp(prefix="modefsm-bench-pg-"))
    try:
        url, stop = pgserver.start(tmp)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        msg = f"no PostgreSQL server could be started: {exc}"
        raise RuntimeError(msg) from None
    except RuntimeError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        yield url
    finally:
        subprocess.run(stop, capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def database(url: str) -> Iterator[str]:
    """A fresh database on the server at *url*, dropped after the block."""
    import psycopg  # noqa: PLC0415

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _writer(  # noqa: PLR0917 - a multiprocessing target takes positional arguments
    kind: str, url: str, index: int, changes: int, folder: str, go: Any, out: Any
) -> None:
    from modefsm.store import FileStore  # noqa: PLC0415
    from modefsm.store._postgres import PgStore  # noqa: PLC0415

    log = TransitionLog.to_file(Path(folder) / f"{kind}{index}.jsonl")
    store: Any = None
    if kind == "pg":
        store = PgStore(url, log=log)
    elif kind == "fs":  # url: the shared file; a generous wait, to measure, not to fail
        store = FileStore(url, lock_timeout=60.0)
    try:
        span = asyncio.run(_writes(store, log, index, changes, go=go, out=out))
    finally:
        if store is not None:
            store.close()
        log.close()
    out.put(span)


async def _writes(
    store: Any, log: TransitionLog, index: int, changes: int, *, go: Any, out: Any
) -> tuple[float, float]:
    """One writer's sessions, then its timed changes: awaited as ``modefsm serve`` does."""
    from modefsm.store import RestorePoint  # noqa: PLC0415

    heads: dict[str, tuple[str, int, str | None]] = {}
    for i in range(OWN_SESSIONS):
        sid = f"p{index}-s{i}"
        fields = _fields(sid, 1, None, "ask")
        if store is not None:
            digest: str | None = await store.append_async(EVENT_CREATED, fields, None)
        else:
            log.write(EVENT_CREATED, fields)
            digest = log.head
        heads[sid] = ("ask", 1, digest)
    rng = random.Random(index)
    plan = [(f"p{index}-s{rng.randrange(OWN_SESSIONS)}", rng.randrange(2)) for _ in range(changes)]
    out.put(None)  # ready
    await asyncio.to_thread(go.wait)
    start = time.perf_counter()
    for sid, pick in plan:
        mode, seq, digest = heads[sid]
        dst = [m for m in MODES if m != mode][pick]
        fields = _fields(sid, seq + 1, mode, dst)
        if store is not None:
            head = RestorePoint(sid, mode, seq, None, digest)
            digest = await store.append_async(EVENT_CHANGED, fields, head)
        else:
            log.write(EVENT_CHANGED, fields)
        heads[sid] = (dst, seq + 1, digest)
    return start, time.perf_counter()


def _throughput(kind: str, url: str, processes: int, changes: int, folder: str) -> float:
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(kind, url, i, changes, folder, go, out))
        for i in range(processes)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:  # every writer connected and created its sessions
        out.get(timeout=600)
    go.set()
    spans = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            msg = f"a {kind} writer failed (exit {proc.exitcode})"
            raise RuntimeError(msg)
    wall: float = max(end for _, end in spans) - min(start for start, _ in spans)
    return processes * changes / wall


def _append_ms(url: str, changes: int) -> list[float]:
    """The time of each awaited ``append_async`` (its round trips and its line), in ms."""
    from modefsm.store._postgres import PgStore  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        log = TransitionLog.to_file(Path(folder) / "w.jsonl")
        store = PgStore(url, log=log)
        try:
            return asyncio.run(_append_samples(store, changes))
        finally:
            store.close()
            log.close()


async def _append_samples(store: Any, changes: int) -> list[float]:
    from modefsm.store import RestorePoint  # noqa: PLC0415

    digest = await store.append_async(EVENT_CREATED, _fields("s", 1, None, "ask"), None)
    point = RestorePoint("s", "ask", 1, None, digest)
    samples = []
    for _ in range(changes):
        dst = "code" if point.mode == "ask" else "ask"
        start = time.perf_counter()
        digest = await store.append_async(
            EVENT_CHANGED, _fields("s", point.seq + 1, point.mode, dst), point
        )
        samples.append((time.perf_counter() - start) * 1e3)
        point = RestorePoint("s", dst, point.seq + 1, point.mode, digest)
    return samples


def _load(url: str, sessions: int) -> None:
    """*sessions* sessions of two records each, with ``COPY``."""
    import psycopg  # noqa: PLC0415

    from modefsm.store._postgres import PgStore  # noqa: PLC0415

    PgStore(url, log=TransitionLog.to_stream(io.BytesIO())).close()  # creates the tables
    with psycopg.connect(url, autocommit=True) as db:
        with (
            db.cursor() as cur,
            cur.copy(
                "COPY modefsm_records (session_id, seq, to_mode, previous, digest, record) "
                "FROM STDIN"
            ) as copy,
        ):
            chunk: list[str] = []
            for i in range(sessions):
                chunk.append(f"s{i}\t1\task\t\\N\t{i:064x}\t{{}}\n")
                chunk.append(f"s{i}\t2\tcode\task\t{i + 1:064x}\t{{}}\n")
                if len(chunk) >= 20_000:
                    copy.write("".join(chunk))
                    chunk.clear()
            copy.write("".join(chunk))
        db.execute("ANALYZE modefsm_records")


def _restore_ms(url: str, sessions: int, lookups: int) -> list[float]:
    """The time of each awaited ``restore_point_async`` (a catch-up or a load), in ms."""
    from modefsm.store._postgres import PgStore  # noqa: PLC0415

    store = PgStore(url, log=TransitionLog.to_stream(io.BytesIO()))
    try:
        return asyncio.run(_restore_samples(store, sessions, lookups))
    finally:
        store.close()


async def _restore_samples(store: Any, sessions: int, lookups: int) -> list[float]:
    rng = random.Random(sessions)
    samples = []
    for _ in range(lookups):
        sid = f"s{rng.randrange(sessions)}"
        start = time.perf_counter()
        point = await store.restore_point_async(sid)
        samples.append((time.perf_counter() - start) * 1e3)
        assert point is not None  # noqa: S101 - loaded above
        assert point.seq == 2  # noqa: S101
    return samples


@benchmark("store", TITLE)
def run(size: Size) -> Result:
    """Changes/s with 1-8 processes on each store vs the file log; ``restore_point`` time."""
    result = Result("store", TITLE)
    try:
        import psycopg  # noqa: F401, PLC0415
    except ImportError:
        result.skipped = "psycopg is not installed (pip install 'modefsm[postgresql]')"
        return result
    changes = CHANGES[size.name]
    try:
        with server() as url, tempfile.TemporaryDirectory() as folder:
            base = result.add(
                Row("changes/s", "file log today, 1 proc", "changes/s", [], baseline=True)
            )
            note = "each process on its own sessions; server fsync=off"
            shared = "one shared file, each append under its flock; no fsync"
            files = {
                processes: result.add(
                    Row(
                        "changes/s",
                        f"embedded file store, {processes} proc",
                        "changes/s",
                        [],
                        note=shared,
                    )
                )
                for processes in PROCESSES[size.name]
            }
            rows = {
                processes: result.add(
                    Row("changes/s", f"PostgreSQL, {processes} proc", "changes/s", [], note=note)
                )
                for processes in PROCESSES[size.name]
            }
            for turn in range(ROUNDS[size.name]):  # rounds interleave the configurations
                base.samples.append(_throughput("file", url, 1, changes, folder))
                for processes, row in files.items():
                    path = str(Path(folder) / f"shared-{turn}-{processes}.jsonl")
                    row.samples.append(_throughput("fs", path, processes, changes, folder))
                for processes, row in rows.items():
                    with database(url) as db:
                        row.samples.append(_throughput("pg", db, processes, changes, folder))
            with database(url) as db:
                result.add(
                    Row("append", "PostgreSQL, 1 proc", "ms/change", _append_ms(db, changes))
                )
            medians: list[float] = []
            for sessions in RESTORE_SIZES[size.name]:
                with database(url) as db:
                    _load(db, sessions)
                    samples = _restore_ms(db, sessions, LOOKUPS[size.name])
                row = Row("restore_point", f"PostgreSQL, {sessions:,} sessions", "ms", samples)
                row.baseline = not medians
                result.add(row)
                medians.append(statistics.median(samples))
    except RuntimeError as exc:
        result.rows.clear()
        result.skipped = str(exc)
        return result
    worst = max(medians)
    result.target(
        f"restore_point median <= {RESTORE_BOUND_MS:g} ms at every size",
        met=worst <= RESTORE_BOUND_MS,
        measured=f"{worst:.3f} ms",
    )
    result.notes.append(
        "append and restore_point rows: every call is a sample (median, min, max over the "
        "calls), awaited as modefsm serve awaits it (the event loop serves others meanwhile); "
        "append: BEGIN, the INSERT, COMMIT (three round trips) and the line; restore_point: "
        "one query, on two records per session, loaded with COPY"
    )
    return result
