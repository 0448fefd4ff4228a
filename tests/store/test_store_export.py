"""`modefsm store export URL`: the database's records, replayed as one history per session."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from modefsm import ModeEngine, ModeSpec, TransitionLog, preset
from tests.replay.golden_workers import clean_files

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

MODEFSM = (sys.executable, "-m", "modefsm")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MODEFSM, *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=60
    )


def replay_summary(cwd: Path, name: str) -> tuple[int, list[str]]:
    done = run("replay", name, "--verify", "--summary", cwd=cwd)
    assert done.stderr == ""
    return done.returncode, done.stdout.splitlines()


def test_an_export_replays_clean_as_the_workers_files_do(postgres_url: str, tmp_path: Path):
    clean_files(postgres_url)  # three workers, eight committed records (and a rejection)
    done = run("store", "export", postgres_url, "-o", "all.jsonl", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "exported 8 records\n")
    lines = (tmp_path / "all.jsonl").read_bytes().splitlines()
    header = orjson.loads(lines[0])
    assert header["event"] == "modefsm.store_export"
    assert header["schema"] == 2
    spec = orjson.loads(lines[1])  # the header of the spec the workers named, once
    seed = preset("seed")
    assert (spec["event"], spec["spec_hash"], spec["definition"], spec["prev"]) == (
        "modefsm.spec",
        seed.content_hash,
        seed.definition,
        None,
    )
    assert [orjson.loads(line)["gseq"] for line in lines[2:]] == [1, 2, 3, 4, 5, 7, 8, 9]
    status, report = replay_summary(tmp_path, "all.jsonl")
    assert status == 0
    assert report == [
        "SESSIONS (3)",
        "  sess_a  ask        (seq 4, spec seed, 4 records)",
        "  sess_b  code       (seq 2, spec seed, 2 records)",
        "  sess_c  architect  (seq 2, spec seed, 2 records)",
        "CHAIN  8 records verified, 0 without a digest; 1 files merged by gseq",
        "  all.jsonl  head - (an export: chained by session)",
        "RESULT  clean",
    ]
    # standard output: the same bytes
    again = subprocess.run(
        [*MODEFSM, "store", "export", postgres_url], capture_output=True, check=False, timeout=60
    )
    assert again.stdout == (tmp_path / "all.jsonl").read_bytes()


def test_an_edited_or_deleted_record_of_an_export_is_found(postgres_url: str, tmp_path: Path):
    clean_files(postgres_url)
    assert run("store", "export", postgres_url, "-o", "all.jsonl", cwd=tmp_path).returncode == 0
    lines = (tmp_path / "all.jsonl").read_bytes().splitlines()
    edited = orjson.loads(lines[4])  # gseq 3: sess_a seq 2, ask -> architect
    edited["to_mode"] = "code"
    (tmp_path / "edited.jsonl").write_bytes(
        b"\n".join([*lines[:4], orjson.dumps(edited), *lines[5:]]) + b"\n"
    )
    status, report = replay_summary(tmp_path, "edited.jsonl")
    assert status == 1
    assert report[4:7] == [
        "VIOLATIONS (2)",
        (
            "  edited.jsonl:5: session 'sess_a' seq 2: tampered: the record was changed after it "
            "was written: its digest does not match"
        ),
        (
            "  edited.jsonl:6: session 'sess_a' seq 3: from_mode: from_mode 'architect', but seq 2 "
            "(edited.jsonl:5) left the session in 'code'"
        ),
    ]
    (tmp_path / "deleted.jsonl").write_bytes(b"\n".join([*lines[:4], *lines[5:]]) + b"\n")
    status, report = replay_summary(tmp_path, "deleted.jsonl")
    assert status == 1
    assert report[4:6] == [
        "VIOLATIONS (2)",
        (
            "  deleted.jsonl:5: session 'sess_a' seq 3: gap: seq 3 follows seq 1 "
            "(deleted.jsonl:3): 1 record is missing"
        ),
    ]


def test_export_refuses_other_urls_and_an_existing_file(tmp_path: Path):
    done = run("store", "export", "mysql://x", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "modefsm store: mysql://x: not a postgresql:// URL\n"
    (tmp_path / "old.jsonl").write_text("keep\n")
    done = run("store", "export", "postgresql://nobody@127.0.0.1:1/x", "-o", "old.jsonl",
               cwd=tmp_path)  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "modefsm store: old.jsonl: exists already; give a new file\n"
    assert (tmp_path / "old.jsonl").read_text() == "keep\n"
    done = run("store", "export", "postgresql://nobody@127.0.0.1:1/x", "-o", "new.jsonl",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("modefsm store: cannot connect to the session store 127.0.0.1:1/")
    assert not (tmp_path / "new.jsonl").exists()


def test_an_export_is_0600_whatever_the_umask(postgres_url: str, tmp_path: Path):
    clean_files(postgres_url)
    done = subprocess.run(
        [*MODEFSM, "store", "export", postgres_url, "-o", "all.jsonl"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
        preexec_fn=lambda: os.umask(0),
    )
    assert (done.returncode, done.stderr) == (0, "exported 8 records\n")
    assert stat.S_IMODE((tmp_path / "all.jsonl").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("record", "kind"),
    [("[1, 2]", "a JSON array"), ('"text"', "a JSON string"), ("7", "a JSON number")],
)
def test_a_malformed_row_is_refused_and_nothing_is_written(
    postgres_url: str, tmp_path: Path, record: str, kind: str
):
    import psycopg

    clean_files(postgres_url)  # gseq 1 to 9 (6 refused): then the malformed row, gseq 10
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO modefsm_records (session_id, seq, to_mode, previous, digest, record) "
            "VALUES ('sess_x', 1, 'ask', NULL, 'd', %s::jsonb)",
            (record,),
        )
    from modefsm.store._postgres import _display

    where = _display(postgres_url)
    expected = f"modefsm store: {where}: the record of gseq 10 is {kind}, not a JSON object\n"
    done = run("store", "export", postgres_url, "-o", "all.jsonl", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no partial export, no leftover
    done = run("store", "export", postgres_url, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)


def test_an_export_and_a_workers_file_of_a_custom_spec_replay_without_spec(
    postgres_url: str, tmp_path: Path
):
    """The header travels: the worker's file and the export both name the spec."""
    from modefsm.store._postgres import PgStore

    spec = ModeSpec.from_data(
        {
            "name": "review",
            "initial": "draft",
            "modes": [{"id": "draft", "name": "Draft"}, {"id": "review", "name": "Review"}],
        }
    )
    log = TransitionLog.to_file(tmp_path / "w1.jsonl")
    store = PgStore(postgres_url, log=log)
    try:
        engine = ModeEngine(spec, store=store)
        ModeEngine(spec, store=store)  # a second engine of the store: no second row
        engine.new_session("s1")
        engine.change("s1", "review", "set_mode")
    finally:
        store.close()
        log.close()
    done = run("store", "export", postgres_url, "-o", "all.jsonl", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "exported 2 records\n")
    events = [
        orjson.loads(line)["event"] for line in (tmp_path / "all.jsonl").read_bytes().splitlines()
    ]
    assert events == [
        "modefsm.store_export",
        "modefsm.spec",
        "modefsm.session_created",
        "modefsm.mode_changed",
    ]
    for name in ("all.jsonl", "w1.jsonl"):
        status, report = replay_summary(tmp_path, name)
        assert (status, report[1], report[-1]) == (
            0,
            "  s1  review  (seq 2, spec review, 2 records)",
            "RESULT  clean",
        )
