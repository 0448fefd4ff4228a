"""The golden files of PostgreSQL workers are what real workers write (then edited)."""

from __future__ import annotations

import os
from collections.abc import Callable

import orjson
import pytest

from tests.replay.golden_workers import (
    CASES,
    GOLDEN_WORKERS,
    Files,
    clean_files,
    one_worker_files,
    render,
)

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

REGENERATE = os.environ.get("MODEFSM_REGEN_GOLDEN") == "1"


@pytest.mark.parametrize("run", [clean_files, one_worker_files], ids=lambda run: run.__name__)
def test_every_case_is_the_workers_files_then_edited(
    postgres_url: str, run: Callable[[str], Files]
) -> None:
    files = run(postgres_url)  # a fresh database: gseq from 1
    for name, case in CASES.items():
        if case.run is not run:
            continue
        rendered = render(case.edit({key: list(lines) for key, lines in files.items()}), case.files)
        folder = GOLDEN_WORKERS / name
        for file in case.files:
            if REGENERATE:
                folder.mkdir(exist_ok=True)
                (folder / file).write_bytes(rendered[file])
            assert (folder / file).read_bytes() == rendered[file], (name, file)


def test_the_idle_worker_wrote_nothing_and_the_refusing_one_only_rejections(
    postgres_url: str,
) -> None:
    files = clean_files(postgres_url)
    assert files["w4.jsonl"] == []
    refusals = [orjson.loads(line) for line in files["w5.jsonl"]]
    assert [(r["event"], r.get("reason"), "gseq" in r) for r in refusals] == [
        ("modefsm.spec", None, False),  # its header: before its first record
        ("modefsm.change_rejected", "unknown_mode", False),
        ("modefsm.change_rejected", "option_rejected", False),
    ]
