"""Faults on the wire: unread or closed pipes, early end of input, wide frames, hang-ups.

Each test runs a real ``modefsm serve`` over real pipes and asserts exact outcomes: an
answer to every request read (counted by id), the exit status, no traceback on stderr,
the agent's memory (``VmRSS``/``VmHWM`` of the process, from ``/proc``) and time, with
generous limits: these are bounds, not benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modefsm.cli._serve import STDERR_LOG_WAIT
from modefsm.protocol.transport._batch import MAX_BATCH, Batches
from modefsm.protocol.transport._stdio import (
    EOF_GRACE,
    MAX_DEPTH,
    MAX_ID_CHARS,
    MAX_IN_FLIGHT,
    MAX_OPEN,
    MAX_VALUES,
    CheckedTransport,
    Diagnostics,
    _Output,
)

from .harness import TIMEOUT, Agent, frame, read_log

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

NEW = {"cwd": ".", "mcpServers": []}


def memory_kb(pid: int, field: str = "VmRSS") -> int:
    """The agent's resident memory (``VmRSS``) or its peak (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    msg = f"no {field} for {pid}"
    raise AssertionError(msg)


@pytest.fixture
def agents() -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []

    def start(*args: str, log: Path | None, stderr: Any = subprocess.PIPE) -> Agent:
        agent = Agent(*args, log=log, stderr=stderr)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.kill()


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "ERROR:" not in stderr, stderr[-3000:]


# -- stderr that nobody reads -----------------------------------------------------------


def drain_in_background(fd: int) -> tuple[threading.Thread, list[bytes]]:
    """Read *fd* to its end in a thread; return (the thread, the chunks read) once the
    first chunk is read, so that the pipe has room again."""
    drained: list[bytes] = []
    reading = threading.Event()

    def drain() -> None:
        while chunk := os.read(fd, 1 << 16):
            drained.append(chunk)
            reading.set()
        reading.set()

    drainer = threading.Thread(target=drain)
    drainer.start()
    assert reading.wait(TIMEOUT)
    return drainer, drained


