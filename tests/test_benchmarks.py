"""The benchmarks run, at a tiny size, and compare like with like (no timing is asserted)."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from acp.agent.connection import AgentSideConnection
from acp.schema import CurrentModeUpdate

from benchmarks import cli
from benchmarks.baselines.handlers import HANDLERS, statechart_available
from benchmarks.baselines.wire import NullWire, notification_bytes
from benchmarks.cases import roundtrip, roundtrip_http, startup
from benchmarks.cases.changes import make_plan, session_ids
from benchmarks.harness import BENCHMARKS, TINY
from modefsm import ModeEngine, preset
from modefsm.engine import ModeChanged
from modefsm.log._records import record_digest
from modefsm.protocol.v1 import session_updates

SEED = preset("seed")


class TestEveryBenchmark:
    """Every registered benchmark runs at the tiny size and reports rows or why it cannot."""

    @pytest.mark.parametrize("key", sorted(BENCHMARKS))
    def test_benchmark_runs_at_tiny_size(self, key):
        result = BENCHMARKS[key].run(TINY)
        if result.skipped is not None and key == "store":  # needs a PostgreSQL server
            assert os.environ.get("MODEFSM_POSTGRES") != "required", result.skipped
            assert "PostgreSQL" in result.skipped or "psycopg" in result.skipped
            return
        if result.skipped is not None:  # benchmarks 3 and 4 need modefsm's replay side
            assert key in {"replay", "restore"}
            assert "modefsm" in result.skipped
            return
        assert result.rows
        for row in result.rows:
            assert len(row.samples) >= 1
            assert all(sample >= 0 for sample in row.samples)
        assert result.targets
        json.dumps(result.to_json())

    def test_cli_prints_the_table_and_writes_json(self, tmp_path, capsys):
        out = tmp_path / "results.json"
        assert cli.main(["--size", "tiny", "--only", "changes", "--out", str(out)]) == 0
        document = json.loads(out.read_text(encoding="utf-8"))
        assert document["size"] == "tiny"
        assert [r["key"] for r in document["results"]] == ["changes"]
        assert "| 1. change throughput | µs/change | modefsm |" in capsys.readouterr().out


class TestSameWork:
    """The implementations compared do the same work per change."""

    @pytest.mark.parametrize("key", sorted(HANDLERS))
    async def test_handler_logs_the_same_lines_as_modefsm(self, key, tmp_path):
        if key == "statechart_per_session" and not statechart_available():
            pytest.skip("python-statemachine is not installed")
        ids = session_ids(20)
        plan = make_plan(SEED, ids, 100)
        lines = {}
        wires = {}
        for name in ("modefsm", key):
            wires[name] = NullWire()
            handler = HANDLERS[name](SEED, tmp_path / f"{name}.jsonl", wires[name])
            for session_id in ids:
                handler.new_session(session_id)
            for session_id, mode_id in plan:
                await handler.set_mode(session_id, mode_id)
            handler.shutdown()
            records = [
                orjson.loads(line)
                for line in (tmp_path / f"{name}.jsonl").read_bytes().splitlines()
            ]
            # the chain covers the timestamp, so digests differ between runs: check its links
            assert [r["prev"] for r in records] == [None] + [r["digest"] for r in records[:-1]]
            assert all(record_digest(r) == r["digest"] for r in records)
            if name == "modefsm":  # its header, which names the spec: the one line more
                assert records.pop(0)["event"] == "modefsm.spec"
            lines[name] = [
                {k: v for k, v in r.items() if k not in ("timestamp", "prev", "digest")}
                for r in records
            ]
        assert lines[key] == lines["modefsm"]
        assert (wires[key].sent, wires[key].size) == (wires["modefsm"].sent, wires["modefsm"].size)

    async def test_null_wire_serializes_the_bytes_the_sdk_writes(self):
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb")
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        conn = AgentSideConnection(
            cast("Any", object()), writer, asyncio.StreamReader(), listening=False
        )
        engine = ModeEngine(SEED)
        event = ModeChanged("sess_1", "code", 2, (engine.views["code"].mode_option,))
        expected = b""
        for update in session_updates(event):
            await conn.session_update(session_id="sess_1", update=update)
            expected += notification_bytes("sess_1", update)
        await conn.close()
        sent = b""
        while len(sent) < len(expected):
            sent += os.read(read_fd, 65536)
        os.close(read_fd)
        assert sent == expected


def _decode(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


def test_notification_bytes_are_one_json_rpc_line():
    update = CurrentModeUpdate(session_update="current_mode_update", current_mode_id="ask")
    assert _decode(notification_bytes("sess_1", update)) == [
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "sess_1",
                "update": {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
            },
        }
    ]


def test_results_directory_is_ignored_by_git():
    ignore = (Path(__file__).resolve().parent.parent / ".gitignore").read_text(encoding="utf-8")
    assert "benchmarks/results/" in ignore


class TestLayout:
    """Cases live apart from the baselines they measure against, and name modules that exist."""

    BENCHMARKS_DIR = Path(__file__).resolve().parent.parent / "benchmarks"

    @pytest.mark.parametrize(
        "path",
        sorted((BENCHMARKS_DIR / "baselines").glob("*.py")),
        ids=lambda path: path.name,
    )
    def test_a_baseline_imports_no_case(self, path):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                imported.add(node.module)
        assert sorted(m for m in imported if m.startswith("benchmarks.cases")) == []

    def test_every_spawned_agent_module_exists(self):
        modules = {args[0] for _name, args, _note in roundtrip.AGENTS.values()}
        modules |= {args[0] for _name, args, _note in roundtrip.V2_AGENTS.values()}
        modules |= {args[0] for _name, args in roundtrip_http.AGENTS.values()}
        modules |= {a[1] for _m, _i, a, _b in startup.COMMANDS.values() if a[0] == "-m"}
        assert sorted(modules) == [
            "benchmarks.baselines.dict_agent",
            "benchmarks.baselines.dict_agent_v2",
            "benchmarks.baselines.dict_agent_v2_http",
            "benchmarks.baselines.minimal_agent",
            "modefsm",
        ]
        assert all(importlib.util.find_spec(module) is not None for module in modules)
