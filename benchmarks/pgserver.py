"""A throwaway PostgreSQL server for the store benchmark and tests (no systemd, no mock).

``MODEFSM_TEST_POSTGRES_URL`` names a server to use instead. Otherwise :func:`start`
runs ``initdb`` and ``pg_ctl`` in a temporary directory on a free port of 127.0.0.1, as the
``postgres`` user when run as root (``initdb`` refuses root), with ``fsync=off``: the
server's durability is not what is measured or tested. The binaries come from
``MODEFSM_POSTGRES_BIN``, Debian's ``/usr/lib/postgresql/<major>/bin`` or ``PATH``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path

__all__ = ["server_bin", "start"]


def server_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None``."""
    if os.environ.get("MODEFSM_POSTGRES_BIN"):
        path = Path(os.environ["MODEFSM_POSTGRES_BIN"])
        return path if (path / "pg_ctl").exists() else None
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def start(tmp: Path) -> tuple[str, list[str]]:
    """Start a server with its data in *tmp*; return its URL and the command that stops it.

    Raises:
        RuntimeError: no server binaries, or root without a ``postgres`` user.
        subprocess.CalledProcessError: ``initdb`` or ``pg_ctl`` failed (see its stderr).
    """
    bindir = server_bin()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:
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
