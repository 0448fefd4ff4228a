"""A writer process for the PostgreSQL store tests and benchmarks.

``python -m tests.store.pg_writer URL SEED CHANGES SESSIONS_FILE ACK_FILE [LOG]``

Changes random sessions of SESSIONS_FILE (one sessionId a line, already created) to
random modes; after each append returns (what a client would be told) it appends
``sessionId seq digest`` to ACK_FILE. A lost race adopts the current point and retries,
as the engine does. With ``MODEFSM_TEST_GATE=PATH`` it creates ``PATH.<pid>`` once ready
and starts writing when PATH exists (so that several writers overlap). Prints
``{"done": n, "moved": n, "busy": n}`` at the end.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import orjson

from modefsm.log import EVENT_CHANGED, TransitionLog
from modefsm.store import SessionMoved, StoreBusy
from modefsm.store._postgres import PgStore

MODES = ("ask", "architect", "code")
SPEC_HASH = "sha256:0df565f236717a02"  # preset("seed").content_hash


def main() -> None:
    """Run the writer (see the module docstring)."""
    url, seed, changes, sessions_file, ack_file, *rest = sys.argv[1:]
    summary = write(
        url, int(seed), int(changes), sessions_file, ack_file, rest[0] if rest else None
    )
    sys.stdout.write(orjson.dumps(summary).decode() + "\n")


def write(  # noqa: PLR0917 - the command line, as arguments
    url: str, seed: int, changes: int, sessions_file: str, ack_file: str, log_path: str | None
) -> dict[str, int]:
    """Make *changes* changes; return ``{"done": n, "moved": n, "busy": n}``."""
    rng = random.Random(seed)
    sessions = Path(sessions_file).read_text().split()
    log = TransitionLog.to_file(log_path) if log_path else None
    store = PgStore(url, log=log, lock_timeout=5.0)
    ack = os.open(ack_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    heads = {sid: store.restore_point(sid) for sid in sessions}
    gate = os.environ.get("MODEFSM_TEST_GATE")
    if gate:
        Path(f"{gate}.{os.getpid()}").touch()
        while not Path(gate).exists():
            time.sleep(0.005)
    done = moved = busy = 0
    for _ in range(changes):
        sid = sessions[rng.randrange(len(sessions))]
        while True:
            head = heads[sid]
            assert head is not None
            dst = rng.choice([m for m in MODES if m != head.mode])
            fields = {
                "timestamp": "2026-12-01T08:00:00.000000Z",
                "session_id": sid,
                "seq": head.seq + 1,
                "from_mode": head.mode,
                "to_mode": dst,
                "origin": "set_mode",
                "spec": "seed",
                "spec_hash": SPEC_HASH,
            }
            try:
                digest = store.append(EVENT_CHANGED, fields, head)
            except SessionMoved as exc:
                moved += 1
                heads[sid] = exc.current
                continue
            except StoreBusy:
                busy += 1
                continue
            break
        heads[sid] = head._replace(mode=dst, seq=head.seq + 1, previous=head.mode, digest=digest)
        os.write(ack, f"{sid} {head.seq + 1} {digest}\n".encode())
        done += 1
    store.close()
    if log is not None:
        log.close()
    return {"done": done, "moved": moved, "busy": busy}


if __name__ == "__main__":
    main()
