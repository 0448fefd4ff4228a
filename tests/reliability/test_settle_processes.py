"""Two processes restoring a session at the same moment settle its abandoned ask once.

A real process (:mod:`tests.reliability.settle_worker` ``ask``) opens one session per round,
each with a tool call the ``ask`` mode asks the client about, and is SIGKILLed while every
request waits. Two restoring processes, both blocked reading their input, are then handed
the same session id at once, round after round: each restores it (``session/load``) and
settles what the killed process left open. The store (the shared log file, or a real
PostgreSQL database) must hold exactly one ``abandoned`` record per call, the whole record
list asserted; ``modefsm replay --verify`` calls it clean; both clients see the call
``failed``.
"""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from modefsm import preset
from modefsm.log import title_digest
from tests.store.two_processes import export_store, replay

from .harness import TIMEOUT, assert_replay_clean

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

ROUNDS = 48
"""Sessions raced per store: enough that the check-then-write of the old settlement loses
(on the file store it did in about one round in ten, on PostgreSQL in most)."""
RESTARTED = "Failed: the agent restarted before the permission request was answered."
TITLE = "Edit notes.txt"


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.settle_worker", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )


def read_line(stream: IO[str] | None) -> str:
    """The worker's next line, within TIMEOUT (a hung worker fails the test: it is killed)."""
    assert stream is not None
    reader = concurrent.futures.ThreadPoolExecutor(1)
    try:  # the thread ends with the read: once the line comes, or the worker is killed
        text = reader.submit(stream.readline).result(TIMEOUT)
    except TimeoutError:
        pytest.fail(f"a worker said nothing for {TIMEOUT:g} s")
    finally:
        reader.shutdown(wait=False)
    assert text, "the worker ended"
    return text.strip()


def killed_while_asking(store: str, folder: Path) -> None:
    """The ``ask`` worker opens ROUNDS sessions, each asking; SIGKILL it while they wait."""
    args = ("ask", store, str(folder / "journal"), str(folder / "asker.jsonl"), str(ROUNDS))
    with worker(*args) as asking:
        try:
            assert read_line(asking.stdout) == "ready"
        finally:
            asking.send_signal(signal.SIGKILL)
            asking.wait(TIMEOUT)
    assert asking.returncode == -signal.SIGKILL


@pytest.fixture
def restorers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        with process:  # its pipes closed, waited for
            pass


def race(store: str, folder: Path, restorers: list[subprocess.Popen[str]]) -> list[list[Any]]:
    """Both restorers load each session at once; what each client got, by round."""
    journal = str(folder / "journal")
    restorers.extend(worker("restore", store, journal, str(folder / f"{n}.jsonl")) for n in "12")
    for process in restorers:
        assert read_line(process.stdout) == "open"
    seen = []
    for n in range(ROUNDS):
        for process in restorers:  # both are blocked reading: they wake together
            assert process.stdin is not None
            process.stdin.write(f"sess_{n}\n")
            process.stdin.flush()
        seen.append([orjson.loads(read_line(process.stdout)) for process in restorers])
    for process in restorers:
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(TIMEOUT) == 0
        assert process.stdout is not None
        assert process.stdout.read() == ""
    return seen


def expected_updates(n: int) -> list[dict[str, Any]]:
    call = f"call_{n}"
    return [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": call,
            "title": TITLE,
            "kind": "edit",
            "status": "pending",
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": RESTARTED}}],
        },
    ]


def check_clients(seen: list[list[Any]]) -> None:
    """Each client saw the call pending, then failed, once (the kept conversation).

    A restorer that read the journal before the other ended the call ends it itself: the
    journal then keeps two ``failed`` updates, and a client may be shown both.
    """
    for n, clients in enumerate(seen):
        first, failed = expected_updates(n)
        for updates in clients:
            assert updates[0] == first
            assert updates[1:] in ([failed], [failed, failed]), (n, updates)


def abandoned(n: int) -> dict[str, Any]:
    return {
        "session_id": f"sess_{n}",
        "tool_call_id": f"call_{n}",
        "kind": "edit",
        "tool": None,
        "title_digest": title_digest(TITLE),
        "rule": None,
        "decision": "ask",
        "outcome": "abandoned",
        "mode": "ask",
        "mode_seq": 1,
        "spec": "seed",
        "spec_hash": preset("seed").content_hash,
        "event": "modefsm.tool_decided",
    }


def created(n: int) -> dict[str, Any]:
    return {
        "session_id": f"sess_{n}",
        "seq": 1,
        "event": "modefsm.session_created",
        "to_mode": "ask",
        "cwd": "/",
    }


def lines(data: bytes) -> list[dict[str, Any]]:
    """The records of a log or an export, the fields that vary left out."""
    kept = []
    for line in data.splitlines():
        record = orjson.loads(line)
        if record["event"] == "modefsm.tool_decided":
            kept.append({k: v for k, v in record.items() if k in abandoned(0)})
        elif record["event"] == "modefsm.session_created":
            kept.append({k: v for k, v in record.items() if k in created(0)})
        else:
            kept.append({"event": record["event"]})
    return kept


def test_two_processes_settle_each_abandoned_ask_once_in_the_file_store(
    tmp_path: Path, restorers: list[subprocess.Popen[str]]
) -> None:
    log = tmp_path / "modes.jsonl"
    killed_while_asking(str(log), tmp_path)
    seen = race(str(log), tmp_path, restorers)
    settled = [abandoned(n) for n in range(ROUNDS)]
    records = lines(log.read_bytes())
    assert records[0] == {"event": "modefsm.spec"}
    assert records[1 : ROUNDS + 1] == [created(n) for n in range(ROUNDS)]
    # the settlements' order is the race's: each call once, whoever wrote it
    rest = records[ROUNDS + 1 :]
    assert sorted(rest, key=lambda r: r["session_id"]) == sorted(
        settled, key=lambda r: r["session_id"]
    )
    assert_replay_clean(log)
    check_clients(seen)


def test_two_processes_settle_each_abandoned_ask_once_in_postgresql(
    postgres_url: str, tmp_path: Path, restorers: list[subprocess.Popen[str]]
) -> None:
    killed_while_asking(postgres_url, tmp_path)
    seen = race(postgres_url, tmp_path, restorers)
    export = tmp_path / "export.jsonl"
    export_store(postgres_url, export)
    records = lines(export.read_bytes())
    assert records[0] == {"event": "modefsm.store_export"}
    assert records[1] == {"event": "modefsm.spec"}
    expected = [line for n in range(ROUNDS) for line in (created(n), abandoned(n))]
    assert records[2:] == expected
    report = replay(tmp_path, export.name)
    assert report[-1] == "RESULT  clean", report
    check_clients(seen)
