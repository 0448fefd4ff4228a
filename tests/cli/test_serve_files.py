"""``modefsm serve`` with files for stdio, and without its optional dependencies.

stdin and stdout may be regular files or ``/dev/null``: a recorded script in a file runs
in order, each request read once the one before is answered (or waits for the client's
answer to the agent's permission request, which the script then holds), and every frame
reaches the output file. A missing optional dependency is one line on stderr, exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

SERVE = [sys.executable, "-m", "modefsm", "serve"]


def _frame(number: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if number is not None:
        frame["id"] = number
    if params is not None:
        frame["params"] = params
    return orjson.dumps(frame) + b"\n"


SELECTED = {"outcome": "selected", "optionId": "code"}
INITIALIZE = _frame(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})


def _serve_files(script: Path, output: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    with script.open("rb") as stdin, output.open("wb") as stdout:
        return subprocess.run(
            [*SERVE, *args],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )


def _summary(frame: dict[str, Any]) -> tuple[Any, ...]:
    """A frame as (id, method, what it says): its update kind and mode, or its result."""
    update = frame.get("params", {}).get("update", {})
    said = update.get("currentModeId") or update.get("status") or update.get("content")
    if "result" in frame:
        said = frame["result"].get("stopReason", sorted(frame["result"]))
    if update.get("sessionUpdate") == "config_option_update":
        said = update["configOptions"][0]["currentValue"]
    return frame.get("id"), frame.get("method"), update.get("sessionUpdate"), said


def test_a_recorded_script_in_a_file_runs_in_order_into_a_file(tmp_path: Path):
    log = tmp_path / "modes.jsonl"
    first = tmp_path / "new.jsonl"
    first.write_bytes(INITIALIZE + _frame(1, "session/new", {"cwd": "/", "mcpServers": []}))
    done = _serve_files(first, tmp_path / "new.out", "--log", str(log))
    assert (0, b"") == (done.returncode, done.stderr)
    answers = [orjson.loads(line) for line in (tmp_path / "new.out").read_bytes().splitlines()]
    session_id = answers[1]["result"]["sessionId"]
    of = {"sessionId": session_id}
    script = tmp_path / "script.jsonl"
    script.write_bytes(
        INITIALIZE
        + _frame(1, "session/resume", {**of, "cwd": "/", "mcpServers": []})
        + _frame(2, "session/set_mode", {**of, "modeId": "architect"})
        + _frame(3, "session/prompt", {**of, "prompt": [{"type": "text", "text": "go"}]})
        # the answer to the agent's permission request (its id 0), as the client recorded it
        + orjson.dumps({"jsonrpc": "2.0", "id": 0, "result": {"outcome": SELECTED}})
        + b"\n"
        + _frame(4, "session/set_mode", {**of, "modeId": "ask"})
    )
    output = tmp_path / "script.out"
    done = _serve_files(script, output, "--log", str(log))
    assert (0, b"") == (done.returncode, done.stderr)
    frames = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert [
        (0, None, None, ["agentCapabilities", "agentInfo", "protocolVersion"]),
        (1, None, None, ["configOptions", "modes"]),
        (None, "session/update", "current_mode_update", "architect"),
        (None, "session/update", "config_option_update", "architect"),
        (2, None, None, []),
        (None, "session/update", "tool_call", "pending"),
        (0, "session/request_permission", None, None),
        (None, "session/update", "current_mode_update", "code"),
        (None, "session/update", "config_option_update", "code"),
        (None, "session/update", "tool_call_update", "completed"),
        (
            None,
            "session/update",
            "agent_message_chunk",
            {"text": "Approved: now in code mode.", "type": "text"},
        ),
        (3, None, None, "end_turn"),
        (None, "session/update", "current_mode_update", "ask"),
        (None, "session/update", "config_option_update", "ask"),
        (4, None, None, []),
    ] == [_summary(frame) for frame in frames]
    header, *records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert (header["event"], header["spec"]) == ("modefsm.spec", "seed")
    assert [
        ("new", None, "ask"),
        ("set_mode", "ask", "architect"),
        ("switch_mode", "architect", "code"),
        ("set_mode", "code", "ask"),
    ] == [(r["origin"], r["from_mode"], r["to_mode"]) for r in records]


@pytest.mark.parametrize("stdout", ["file", "devnull"])
def test_dev_null_as_stdin_ends_at_once(tmp_path: Path, stdout: str):
    output = tmp_path / "out" if stdout == "file" else Path("/dev/null")
    with open("/dev/null", "rb") as stdin, output.open("wb") as out:
        done = subprocess.run(
            SERVE, stdin=stdin, stdout=out, stderr=subprocess.PIPE, timeout=60, check=False
        )
    assert (0, b"") == (done.returncode, done.stderr)
    if stdout == "file":
        assert b"" == output.read_bytes()


def test_dev_null_as_stdout_takes_the_answers(tmp_path: Path):
    script = tmp_path / "script.jsonl"
    script.write_bytes(INITIALIZE + _frame(1, "session/new", {"cwd": "/", "mcpServers": []}))
    log = tmp_path / "modes.jsonl"
    done = _serve_files(script, Path("/dev/null"), "--log", str(log))
    assert (0, b"") == (done.returncode, done.stderr)
    assert ["modefsm.spec", "modefsm.session_created"] == [
        orjson.loads(line)["event"] for line in log.read_bytes().splitlines()
    ]


def test_a_large_output_reaches_the_file_whole(tmp_path: Path):
    script = tmp_path / "script.jsonl"
    news = b"".join(_frame(n, "session/new", {"cwd": "/", "mcpServers": []}) for n in range(1, 401))
    script.write_bytes(INITIALIZE + news)
    output = tmp_path / "out.jsonl"
    done = _serve_files(script, output, "--log", str(tmp_path / "modes.jsonl"))
    assert (0, b"") == (done.returncode, done.stderr)
    assert list(range(401)) == [
        orjson.loads(line)["id"] for line in output.read_bytes().splitlines()
    ]


def _without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``modefsm ARGS`` in a process where *module* cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['modefsm', *sys.argv[1:]]\n"
        "from modefsm.__main__ import run\n"
        "run()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "distribution"),
    [
        ("uvicorn", "uvicorn"),
        ("h11", "h11"),
        ("starlette", "starlette"),
        ("acp.http", "agent-client-protocol[http]"),
        ("websockets", "websockets"),
    ],
)
def test_serve_http_without_a_module_of_the_http_extra_is_one_line(module, distribution):
    done = _without(module, "serve", "--http", "127.0.0.1:0")
    assert (2, "", "") == (done.returncode, done.stdout, "")
    assert (
        f"modefsm serve: --http needs the http extra ({distribution} is missing): "
        "pip install 'modefsm[http]'\n"
    ) == done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--store", "postgresql://modefsm@127.0.0.1:1/modes"),
        ("store", "export", "postgresql://modefsm@127.0.0.1:1/modes"),
    ],
    ids=["serve", "store-export"],
)
def test_the_postgresql_store_without_psycopg_is_one_line(args):
    done = _without("psycopg", *args)
    assert (
        2,
        "",
        (
            f"modefsm {args[0]}: the PostgreSQL store needs psycopg (import of psycopg "
            "halted; None in sys.modules): pip install 'modefsm[postgresql]'\n"
        ),
    ) == (done.returncode, done.stdout, done.stderr)
