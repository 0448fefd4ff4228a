"""A 2,000-mode spec file, through real processes: ``serve``, ``diagram`` and ``replay``.

Start-up, diagrams and replay take time linear in the spec (docs/specs.md); what no
picture can show in bounded time is refused with the documented one-line error and exit
status 2, never a traceback. Time limits here are generous bounds against a hang or a
quadratic start-up (seconds on 2 cores), not benchmarks.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from modefsm.diagram import DRAWN_MAX, render
from modefsm.spec import load_spec

from .harness import TIMEOUT, read_log, strict_loads

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

MODES = 2000
BOUND = 20.0
"""Seconds a command on the 2,000-mode spec may take."""


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Any mode to any mode, but for m1 (only to m0 and m2); a ``$previous`` switch in m0;
    m1999 is not restorable."""
    modes: list[dict[str, Any]] = [{"id": f"m{i}", "name": f"Mode {i}"} for i in range(MODES)]
    modes[-1] |= {"restorable": False, "fallback": "m0"}
    option = {"optionId": "back", "name": "Back", "kind": "allow_once", "target": "$previous"}
    data = {
        "name": "big",
        "initial": "m0",
        "modes": modes,
        "client_changes": {"m1": ["m0", "m2"]},
        "switches": [
            {
                "source": ["m0"],
                "title": "Switch?",
                "options": [option, {"optionId": "no", "name": "No", "kind": "reject_once"}],
            }
        ],
    }
    path = tmp_path_factory.mktemp("scale") / "big.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


class Agent:
    """``modefsm serve`` over pipes, its stdout read by a thread and parsed strictly."""

    def __init__(self, *args: str) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "modefsm", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notifications: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.next_id = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(strict_loads(line))

    def call(self, method: str, params: Any) -> dict[str, Any]:
        """Send a request; return its whole response frame."""
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")
        self.process.stdin.flush()
        while True:
            try:
                message = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail(f"modefsm serve did not answer {method} in {TIMEOUT} s")
            if message.get("id") == self.next_id and "method" not in message:
                return message
            self.notifications.append(message)

    def close(self) -> tuple[int, bytes]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(TIMEOUT)
        self.reader.join(TIMEOUT)
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self.process.stdout.close()
        with self.process.stderr:
            return code, self.process.stderr.read()


def modefsm(*args: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", *args],
        capture_output=True,
        timeout=TIMEOUT * 2,
        check=False,
    )
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def drawn(spec_file: Path) -> dict[str, tuple[subprocess.CompletedProcess[bytes], float]]:
    """``modefsm diagram SPEC --format F`` for each text format, run once."""
    return {fmt: modefsm("diagram", str(spec_file), "--format", fmt) for fmt in TEXT_FORMATS}


TEXT_FORMATS = ("mermaid", "dot", "md")


