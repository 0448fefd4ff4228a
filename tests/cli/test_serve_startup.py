"""Start-up of ``modefsm serve``: what it loads before it answers ``initialize``.

A real ``modefsm serve`` runs with ``-X importtime`` on pipes; the modules it imported are
read from its stderr. The records are structlog's bytes, rendered by orjson directly:
structlog is loaded only for a value orjson cannot serialize, never for a record; the
record bytes are checked elsewhere (the golden logs, the writer and engine tests).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import orjson

from modefsm.cli import main

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
INITIALIZE["params"] = {"protocolVersion": 1, "clientCapabilities": {}}
NEW_SESSION = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
NEW_SESSION["params"] = {"cwd": "/", "mcpServers": []}


def serve(*frames: dict[str, object]) -> tuple[list[dict[str, object]], set[str], str]:
    """Send *frames* to ``modefsm serve`` one by one, each after the last one's answer.

    Returns the answers, the modules the process imported, and what it wrote on stderr
    that is not an import time line.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    with subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "modefsm", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        answers = []
        for frame in frames:
            process.stdin.write(orjson.dumps(frame) + b"\n")
            process.stdin.flush()
            answers.append(orjson.loads(process.stdout.readline()))
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    modules, other = set(), []
    for line in err.decode().splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
        else:
            other.append(line)
    return answers, modules, "\n".join(other)


def _structlog(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "structlog" or m.startswith("structlog."))


def test_initialize_is_answered_without_loading_structlog():
    answers, modules, _ = serve(INITIALIZE)
    assert [(a["id"], "result" in a) for a in answers] == [(0, True)]
    assert _structlog(modules) == []
    assert "acp.schema" in modules  # the check reads the imports: the SDK is among them


def test_the_first_record_is_written_on_stderr_without_loading_structlog():
    answers, modules, stderr = serve(INITIALIZE, NEW_SESSION)
    assert [(a["id"], "result" in a) for a in answers] == [(0, True), (1, True)]
    assert (_structlog(modules), "orjson" in modules) == ([], True)
    records = [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert [(r["event"], r.get("seq"), r.get("to_mode"), r["level"]) for r in records] == [
        ("modefsm.spec", None, None, "info"),  # the stream names its spec first
        ("modefsm.session_created", 1, "ask", "info"),
    ]
    assert list(records[1])[-3:] == ["digest", "event", "level"]


class TestCollector:
    """serve builds its start-up objects with the collector off, then freezes them."""

    def test_a_spec_that_fails_leaves_the_collector_as_it_was(self, tmp_path, capsys):
        path = tmp_path / "bad.toml"
        path.write_text("not = [toml\n", encoding="utf-8")
        assert (gc.isenabled(), gc.get_freeze_count()) == (True, 0)
        assert main(["serve", "--spec", str(path)]) == 2
        assert (gc.isenabled(), gc.get_freeze_count()) == (True, 0)
        assert capsys.readouterr().err.startswith(f"modefsm serve: {path}: ")

    def test_a_serve_that_ends_unfreezes_and_keeps_a_disabled_collector_off(
        self, tmp_path, monkeypatch, capsys
    ):
        folder = os.open(tmp_path, os.O_RDONLY)

        class Folder:  # a directory as stdin: serve refuses it
            def fileno(self) -> int:
                return folder

        monkeypatch.setattr(sys, "stdin", Folder())
        gc.disable()
        try:
            assert main(["serve"]) == 2
            assert (gc.isenabled(), gc.get_freeze_count()) == (False, 0)
        finally:
            gc.enable()
            os.close(folder)
        assert capsys.readouterr().err == (
            "modefsm serve: stdin must be a pipe, a file or a terminal: an ACP client starts "
            "`modefsm serve` with pipes (to try it by hand: modefsm serve < requests.jsonl)\n"
        )

    def test_the_serving_process_holds_its_start_up_objects_frozen(self):
        code = (
            "import gc, sys\n"
            "from modefsm.cli import _serve\n"
            "def report(*args, **kwargs):\n"
            "    print(gc.isenabled(), gc.get_freeze_count() > 10_000, flush=True)\n"
            "    return 0\n"
            "_serve.serve = report\n"
            "from modefsm.cli import main\n"
            "sys.exit(main(['serve']))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "True True\n", "")