class TestUnreadStderr:
    """The SDK's default spawn pipes stderr and never reads it."""

    def test_the_log_on_stderr_fails_changes_instead_of_hanging(self, agents):
        agent = agents(log=None)  # the transition log goes to stderr, never read here
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        session_id = agent.result(1, "session/new", NEW)["sessionId"]
        acknowledged = ["ask"]
        failed_at = None
        for n in range(2, 5000):
            mode = "code" if acknowledged[-1] == "ask" else "ask"
            started = time.monotonic()
            answer = agent.call(n, "session/set_mode", {"sessionId": session_id, "modeId": mode})
            took = time.monotonic() - started
            if "result" in answer:
                acknowledged.append(mode)
                continue
            assert answer["error"]["code"] == -32603, answer
            assert "<stderr>" in answer["error"]["message"], answer
            assert took < STDERR_LOG_WAIT + 5, took
            failed_at = n
            break
        assert failed_at is not None, "5,000 records fit in an unread stderr pipe?"
        assert len(acknowledged) > 100  # a 64 KiB pipe holds a few hundred records
        # while the pipe stays full, each change fails at once, and changes nothing
        for n in range(failed_at + 1, failed_at + 4):
            mode = "code" if acknowledged[-1] == "ask" else "ask"
            started = time.monotonic()
            answer = agent.call(n, "session/set_mode", {"sessionId": session_id, "modeId": mode})
            assert answer["error"]["code"] == -32603, answer
            assert time.monotonic() - started < 1.0
        load = {"cwd": ".", "sessionId": session_id, "mcpServers": []}
        assert (
            agent.result(9000, "session/load", load)["modes"]["currentModeId"] == acknowledged[-1]
        )
        modes = agent.notifications("current_mode_update")
        assert [m["currentModeId"] for m in modes] == acknowledged[1:]
        # once the pipe is read again, changes are made and logged again
        assert agent.process.stderr is not None
        drainer, drained = drain_in_background(agent.process.stderr.fileno())
        mode = "code" if acknowledged[-1] == "ask" else "ask"
        agent.result(9001, "session/set_mode", {"sessionId": session_id, "modeId": mode})
        acknowledged.append(mode)
        agent.process.stdin.close()
        assert agent.process.wait(TIMEOUT) == 0
        drainer.join(TIMEOUT)
        agent.reader.join(TIMEOUT)
        text = b"".join(drained).decode()
        lines = text.splitlines()
        no_traceback(text)
        records = [json.loads(line) for line in lines if line.startswith("{")]
        changes = [r["to_mode"] for r in records if r["event"] == "modefsm.mode_changed"]
        assert changes == acknowledged[1:]  # every acknowledged change, and nothing else
        assert [r["seq"] for r in records if "seq" in r] == list(range(1, len(acknowledged) + 1))

    def test_unrouted_notifications_neither_block_nor_spam(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")  # stderr piped, never read until the end
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        burst = b"".join(
            frame(None, method, {"requestId": n})
            for n in range(5_000)
            for method in ("$/cancel_request", "no/such_notification", "session/cancel")
            # session/cancel is routed, but these params are invalid: a diagnostic each;
            # $/cancel_request is routed too, and naming no request in flight it does nothing
        )
        unknown = b"".join(frame(100 + n, "no/such_method", {}) for n in range(2_000))
        started = time.monotonic()
        agent.send(burst + unknown)
        session_id = agent.result(1, "session/new", NEW)["sessionId"]
        assert time.monotonic() - started < TIMEOUT
        for n in range(2_000):
            assert agent.response(100 + n)["error"]["code"] == -32601
        assert session_id in read_log(tmp_path / "log.jsonl").sessions()
        code, stderr = agent.finish()
        assert code == 0
        no_traceback(stderr)
        took = time.monotonic() - started
        lines = stderr.splitlines()
        # 5,000 invalid session/cancel: a diagnostic each, 20 at once and 2 a second
        assert len(lines) <= 20 + 2 * took + 2, lines
        *invalid, last = lines
        for line in invalid:
            assert line.startswith(
                "modefsm serve: Unhandled error while handling notification "
                "method=session/cancel: ValidationError: 1 validation error for "
                "CancelNotification\\nsessionId\\n  Field required"
            ), line
        assert last.startswith("modefsm serve: ignored 5000 notifications of methods not served")
        dropped = [re.search(r" \((\d+) earlier diagnostics? dropped\)$", line) for line in lines]
        counted = sum(int(match.group(1)) for match in dropped if match)
        assert len(invalid) + counted == 5_000  # each written, or counted as dropped


def test_diagnostics_never_block_and_count_what_they_drop():
    read, write = os.pipe()
    try:
        os.set_blocking(write, False)
        filled = 0
        try:
            while True:
                filled += os.write(write, b"x" * 4096)
        except BlockingIOError:
            pass
        os.set_blocking(write, True)  # as stderr is: blocking, and full
        diagnostics = Diagnostics(write, prefix="modefsm serve", burst=5, per_second=1.0)
        started = time.monotonic()
        for n in range(10_000):
            diagnostics.say(f"diagnostic {n}")
        assert time.monotonic() - started < 2.0
        assert diagnostics.dropped == 10_000
        while filled:  # the reader catches up
            filled -= len(os.read(read, filled))
        for n in range(10):
            diagnostics.say(f"later {n}")
        diagnostics.close()
        os.close(write)
        write = -1
        text = b""
        while chunk := os.read(read, 65536):
            text += chunk
        assert text.decode().splitlines() == [
            "modefsm serve: later 0 (10000 earlier diagnostics dropped)",
            "modefsm serve: later 1",
            "modefsm serve: later 2",
            "modefsm serve: later 3",
            "modefsm serve: later 4",
            "modefsm serve: 5 diagnostics dropped",
        ]
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


# -- the end of input, and stdout closed or unread ------------------------------------------


class TestEndOfInput:
    def test_every_request_read_before_the_end_is_answered(self, agents, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        agent = agents(log=log)
        agent.read()
        requests = frame(0, "initialize", {"protocolVersion": 1}) + b"".join(
            frame(n, "session/new", NEW) for n in range(1, 2_001)
        )
        writer = threading.Thread(target=lambda: agent.send(requests), daemon=True)
        writer.start()
        writer.join(TIMEOUT)
        code, stderr = agent.finish()  # stdin closed right after the last request
        assert code == 0
        no_traceback(stderr)
        assert sorted(json.loads(k) for k in agent.responses) == list(range(2_001))
        assert all("result" in r for r in agent.responses.values())
        created = {r["result"]["sessionId"] for k, r in agent.responses.items() if k != "0"}
        assert len(created) == 2_000
        assert set(read_log(log).sessions()) == created

    def test_changes_read_before_the_end_are_answered_and_announced(self, agents, tmp_path):
        log = tmp_path / "log.jsonl"
        agent = agents(log=log)
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        session_id = agent.result(1, "session/new", NEW)["sessionId"]
        modes = ["code" if n % 2 == 0 else "ask" for n in range(1_000)]
        agent.send(
            b"".join(
                frame(n + 2, "session/set_mode", {"sessionId": session_id, "modeId": mode})
                for n, mode in enumerate(modes)
            )
        )
        code, stderr = agent.finish()
        assert code == 0
        no_traceback(stderr)
        assert len(agent.responses) == 1_002
        assert all("result" in r for r in agent.responses.values())
        announced = [u["currentModeId"] for u in agent.notifications("current_mode_update")]
        assert announced == modes
        assert [r["to_mode"] for r in read_log(log).changes(session_id)] == modes


class TestClosedStdout:
    def test_the_agent_stops_at_once_when_stdout_is_closed(self, agents, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        agent = agents(log=log)
        agent.call_unthreaded(0, "initialize", {"protocolVersion": 1})
        session_id = agent.call_unthreaded(1, "session/new", NEW)["sessionId"]
        agent.process.stdout.close()  # the client stops listening; stdin stays open
        started = time.monotonic()
        sent = 0
        with contextlib.suppress(BrokenPipeError):
            while agent.process.poll() is None and time.monotonic() - started < TIMEOUT:
                mode = "code" if sent % 2 == 0 else "ask"
                agent.send(
                    frame(sent + 2, "session/set_mode", {"sessionId": session_id, "modeId": mode})
                )
                sent += 1
                time.sleep(0.001)
        assert agent.process.wait(TIMEOUT) == 1
        assert time.monotonic() - started < 5.0
        stderr = agent.process.stderr.read().decode()
        no_traceback(stderr)
        assert len(stderr.splitlines()) == 1, stderr
        assert stderr.startswith("modefsm serve: stdout was closed by the client; "), stderr
        # changes nobody could hear stopped with the agent (a few may have been in flight)
        assert len(read_log(log).changes(session_id)) < 100

    def test_an_idle_agent_stops_when_stdout_is_closed(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.call_unthreaded(0, "initialize", {"protocolVersion": 1})
        agent.process.stdout.close()
        assert agent.process.wait(TIMEOUT) == 1
        stderr = agent.process.stderr.read().decode()
        assert stderr == "modefsm serve: stdout was closed by the client; 0 requests unanswered\n"


class TestUnreadStdout:
    def test_reading_pauses_while_stdout_is_not_read(self, agents, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        agent = agents(log=log)
        total = 5_000
        padded = {**NEW, "_meta": {"pad": "p" * 4_000}}  # 20 MB of requests in all
        requests = frame(0, "initialize", {"protocolVersion": 1}) + b"".join(
            frame(n, "session/new", padded) for n in range(1, total + 1)
        )
        sent = [0]

        def write() -> None:
            for start in range(0, len(requests), 4096):
                agent.send(requests[start : start + 4096])
                sent[0] = start + 4096

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + TIMEOUT  # however slow the machine, reading stops
        before = -1
        while sent[0] != before and time.monotonic() < deadline:
            before = sent[0]
            time.sleep(1.0)
        assert sent[0] == before, "still reading although nothing is read from its stdout"
        assert writer.is_alive()
        assert before < len(requests) / 2, (before, len(requests))
        assert len(read_log(log).sessions()) < 1_000  # bounded work for nobody
        rss = memory_kb(agent.process.pid)
        assert rss < 150_000, f"VmRSS {rss} KiB"
        agent.read()  # the client catches up: everything is answered
        writer.join(TIMEOUT * 2)
        assert not writer.is_alive()
        code, stderr = agent.finish(TIMEOUT * 2)
        assert code == 0
        no_traceback(stderr)
        assert len(agent.responses) == total + 1
        assert len(read_log(log).sessions()) == total


# -- answers owed to the client ------------------------------------------------------------


def over_open(request_id: Any) -> dict[str, Any]:
    """The whole answer to a request beyond MAX_OPEN unanswered ones."""
    details = f"at most {MAX_OPEN} requests of a connection are answered at once"
    data = {"details": details, "limit": "open", "max": MAX_OPEN}
    error = {"code": -32600, "message": "Invalid request", "data": data}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def in_architect(agent: Agent) -> str:
    """Read *agent*, initialize it (id 0), make a session (1) and set it to architect (2),
    where its prompts propose a switch; the session's id."""
    agent.read()
    agent.result(0, "initialize", {"protocolVersion": 1})
    session_id: str = agent.result(1, "session/new", NEW)["sessionId"]
    agent.result(2, "session/set_mode", {"sessionId": session_id, "modeId": "architect"})
    return session_id


class TestPendingPrompts:
    """Prompts waiting for the client's permission answers never stop stdin being read."""

    def prompts(self, agent: Agent, session_id: str, ids: list[str]) -> list[dict[str, Any]]:
        """Send a prompt for each id at once; the permission requests they make, and
        check that the others were refused at once with the MAX_OPEN error."""
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        start = len(self.asked(agent))
        writer = threading.Thread(
            target=agent.send, args=(b"".join(frame(i, "session/prompt", params) for i in ids),)
        )
        writer.start()
        keys = [json.dumps(i) for i in ids]

        def settled() -> bool:  # each prompt asked for permission, or was refused
            return len(self.asked(agent)) - start + sum(k in agent.responses for k in keys) == len(
                ids
            )

        agent.wait(settled)
        writer.join(TIMEOUT)
        asked = self.asked(agent)[start:]
        refused = [i for i in ids if json.dumps(i) in agent.responses]
        assert [agent.responses[json.dumps(i)] for i in refused] == [over_open(i) for i in refused]
        return asked

    def asked(self, agent: Agent) -> list[dict[str, Any]]:
        with agent.arrived:
            return [m for m in agent.messages if m.get("method") == "session/request_permission"]

    def test_5000_prompts_are_answered_and_cancellable(self, agents, tmp_path: Path):
        log = tmp_path / "log.jsonl"
        agent = agents(log=log)
        session_id = in_architect(agent)
        first = [f"a{n}" for n in range(5_000)]
        asked = self.prompts(agent, session_id, first)
        assert len(asked) == MAX_OPEN  # the first 1,024 wait; 3,976 were refused at once
        assert sum(json.dumps(i) in agent.responses for i in first) == 5_000 - MAX_OPEN
        # the client answers half of them (reject), then cancels the others' turns
        reject = next(
            o["optionId"] for o in asked[0]["params"]["options"] if o["kind"] == "reject_once"
        )
        outcome = {"outcome": {"outcome": "selected", "optionId": reject}}
        answers = [
            json.dumps({"jsonrpc": "2.0", "id": r["id"], "result": outcome}).encode() + b"\n"
            for r in asked[: MAX_OPEN // 2]
        ]
        agent.send(b"".join(answers))
        agent.wait(
            lambda: sum(json.dumps(i) in agent.responses for i in first) == 4_488
        )  # 3,976 + 512
        agent.send(frame(None, "session/cancel", {"sessionId": session_id}))
        agent.wait(lambda: all(json.dumps(i) in agent.responses for i in first))
        stops = [agent.responses[json.dumps(i)].get("result", {}).get("stopReason") for i in first]
        assert (stops.count("end_turn"), stops.count("cancelled"), stops.count(None)) == (
            MAX_OPEN // 2,
            MAX_OPEN // 2,
            5_000 - MAX_OPEN,
        )
        # nothing is owed any more: the next requests are served, up to the cap again
        second = [f"b{n}" for n in range(MAX_OPEN + 10)]
        assert len(self.prompts(agent, session_id, second)) == MAX_OPEN
        # the end of input ends the waiting prompts as cancelled, at once
        assert agent.process.stdin is not None
        agent.process.stdin.close()
        started = time.monotonic()
        code, stderr = agent.finish()
        took = time.monotonic() - started
        assert (code, stderr) == (0, "")
        assert took < EOF_GRACE, took
        stops = [agent.responses[json.dumps(i)].get("result", {}).get("stopReason") for i in second]
        assert (stops.count("cancelled"), stops.count(None)) == (MAX_OPEN, 10)
        reasons = Counter(r.get("reason") for r in read_log(log).rejections())
        assert reasons == {
            "option_rejected": MAX_OPEN // 2,
            "cancelled": MAX_OPEN // 2,
            "session_closed": MAX_OPEN,
        }
        assert [r["to_mode"] for r in read_log(log).changes(session_id)] == ["architect"]


class Piped:
    """A :class:`CheckedTransport` on real pipes: what a client writes, what it reads."""

    def __init__(self, transport: CheckedTransport, write: int, read: int) -> None:
        self.transport = transport
        self.write_fd = write
        self.read_fd = read

    def send(self, data: bytes) -> None:
        """Write *data* to the transport's input (blocking until the pipe took it all)."""
        os.write(self.write_fd, data)

    def end_input(self) -> None:
        os.close(self.write_fd)
        self.write_fd = -1

    async def read(self, size: int = 4096) -> bytes:
        """What the transport wrote, up to *size* bytes (waiting up to 10 s for some)."""
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(None, os.read, self.read_fd, size), 10)


@contextlib.asynccontextmanager
async def piped() -> AsyncIterator[Piped]:
    """A :class:`Piped` transport, closed with its pipes on the way out."""
    loop = asyncio.get_running_loop()
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    reader = asyncio.StreamReader()
    stdin = os.fdopen(in_read, "rb", 0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    output = _Output(loop)
    pipe, _ = await loop.connect_write_pipe(lambda: output, os.fdopen(out_write, "wb", 0))
    peer = Piped(
        CheckedTransport(reader, asyncio.StreamWriter(pipe, output, None, loop)), in_write, out_read
    )
    try:
        yield peer
    finally:
        await peer.transport.close()
        stdin.close()
        os.close(out_read)
        if peer.write_fd >= 0:
            os.close(peer.write_fd)


CANCELLED = {"code": -32800, "message": "Request cancelled", "data": None}
"""The SDK's own answer to a request cancelled by ``$/cancel_request``."""


async def test_requests_beyond_those_in_flight_are_held_and_a_cancel_request_reaches_them():
    """Real pipes into a CheckedTransport: with MAX_IN_FLIGHT requests handed over and not
    answered, reading goes on; a request held meanwhile is cancelled by ``$/cancel_request``
    (answered -32800 at once), the next is handed over once one in flight is answered."""
    held, cancelled = MAX_IN_FLIGHT, MAX_IN_FLIGHT + 1
    lines = [frame(n, "session/new", NEW) for n in range(MAX_IN_FLIGHT + 2)]
    lines.append(frame(None, "$/cancel_request", {"requestId": cancelled}))
    async with piped() as peer:
        transport = peer.transport
        peer.send(b"".join(lines))
        handed = [await transport.receive() for _ in range(MAX_IN_FLIGHT)]
        assert [f["id"] for f in handed if f is not None] == list(range(MAX_IN_FLIGHT))
        following = asyncio.ensure_future(transport.receive())
        answer = await peer.read()
        assert json.loads(answer) == {"jsonrpc": "2.0", "id": cancelled, "error": CANCELLED}
        assert not following.done()  # still MAX_IN_FLIGHT in flight
        await transport.send({"jsonrpc": "2.0", "id": 0, "result": {}})
        assert (await asyncio.wait_for(following, 10) or {}).get("id") == held
        peer.end_input()
        for n in range(1, MAX_IN_FLIGHT + 1):
            await transport.send({"jsonrpc": "2.0", "id": n, "result": {}})
        assert await asyncio.wait_for(transport.receive(), 10) is None
        assert transport.open_requests == 0


async def test_a_v2_batch_counts_its_requests_one_by_one_and_answers_in_its_array():
    """Real pipes into a CheckedTransport serving batches: a batch of MAX_BATCH requests
    after one lone request. Past MAX_IN_FLIGHT handled its requests are held (reading goes
    on), a ``$/cancel_request`` of a held one is answered -32800 in the array, the one past
    MAX_OPEN open is refused in the array; the array is written once, when the last request
    handed over is answered, every entry in the batch's order."""
    cancelled = MAX_IN_FLIGHT + 5  # held when the cancel is read
    batch = [
        {"jsonrpc": "2.0", "id": n, "method": "session/new", "params": NEW}
        for n in range(MAX_BATCH)
    ]
    async with piped() as peer:
        transport = peer.transport
        transport.batches = Batches()
        lines = [
            frame("lone", "session/new", NEW),
            json.dumps(batch).encode() + b"\n",
            frame(None, "$/cancel_request", {"requestId": cancelled}),
        ]
        writing = asyncio.ensure_future(asyncio.to_thread(peer.send, b"".join(lines)))
        served = [await transport.receive() for _ in range(MAX_IN_FLIGHT)]
        following = asyncio.ensure_future(transport.receive())
        # every entry read: 1 + 1,023 open (held past MAX_IN_FLIGHT), the last refused;
        # then the cancel of a held one closes it (nothing written: the array waits)
        assert await transport._until(lambda: transport.open_requests == MAX_OPEN - 1, 10)
        await asyncio.wait_for(writing, 10)
        assert not following.done()  # still MAX_IN_FLIGHT in flight
        for request in served:
            await transport.send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        served.append(await asyncio.wait_for(following, 10))
        while len(served) < MAX_BATCH - 1:  # "lone" and every batch request but two
            request = await asyncio.wait_for(transport.receive(), 10)
            served.append(request)
            await transport.send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        await transport.send({"jsonrpc": "2.0", "id": served[MAX_IN_FLIGHT]["id"], "result": {}})
        peer.end_input()
        assert await asyncio.wait_for(transport.receive(), 10) is None
        assert transport.open_requests == 0
        written = b""
        while written.count(b"\n") < 2:
            written += await peer.read(1 << 20)
    kept = [n for n in range(MAX_BATCH - 1) if n != cancelled]
    assert [request["id"] for request in served] == ["lone", *kept]
    lone, array = (json.loads(line) for line in written.splitlines())
    assert lone == {"jsonrpc": "2.0", "id": "lone", "result": {}}
    assert array == [
        *(
            {"jsonrpc": "2.0", "id": n, "error": CANCELLED}
            if n == cancelled
            else {"jsonrpc": "2.0", "id": n, "result": {}}
            for n in range(MAX_BATCH - 1)
        ),
        over_open(MAX_BATCH - 1),
    ]


# -- wide frames and echoes of bad input ---------------------------------------------------


def wide(inner: bytes) -> bytes:
    """A session/new request (id 1) whose ``_meta.wide`` is *inner* (raw JSON)."""
    head = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":'
    return head + b'{"cwd":".","mcpServers":[],"_meta":{"wide":' + inner + b"}}}\n"


class TestWideFrames:
    @pytest.mark.parametrize(
        ("inner", "values"),
        [
            (b"[" + b"0," * 24_000_000 + b"0]", 24_000_010),  # 48 MB of zeros
            (
                b"{" + b",".join(b'"k%d":0' % n for n in range(2_500_000)) + b"}",
                2_500_009,
            ),  # 2.5 million keys
        ],
        ids=["zeros", "keys"],
    )
    def test_too_many_values_are_refused_quickly_in_bounded_memory(
        self, agents, tmp_path: Path, inner: bytes, values: int
    ):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        line = wide(inner)
        started = time.monotonic()
        agent.send(line)
        answer = agent.response(1)  # the id, read at the frame's start
        took = time.monotonic() - started
        assert answer["error"]["code"] == -32600
        assert answer["error"]["data"] == {
            "details": f"a frame holds at most {MAX_VALUES} values, not {values}",
            "limit": "values",
            "max": MAX_VALUES,
        }
        assert took < 10.0, took
        peak = memory_kb(agent.process.pid, "VmHWM")
        assert peak < 250_000, f"VmHWM {peak} KiB for a {len(line)}-byte frame"
        assert "result" in agent.call(2, "session/new", NEW)  # still serving
        code, stderr = agent.finish()
        assert (code, stderr) == (0, "")

    def test_a_wide_frame_under_the_limits_is_served(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        started = time.monotonic()
        agent.send(wide(b"[" + b"0," * (MAX_VALUES - 10) + b"0]"))
        assert "sessionId" in agent.response(1)["result"]
        assert time.monotonic() - started < 10.0
        assert agent.finish() == (0, "")

    def test_deep_nesting_names_the_limit(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.send(wide(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH))
        answer = agent.response(1)
        assert answer["error"]["data"] == {
            "details": f"nested deeper than {MAX_DEPTH} levels",
            "limit": "depth",
            "max": MAX_DEPTH,
        }
        assert agent.finish() == (0, "")


class TestEchoes:
    """An error response echoes a bounded prefix of bad input, once."""

    def test_huge_values_are_cut_in_error_responses(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        session_id = agent.result(1, "session/new", NEW)["sessionId"]
        huge = "m" * 5_000_000
        cases = [
            ("session/set_mode", {"sessionId": session_id, "modeId": huge}, -32602),
            ("session/set_mode", {"sessionId": huge, "modeId": "code"}, -32002),
            ("session/set_mode", {"sessionId": session_id, "modeId": [huge]}, -32602),
            (huge, {}, -32601),
        ]
        for n, (method, params, code) in enumerate(cases, 2):
            answer = agent.call(n, method, params)
            assert answer["error"]["code"] == code, answer
            assert agent.sizes[str(n)] < 8_000, (method[:20], agent.sizes[str(n)])
            assert "m" * 256 + "...[+4999744 chars]" in json.dumps(answer), answer
        assert agent.finish() == (0, "")

    def test_many_long_values_echoed_are_cut_to_a_bounded_answer_quickly(
        self, agents, tmp_path: Path
    ):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.result(0, "initialize", {"protocolVersion": 1})
        session_id = agent.result(1, "session/new", NEW)["sessionId"]
        junk = [f"{n:06d}" + "y" * 300 for n in range(100_000)]  # 30 MB, no prompt
        started = time.monotonic()
        answer = agent.call(2, "session/prompt", {"sessionId": session_id, "junk": junk})
        took = time.monotonic() - started
        assert took < 30, took  # each echo looked for in each string: half an hour
        assert agent.sizes["2"] < 20_000, agent.sizes["2"]  # pydantic's input: every value
        error = answer["error"]
        assert (error["code"], error["message"]) == (-32602, "Invalid params")
        [missing] = error["data"]["errors"]
        assert (missing["type"], missing["loc"]) == ("missing", ["prompt"])
        echoed = missing["input"]["junk"]
        assert echoed[:2] == [
            "000000" + "y" * 250 + "...[+50 chars]",
            "000001" + "y" * 250 + "...[+50 chars]",
        ]
        assert echoed[64:] == ["...[+99936 items]"]
        assert agent.finish() == (0, "")

    def test_an_id_too_long_is_answered_with_id_null(self, agents, tmp_path: Path):
        agent = agents(log=tmp_path / "log.jsonl")
        agent.read()
        agent.send(frame("i" * 5_000_000, "session/new", NEW))
        answer = agent.response(None)
        assert agent.sizes["null"] < 1_000
        assert answer["error"] == {
            "code": -32600,
            "message": "Invalid request",
            "data": {
                "details": f"id: a string of at most {MAX_ID_CHARS} characters, not 5000000",
                "limit": "id_chars",
                "max": MAX_ID_CHARS,
            },
        }
        assert agent.call("i" * MAX_ID_CHARS, "session/new", NEW)["id"] == "i" * MAX_ID_CHARS
        assert agent.finish() == (0, "")


# -- a client that hangs up while a permission request is pending ---------------------------


def test_a_hang_up_during_a_permission_request_ends_cleanly(agents, tmp_path: Path):
    log = tmp_path / "log.jsonl"
    agent = agents(log=log)
    session_id = in_architect(agent)
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "## Plan"}]}
    agent.send(frame(3, "session/prompt", prompt))
    agent.wait(lambda: any(m.get("method") == "session/request_permission" for m in agent.messages))
    code, stderr = agent.finish()  # stdin closed, the permission request unanswered
    assert (code, stderr) == (0, "")
    assert agent.responses["3"]["result"] == {"stopReason": "cancelled"}
    rejected = read_log(log).rejections()
    assert [(r["session_id"], r["reason"]) for r in rejected] == [(session_id, "session_closed")]
    assert [r["to_mode"] for r in read_log(log).changes(session_id)] == ["architect"]


# -- Ctrl-C -----------------------------------------------------------------------------------


def _wait_for_imports(pid: int) -> None:
    """Return once pydantic's core is mapped in *pid*: modefsm's imports are running, so
    its Ctrl-C handler (installed before them) is in place."""
    deadline = time.monotonic() + TIMEOUT
    maps = Path(f"/proc/{pid}/maps")
    while "pydantic_core" not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.001)


def interrupt(args: list[str], point: float | str) -> tuple[int, str]:
    """Start ``modefsm ARGS`` in a process group of its own (a terminal's job), send the
    group SIGINT at *point* (seconds after its imports began; ``"import"``: while it imports its
    dependencies; ``"running"``: once it has printed a line, after an ``initialize`` for
    ``serve``), and return its exit status and stderr once the group is gone."""
    process = subprocess.Popen(
        [sys.executable, "-m", "modefsm", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        if point == "import":
            _wait_for_imports(process.pid)
        elif point == "running":
            if args[0] == "serve":
                process.stdin.write(frame(0, "initialize", {"protocolVersion": 1}))
                process.stdin.flush()
            assert process.stdout.readline()
        elif point:  # seconds after the handler is in place, however slow the start
            _wait_for_imports(process.pid)
            time.sleep(float(point))
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        with contextlib.suppress(ProcessLookupError):  # the demo's agents end too
            while time.monotonic() < deadline:
                os.killpg(process.pid, 0)
                time.sleep(0.02)
            msg = f"{args}: a process of its group is still running"
            raise AssertionError(msg)
        return code, process.stderr.read().decode()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stdin.close()
        process.stdout.close()
        process.stderr.close()


def test_the_command_imports_nothing_before_its_ctrl_c_handler():
    # until run() sets the handler, Ctrl-C ends the code running with a traceback: the two
    # modules that run first may only use what the interpreter loaded when it started
    probe = (
        "import sys; loaded = set(sys.modules); import modefsm.__main__; "
        "print(sorted(set(sys.modules) - loaded))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True)
    assert done.stdout.decode() == "['modefsm', 'modefsm.__main__']\n"


def test_ctrl_c_at_any_moment_prints_one_line_and_exits_130(tmp_path: Path):
    runs: list[tuple[float | str, list[str]]] = [
        (0.0, ["serve"]),  # at once
        ("import", ["serve"]),
        ("running", ["serve"]),  # serving: initialize answered
        (0.0, ["demo"]),
        ("import", ["demo"]),
        ("running", ["demo"]),  # in the story, with an agent the demo started
        (1.5, ["demo"]),
        ("import", ["replay", "-"]),
        (1.5, ["replay", "-"]),  # reading a log from stdin (kept open)
        ("import", ["diagram", "--preset", "seed"]),
    ]
    results: dict[int, tuple[int, str]] = {}

    def run(n: int, point: float | str, args: list[str]) -> None:
        if args[0] in {"demo", "serve"}:
            args = [*args, "--log", str(tmp_path / f"log{n}.jsonl")]
        results[n] = interrupt(args, point)

    threads = [
        threading.Thread(target=run, args=(n, point, args)) for n, (point, args) in enumerate(runs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    for n, (point, args) in enumerate(runs):
        code, stderr = results[n]
        if point == 0.0 and code != 130:
            # so early that no modefsm code ran yet: the signal's default action kills the
            # interpreter before it starts, or Python reports it while starting
            assert "/modefsm/" not in stderr, (args, stderr)
            assert code == -signal.SIGINT or "KeyboardInterrupt" in stderr, (args, stderr)
            continue
        assert (code, stderr) == (130, "modefsm: interrupted\n"), (point, args)