@pytest.fixture(scope="module")
def served_log(spec_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A log of one session of the big spec: m0 -> m7 -> m1999 -> m1 -> m2 -> m1998."""
    log = tmp_path_factory.mktemp("served") / "big.log"
    agent = Agent("--spec", str(spec_file), "--log", str(log))
    agent.call("initialize", {"protocolVersion": 1})
    sid = agent.call("session/new", {"cwd": ".", "mcpServers": []})["result"]["sessionId"]
    for mode_id in ("m7", "m1999", "m1", "m2", "m1998"):
        assert "result" in agent.call("session/set_mode", {"sessionId": sid, "modeId": mode_id})
    assert agent.close() == (0, b"")
    return log, sid


class TestServe:
    """``serve`` starts in seconds, advertises every mode, and enforces the policy."""

    def test_starts_advertises_every_mode_and_changes_modes(self, spec_file, tmp_path):
        log = tmp_path / "big.log"
        agent = Agent("--spec", str(spec_file), "--log", str(log))
        try:
            initialized = agent.call("initialize", {"protocolVersion": 1})
            created = agent.call("session/new", {"cwd": ".", "mcpServers": []})
            started = time.monotonic() - agent.started
            session_id = created["result"]["sessionId"]
            moved = agent.call("session/set_mode", {"sessionId": session_id, "modeId": "m1500"})
            agent.call("session/set_mode", {"sessionId": session_id, "modeId": "m1"})
            refused = agent.call("session/set_mode", {"sessionId": session_id, "modeId": "m9"})
        finally:
            code, stderr = agent.close()

        modes = created["result"]["modes"]
        options = created["result"]["configOptions"][0]["options"]
        assert started < BOUND, f"initialize and session/new took {started:.1f} s"
        assert initialized["result"]["protocolVersion"] == 1
        assert modes["currentModeId"] == "m0"
        assert [m["id"] for m in modes["availableModes"]] == [f"m{i}" for i in range(MODES)]
        assert [o["value"] for o in options] == [f"m{i}" for i in range(MODES)]
        assert moved == {"jsonrpc": "2.0", "id": 3, "result": {}}
        assert refused["error"]["code"] == -32602
        assert refused["error"]["data"] == {
            "field": "modeId",
            "value": "m9",
            "valid": ["m0", "m2"],
            "message": f"modeId: set_mode may not change session {session_id!r} from mode "
            "'m1' to 'm9'; allowed from 'm1': 'm0', 'm2'",
        }
        assert [
            (r["event"], r["from_mode"], r["to_mode"]) for r in read_log(log).of(session_id)
        ] == [
            ("modefsm.session_created", None, "m0"),
            ("modefsm.mode_changed", "m0", "m1500"),
            ("modefsm.mode_changed", "m1500", "m1"),
            ("modefsm.change_rejected", "m1", "m9"),
        ]
        assert (code, stderr) == (0, b"")


class TestDiagram:
    """Each text format is written in seconds; what cannot be is one line and exit 2."""

    @pytest.mark.parametrize("fmt", TEXT_FORMATS)
    def test_text_formats_are_written_in_full(self, spec_file, drawn, fmt):
        done, took = drawn[fmt]

        assert (done.returncode, done.stderr) == (0, b"")
        assert done.stdout == render(load_spec(spec_file), fmt)
        assert b"Mode 1999" in done.stdout
        assert took < BOUND, f"diagram --format {fmt} took {took:.1f} s"

    def test_mermaid_draws_the_group_as_a_hub_and_the_restricted_mode_apart(self, drawn):
        done, _ = drawn["mermaid"]
        lines = done.stdout.decode().splitlines()
        spokes = [line for line in lines if " <--> " in line]
        arrows = [line for line in lines if re.match(r"    \S+ (-{2,3}>|-\.->)\|", line)]

        # every mode but m1 may change to any other: one group, its hub g0 with a two-way
        # spoke to each member, one arrow from the hub to m1; m1 only to m0 and m2; the
        # switch in m0: one arrow to its choice, one to "previous", one back (reject);
        # m1999 restores to m0
        assert spokes == [f"    g0 <--> s{i}" for i in range(MODES) if i != 1]
        assert arrows == [
            '    start --->|"session/new"| s0',
            '    g0 -->|"set_mode<br>from any"| s1',
            '    s1 -->|"set_mode"| s0',
            '    s1 -->|"set_mode"| s2',
            '    s0 -.->|"switch_mode"| c0',
            '    c0 -.->|"Back<br>(allow_once)"| p0',
            '    c0 -.->|"No<br>(reject_once)"| s0',
            f'    s{MODES - 1} -.->|"on load/resume"| s0',
        ]

    @pytest.mark.parametrize("fmt", ["svg", "png"])
    def test_graphviz_formats_are_refused_past_the_node_cap(self, spec_file, tmp_path, fmt):
        output = tmp_path / f"big.{fmt}"

        done, took = modefsm("diagram", str(spec_file), "-o", str(output))

        assert (done.returncode, done.stdout) == (2, b"")
        assert done.stderr.decode() == (
            f"modefsm diagram: spec 'big': {fmt} output draws at most 500 nodes and 1000 "
            f"arrows (the limits), this diagram has {MODES + 3} nodes and 8 arrows; write "
            "mermaid, dot or md instead\n"
        )
        assert not output.exists()
        assert took < BOUND

    def test_a_log_table_past_the_cap_is_refused_and_mermaid_counts_it(self, spec_file, served_log):
        log, _ = served_log

        table, _ = modefsm("diagram", str(spec_file), "--log", str(log), "--format", "md")
        mermaid, took = modefsm("diagram", str(spec_file), "--log", str(log))

        assert (table.returncode, table.stdout) == (2, b"")
        assert table.stderr.decode() == (
            "modefsm diagram: spec 'big': the table of transitions taken would have more than "
            f"{DRAWN_MAX} rows (the limit); draw it as mermaid or dot instead\n"
        )
        assert (mermaid.returncode, mermaid.stderr) == (0, b"")
        taken = '    s0 -->|"set_mode<br>\N{MULTIPLICATION SIGN}1"| s7'
        assert taken in mermaid.stdout.decode().splitlines()
        assert took < BOUND


class TestReplay:
    """``replay --spec`` of the 2,000-mode spec checks every change against it."""

    def test_replay_checks_the_log_against_the_spec(self, spec_file, served_log):
        log, sid = served_log

        done, took = modefsm("replay", "--spec", str(spec_file), "--format", "json", str(log))

        report = json.loads(done.stdout)
        assert (done.returncode, done.stderr) == (0, b"")
        assert [(s["session_id"], s["mode"], s["seq"]) for s in report["sessions"]] == [
            (sid, "m1998", 6)
        ]
        assert report["violations"] == []
        assert took < BOUND
