"""Tool decisions across real processes on one store (a file, a PostgreSQL database).

Another process changes the mode, or grants an ``allow_always``, or is killed right after
it did; this process's next ``decide_async`` is governed by what the other committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from modefsm import FileStore, ModeEngine, ModeSpec, SessionStore, ToolCall, TransitionLog
from modefsm import preset as preset_spec
from modefsm.log import EVENT_DECIDED
from modefsm.replay import replay
from modefsm.store import export_store

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import asyncio, sys, time
from modefsm import FileStore, ModeEngine, ModeSpec, ToolCall, TransitionLog, preset

target, log, action, persist, hold = sys.argv[1:6]
data = preset("permission").model_dump(mode="json", by_alias=True, exclude_none=True)
data["grants"] = {"scope": "mode", "persist": persist == "persist"}
spec = ModeSpec.model_validate(data)
if target.startswith("postgresql://"):
    from modefsm.store._postgres import PgStore
    store = PgStore(target, log=TransitionLog.to_file(log))
else:
    store = FileStore(target)

async def main():
    engine = ModeEngine(spec, store=store)
    point = store.restore_point("s")
    if point is None:
        await engine.new_session_async("s")
    else:
        await engine.restore_session_async("s", point.mode, point.seq, previous=point.previous,
                                           digest=point.digest)
    if action.startswith("mode:"):
        await engine.set_mode("s", action[5:])
    elif action == "grant":
        asked = await engine.decide_async("s", ToolCall("call_w", "execute", "Bash"))
        await engine.settle(asked, "allow_always")

asyncio.run(main())
print("done", flush=True)
if hold == "hold":
    time.sleep(60)  # killed here: the grant must outlive this process
store.close()
"""


def spec_of(*, persist: bool) -> ModeSpec:
    data = preset_spec("permission").model_dump(mode="json", by_alias=True, exclude_none=True)
    data["grants"] = {"scope": "mode", "persist": persist}
    return ModeSpec.model_validate(data)


def worker(
    target: str, log: Path, action: str, *, persist: bool = False, hold: bool = False
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = ["persist" if persist else "once", "hold" if hold else "exit"]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, target, str(log), action, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def run_worker(target: str, log: Path, action: str) -> None:
    process = worker(target, log, action)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out) == (0, "done\n"), err


@pytest.fixture(params=["file", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "modes.jsonl")


def open_store(target: str, tmp_path: Path) -> SessionStore:
    if target.startswith("postgresql://"):
        from modefsm.store._postgres import PgStore

        return PgStore(target, log=TransitionLog.to_file(tmp_path / "main.jsonl"))
    return FileStore(target)


def exported(url: str, tmp_path: Path) -> Path:
    """The database's export (``modefsm store export``), as a file."""
    path = tmp_path / "export.jsonl"
    with path.open("wb") as out:
        export_store(url, out)
    return path


def decisions(target: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Every process's decisions: the shared file's, or the database's (its export)."""
    postgres = target.startswith("postgresql://")
    path = exported(target, tmp_path) if postgres else Path(target)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [
        {k: line[k] for k in ("tool_call_id", "decision", "outcome", "mode", "mode_seq")}
        for line in lines
        if line["event"] == EVENT_DECIDED
    ]


async def test_another_process_changes_the_mode_mid_turn(target: str, tmp_path: Path) -> None:
    store = open_store(target, tmp_path)
    engine = ModeEngine(preset_spec("permission"), store=store)
    await engine.new_session_async("s")
    asked = await engine.decide_async("s", ToolCall("call_1", "edit", "Edit"))
    assert asked.decision == "ask"
    await asyncio.to_thread(run_worker, target, tmp_path / "worker.jsonl", "mode:plan")
    denied = await engine.decide_async("s", ToolCall("call_2", "edit", "Edit"))
    assert (denied.decision, denied.mode, denied.mode_seq) == ("deny", "plan", 2)
    withdrawn = await asyncio.wait_for(engine.outcome_of(asked), 5)
    assert (withdrawn.decision, withdrawn.mode, withdrawn.mode_seq) == ("deny", "plan", 2)
    store.close()
    assert sorted(map(tuple, map(dict.values, decisions(target, tmp_path)))) == [
        ("call_1", "deny", None, "plan", 2),
        ("call_2", "deny", None, "plan", 2),
    ]
    spec = preset_spec("permission")
    assert (
        replayed(target, tmp_path, spec, tmp_path / "main.jsonl", tmp_path / "worker.jsonl") == ()
    )


def replayed(target: str, tmp_path: Path, spec: ModeSpec, *workers: Path) -> tuple[object, ...]:
    """The violations of replaying the store: the file, or each worker's log and the export."""
    if not target.startswith("postgresql://"):
        return replay([target], [spec], verify=True).violations
    export = exported(target, tmp_path)
    logs = [str(path) for path in workers if path.exists()]
    return (
        *replay([str(export)], [spec], verify=True).violations,
        *replay(logs, [spec], verify=True).violations,
    )


async def test_a_grant_made_in_another_process(target: str, tmp_path: Path) -> None:
    store = open_store(target, tmp_path)
    engine = ModeEngine(spec_of(persist=False), store=store)
    await engine.new_session_async("s")
    await asyncio.to_thread(run_worker, target, tmp_path / "worker.jsonl", "grant")
    granted = await engine.decide_async("s", ToolCall("call_1", "execute", "Bash"))
    assert (granted.decision, granted.outcome) == ("allow", "granted")
    other_mode = await engine.set_mode("s", "acceptEdits")
    assert other_mode.seq == 2
    asked = await engine.decide_async("s", ToolCall("call_2", "execute", "Bash"))
    assert (asked.decision, asked.outcome, asked.mode) == ("ask", None, "acceptEdits")
    store.close()
    assert decisions(target, tmp_path) == [
        {"tool_call_id": "call_w", "decision": "ask", "outcome": "allow_always",
         "mode": "default", "mode_seq": 1},
        {"tool_call_id": "call_1", "decision": "ask", "outcome": "granted",
         "mode": "default", "mode_seq": 1},
    ]  # fmt: skip
    spec = spec_of(persist=False)
    assert (
        replayed(target, tmp_path, spec, tmp_path / "main.jsonl", tmp_path / "worker.jsonl") == ()
    )


@pytest.mark.parametrize("persist", [True, False])
async def test_a_grant_outlives_the_process_killed_after_it(
    target: str, tmp_path: Path, persist: bool
) -> None:
    process = worker(target, tmp_path / "worker.jsonl", "grant", persist=persist, hold=True)
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
    assert line == "done\n"
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)  # reaped, its pipes closed
    assert process.returncode == -signal.SIGKILL
    spec = spec_of(persist=persist)
    store = open_store(target, tmp_path)
    engine = ModeEngine(spec, store=store)
    point = store.restore_point("s")
    assert point is not None
    await engine.restore_session_async("s", point.mode, point.seq, digest=point.digest)
    after = await engine.decide_async("s", ToolCall("call_1", "execute", "Bash"))
    assert (after.decision, after.outcome) == (("allow", "granted") if persist else ("ask", None))
    store.close()
    assert (
        replayed(target, tmp_path, spec, tmp_path / "main.jsonl", tmp_path / "worker.jsonl") == ()
    )
