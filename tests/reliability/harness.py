"""Shared tools of the reliability tests: seeds and scale, a strict log reader, a raw peer.

Scale: the suite runs a short version of every randomized test. ``MODEFSM_SOAK=N``
multiplies the number of schedules, kills and examples by N (a long soak);
``MODEFSM_SEED=S`` runs only seed S of every seeded test (to reproduce a failure, whose
message prints the seed and the command).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.acp_client import start_host, start_serve

TIMEOUT = 30.0
"""Seconds any single request may take before the test calls it a hang."""


def soak_factor() -> int:
    """The ``MODEFSM_SOAK`` multiplier (1 without it)."""
    raw = os.environ.get("MODEFSM_SOAK", "")
    return max(1, int(raw)) if raw.strip() else 1


def seeds(count: int) -> list[int]:
    """The seeds a seeded test runs: ``MODEFSM_SEED`` alone, else ``count`` x soak seeds."""
    fixed = os.environ.get("MODEFSM_SEED", "")
    if fixed.strip():
        return [int(fixed)]
    return list(range(count * soak_factor()))


def reproduce(test: str, seed: int) -> str:
    """The line a failing seeded test prints."""
    return f"seed {seed} failed; reproduce with: MODEFSM_SEED={seed} python -m pytest -q {test}"


# -- the transition log, read strictly -------------------------------------------------


@dataclass
class LogContents:
    """A transition log split into records and a possibly torn last line.

    Attributes:
        records: every complete line, parsed, in file order.
        torn: the last line when a crash cut it (no newline and not a whole JSON object),
            else ``None``.
        repaired: how many earlier torn lines a restart ended with ``modefsm.log_repaired``.
    """

    records: list[dict[str, Any]]
    torn: bytes | None = None
    repaired: int = 0

    def of(self, session_id: str) -> list[dict[str, Any]]:
        """The records of *session_id*, in file order."""
        return [r for r in self.records if r.get("session_id") == session_id]

    def commits(self, session_id: str) -> list[dict[str, Any]]:
        """The committed records (creation and changes) of *session_id*, in file order."""
        return [
            r
            for r in self.of(session_id)
            if r.get("event") in ("modefsm.session_created", "modefsm.mode_changed")
        ]

    def changes(self, session_id: str) -> list[dict[str, Any]]:
        """The ``modefsm.mode_changed`` records of *session_id*, in file order."""
        return [r for r in self.of(session_id) if r.get("event") == "modefsm.mode_changed"]

    def rejections(self) -> list[dict[str, Any]]:
        """Every ``modefsm.change_rejected`` record."""
        return [r for r in self.records if r.get("event") == "modefsm.change_rejected"]

    def sessions(self) -> list[str]:
        """Every session created in the log, in order of creation."""
        return [
            r["session_id"] for r in self.records if r.get("event") == "modefsm.session_created"
        ]


def read_log(path: Path) -> LogContents:
    """Read *path*: every line but the last must be a JSON object; the last may be torn."""
    if not path.exists():
        return LogContents([])
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    records: list[dict[str, Any]] = []
    repaired = 0
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            # a line torn by a crash, which a restart ended with a repair record
            after = json.loads(lines[number]) if number < len(lines) else {}
            if after.get("event") == "modefsm.log_repaired" and after["torn_bytes"] == len(line):
                repaired += 1
                continue
            msg = f"{path}:{number}: not JSON (only the last line may be torn): {line[:200]!r}"
            raise AssertionError(msg) from None
        assert isinstance(record, dict), f"{path}:{number}: not an object"
        if record.get("event") != "modefsm.log_repaired":
            records.append(record)
    if last:  # no newline at the end: a whole record that lost only its newline counts
        try:
            record = json.loads(last)
        except ValueError:
            return LogContents(records, torn=last, repaired=repaired)
        if not isinstance(record, dict):
            return LogContents(records, torn=last, repaired=repaired)
        records.append(record)
    return LogContents(records, repaired=repaired)


def assert_sequences(log: LogContents) -> None:
    """Every session's committed records are numbered 1, 2, 3, ... in file order."""
    for session_id in {r["session_id"] for r in log.records if "session_id" in r}:
        seqs = [r["seq"] for r in log.commits(session_id)]
        assert seqs == list(range(1, len(seqs) + 1)), (session_id, seqs)
        modes = [r["to_mode"] for r in log.commits(session_id)]
        froms = [r["from_mode"] for r in log.commits(session_id)]
        assert froms[1:] == modes[:-1], (session_id, list(zip(froms, modes, strict=True)))


