"""Golden files of PostgreSQL workers: written by real engines on a real database.

:func:`clean_files` runs five :class:`~modefsm.ModeEngine` objects, each with its own
``PgStore`` on one fresh database and its own JSON-lines file, with a fixed clock: a
session created in one worker and changed in two others (one of them stale, so it
adopts and retries), an approved switch, a stale rejection; a fourth worker that changes
nothing (an empty file) and a fifth that only refuses requests (rejections: no ``gseq``).
:func:`one_worker_files` runs three workers of which only one changes anything. Each
fault is an edit of those files, done here so that it is reviewable.
``tests/replay/golden_workers/<case>/`` holds the case's files and ``expected.txt`` (the
report of ``modefsm replay FILE... --verify``, the files in :data:`CASES` order).
Written again with ``MODEFSM_REGEN_GOLDEN=1 pytest tests/store/test_golden_workers.py
tests/replay/test_golden_workers.py`` (the first needs PostgreSQL).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import orjson

from modefsm import ModeEngine, TransitionLog, preset
from modefsm.errors import ModefsmError
from tests.conftest import settle_now
from tests.replay.golden_logs import fixed_clock, rechain

if TYPE_CHECKING:
    from modefsm.store._postgres import PgStore

GOLDEN_WORKERS = Path(__file__).parent / "golden_workers"
FILES = ("w1.jsonl", "w2.jsonl", "w3.jsonl")
IDLE = "w4.jsonl"
"""The file of a worker that served and changed nothing: empty."""
REFUSING = "w5.jsonl"
"""The file of a worker that only refused requests: rejections, none with a ``gseq``."""

Files = dict[str, list[bytes]]


def _workers(
    url: str, count: int, script: Callable[[list[ModeEngine], list[PgStore]], None]
) -> Files:
    """*count* workers' files (``w1.jsonl``...) after *script(engines, stores)*."""
    from modefsm.store._postgres import PgStore

    buffers = [io.BytesIO() for _ in range(count)]
    stores = [PgStore(url, log=TransitionLog.to_stream(b)) for b in buffers]
    try:
        with fixed_clock():
            script([ModeEngine(preset("seed"), store=s) for s in stores], stores)
    finally:
        for store in stores:
            store.close()
    return {f"w{n}.jsonl": b.getvalue().splitlines() for n, b in enumerate(buffers, 1)}


def _load(engine: ModeEngine, store: PgStore, session_id: str) -> None:
    point = store.restore_point(session_id)
    assert point is not None
    engine.restore_session(
        session_id, point.mode, point.seq, previous=point.previous, digest=point.digest
    )


def clean_files(url: str) -> Files:
    """Five workers' files, from a fresh database.

    gseq: 1 w1 a created, 2 w2 b created, 3 w1 a ask->architect, 4 w3 a switch ->code,
    5 w2 b ->code, 6 none (w1's insert from its stale view of a, refused: w1 adopts code),
    7 w1 a ->ask, then w3 rejects a change of a from its stale view (code), 8 w3 c
    created, 9 w2 c ->architect. Then w5 loads b and refuses two requests (an unknown
    mode, a rejected switch); w4 changes nothing.
    """

    def script(engines: list[ModeEngine], stores: list[PgStore]) -> None:
        w1, w2, w3, _w4, w5 = engines
        w1.new_session("sess_a", request_id=0)
        w2.new_session("sess_b", request_id=0)
        w1.change("sess_a", "architect", "set_mode", request_id=1)
        _load(w3, stores[2], "sess_a")
        settle_now(w3, "sess_a", "code", tool_call_id="call_1")
        w2.change("sess_b", "code", "set_config_option", request_id=1)
        w1.change("sess_a", "ask", "set_mode", request_id=2)
        with contextlib.suppress(ModefsmError):
            w3.change("sess_a", "debug", "set_mode", request_id=1)
        w3.new_session("sess_c", request_id=2)
        _load(w2, stores[1], "sess_c")
        w2.change("sess_c", "architect", "set_mode", request_id=2)
        _load(w5, stores[4], "sess_b")
        with contextlib.suppress(ModefsmError):
            w5.change("sess_b", "debug", "set_mode", request_id=0)
        w5.reject_switch("sess_b", "option_rejected", tool_call_id="call_2", option_id="reject")

    return _workers(url, 5, script)


