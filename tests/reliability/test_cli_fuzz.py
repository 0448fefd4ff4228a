"""`modefsm replay` over mutated logs and `modefsm diagram` over mutated spec files.

Whatever the input, the command answers with its exit status and at most a few lines on
stderr; it never raises (a traceback is a bug). Valid sessions in a damaged log are still
reported.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.cli._main import main
from tests.conftest import settle_now

from .harness import soak_factor

pytestmark = pytest.mark.reliability

FUZZ = settings(
    max_examples=150 * soak_factor(),
    derandomize=soak_factor() == 1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _clean_log() -> bytes:
    """A real log: three sessions of the seed spec, changes, a switch and a rejection."""
    folder = Path(tempfile.mkdtemp())
    log = TransitionLog.to_file(folder / "log.jsonl")
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    for sid in ("s1", "s2", "s3"):
        engine.new_session(sid)
        engine.change(sid, "architect", "set_mode")
    settle_now(engine, "s1", "code", tool_call_id="t1")
    engine.change("s2", "ask", "set_config_option")
    asyncio.run(engine.flush())
    log.close()
    return (folder / "log.jsonl").read_bytes()


CLEAN_LOG = _clean_log()
SEED_TOML = (
    Path(__file__).resolve().parents[2] / "modefsm" / "spec" / "presets" / "seed.toml"
).read_bytes()


def mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """*data* with a few bytes flipped, cut, repeated or inserted."""
    position = st.integers(0, len(data))

    def flip(pos: int, value: int) -> bytes:
        return data[:pos] + bytes([value]) + data[pos + 1 :]

    return st.one_of(
        st.builds(flip, position, st.integers(0, 255)),
        st.builds(lambda pos: data[:pos], position),
        st.builds(lambda a, b: data[: min(a, b)] + data[max(a, b) :], position, position),
        st.builds(
            lambda pos, extra: data[:pos] + extra + data[pos:],
            position,
            st.binary(min_size=1, max_size=40),
        ),
        st.builds(lambda a, b: data[: max(a, b)] + data[min(a, b) :], position, position),
    )


@FUZZ
@given(mutated=mutations(CLEAN_LOG), verify=st.booleans(), json_format=st.booleans())
def test_replay_never_raises_on_a_mutated_log(mutated, verify, json_format, capsys):
    path = Path(tempfile.mkdtemp()) / "log.jsonl"
    path.write_bytes(mutated)
    argv = ["replay", str(path)]
    argv += ["--verify"] if verify else []
    argv += ["--format", "json"] if json_format else []
    status = main(argv)
    err = capsys.readouterr().err
    assert status in (0, 1, 2, 3)  # 3: a byte of a spec_hash changed (spec mismatch)
    assert "Traceback" not in err


@FUZZ
@given(mutated=mutations(SEED_TOML), fmt=st.sampled_from(["mermaid", "dot", "md"]))
def test_diagram_never_raises_on_a_mutated_spec(mutated, fmt, capsys):
    path = Path(tempfile.mkdtemp()) / "spec.toml"
    path.write_bytes(mutated)
    status = main(["diagram", str(path), "--format", fmt])
    out, err = capsys.readouterr()
    assert status in (0, 2)
    if status == 2:
        assert out == ""
        assert len(err.splitlines()) == 1
        assert err.startswith("modefsm diagram: ")


def test_clean_log_replays_clean(capsys):
    path = Path(tempfile.mkdtemp()) / "log.jsonl"
    path.write_bytes(CLEAN_LOG)
    assert main(["replay", str(path), "--verify"]) == 0
    assert capsys.readouterr().err == ""
