"""Shared fixtures: engines wired to a real log file and a recording notification sink."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from acp.schema import SessionNotification
from acp.utils import serialize_params

from benchmarks.pgserver import start
from modefsm import LogStore, ModeEngine, ModeSpec, SwitchOffer, SwitchResult, TransitionLog, preset
from modefsm.protocol.v1 import session_updates
from tests.frame_schemas import FrameLog, available

FRAME_TAP = Path(__file__).resolve().parent / "frame_tap"
"""Put on ``PYTHONPATH``: its ``sitecustomize`` records what each agent process writes."""


def wire(session_id: str, update: Any) -> dict[str, Any]:
    """The exact ``session/update`` params the SDK puts on the wire for *update*."""
    return serialize_params(SessionNotification(session_id=session_id, update=update))


class Recorder:
    """A notification sink that keeps the exact v1 wire dicts of its events, in order."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, session_id: str, event: Any) -> None:
        for update in session_updates(event):
            self.sent.append(wire(session_id, update))


def offer_now(engine: ModeEngine, session_id: str, tool_call_id: str = "t") -> SwitchOffer:
    """``engine.offer_switch``, for code that runs without an event loop."""
    return asyncio.run(engine.offer_switch(session_id, tool_call_id=tool_call_id))


def settle_now(
    engine: ModeEngine, offer: SwitchOffer | str, option_id: str | None, **answer: Any
) -> SwitchResult:
    """``engine.settle_switch`` without an event loop; a session id is offered first."""
    if isinstance(offer, str):
        offer = offer_now(engine, offer, answer.pop("tool_call_id", "t"))
    return asyncio.run(engine.settle_switch(offer, option_id, **answer))


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of *path* but the file's header (``modefsm.spec``: the replay tests
    check it), without the fields that vary from run to run: the timestamp and the digest
    chain (``prev``, ``digest``; the replay tests check those)."""
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    lines = [line for line in lines if line["event"] != "modefsm.spec"]
    for line in lines:
        line.pop("timestamp")
        line.pop("prev", None)
        line.pop("digest", None)
    return lines


def spec_with(ids: list[str], **extra: Any) -> ModeSpec:
    return ModeSpec(
        name="t", initial=ids[0], modes=[{"id": i, "name": i.upper() or "X"} for i in ids], **extra
    )


LOCKED_TOML = (
    'name = "locked"\ninitial = "a"\n'
    '[[modes]]\nid = "a"\nname = "A"\n[[modes]]\nid = "b"\nname = "B"\n'
    '[[modes]]\nid = "c"\nname = "C"\n'
    '[client_changes]\na = ["b"]\nb = ["a"]\nc = ["a"]\n'
    '[[switches]]\nsource = ["a"]\ntitle = "Go to C"\n'
    '[[switches.options]]\noption_id = "c"\nname = "Yes"\nkind = "allow_once"\n'
    'target = "c"\n'
)
"""A spec whose one switch, from ``a``, leads to ``c`` (no client change reaches it): an
approval answered after the client moved to ``b`` is stale, and forbidden from there."""


def mode_option(spec: ModeSpec, current: str) -> dict[str, Any]:
    """The complete mode config option, as a hand-written wire dict: its options are the
    modes selectable from *current* (itself and its ``client_changes``; all if unrestricted)."""
    selectable = set(spec.mode_ids)
    if spec.client_restricted(current):
        selectable = {current, *spec.client_changes[current]}
    options = []
    for mode in (m for m in spec.modes if m.id in selectable):
        option: dict[str, Any] = {"value": mode.id, "name": mode.name}
        if mode.description is not None:
            option["description"] = mode.description
        options.append(option)
    return {
        "id": "mode",
        "name": "Session Mode",
        "category": "mode",
        "type": "select",
        "currentValue": current,
        "options": options,
    }


def modes_state(spec: ModeSpec, current: str) -> dict[str, Any]:
    """ACP v1 ``modes`` (``SessionModeState``) at *current*, as a hand-written wire dict: every
    mode of *spec*, in order."""
    available = []
    for mode in spec.modes:
        entry: dict[str, Any] = {"id": mode.id, "name": mode.name}
        if mode.description is not None:
            entry["description"] = mode.description
        available.append(entry)
    return {"currentModeId": current, "availableModes": available}


def mode_result(spec: ModeSpec, current: str, **fields: Any) -> dict[str, Any]:
    """An ACP v1 ``session/new`` or ``session/load`` result at *current*, whole: *fields*
    (``sessionId``), then ``modes`` and ``configOptions``."""
    modes = modes_state(spec, current)
    return {**fields, "modes": modes, "configOptions": [mode_option(spec, current)]}


def announced(spec: ModeSpec, session_id: str, mode_id: str) -> list[dict[str, Any]]:
    """The two notifications that announce a change to *mode_id*, as hand-written dicts."""
    return [
        {
            "sessionId": session_id,
            "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode_id},
        },
        {
            "sessionId": session_id,
            "update": {
                "sessionUpdate": "config_option_update",
                "configOptions": [mode_option(spec, mode_id)],
            },
        },
    ]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "transitions.jsonl"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_engine(log_path: Path, recorder: Recorder) -> Iterator[Any]:
    logs: list[TransitionLog] = []

    def make(spec: ModeSpec | str = "seed", **kwargs: Any) -> ModeEngine:
        spec = preset(spec) if isinstance(spec, str) else spec
        log = TransitionLog.to_file(log_path)
        logs.append(log)
        return ModeEngine(spec, store=LogStore(log), sink=recorder, **kwargs)

    yield make
    for log in logs:
        log.close()


@pytest.fixture(scope="session", autouse=True)
def agent_frame_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrameLog | None]:
    """Every Python process the suite starts records the frames its agent writes.

    ``None`` (nothing recorded) when the TypeScript SDK's schemas are not installed (run
    ``npm ci`` in ``tests/ts``; CI does).
    """
    if not available():
        yield None
        return
    folder = tmp_path_factory.mktemp("agent-frames")
    saved = {name: os.environ.get(name) for name in ("MODEFSM_TEST_FRAMES", "PYTHONPATH")}
    os.environ["MODEFSM_TEST_FRAMES"] = str(folder)
    paths = [str(FRAME_TAP), *filter(None, [saved["PYTHONPATH"]])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        yield FrameLog(folder)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def agent_frames_follow_the_schema(agent_frame_log: FrameLog | None) -> Iterator[None]:
    """After each test: every frame an agent wrote meanwhile validates against its schema."""
    yield
    if agent_frame_log is not None:
        problems = agent_frame_log.problems()
        assert problems == [], f"{len(problems)} frames break the ACP schema:\n" + "\n".join(
            problems[:20]
        )


# -- PostgreSQL ---------------------------------------------------------------------------
# ``MODEFSM_TEST_POSTGRES_URL`` (a superuser URL to a maintenance database) if set; else a
# throwaway server started once per test session (:func:`benchmarks.pgserver.start`); else
# the tests that need one are skipped with the reason, or fail when
# ``MODEFSM_POSTGRES=required`` (CI). Each test gets a fresh database, dropped after it.


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server's maintenance database, for the whole test session."""
    url = os.environ.get("MODEFSM_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    tmp = Path(tempfile.mkdtemp(prefix="modefsm-pg-"))
    try:
        url, stop = start(tmp)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or ""
        reason = f"no PostgreSQL server could be started: {exc} {detail}".strip()
        if os.environ.get("MODEFSM_POSTGRES") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield url
    finally:
        subprocess.run(stop, capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for one test, dropped after it."""
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server, autocommit=True) as db:
        db.execute(f"DROP DATABASE {name} WITH (FORCE)")