def one_worker_files(url: str) -> Files:
    """Three workers' files, from a fresh database: one makes every change.

    gseq: 1 w1 a created, 2 w1 a ask->architect, 3 w1 b created, 4 w1 a switch ->code,
    then w3 loads a and refuses a change to an unknown mode; w2 changes nothing.
    """

    def script(engines: list[ModeEngine], stores: list[PgStore]) -> None:
        w1, _w2, w3 = engines
        w1.new_session("sess_a", request_id=0)
        w1.change("sess_a", "architect", "set_mode", request_id=1)
        w1.new_session("sess_b", request_id=2)
        settle_now(w1, "sess_a", "code", tool_call_id="call_1")
        _load(w3, stores[2], "sess_a")
        with contextlib.suppress(ModefsmError):
            w3.change("sess_a", "debug", "set_mode", request_id=0)

    return _workers(url, 3, script)


def _gseq(line: bytes) -> int | None:
    value = orjson.loads(line).get("gseq")
    return value if isinstance(value, int) else None


def _at(lines: list[bytes], gseq: int) -> int:
    return next(i for i, line in enumerate(lines) if _gseq(line) == gseq)


def deleted(files: Files) -> Files:
    """w1's gseq 3 (sess_a seq 2, ask -> architect) is gone."""
    w1 = files["w1.jsonl"]
    del w1[_at(w1, 3)]
    return files


def duplicated(files: Files) -> Files:
    """w2's gseq 5 (sess_b seq 2) was copied into w3's file, after its gseq 4."""
    w3 = files["w3.jsonl"]
    w3.insert(_at(w3, 4) + 1, files["w2.jsonl"][_at(files["w2.jsonl"], 5)])
    return files


def reordered(files: Files) -> Files:
    """In w1's file, gseq 3 and gseq 7 (sess_a seq 2 and seq 4) are swapped."""
    w1 = files["w1.jsonl"]
    i, j = _at(w1, 3), _at(w1, 7)
    w1[i], w1[j] = w1[j], w1[i]
    return files


def edited(files: Files) -> Files:
    """w3's approved switch (gseq 4, sess_a seq 3) was edited to say -> ask, not -> code."""
    w3 = files["w3.jsonl"]
    i = _at(w3, 4)
    data = orjson.loads(w3[i])
    data["to_mode"] = "ask"
    w3[i] = orjson.dumps(data)
    return files


def rechained(files: Files) -> Files:
    """w1's gseq 3 edited to ask -> code, w1's chain recomputed (a forger with w1 only)."""
    w1 = files["w1.jsonl"]
    i = _at(w1, 3)
    data = orjson.loads(w1[i])
    data["to_mode"] = "code"
    w1[i] = orjson.dumps(data)
    files["w1.jsonl"] = rechain(w1)
    return files


class Case(NamedTuple):
    """A golden worker set: which run, which of its files (in this order), which edit."""

    run: Callable[[str], Files]
    files: tuple[str, ...]
    edit: Callable[[Files], Files]


def _same(files: Files) -> Files:
    return files


CASES: dict[str, Case] = {
    "clean": Case(clean_files, FILES, _same),
    "deleted": Case(clean_files, FILES, deleted),
    "duplicated": Case(clean_files, FILES, duplicated),
    "reordered": Case(clean_files, FILES, reordered),
    "edited": Case(clean_files, FILES, edited),
    "rechained": Case(clean_files, FILES, rechained),
    "idle_worker": Case(clean_files, (*FILES, IDLE), _same),
    "refusing_worker": Case(clean_files, (*FILES, REFUSING), _same),
    "idle_and_refusing": Case(clean_files, (IDLE, *FILES, REFUSING), _same),
    "one_worker": Case(one_worker_files, FILES, _same),
}
"""Each case's name: the run it comes from, the files it keeps, and its edit of them."""


def render(files: Files, names: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of each file of *names*: its lines, each ended by a newline."""
    return {name: b"".join(line + b"\n" for line in files[name]) for name in names}
