"""PostgreSQL for the store tests: a real server, never a mock.

``MODEFSM_TEST_POSTGRES_URL`` (a superuser URL to a maintenance database) if set; else a
throwaway server started here once per test session (``initdb`` + ``pg_ctl`` in a temporary
directory on a free port, run as the ``postgres`` user when the tests run as root; the
binaries are found in ``MODEFSM_POSTGRES_BIN``, Debian's ``/usr/lib/postgresql/*/bin`` or
``PATH``); else the tests are skipped with the reason, or fail when
``MODEFSM_POSTGRES=required`` (CI). Each test gets a fresh database, dropped after it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin() -> Path | None:
    if os.environ.get("MODEFSM_POSTGRES_BIN"):
        path = Path(os.environ["MODEFSM_POSTGRES_BIN"])
        return path if (path / "pg_ctl").exists() else None
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _start_server(tmp: Path) -> tuple[str, list[str]]:
    """Start a server in *tmp*; return its URL and the command that stops it."""
    bindir = _pg_bin()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the package's user
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root and there is no `postgres` user") from None
        shutil.chown(tmp, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp / "data"
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
         "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    opts = (
        f"-p {port} -c listen_addresses=127.0.0.1 -k {tmp} -c fsync=off "
        "-c full_page_writes=off -c max_connections=200"
    )
    subprocess.run(
        [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(tmp / "server.log"),
         "-w", "-t", "60", "-o", opts, "start"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    stop = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server's maintenance database, for the whole test session."""
    url = os.environ.get("MODEFSM_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    tmp = Path(tempfile.mkdtemp(prefix="modefsm-pg-"))
    try:
        url, stop = _start_server(tmp)
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
