"""Golden logs (``tests/replay/golden/*.jsonl``) and the exact report ``modefsm replay`` gives each.

Set ``MODEFSM_REGEN_GOLDEN=1`` to write the logs and expected reports again (then read
the diff: it is the review).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pytest

from modefsm.cli._main import main
from tests.replay.golden_logs import CASES, render

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("MODEFSM_REGEN_GOLDEN") == "1"


class Case(NamedTuple):
    args: tuple[str, ...]
    exit_status: int


REGISTRY: dict[str, Case] = {
    "clean": Case(("--verify",), 0),
    "torn_tail": Case(("--verify",), 0),
    "gap": Case((), 1),
    "duplicate": Case(("--verify",), 1),
    "reorder": Case(("--verify",), 1),
    "edited_mode": Case(("--verify",), 1),
    "deleted_record": Case(("--verify",), 1),
    "illegal_edge": Case(("--verify",), 1),
    "custom_spec": Case(("--verify",), 0),
    "unknown_spec": Case(("--verify",), 3),
    "header_edited": Case(("--verify",), 1),
    "spec_changed": Case(("--preset", "seed", "--verify"), 3),
    "spec_mismatch": Case(("--preset", "seed", "--verify"), 3),
    "interleaved": Case(("--verify",), 1),
    "wrong_shape": Case(("--verify",), 1),
}


def _check(path: Path, actual: bytes) -> None:
    if REGENERATE:
        path.write_bytes(actual)
    assert path.read_bytes() == actual


class TestGoldenFiles:
    """Each golden log is what its recipe in tests/replay/golden_logs.py makes, byte for byte."""

    def test_every_golden_file_is_registered(self):
        expected = {f"{n}.jsonl" for n in REGISTRY} | {f"{n}.expected.txt" for n in REGISTRY}
        assert sorted(expected) == sorted(p.name for p in GOLDEN.iterdir())

    def test_every_recipe_is_registered(self):
        assert sorted(REGISTRY) == sorted(CASES)

    @pytest.mark.parametrize("name", sorted(REGISTRY))
    def test_log_is_what_the_engine_writes_then_edited(self, name):
        _check(GOLDEN / f"{name}.jsonl", render(name))


class TestGoldenReports:
    """modefsm replay prints exactly the expected report and exit status for each log."""

    @pytest.mark.parametrize("name", sorted(REGISTRY))
    def test_report(self, name, monkeypatch, capsys):
        case = REGISTRY[name]
        monkeypatch.chdir(GOLDEN)
        status = main(["replay", f"{name}.jsonl", *case.args])
        out, err = capsys.readouterr()
        _check(GOLDEN / f"{name}.expected.txt", out.encode())
        assert (case.exit_status, "") == (status, err)
