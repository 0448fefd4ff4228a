"""PgStore on a real PostgreSQL server: ordering, restore, timeouts, lost connections, kills."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import orjson
import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

from modefsm.errors import LogError  # noqa: E402
from modefsm.log import (  # noqa: E402
    EVENT_CHANGED,
    EVENT_CREATED,
    EVENT_REJECTED,
    TransitionLog,
    record_digest,
)
from modefsm.store import (  # noqa: E402
    RestorePoint,
    SessionMoved,
    StoreBusy,
    open_store,
)
from modefsm.store._postgres import CATCH_UP_QUERY, HEAD_QUERY, PgStore  # noqa: E402
from tests.reliability.harness import soak_factor  # noqa: E402
from tests.store.pg_writer import write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TERMINATE = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE application_name LIKE 'modefsm/%%' AND datname = %s"
)
SPEC_HASH = "sha256:0df565f236717a02"  # preset("seed").content_hash


def fields(
    sid: str, seq: int, src: str | None, dst: str, origin: str = "set_mode"
) -> dict[str, Any]:
    return {
        "timestamp": "2026-12-01T08:00:00.000000Z",
        "session_id": sid,
        "seq": seq,
        "from_mode": src,
        "to_mode": dst,
        "origin": origin,
        "spec": "seed",
        "spec_hash": SPEC_HASH,
    }


def create(store: PgStore, sid: str, mode: str = "ask") -> RestorePoint:
    digest = store.append(EVENT_CREATED, fields(sid, 1, None, mode, "new"), None)
    return RestorePoint(sid, mode, 1, None, digest)


def change(store: PgStore, head: RestorePoint, dst: str) -> RestorePoint:
    digest = store.append(
        EVENT_CHANGED, fields(head.session_id, head.seq + 1, head.mode, dst), head
    )
    return RestorePoint(head.session_id, dst, head.seq + 1, head.mode, digest)


def rows(url: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    with psycopg.connect(url) as db:
        found: list[tuple[str, int, str, dict[str, Any]]] = db.execute(
            "SELECT session_id, seq, digest, record FROM modefsm_records ORDER BY session_id, seq"
        ).fetchall()
    return found


def check_one_history(url: str) -> dict[tuple[str, int], str]:
    """Every session is seq 1..n, each record links to the one before, digests recompute."""
    found: dict[tuple[str, int], str] = {}
    last: dict[str, tuple[int, str]] = {}
    for sid, seq, digest, record in rows(url):
        seq_before, digest_before = last.get(sid, (0, None))
        assert seq == seq_before + 1, (sid, seq)
        assert record["session_prev"] == digest_before, (sid, seq)
        assert record_digest(record) == digest == record["digest"]
        last[sid] = (seq, digest)
        found[sid, seq] = digest
    return found


def assert_replays_clean(log: Path) -> None:
    verify = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(log), "--verify"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.fixture
def store(postgres_url: str, tmp_path: Path) -> Any:
    log = TransitionLog.to_file(tmp_path / "w1.jsonl")
    opened = PgStore(postgres_url, log=log)
    yield opened
    opened.close()
    log.close()


def test_restore_point_is_exact_after_many_changes(store: PgStore, postgres_url: str) -> None:
    rng = random.Random(13)
    heads = {sid: create(store, sid) for sid in ("s1", "s2", "s3")}
    for _ in range(300):
        sid = rng.choice(sorted(heads))
        dst = rng.choice([m for m in ("ask", "architect", "code") if m != heads[sid].mode])
        heads[sid] = change(store, heads[sid], dst)
    for sid, head in heads.items():
        assert store.restore_point(sid) == head
    assert store.restore_point("nope") is None
    history = list(store.history("s2"))
    assert [r.seq for r in history] == list(range(1, heads["s2"].seq + 1))
    assert history[-1].digest == heads["s2"].digest
    assert sum(1 for _ in store.export()) == sum(h.seq for h in heads.values())
    assert len(check_one_history(postgres_url)) == 303


def test_history_pages_through_a_long_history(store: PgStore) -> None:
    head = create(store, "long")
    for i in range(1_004):
        head = change(store, head, ("code", "ask")[i % 2])
    history = list(store.history("long"))
    assert [r.seq for r in history] == list(range(1, 1_006))
    assert [r.session_prev for r in history[1:]] == [r.digest for r in history[:-1]]
    assert history[-1].digest == head.digest


def test_restore_keeps_previous_and_restore_origin(store: PgStore) -> None:
    head = change(store, create(store, "s"), "code")
    digest = store.append(EVENT_CHANGED, fields("s", 3, "code", "ask", "restore"), head)
    assert store.restore_point("s") == RestorePoint("s", "ask", 3, "ask", digest)


def test_mirror_lines_carry_the_committed_digest(store: PgStore, tmp_path: Path) -> None:
    head = change(store, create(store, "s"), "code")
    store.note(
        EVENT_REJECTED, {**fields("s", 3, "code", "nope"), "seq": None, "reason": "unknown_mode"}
    )
    head = change(store, head, "ask")
    lines = [orjson.loads(line) for line in (tmp_path / "w1.jsonl").read_bytes().splitlines()]
    assert [line["event"] for line in lines] == [
        EVENT_CREATED,
        EVENT_CHANGED,
        EVENT_REJECTED,
        EVENT_CHANGED,
    ]
    assert [line.get("gseq") for line in lines] == [1, 2, None, 3]
    assert lines[-1]["digest"] == head.digest
    assert lines[-1]["session_prev"] == lines[1]["digest"]
    assert lines[-1]["prev"] == lines[2]["digest"]  # the file chain includes the rejection
    for line in lines:
        assert record_digest(line) == line["digest"]
    assert_replays_clean(tmp_path / "w1.jsonl")


def test_stale_head_duplicate_and_fork_are_refused(
    postgres_url: str, store: PgStore, tmp_path: Path
) -> None:
    other = PgStore(postgres_url, log=TransitionLog.to_file(tmp_path / "w2.jsonl"))
    try:
        start = create(store, "s")
        won = change(store, start, "code")
        with pytest.raises(SessionMoved) as moved:  # same seq, built on the same head
            change(other, start, "architect")
        assert moved.value.current == won
        assert moved.value.current.seq == 2
        with pytest.raises(SessionMoved) as forked:  # seq 3 chained to a digest not in the store
            change(other, won._replace(digest="0" * 64), "ask")
        assert forked.value.current == won
        with pytest.raises(SessionMoved):  # a second creation
            create(other, "s", "code")
        with pytest.raises(ValueError, match="does not follow"):
            other.append(EVENT_CHANGED, fields("s", 5, "code", "ask"), won)
        assert list(check_one_history(postgres_url)) == [("s", 1), ("s", 2)]
        assert change(other, moved.value.current, "ask").seq == 3  # adopt and retry
    finally:
        other.close()
        other.log.close()


async def test_concurrent_appends_share_a_transaction_each_with_its_own_outcome(
    postgres_url: str, store: PgStore, tmp_path: Path
) -> None:
    """Records of one process's calls made while one is on its way go in one transaction;
    a refused row (its session moved by another process, or chained to a digest not in
    the store) fails its own call only, and the others still commit, in one more."""
    other = PgStore(postgres_url, log=TransitionLog.to_file(tmp_path / "w2.jsonl"))
    try:
        heads = {f"s{i:02}": create(store, f"s{i:02}") for i in range(12)}
        moved = change(other, heads["s03"], "architect")  # our head of s03 is now stale
        forked = heads["s07"]._replace(digest="0" * 64)

        async def one(sid: str) -> str | BaseException:
            head = forked if sid == "s07" else heads[sid]
            try:
                return await store.append_async(EVENT_CHANGED, fields(sid, 2, "ask", "code"), head)
            except SessionMoved as exc:
                return exc

        outcomes = dict(zip(heads, await asyncio.gather(*map(one, heads)), strict=True))
    finally:
        other.close()
        other.log.close()
    refused = {sid: o.current for sid, o in outcomes.items() if isinstance(o, SessionMoved)}
    assert refused == {"s03": moved, "s07": heads["s07"]}
    history = check_one_history(postgres_url)
    written = {sid: history[sid, 2] for sid in heads if sid not in refused}
    assert written == {sid: o for sid, o in outcomes.items() if sid not in refused}
    assert sorted(history) == sorted([*((sid, 1) for sid in heads), ("s03", 2), *(
        (sid, 2) for sid in written)])  # fmt: skip
    with psycopg.connect(postgres_url) as db:
        xmins = db.execute(
            "SELECT count(DISTINCT xmin::text) FROM modefsm_records "
            "WHERE seq = 2 AND session_id <> 's03'"
        ).fetchone()
    assert xmins == (2,)  # s00's alone (nothing was on its way), then the nine others
    lines = [orjson.loads(line) for line in (tmp_path / "w1.jsonl").read_bytes().splitlines()]
    changed = [line for line in lines if line["event"] == EVENT_CHANGED]
    assert [line["session_id"] for line in changed] == sorted(written)
    assert [line["digest"] for line in changed] == [written[sid] for sid in sorted(written)]
    assert [line["gseq"] for line in changed] == sorted(line["gseq"] for line in changed)
    assert_replays_clean(tmp_path / "w1.jsonl")


def test_restore_point_is_one_index_scan(store: PgStore, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
            "SELECT 's' || (i / 10), i % 10 + 1, 'ask', NULL, md5(i::text), '{}' "
            "FROM generate_series(0, 49999) AS i"
        )
        db.execute("ANALYZE modefsm_records")
        plan = db.execute("EXPLAIN (FORMAT JSON) " + HEAD_QUERY, ("s77",)).fetchone()[0][0]["Plan"]
    assert plan["Node Type"] == "Limit"
    scan = plan["Plans"][0]
    assert scan["Node Type"] == "Index Scan"
    assert scan["Scan Direction"] == "Backward"
    assert scan["Index Name"] == "modefsm_records_pkey"
    assert store.restore_point("s77") == RestorePoint("s77", "ask", 10, None, _md5(779))


def _scans(plan: dict[str, Any]) -> set[tuple[str, str]]:
    """Every scan of *plan*: (node type, the table or, for an index's part of it, index)."""
    found: set[tuple[str, str]] = set()
    if "Relation Name" in plan or "Index Name" in plan:
        found.add((plan["Node Type"], plan.get("Index Name") or plan["Relation Name"]))
    for child in plan.get("Plans", ()):
        found |= _scans(child)
    return found


def test_the_catch_up_is_one_query_of_index_scans(store: PgStore, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
            "SELECT 's' || (i / 10), i % 10 + 1, 'ask', NULL, md5(i::text), '{}' "
            "FROM generate_series(0, 49999) AS i"
        )
        db.execute(
            "INSERT INTO modefsm_decisions "
            "(session_id, mode_seq, at_gseq, digest, outcome, record) "
            "SELECT 's' || (i / 10), 1, 1, md5(i::text), "
            "CASE WHEN i % 3 = 0 THEN 'allow_always' END, '{}' "
            "FROM generate_series(0, 49999) AS i"
        )
        db.execute("ANALYZE modefsm_records")
        db.execute("ANALYZE modefsm_decisions")
        params = {"sid": "s77", "mark": 0, "limit": 1024}
        explained = db.execute("EXPLAIN (FORMAT JSON) " + CATCH_UP_QUERY, params).fetchone()
    scans = _scans(explained[0][0]["Plan"])
    assert {node for node, _ in scans} <= {  # no Seq Scan: each is an index's range
        "Index Scan", "Index Only Scan", "Bitmap Index Scan", "Bitmap Heap Scan",
    }  # fmt: skip
    assert {name for _, name in scans if name.endswith("_pkey")} == {
        "modefsm_records_pkey",
        "modefsm_decisions_pkey",
    }
    assert scans - {(n, t) for n, t in scans if t.endswith("_pkey")} <= {
        ("Bitmap Heap Scan", "modefsm_decisions"),
    }


def _md5(i: int) -> str:
    import hashlib

    return hashlib.md5(str(i).encode()).hexdigest()  # noqa: S324 - matches md5() in SQL


def test_a_held_table_lock_is_store_busy_then_recovers(postgres_url: str, tmp_path: Path) -> None:
    log = TransitionLog.to_file(tmp_path / "w.jsonl")
    store = PgStore(postgres_url, log=log, lock_timeout=0.3)
    head = create(store, "s")
    with psycopg.connect(postgres_url) as holder:
        holder.execute("LOCK TABLE modefsm_records IN ACCESS EXCLUSIVE MODE")
        start = time.monotonic()
        with pytest.raises(StoreBusy, match=r"did not answer within 0\.3 s.*nothing was written"):
            change(store, head, "code")
        assert time.monotonic() - start < 3
        holder.rollback()
    assert store.restore_point("s") == head
    assert change(store, head, "code").seq == 2
    store.close()
    log.close()


_BLOCKED_WRITER = """
import io, sys
from modefsm.log import TransitionLog
from modefsm.store._postgres import PgStore
from tests.store.test_postgres import change
store = PgStore(sys.argv[1], log=TransitionLog.to_stream(io.BytesIO()), lock_timeout=60)
head = store.restore_point("s")
print("ready", flush=True)
sys.stdin.readline()
change(store, head, "code")
"""


def test_an_insert_sent_before_a_sigkill_never_commits_after_it(
    store: PgStore, postgres_url: str
) -> None:
    """What docs/durability.md's kill row says: a worker's statement can outlive the worker (its
    ``pg_stat_activity`` row, ``modefsm/PID``, shows when the outcome is settled), but an
    ``INSERT`` whose ``COMMIT`` was never sent is rolled back when it ends."""
    head = create(store, "s")
    activity = "SELECT wait_event_type FROM pg_stat_activity WHERE application_name = %s"
    with subprocess.Popen(
        [sys.executable, "-c", _BLOCKED_WRITER, postgres_url],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as writer:  # fmt: skip
        assert writer.stdin is not None
        assert writer.stdout is not None
        assert writer.stdout.readline() == "ready\n"
        name = f"modefsm/{writer.pid}"
        deadline = time.monotonic() + 30
        with psycopg.connect(postgres_url) as holder, psycopg.connect(postgres_url) as watch:
            watch.autocommit = True
            assert watch.execute(activity, (name,)).fetchall() == [("Client",)]  # idle, named
            holder.execute("LOCK TABLE modefsm_records IN ACCESS EXCLUSIVE MODE")
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while watch.execute(activity, (name,)).fetchall() != [("Lock",)]:
                assert writer.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.01)
            writer.kill()
            assert writer.wait(10) == -signal.SIGKILL
            assert watch.execute(activity, (name,)).fetchall() == [("Lock",)]  # still waiting
            holder.rollback()  # the lock is released: the dead worker's INSERT runs ...
            while watch.execute(activity, (name,)).fetchall():
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert store.restore_point("s") == head  # ... and is rolled back: no COMMIT came
    assert list(check_one_history(postgres_url)) == [("s", 1)]


def test_terminated_connection_reconnects_once_else_clear_error(
    store: PgStore, postgres_url: str, postgres_server: str
) -> None:
    head = create(store, "s")
    dbname = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(TERMINATE, (dbname,))
        head = change(store, head, "code")  # the one reconnection carries it
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false")
        admin.execute(TERMINATE, (dbname,))
        with pytest.raises(
            LogError, match=r"cannot connect to the session store 127\.0\.0\.1:\d+/t_"
        ):
            change(store, head, "ask")
        with pytest.raises(LogError, match="cannot connect to the session store"):
            store.restore_point("s")
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true")
    assert store.restore_point("s") == head
    assert change(store, head, "ask").seq == 3
    assert list(check_one_history(postgres_url)) == [("s", 1), ("s", 2), ("s", 3)]


def test_unreachable_server_and_other_schema_are_refused(postgres_url: str) -> None:
    with pytest.raises(LogError, match=r"cannot connect to the session store 127\.0\.0\.1:1/x"):
        PgStore("postgresql://postgres@127.0.0.1:1/x")
    open_store(postgres_url).close()  # creates the schema
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("UPDATE modefsm_schema SET version = 99")
    with pytest.raises(LogError, match="has schema version 99; this modefsm uses 2"):
        open_store(postgres_url)
    with pytest.raises(LogError, match="not a postgresql:// URL"):
        open_store("mysql://x")


# -- several processes --------------------------------------------------------------------


def spawn(url: str, seed: int, changes: int, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    """A writer process acknowledging to ``NAME.acks`` and mirroring to ``NAME.jsonl``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.pg_writer", url, str(seed), str(changes),
         str(tmp / "sessions"), str(tmp / f"{name}.acks"), str(tmp / f"{name}.jsonl")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


FORK = multiprocessing.get_context("fork")


def fork(url: str, seed: int, changes: int, tmp: Path, name: str) -> BaseProcess:
    """The same writer, forked from this process (starts in milliseconds, SIGKILLable)."""
    args = (url, seed, changes, str(tmp / "sessions"), str(tmp / f"{name}.acks"))
    proc = FORK.Process(target=write, args=(*args, str(tmp / f"{name}.jsonl")), daemon=True)
    proc.start()
    return proc


def acks_of(tmp: Path, name: str) -> int:
    path = tmp / f"{name}.acks"
    return path.stat().st_size if path.exists() else 0


def setup_sessions(url: str, tmp: Path, count: int) -> None:
    creator = PgStore(url, log=TransitionLog.to_file(tmp / "creator.jsonl"))
    sids = [f"s{i}" for i in range(count)]
    for sid in sids:
        create(creator, sid)
    creator.close()
    (tmp / "sessions").write_text("\n".join(sids))


def acknowledged(tmp: Path) -> dict[tuple[str, int], str]:
    acks: dict[tuple[str, int], str] = {}
    lines = [line for path in sorted(tmp.glob("*.acks")) for line in path.read_text().splitlines()]
    for line in lines:
        sid, seq, digest = line.split()
        assert (sid, int(seq)) not in acks, f"acknowledged twice: {line}"
        acks[sid, int(seq)] = digest
    return acks


def test_two_processes_racing_on_one_session_make_one_history(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_sessions(postgres_url, tmp_path, 1)
    gate = tmp_path / "go"
    monkeypatch.setenv("MODEFSM_TEST_GATE", str(gate))
    procs = [spawn(postgres_url, seed, 150, tmp_path, f"w{seed}") for seed in (1, 2)]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.touch()  # both are connected and hold the head: they race from here
    results = [orjson.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [r["done"] for r in results] == [150, 150]
    assert sum(r["moved"] for r in results) > 0  # they did race
    stored = check_one_history(postgres_url)
    acks = acknowledged(tmp_path)
    assert len(stored) == 301  # the creation + every acknowledged change, no more
    assert all(stored[key] == digest for key, digest in acks.items())


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_sigkilled_writers_lose_nothing_acknowledged(
    postgres_url: str, tmp_path: Path, workers: int
) -> None:
    setup_sessions(postgres_url, tmp_path, 6)
    rng = random.Random(workers)
    running = {f"w{i}": fork(postgres_url, i, 10**6, tmp_path, f"w{i}") for i in range(workers)}
    started, kills = workers, 0
    while (
        kills < 20 * soak_factor()
    ):  # kill writers that are acknowledging changes, at random points
        time.sleep(rng.uniform(0.01, 0.08))
        writing = sorted(name for name in running if acks_of(tmp_path, name))
        if not writing:
            continue
        victim = running.pop(rng.choice(writing))
        os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
        victim.join()
        assert victim.exitcode == -signal.SIGKILL, victim.exitcode
        kills += 1
        running[f"w{started}"] = fork(postgres_url, started, 10**6, tmp_path, f"w{started}")
        started += 1
    for proc in running.values():
        os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
        proc.join()
    killed_acks = len(acknowledged(tmp_path))
    finishing = [fork(postgres_url, started + i, 40, tmp_path, f"f{i}") for i in range(2)]
    for proc in finishing:
        proc.join(timeout=120)
        assert proc.exitcode == 0, proc.exitcode  # survivors keep writing after the kills
    stored = check_one_history(postgres_url)
    acks = acknowledged(tmp_path)
    assert killed_acks >= 20
    assert len(acks) == killed_acks + 80
    missing = {key: digest for key, digest in acks.items() if stored.get(key) != digest}
    assert not missing, f"acknowledged but not stored: {sorted(missing)[:5]}"
