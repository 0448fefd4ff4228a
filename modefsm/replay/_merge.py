"""The files of several PostgreSQL workers, read as one history: a k-way merge by ``gseq``.

Each worker of a :class:`~modefsm.store._postgres.PgStore` writes the records it committed
to its own JSON-lines file, each with ``gseq`` (the database's commit number) and
``session_prev`` (the digest of its session's previous record, wherever that is). A
database export (``modefsm store export``) is one such file holding every worker's
records, with a first line naming it (:data:`EXPORT_EVENT`).
"""

from __future__ import annotations

import gzip
import heapq
import itertools
import stat
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import orjson

from modefsm.log import (
    EVENT_REJECTED,
    MAX_LINE,
    DecisionEntry,
    LogEntry,
    LogProblem,
    SpecEntry,
    read_log,
)
from modefsm.store import EXPORT_EVENT

__all__: list[str] = []  # used by replay() only

FileKind = Literal["export", "worker", "plain", "uncommitted"]


def file_kind(path: str, *, workers: bool = True) -> FileKind:
    """What *path* holds: a database export, a PostgreSQL worker's file, a plain log, or none.

    A worker's file is one whose first committed record carries an integer ``gseq``; a
    file whose first committed record has none is a plain log. A file with no committed
    record at all (empty, or only rejections and lines that are not records: what a
    worker that changed nothing writes) is ``uncommitted``: it fits either kind. With
    *workers* false only an export is told apart. An unreadable file is ``plain`` (the
    replay reports it).
    """
    if path == "-" or _first_event(path) == EXPORT_EVENT:
        return "plain" if path == "-" else "export"
    if not workers or not _regular(path):  # a FIFO's lines are read once, by the replay
        return "plain"
    for item in read_log([path]):
        if isinstance(item, LogEntry) and item.record.event != EVENT_REJECTED:
            return "worker" if item.gseq is not None else "plain"
        if isinstance(item, LogProblem) and item.fatal:
            return "plain"
    return "uncommitted"


def merged_kinds(kinds: Sequence[FileKind]) -> bool:
    """Whether files of *kinds* are read as one history merged by ``gseq``.

    They are when none is a plain log and at least one holds records with ``gseq``
    (a worker's file or an export), several files or one export:

    >>> merged_kinds(["worker", "uncommitted", "uncommitted"])
    True
    >>> merged_kinds(["worker", "plain"]), merged_kinds(["uncommitted", "uncommitted"])
    (False, False)
    >>> merged_kinds(["worker"]), merged_kinds(["export"])
    (False, True)
    """
    if "plain" in kinds or not any(kind in ("worker", "export") for kind in kinds):
        return False
    return len(kinds) > 1 or kinds[0] == "export"


def _first_event(path: str) -> object:
    """The ``event`` of the first line of *path* (a gzip file's too), if it has one.

    Only a regular file is looked into: a FIFO's lines are read once, by the replay.
    """
    if not _regular(path):
        return None
    try:
        with open(path, "rb") as file:  # noqa: PTH123 - a path as the user gave it
            first = file.readline(MAX_LINE)
        if first[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as file:
                first = file.readline(MAX_LINE)
        data = orjson.loads(first)
    except (OSError, EOFError, zlib.error, orjson.JSONDecodeError):
        return None
    return data.get("event") if isinstance(data, dict) else None


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(Path(path).stat().st_mode)
    except (OSError, ValueError):
        return False


_Item = LogEntry | DecisionEntry | SpecEntry | LogProblem


def merge_by_gseq(
    paths: Sequence[str], *, check_digests: bool = False
) -> Iterator[LogEntry | DecisionEntry | SpecEntry | LogProblem]:
    """The items of :func:`~modefsm.log.read_log` of every file in *paths*, merged by ``gseq``.

    Streaming: one item per file is held at a time. Each file's items come in their file
    order; a record is placed by its ``gseq``, a decision with an ``at_gseq`` right after
    the record of that ``gseq`` (the one it was decided against; several by their own
    ``gseq``); an item without (a rejection, a header, a problem) keeps the place of the
    item before it in its file (before every record when there is none); equal places are
    taken in the order of *paths*.
    """
    readers = [
        read_log([path], check_digests=check_digests, decisions=True, headers=True)
        for path in paths
    ]
    # each file's last place, for items without: (gseq, 0, gseq) of a record,
    # (at_gseq, 1, gseq) of a decision
    keys = [(0, 0, 0)] * len(readers)
    order = itertools.count()
    heap: list[tuple[tuple[int, int, int], int, int, _Item]] = []

    def push(number: int) -> None:
        item = next(readers[number], None)
        if item is None:
            return
        if isinstance(item, LogEntry) and item.gseq is not None:
            keys[number] = (item.gseq, 0, item.gseq)
        elif isinstance(item, DecisionEntry) and item.gseq is not None and item.at_gseq is not None:
            keys[number] = (item.at_gseq, 1, item.gseq)
        heapq.heappush(heap, (keys[number], number, next(order), item))

    for number in range(len(readers)):
        push(number)
    while heap:
        _, number, _, item = heapq.heappop(heap)
        yield item
        push(number)
