"""Two `modefsm serve --store postgresql://...` workers on one database, driven by the SDK."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from modefsm import TransitionLog
from tests.acp_client import serve

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

from modefsm.store._postgres import PgStore

pytestmark = pytest.mark.e2e


async def test_two_workers_share_one_history(postgres_url: str, tmp_path: Path) -> None:
    w1, w2 = tmp_path / "w1.jsonl", tmp_path / "w2.jsonl"
    async with (
        serve(w1, "--store", postgres_url) as (one, one_client),
        serve(w2, "--store", postgres_url) as (two, _c2),
    ):
        session_id = (await one.new_session(cwd=".", mcp_servers=[])).session_id
        await one.set_session_mode(session_id=session_id, mode_id="architect")
        loaded = await two.load_session(cwd=".", session_id=session_id)
        assert loaded.modes.current_mode_id == "architect"  # created and changed in w1
        await two.set_session_mode(session_id=session_id, mode_id="code")
        # w1's view is stale: it adopts w2's change (and says so), then makes its own
        await one.set_session_mode(session_id=session_id, mode_id="ask")
        told = [
            m["params"]["update"]["currentModeId"]
            for direction, m in one_client.frames
            if direction == "incoming"
            and m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "current_mode_update"
        ]
        assert told == ["architect", "code", "ask"]
    lines = [orjson.loads(line) for path in (w1, w2) for line in path.read_bytes().splitlines()]
    committed = sorted((r["seq"], r["to_mode"], r["gseq"]) for r in lines if r.get("seq"))
    assert [(seq, mode) for seq, mode, _ in committed] == [
        (1, "ask"),
        (2, "architect"),
        (3, "code"),
        (4, "ask"),
    ]
    gseqs = [gseq for _, _, gseq in committed]  # the commit order; a refused insert skips one
    assert gseqs == sorted(gseqs)
    assert len(set(gseqs)) == 4
    store = PgStore(postgres_url, log=TransitionLog.to_stream(io.BytesIO()))
    try:  # the database holds the one history; each worker's file holds its own records
        history = list(store.history(session_id))
    finally:
        store.close()
    assert [(r.seq, r.to_mode) for r in history] == [
        (1, "ask"),
        (2, "architect"),
        (3, "code"),
        (4, "ask"),
    ]
    assert [r.session_prev for r in history[1:]] == [r.digest for r in history[:-1]]


def test_store_flag_refuses_other_urls(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "modefsm", "serve", "--store", "mysql://x"],
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--store: not a postgresql:// URL: 'mysql://x'" in done.stderr
    assert "Traceback" not in done.stderr
