"""Start-up: the commands that speak no ACP load no part of the ACP SDK.

Each check runs a real interpreter with ``-X importtime`` and reads the modules it
imported from its stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN_CLEAN = Path(__file__).resolve().parent / "replay" / "golden" / "clean.jsonl"


def imported(*args: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The top-level names of the modules ``python -X importtime ARGS`` imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    modules = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                modules.add(name)
    return modules, result


def _sdk(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "acp" or m.startswith("acp."))


def _fsm(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "transitions" or m.startswith("transitions."))


def test_import_modefsm_loads_no_sdk_and_no_transitions():
    modules, result = imported("-c", "import modefsm")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "modefsm" in modules
    assert _sdk(modules) == []
    assert _fsm(modules) == []


def test_help_loads_no_sdk():
    modules, result = imported("-m", "modefsm", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: modefsm" in result.stdout
    assert "modefsm.cli._main" in modules
    assert _sdk(modules) == []
    # the models, the log and the diagram load when a command runs, not for its help
    assert "pydantic" not in modules
    assert "modefsm.diagram._model" not in modules


def test_replay_loads_neither_the_sdk_nor_transitions():
    modules, result = imported("-m", "modefsm", "replay", "--verify", str(GOLDEN_CLEAN))
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert "modefsm.replay._replayer" in modules
    assert _sdk(modules) == []
    assert _fsm(modules) == []


def test_diagram_loads_neither_the_sdk_nor_transitions(tmp_path: Path):
    out = tmp_path / "seed.md"
    modules, result = imported(
        "-m", "modefsm", "diagram", "--preset", "seed", "--log", str(GOLDEN_CLEAN), "-o", str(out)
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert out.read_text(encoding="utf-8").startswith("# Modes of seed")
    assert "modefsm.diagram.renderers._markdown" in modules  # (_files loads on first use,
    # through importlib, which -X importtime does not report)
    assert _sdk(modules) == []
    assert _fsm(modules) == []


@pytest.mark.parametrize(
    "code",
    [
        "import modefsm; modefsm.ModeSpec; modefsm.replay; modefsm.TransitionLog",
        "from modefsm import RestoreIndex, ReplayReport, Violation, load_spec",
    ],
)
def test_public_names_outside_the_protocol_load_no_sdk(code: str):
    check = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'acp'))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{check}"], capture_output=True, text=True, check=True
    )
    assert result.stdout == "[]\n"


def test_the_stages_below_the_protocol_load_no_sdk():
    """Engine, spec, log, store, replay and diagram, every module of each, and the names an
    embedder uses: none of them loads any part of the ACP SDK."""
    code = (
        "import pkgutil, importlib, sys\n"
        "from modefsm import ModeEngine, preset\n"
        "stages = ['engine', 'spec', 'log', 'store', 'replay', 'diagram']\n"
        "names = []\n"
        "for stage in stages:\n"
        "    package = importlib.import_module('modefsm.' + stage)\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        if info.name != 'modefsm.store._postgres':  # psycopg: an optional extra\n"
        "            importlib.import_module(info.name)\n"
        "            names.append(info.name)\n"
        "engine = ModeEngine(preset('seed'))\n"
        "engine.new_session('s')\n"
        "print(len(names), 'modefsm.engine._engine' in names)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'acp'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    count, engine_seen = result.stdout.splitlines()[0].split()
    assert (int(count) > 20, engine_seen) == (True, "True")
    assert result.stdout.splitlines()[1] == "[]"


def test_the_agent_does_load_the_sdk():
    """The checks above can fail: the protocol layer does import the SDK."""
    modules, result = imported("-c", "import modefsm; modefsm.ModeAgent")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "acp" in _sdk(modules)


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of *names* are in ``sys.modules`` after running *code* in a fresh interpreter."""
    check = f"import sys; print(sorted(n for n in {names!r} if n in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{check}"], capture_output=True, text=True, check=True
    )
    return list(eval(result.stdout))  # noqa: S307 - a list of names printed just above


MODELS = ("pydantic.main", "modefsm.spec._model", "modefsm.log._models", "modefsm.engine._engine")


def test_the_embedder_import_builds_no_pydantic_model():
    """``from modefsm import ModeEngine, preset`` loads neither pydantic's model machinery
    nor the spec's or the records' models: ``preset`` loads them when it is called."""
    code = "from modefsm import ModeEngine, preset"
    assert _loaded(code, MODELS) == ["modefsm.engine._engine"]


def test_calling_preset_does_build_the_models():
    """The check above can fail: a spec is pydantic models."""
    code = "from modefsm import ModeEngine, preset; ModeEngine(preset('seed'))"
    assert _loaded(code, MODELS) == [
        "modefsm.engine._engine",
        "modefsm.spec._model",
        "pydantic.main",
    ]
