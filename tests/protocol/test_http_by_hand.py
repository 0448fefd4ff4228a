"""The documentation's curl walkthrough of ``modefsm serve --http``, run as written, to the end.

The shell block after "By hand, with curl" is read from ``docs/transports.md`` and run with bash
and curl against a real ``modefsm serve --http`` (the block starts it), on a free port
instead of 8000: initialize, the connection's and the session's event streams,
``session/new``, ``session/set_mode``, a prompt whose permission request is answered.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.doc_blocks import DOCS, blocks
from tests.protocol.http_wire import verify

PAGE = DOCS / "transports.md"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def _walkthrough() -> str:
    text = PAGE.read_text(encoding="utf-8")
    after = text.count("\n", 0, text.index("By hand, with curl")) + 1
    [first, *_] = [block for block in blocks(PAGE, "sh") if block.line > after]
    return first.text


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_documented_curl_steps_work_to_the_end(tmp_path: Path):
    script = _walkthrough()
    assert "127.0.0.1:8000" in script
    port = _free_port()
    bin_dir = str(Path(sys.executable).parent)  # where `modefsm` is installed
    done = subprocess.run(
        ["bash", "-c", script.replace("127.0.0.1:8000", f"127.0.0.1:{port}")],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (0, "") == (done.returncode, done.stderr)
    initialize, *rest = done.stdout.splitlines()
    capabilities = {
        "loadSession": True,
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
    }
    agent = {"name": "modefsm", "version": importlib.metadata.version("modefsm")}
    assert {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"protocolVersion": 1, "agentCapabilities": capabilities, "agentInfo": agent},
    } == orjson.loads(initialize)
    assert [
        "202",
        "202",
        "202",
        "202",
        '"currentModeId":"architect"',
        '"currentModeId":"code"',
        '"stopReason":"end_turn"',
    ] == rest
    header, *records = map(orjson.loads, (tmp_path / "modes.jsonl").read_bytes().splitlines())
    assert (header["event"], header["spec"]) == ("modefsm.spec", "seed")
    assert [
        ("new", None, "ask"),
        ("set_mode", "ask", "architect"),
        ("switch_mode", "architect", "code"),
    ] == [(r["origin"], r["from_mode"], r["to_mode"]) for r in records]
    assert "RESULT  clean" == verify(tmp_path / "modes.jsonl")
    err = (tmp_path / "serve.err").read_text().splitlines()
    assert [
        f"modefsm serve: listening on http://127.0.0.1:{port}/acp",
        "modefsm serve: SIGTERM: closing every connection and stopping",
    ] == [err[0].partition(" (token in ")[0], err[1]]
    assert 2 == len(err)
