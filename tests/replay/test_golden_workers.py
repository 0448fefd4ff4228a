"""`modefsm replay` over PostgreSQL workers' files: one history, exact reports.

The files (``tests/replay/golden_workers/<case>/``) come from
tests/replay/golden_workers.py; this test needs no database. ``MODEFSM_REGEN_GOLDEN=1``
writes the expected reports again.
"""

from __future__ import annotations

import os

import pytest

from modefsm.cli._main import main
from tests.replay.golden_workers import CASES, GOLDEN_WORKERS

REGENERATE = os.environ.get("MODEFSM_REGEN_GOLDEN") == "1"

STATUS = {"clean": 0, "deleted": 1, "duplicated": 1, "reordered": 1, "edited": 1,
          "rechained": 1, "idle_worker": 0, "refusing_worker": 0, "idle_and_refusing": 0,
          "one_worker": 0}  # fmt: skip


def test_every_case_has_its_folder() -> None:
    assert sorted(STATUS) == sorted(CASES) == sorted(p.name for p in GOLDEN_WORKERS.iterdir())
    for name, case in CASES.items():  # each folder holds its files (committed) and report
        found = sorted(p.name for p in (GOLDEN_WORKERS / name).iterdir())
        assert found == sorted([*case.files, "expected.txt"]), name


@pytest.mark.parametrize("name", sorted(STATUS))
def test_report(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    folder = GOLDEN_WORKERS / name
    monkeypatch.chdir(folder)
    status = main(["replay", *CASES[name].files, "--verify"])
    out, err = capsys.readouterr()
    expected = folder / "expected.txt"
    if REGENERATE:
        expected.write_bytes(out.encode())
    assert out == expected.read_text()
    assert (status, err) == (STATUS[name], "")
