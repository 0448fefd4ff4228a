"""The transition log rotated while ``modefsm serve --log`` serves, by real tools.

1,000 changes of 20 sessions go to a real ``modefsm serve`` over pipes while its log is
rotated four ways, each with the commands an administrator (or logrotate) runs:

1. copy and truncate under the log's lock (``flock LOG -c 'cp LOG LOG.1 && truncate -s
   0 LOG'``), with changes in flight;
2. rename and ``SIGHUP`` (``mv LOG LOG.2; kill -HUP PID``), with changes in flight;
3. plain copy and truncate (``cp LOG LOG.3; truncate -s 0 LOG``) between two changes;
4. rename without a signal (``mv LOG LOG.4``) between two changes: the next record follows.

Then: every change was acknowledged (none failed with ``[Errno 22]``), the agent ends
cleanly (no traceback), ``modefsm replay LOG.1 LOG.2 LOG.3 LOG.4 LOG --verify`` verifies
one chain with every record, a session closed before the rotations and loaded after them
comes back in its mode (from the index's points of an earlier file), and a restart
restores every session in the mode of its last acknowledged change.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.protocol.http_wire import http_process, post

from .harness import TIMEOUT, Agent, frame

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

SESSIONS = 20
CHANGES = 1_000
MODES = ("ask", "architect", "code")
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'


IDS = itertools.count(1)


def start(log: Path) -> Agent:
    """``modefsm serve --log LOG`` over pipes, its answers read by a thread."""
    served = Agent(log=log)
    served.read()
    return served


def send(served: Agent, method: str, params: dict[str, Any]) -> int:
    """Send a request; its id."""
    request_id = next(IDS)
    served.send(frame(request_id, method, params))
    return request_id


def result(served: Agent, method: str, params: dict[str, Any]) -> Any:
    return served.result(next(IDS), method, params)


def run(*command: str, cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (command, done.stderr)


def test_copytruncate_and_rename_during_1000_changes(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    served = start(log)
    try:
        result(served, "initialize", {"protocolVersion": 1})
        sessions = [
            result(served, "session/new", {"cwd": ".", "mcpServers": []})["sessionId"]
            for _ in range(SESSIONS)
        ]
        truth = dict.fromkeys(sessions, "ask")  # each session's last acknowledged mode
        closed = sessions[0]  # changed once, closed, loaded again after the rotations
        result(served, "session/set_mode", {"sessionId": closed, "modeId": "code"})
        truth[closed] = "code"
        result(served, "session/close", {"sessionId": closed})
        change_while_rotating(served, log, sessions[1:], truth)
        load = result(served, "session/load", {"cwd": ".", "sessionId": closed, "mcpServers": []})
        assert load["modes"]["currentModeId"] == "code"  # from the index, after 4 rotations
        code, stderr = served.finish()
    finally:
        served.kill()
    assert (code, stderr) == (0, "")
    files = [f"modes.jsonl.{n}" for n in (1, 2, 3, 4)] + ["modes.jsonl"]
    report = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", *files, "--verify", "--summary"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (report.returncode, report.stderr) == (0, ""), report.stdout
    lines = report.stdout.splitlines()
    assert lines[-1] == "RESULT  clean"
    records = SESSIONS + 1 + CHANGES  # creations, the closed session's change, the changes
    assert lines[-2].startswith(f"CHAIN  {records} records verified, 0 without a digest; head ")
    finals = {line.split()[0]: line.split()[1] for line in lines[1 : 1 + SESSIONS]}
    assert finals == truth
    restarted = start(log)  # a restart restores every acknowledged change
    try:
        result(restarted, "initialize", {"protocolVersion": 1})
        for session_id, mode in truth.items():
            load = {"cwd": ".", "sessionId": session_id, "mcpServers": []}
            assert result(restarted, "session/load", load)["modes"]["currentModeId"] == mode
        assert restarted.finish() == (0, "")
    finally:
        restarted.kill()


def change_while_rotating(
    served: Agent, log: Path, sessions: list[str], truth: dict[str, str]
) -> None:
    """Make CHANGES changes (20 in flight at most), rotating the log four times."""
    rotations = {
        150: ("flock", str(log), "-c", f"cp {log} {log}.1 && truncate -s 0 {log}"),
        400: "rename and SIGHUP",
        650: "copy and truncate",
        850: "rename",
    }
    pending: list[int] = []  # the ids of the changes in flight
    rotating: threading.Thread | None = None
    for number in range(CHANGES):
        session_id = sessions[number % len(sessions)]
        mode = MODES[(MODES.index(truth[session_id]) + 1 + number % 2) % len(MODES)]
        how = rotations.get(number)
        if how in {"copy and truncate", "rename"}:
            settle(served, pending)  # nothing in flight: between two changes
            if how == "rename":
                log.rename(log.with_name("modes.jsonl.4"))
            else:
                run("cp", str(log), f"{log}.3", cwd=log.parent)
                run("truncate", "-s", "0", str(log), cwd=log.parent)
        elif how is not None:  # while changes are in flight
            rotating = threading.Thread(target=rotate, args=(how, log, served))
            rotating.start()
        pending.append(send(served, "session/set_mode", {"sessionId": session_id, "modeId": mode}))
        truth[session_id] = mode  # acknowledged in the order sent
        if len(pending) >= 20:
            settle(served, pending)
        if rotating is not None and not rotating.is_alive():
            rotating.join()
            rotating = None
    settle(served, pending)
    if rotating is not None:
        rotating.join(TIMEOUT)


def rotate(how: tuple[str, ...] | str, log: Path, served: Agent) -> None:
    """Rotate *log* while changes are in flight (in a thread)."""
    if how == "rename and SIGHUP":
        log.rename(log.with_name("modes.jsonl.2"))
        served.process.send_signal(signal.SIGHUP)
        return
    assert isinstance(how, tuple)
    run(*how, cwd=log.parent)


def settle(served: Agent, pending: list[int]) -> None:
    """Wait for the answers of the changes in flight: each acknowledged."""
    for request in pending:
        answer = served.response(request)
        assert answer.get("result") == {}, answer
    pending.clear()


def wait_for(check: Any, what: str) -> None:
    """Wait (generously) until ``check()`` is true."""
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_sighup_moves_an_idle_http_server_to_the_new_file(tmp_path: Path):
    """``serve --http``: no change needed; the signal itself opens the new file."""
    log = tmp_path / "modes.jsonl"
    with http_process(log) as (url, process):
        assert post(url, INITIALIZE)[0] == 200
        log.rename(tmp_path / "modes.jsonl.1")
        process.send_signal(signal.SIGHUP)
        wait_for(log.exists, "SIGHUP did not open a new log")
        assert log.read_bytes() == b""  # created by the signal, nothing written yet
        assert process.poll() is None  # and it serves on


def test_two_processes_follow_a_renamed_log_in_turn(tmp_path: Path):
    """Two `serve --log LOG` share a session; LOG is renamed with no signal: each follows the
    new file at its next record (reading the old one's last lines first), so the session's
    records stay in order across the files and the chain continues."""
    log = tmp_path / "modes.jsonl"
    first, second = start(log), start(log)
    try:
        for served in (first, second):
            result(served, "initialize", {"protocolVersion": 1})
        session_id = result(first, "session/new", {"cwd": ".", "mcpServers": []})["sessionId"]
        load = {"cwd": ".", "sessionId": session_id, "mcpServers": []}
        result(second, "session/load", load)
        change = {"sessionId": session_id}
        result(first, "session/set_mode", {**change, "modeId": "architect"})
        log.rename(tmp_path / "modes.jsonl.1")
        result(second, "session/set_mode", {**change, "modeId": "code"})  # moves, sees seq 2
        result(first, "session/set_mode", {**change, "modeId": "ask"})  # moves, sees seq 3
        assert result(second, "session/load", load)["modes"]["currentModeId"] == "ask"
        assert (first.finish(), second.finish()) == ((0, ""), (0, ""))
    finally:
        first.kill()
        second.kill()
    old_header, *old = map(json.loads, (tmp_path / "modes.jsonl.1").read_bytes().splitlines())
    new_header, *new = map(json.loads, log.read_bytes().splitlines())
    # one header in each file, though both processes write to the new one
    assert (old_header["event"], new_header["event"]) == ("modefsm.spec", "modefsm.spec")
    assert [(r["seq"], r["to_mode"]) for r in old] == [(1, "ask"), (2, "architect")]
    assert [(r["seq"], r["to_mode"]) for r in new] == [(3, "code"), (4, "ask")]
    assert (new_header["prev"], new[0]["prev"]) == (old[-1]["digest"], new_header["digest"])
    report = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", "modes.jsonl.1", "modes.jsonl", "--verify"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert report.stdout.splitlines()[-1] == "RESULT  clean", report.stdout


def test_the_end_of_input_right_after_a_copytruncate(tmp_path: Path):
    """The issue's traceback at the end of input (a read at -1 of an empty file): gone."""
    log = tmp_path / "modes.jsonl"
    served = start(log)
    try:
        result(served, "initialize", {"protocolVersion": 1})
        session_id = result(served, "session/new", {"cwd": ".", "mcpServers": []})["sessionId"]
        result(served, "session/set_mode", {"sessionId": session_id, "modeId": "code"})
        run("cp", str(log), f"{log}.1", cwd=tmp_path)
        run("truncate", "-s", "0", str(log), cwd=tmp_path)
        assert served.finish() == (0, "")
    finally:
        served.kill()
    assert log.read_bytes() == b""
    restarted = start(log)
    try:
        result(restarted, "initialize", {"protocolVersion": 1})
        load = {"cwd": ".", "sessionId": session_id, "mcpServers": []}
        assert result(restarted, "session/load", load)["modes"]["currentModeId"] == "code"
        result(restarted, "session/set_mode", {"sessionId": session_id, "modeId": "ask"})
        assert restarted.finish() == (0, "")
    finally:
        restarted.kill()
    report = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", "modes.jsonl.1", "modes.jsonl", "--verify"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert report.stdout.splitlines()[-1] == "RESULT  clean", report.stdout
