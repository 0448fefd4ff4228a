"""PostgreSQL for the store tests: a real server, never a mock.

``MODEFSM_TEST_POSTGRES_URL`` (a superuser URL to a maintenance database) if set; else a
throwaway server started once per test session (:func:`benchmarks.pgserver.start`); else
the tests are skipped with the reason, or fail when ``MODEFSM_POSTGRES=required`` (CI).
Each test gets a fresh database, dropped after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.pgserver import start


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
