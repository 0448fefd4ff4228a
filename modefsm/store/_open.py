"""Opening a session store by its target, and exporting a PostgreSQL store's records.

The one place that knows the backends: :func:`open_store` picks
:class:`~modefsm.store.FileStore` for a path and ``PgStore`` (psycopg, imported only when
asked for) for a ``postgresql://`` URL.
"""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from modefsm.errors import LogError
from modefsm.log import EVENT_SPEC, TransitionLog
from modefsm.store._file import FileStore
from modefsm.store._interface import EXPORT_EVENT, SessionStore

__all__ = ["export_store", "open_store"]


def open_store(
    target: str | Path,
    *,
    fsync: bool = False,
    lock_timeout: float = 1.0,
    log: TransitionLog | None = None,
) -> SessionStore:
    """Open the store at *target*: a file path, or a ``postgresql://`` URL.

    Args:
        target: a JSON-lines log path (a :class:`~modefsm.store.FileStore`, its restore
            index beside it as ``<path>.index``), or ``postgresql://...`` /
            ``postgres://...`` (``PgStore``; needs ``psycopg``).
        fsync: make every acknowledged record survive power loss (a disk flush each); a
            PostgreSQL commit is as durable as the server's settings make it.
        lock_timeout: the longest wait for another process, in seconds, before
            :class:`StoreBusy`.
        log: for PostgreSQL, the worker's own JSON-lines log that every committed record
            is also written to (``None``: stderr); a file store is its own log.

    Raises:
        LogError: the store cannot be opened (the message names the file or URL),
            *target* is a URL of another scheme, or psycopg is missing for a URL.
    """
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        postgres = _postgres()
        store: SessionStore = postgres.PgStore(text, log=log, lock_timeout=lock_timeout)
        return store
    if "://" in text:
        raise LogError("not a postgresql:// URL", text)
    return FileStore(target, fsync=fsync, lock_timeout=lock_timeout)


def _postgres() -> Any:
    """The PostgreSQL backend, imported only when asked for (psycopg is optional).

    Raises:
        LogError: psycopg (or its libpq) cannot be imported.
    """
    try:
        return importlib.import_module("modefsm.store._postgres")
    except ImportError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = f"the PostgreSQL store needs psycopg ({reason}): pip install 'modefsm[postgresql]'"
        raise LogError(msg) from None


def export_store(url: str, out: BinaryIO) -> int:
    """Write every record of the PostgreSQL store at *url* to *out*; return how many.

    The first line names the export (:data:`EXPORT_EVENT`, the store's host, port and
    database, its schema version); then the header (``modefsm.spec``) of every spec the
    workers named; then one JSON line per committed record and tool call decision
    (``modefsm.tool_decided``), in commit order, each with its ``gseq``; the count returned
    is of both. ``modefsm replay --verify`` reads it as one history per session. The
    store's tables are created if missing (then the export is empty). *out* gets the lines
    as they are read: on an error it holds a part of the export (``modefsm store export``
    writes to a temporary file and keeps it only when complete).

    Raises:
        LogError: *url* is not a ``postgresql://`` URL, ``psycopg`` is missing, the
            database cannot be read, or a row's record is not a JSON object (the message
            names the database and the row's ``gseq``).
    """
    if not url.startswith(("postgresql://", "postgres://")):
        raise LogError("not a postgresql:// URL", url)
    postgres = _postgres()
    store = postgres.PgStore(url, log=TransitionLog.to_stream(io.BytesIO()))
    try:
        header = {"event": EXPORT_EVENT, "store": store.where, "schema": postgres.SCHEMA_VERSION}
        out.write(orjson.dumps(header) + b"\n")
        count = 0
        for record in store.export():  # the specs' headers, then the records and decisions
            out.write(orjson.dumps(record) + b"\n")
            count += record["event"] != EVENT_SPEC
    finally:
        store.close()
    return count
