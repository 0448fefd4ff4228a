"""The embedded store with fsync: several processes, one chain still.

Four real processes append to one file through ``FileStore(fsync=True)``, each on its own
sessions and all on one contested session (lost races: ``SessionMoved``, taken up and
tried again); the file must verify as one chain with every acknowledged record once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

WRITER = """
import sys
from modefsm.errors import ModefsmError
from modefsm.log import EVENT_CHANGED, EVENT_CREATED
from modefsm.store import RestorePoint
from modefsm.store import FileStore, SessionMoved

path, index, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = FileStore(path, fsync=True, lock_timeout=30.0)

def fields(sid, seq, source, dest):
    return {"timestamp": "2026-12-01T00:00:00.000000Z", "session_id": sid, "seq": seq,
            "from_mode": source, "to_mode": dest,
            "origin": "new" if source is None else "set_mode",
            "spec": "seed", "spec_hash": "sha256:0df565f236717a02"}

own = f"own{index}"
digest = store.append(EVENT_CREATED, fields(own, 1, None, "ask"), None)
point = RestorePoint(own, "ask", 1, None, digest)
acknowledged = 1
shared = store.restore_point("shared")
for number in range(count):
    dest = "code" if point.mode == "ask" else "ask"
    digest = store.append(EVENT_CHANGED, fields(own, point.seq + 1, point.mode, dest), point)
    point = RestorePoint(own, dest, point.seq + 1, point.mode, digest)
    acknowledged += 1
    while True:  # the contested session: whoever is first
        dest = "architect" if shared.mode != "architect" else "ask"
        try:
            digest = store.append(
                EVENT_CHANGED, fields("shared", shared.seq + 1, shared.mode, dest), shared
            )
        except SessionMoved as moved:
            shared = moved.current
            continue
        shared = RestorePoint("shared", dest, shared.seq + 1, shared.mode, digest)
        acknowledged += 1
        break
store.close()
print(acknowledged)
"""

CREATE = """
import sys
from modefsm.log import EVENT_CREATED
from modefsm.store import FileStore
store = FileStore(sys.argv[1], fsync=True)
store.append(EVENT_CREATED, {"timestamp": "2026-12-01T00:00:00.000000Z", "session_id": "shared",
    "seq": 1, "from_mode": None, "to_mode": "ask", "origin": "new", "spec": "seed",
    "spec_hash": "sha256:0df565f236717a02"}, None)
store.close()
"""


def test_processes_appending_with_fsync_make_one_chain(tmp_path: Path) -> None:
    log = tmp_path / "modes.jsonl"
    subprocess.run([sys.executable, "-c", CREATE, str(log)], check=True, timeout=60)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log), str(index), "15"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(4)
    ]
    acknowledged = 1  # the shared session's creation
    for writer in writers:
        out, _ = writer.communicate(timeout=120)
        assert writer.returncode == 0
        acknowledged += int(out)
    assert acknowledged == 1 + 4 * (1 + 15 + 15)
    records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert len(records) == acknowledged
    shared = [r["seq"] for r in records if r["session_id"] == "shared"]
    assert shared == list(range(1, 1 + 4 * 15 + 1))
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", "replay", str(log), "--verify", "--summary"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert (done.returncode, lines[-1]) == (0, "RESULT  clean"), done.stdout
    assert lines[-2].startswith(f"CHAIN  {acknowledged} records verified, 0 without a digest")
