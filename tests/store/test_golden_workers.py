"""The golden files of three PostgreSQL workers are what real workers write (then edited)."""

from __future__ import annotations

import os

import pytest

from tests.replay.golden_workers import CASES, FILES, GOLDEN_WORKERS, clean_files, render

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

REGENERATE = os.environ.get("MODEFSM_REGEN_GOLDEN") == "1"


def test_every_case_is_the_workers_files_then_edited(postgres_url: str) -> None:
    clean = clean_files(postgres_url)  # a fresh database: gseq from 1
    for name, edit in CASES.items():
        files = render(edit({key: list(lines) for key, lines in clean.items()}))
        folder = GOLDEN_WORKERS / name
        for file in FILES:
            if REGENERATE:
                folder.mkdir(exist_ok=True)
                (folder / file).write_bytes(files[file])
            assert (folder / file).read_bytes() == files[file], (name, file)