def verify_log_after_crash(path: Path) -> LogContents:
    """What a crash may leave: complete, well-numbered records and at most a torn last line.

    REPLAY_VERIFY_HOOK: once ``modefsm replay --verify`` exists, run it here as well and
    accept only a reported torn last line; until then this reader is the verifier.
    """
    log = read_log(path)
    assert_sequences(log)
    return log


def assert_replay_clean(path: Path, records: int | None = None) -> None:
    """``modefsm replay PATH --verify`` finds *records* records (default: every
    ``modefsm.*`` record in the file but the ``modefsm.spec`` header, which is not
    chained), all chained, and calls the log clean."""
    if records is None:
        records = sum(
            1
            for r in read_log(path).records
            if r.get("event", "").startswith("modefsm.") and r["event"] != "modefsm.spec"
        )
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(path), "--verify", "--summary"],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
    )
    lines = done.stdout.splitlines()
    assert (done.returncode, done.stderr, lines[-1]) == (0, "", "RESULT  clean"), done.stdout
    noun = "record" if records == 1 else "records"
    chain = f"CHAIN  {records} {noun} verified, 0 without a digest; head "
    assert lines[-2].startswith(chain), done.stdout


# -- a raw JSON-RPC peer over a real stdio pipe ------------------------------------------


def strict_loads(line: bytes) -> Any:
    """Parse one frame as JSON the way strict peers do (no NaN or Infinity)."""

    def constant(name: str) -> Any:
        msg = f"non-standard JSON constant {name}"
        raise ValueError(msg)

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            msg = f"non-finite number {text}"
            raise ValueError(msg)
        return value

    return json.loads(line.decode("utf-8"), parse_constant=constant, parse_float=finite)


def key(request_id: Any) -> str:
    """A hashable, exact key for a JSON-RPC id of any JSON type."""
    return json.dumps(request_id, sort_keys=True)


