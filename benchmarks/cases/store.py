"""Benchmark 8: the session stores, against today's single-process file log.

- changes/s: P processes (1, 2, 4, 8; forked, each on its own sessions, started together)
  append ``mode_changed`` records through the embedded :class:`~modefsm.store.FileStore`
  (one shared file, each append under its ``flock``) and through
  :class:`~modefsm.store._postgres.PgStore` (each also writing its JSON line to its own
  file), awaiting ``append_async`` in an event loop as ``modefsm serve`` does (for
  PostgreSQL: ``BEGIN`` and the ``INSERT``, then ``COMMIT``); the baseline is one process
  writing the same records with
  ``TransitionLog.to_file`` (today's path, no restore index). Throughput is all changes
  over the wall time from the first start to the last end. Each configuration runs twice:
  each writer making one change at a time, and each writer's 50 sessions changed at once
  (a task per session, as a worker serving 50 clients).
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
import queue
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
SHARED_FLOOR = 0.5
"""The least share of one process's total that 2, 4 and 8 processes on one file make: every
record is written under the file's one lock (its ``prev`` is the line before it), so the
total falls as processes are added; this bounds how far."""


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
    kind: str,
    url: str,
    index: int,
    changes: int,
    folder: str,
    go: Any,
    out: Any,
    together: bool,  # noqa: FBT001
) -> None:
    from modefsm.store import FileStore  # noqa: PLC0415
    from modefsm.store._postgres import PgStore  # noqa: PLC0415

    if kind == "engine":  # url: the shared file
        out.put(asyncio.run(_engine_changes(url, index, changes, go=go, out=out)))
        return
    log = TransitionLog.to_file(Path(folder) / f"{kind}{index}.jsonl")
    store: Any = None
    if kind == "pg":
        store = PgStore(url, log=log)
    elif kind == "fs":  # url: the shared file; a generous wait, to measure, not to fail
        store = FileStore(url, lock_timeout=60.0)
    try:
        span = asyncio.run(_writes(store, log, index, changes, go=go, out=out, together=together))
    finally:
        if store is not None:
            store.close()
        log.close()
    out.put(span)


async def _writes(
    store: Any, log: TransitionLog, index: int, changes: int, *, go: Any, out: Any, together: bool
) -> tuple[float, float]:
    """One writer's sessions, then its timed changes: awaited as ``modefsm serve`` does.

    *together*: each session's changes are made by a task of its own, all the writer's
    sessions at once (a worker serving 50 clients); else one change at a time.
    """
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

    async def change(sid: str, pick: int) -> None:
        mode, seq, digest = heads[sid]
        dst = [m for m in MODES if m != mode][pick]
        fields = _fields(sid, seq + 1, mode, dst)
        if store is not None:
            head = RestorePoint(sid, mode, seq, None, digest)
            digest = await store.append_async(EVENT_CHANGED, fields, head)
        else:
            log.write(EVENT_CHANGED, fields)
        heads[sid] = (dst, seq + 1, digest)

    async def session(sid: str) -> None:
        for own, pick in plan:
            if own == sid:
                await change(sid, pick)

    start = time.perf_counter()
    if together:
        await asyncio.gather(*(session(sid) for sid in heads))
    else:
        for sid, pick in plan:
            await change(sid, pick)
    return start, time.perf_counter()


async def _engine_changes(
    path: str, index: int, changes: int, *, go: Any, out: Any
) -> tuple[float, float]:
    """One process serving its sessions: ``ModeEngine.set_mode`` through a shared FileStore.

    Each change is what a serving process does for ``session/set_mode`` below the wire:
    the engine's checks and machine, the record through the store (under the file's
    lock), both ACP v1 notifications serialized as the SDK writes them (into a null sink).
    """
    from benchmarks.baselines.handlers import _v1  # noqa: PLC0415
    from benchmarks.baselines.wire import NullWire  # noqa: PLC0415
    from modefsm import ModeEngine, preset  # noqa: PLC0415
    from modefsm.store import FileStore  # noqa: PLC0415

    store = FileStore(path, lock_timeout=60.0)
    engine = ModeEngine(preset("seed"), store=store, sink=_v1(NullWire()))
    try:
        sessions = [f"p{index}-s{i}" for i in range(OWN_SESSIONS)]
        for sid in sessions:
            await engine.new_session_async(sid)
        rng = random.Random(index)
        plan = [(rng.choice(sessions), rng.randrange(2)) for _ in range(changes)]
        out.put(None)  # ready
        await asyncio.to_thread(go.wait)
        start = time.perf_counter()
        for sid, pick in plan:
            mode = engine.get(sid).state
            await engine.set_mode(sid, [m for m in MODES if m != mode][pick])
        return start, time.perf_counter()
    finally:
        store.close()


def _throughput(
    kind: str, url: str, processes: int, changes: int, folder: str, *, together: bool = False
) -> float:
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(kind, url, i, changes, folder, go, out, together))
        for i in range(processes)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:  # every writer connected and created its sessions
        _next(out, procs, kind)
    go.set()
    spans = [_next(out, procs, kind) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            msg = f"a {kind} writer failed (exit {proc.exitcode})"
            raise RuntimeError(msg)
    wall: float = max(end for _, end in spans) - min(start for start, _ in spans)
    return processes * changes / wall


def _next(out: Any, procs: list[Any], kind: str) -> Any:
    """The next message of the writers; a writer that died is reported, not waited for.

    Raises:
        RuntimeError: a writer ended with an error, or none said anything for 600 s.
    """
    for _ in range(600):
        try:
            return out.get(timeout=1)
        except queue.Empty:
            failed = [proc.exitcode for proc in procs if proc.exitcode not in {None, 0}]
            if failed:
                msg = f"a {kind} writer failed (exit {failed[0]})"
                raise RuntimeError(msg) from None
    msg = f"the {kind} writers said nothing for 600 s"
    raise RuntimeError(msg)


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
            at_once = f"{OWN_SESSIONS} sessions at once"
            files = {
                (processes, together): result.add(
                    Row(
                        "changes/s",
                        f"embedded file store, {processes} proc"
                        + (f", {at_once}" if together else ""),
                        "changes/s",
                        [],
                        note=shared,
                    )
                )
                for together in (False, True)
                for processes in PROCESSES[size.name]
            }
            served = {
                processes: result.add(
                    Row(
                        "changes/s",
                        f"engine on the embedded file store, {processes} proc",
                        "changes/s",
                        [],
                        note=shared + "; ModeEngine.set_mode, v1 notifications serialized",
                    )
                )
                for processes in PROCESSES[size.name]
            }
            rows = {
                (processes, together): result.add(
                    Row(
                        "changes/s",
                        f"PostgreSQL, {processes} proc" + (f", {at_once}" if together else ""),
                        "changes/s",
                        [],
                        note=note,
                    )
                )
                for together in (False, True)
                for processes in PROCESSES[size.name]
            }
            for turn in range(ROUNDS[size.name]):  # rounds interleave the configurations
                base.samples.append(_throughput("file", url, 1, changes, folder))
                for (processes, together), row in files.items():
                    path = str(Path(folder) / f"shared-{turn}-{processes}-{together}.jsonl")
                    row.samples.append(
                        _throughput("fs", path, processes, changes, folder, together=together)
                    )
                for processes, row in served.items():
                    path = str(Path(folder) / f"served-{turn}-{processes}.jsonl")
                    row.samples.append(_throughput("engine", path, processes, changes, folder))
                for (processes, together), row in rows.items():
                    with database(url) as db:
                        row.samples.append(
                            _throughput("pg", db, processes, changes, folder, together=together)
                        )
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
    alone = statistics.median(served[1].samples)
    fewest = min(statistics.median(row.samples) for row in served.values())
    result.target(
        "engine on the file store: total changes/s at every process count >= "
        f"{SHARED_FLOOR:g}x 1 process (one chain, one lock: docs/performance.md)",
        met=fewest >= SHARED_FLOOR * alone,
        measured=f"{fewest / alone:.2f}x",
    )
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