@dataclass
class RawPeer:
    """A client that writes raw frames to ``modefsm serve`` and reads its stdout strictly.

    Every line the agent prints must be one JSON-RPC 2.0 object. Responses are matched
    to requests by id (any JSON type); the agent's own requests (``session/request_permission``)
    queue in :attr:`agent_requests`; notifications collect in :attr:`notifications`.
    """

    process: asyncio.subprocess.Process
    received: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    agent_requests: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    responses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    next_id: int = 1000

    async def read_forever(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = strict_loads(line)
            assert isinstance(message, dict), line
            assert message.get("jsonrpc") == "2.0", message
            self.received.append(message)
            if "method" in message and "id" in message:
                await self.agent_requests.put(message)
            elif "method" in message:
                self.notifications.append(message)
            else:
                self.responses.setdefault(key(message.get("id")), []).append(message)
            async with self.arrived:
                self.arrived.notify_all()

    async def send_bytes(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    async def send(self, message: Any) -> None:
        await self.send_bytes(json.dumps(message).encode() + b"\n")

    async def response(self, request_id: Any, limit: float = TIMEOUT) -> dict[str, Any]:
        """Wait for the (first) response with *request_id*."""

        async def arrived() -> dict[str, Any]:
            async with self.arrived:
                await self.arrived.wait_for(lambda: key(request_id) in self.responses)
            return self.responses[key(request_id)][0]

        return await asyncio.wait_for(arrived(), limit)

    async def request(self, method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
        """Send a well-formed request and return its response frame."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, **extra}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.response(self.next_id)

    async def result(self, method: str, params: Any = None) -> Any:
        """Send a request that must succeed; return its result."""
        response = await self.request(method, params)
        assert "result" in response, response
        return response["result"]

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def answer(self, request: dict[str, Any], result: Any) -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    async def next_agent_request(self, limit: float = TIMEOUT) -> dict[str, Any]:
        return await asyncio.wait_for(self.agent_requests.get(), limit)

    async def new_session(self) -> str:
        result = await self.result("session/new", {"cwd": ".", "mcpServers": []})
        session_id: str = result["sessionId"]
        return session_id

    async def set_mode(self, session_id: str, mode_id: str) -> dict[str, Any]:
        return await self.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})

    async def current_mode(self, session_id: str) -> str:
        """The mode the agent reports for a live session (``session/load`` answers it)."""
        result = await self.result(
            "session/load", {"cwd": ".", "sessionId": session_id, "mcpServers": []}
        )
        mode: str = result["modes"]["currentModeId"]
        return mode


@contextlib.asynccontextmanager
async def raw_serve(
    log: Path, *args: str, stderr: Path | None = None, host: Path | None = None
) -> AsyncIterator[RawPeer]:
    """Spawn ``python -m modefsm serve --log LOG ARGS...`` and yield a :class:`RawPeer`.

    With *host*, the agent is that host script instead, run as ``python HOST LOG``.
    On exit, stdin is closed and the agent must exit 0 on its own.
    """
    err = stderr.open("wb") if stderr is not None else None
    if host is None:
        process = await start_serve(log, *args, stderr=err, limit=2**26)
    else:
        process = await start_host(host, log, stderr=err, limit=2**26)
    peer = RawPeer(process)
    reader = asyncio.create_task(peer.read_forever())
    try:
        await peer.result("initialize", {"protocolVersion": 1})
        yield peer
        assert process.stdin is not None
        process.stdin.close()
        code = await asyncio.wait_for(process.wait(), TIMEOUT)
        await asyncio.wait_for(reader, TIMEOUT)
        assert code == 0, f"modefsm serve exited {code}"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if not reader.done():
            reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        if err is not None:
            err.close()


# -- a synchronous peer: modefsm serve over pipes, read by a thread -------------------------


def frame(request_id: Any, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


class Agent:
    """``modefsm serve`` over pipes; stdout is read by a thread only after :meth:`read`."""

    def __init__(self, *args: str, log: Path | None, stderr: Any = subprocess.PIPE) -> None:
        command = [sys.executable, "-m", "modefsm", "serve", *args]
        if log is not None:
            command += ["--log", str(log)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
        self.messages: list[dict[str, Any]] = []
        self.responses: dict[str, dict[str, Any]] = {}
        self.sizes: dict[str, int] = {}
        self.arrived = threading.Condition()
        self.reader: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def read(self) -> None:
        """Start reading stdout (every line strict JSON-RPC)."""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                message = strict_loads(line)
                assert isinstance(message, dict), line[:200]
                assert message.get("jsonrpc") == "2.0", message
                with self.arrived:
                    self.messages.append(message)
                    if "method" not in message:
                        key = json.dumps(message.get("id"))
                        assert key not in self.responses or key == "null", message
                        self.responses[key] = message
                        self.sizes[key] = len(line)
                    self.arrived.notify_all()
        except BaseException as exc:  # reported by the test thread
            self.errors.append(exc)

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def wait(self, ready: Callable[[], bool], limit: float = TIMEOUT) -> None:
        with self.arrived:
            assert self.arrived.wait_for(ready, limit), "no answer in time: a hang"
        assert not self.errors, self.errors

    def response(self, request_id: Any, limit: float = TIMEOUT) -> dict[str, Any]:
        key = json.dumps(request_id)
        self.wait(lambda: key in self.responses, limit)
        return self.responses[key]

    def call(self, request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.send(frame(request_id, method, params))
        return self.response(request_id)

    def result(self, request_id: Any, method: str, params: Any = None) -> Any:
        answer = self.call(request_id, method, params)
        assert "result" in answer, answer
        return answer["result"]

    def call_unthreaded(self, request_id: Any, method: str, params: Any = None) -> Any:
        """Send a request and read stdout in this thread up to its result (no reader thread)."""
        self.send(frame(request_id, method, params))
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            assert line, "stdout ended"
            message = strict_loads(line)
            if "method" not in message and message.get("id") == request_id:
                assert "result" in message, message
                return message["result"]

    def notifications(self, kind: str) -> list[dict[str, Any]]:
        with self.arrived:
            return [
                m["params"]["update"]
                for m in self.messages
                if m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] == kind
            ]

    def finish(self, limit: float = TIMEOUT) -> tuple[int, str]:
        """Close stdin; the exit status and everything on stderr."""
        assert self.process.stdin is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()
        err = b""
        if self.process.stderr is not None:
            err = self.process.stderr.read()
        code = self.process.wait(limit)
        if self.reader is not None:
            self.reader.join(limit)
        assert not self.errors, self.errors
        return code, err.decode("utf-8", "replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.reader is not None:
            self.reader.join(TIMEOUT)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
