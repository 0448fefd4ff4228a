"""`session/list` over PostgreSQL: two `modefsm serve --store postgresql://...` workers."""

from __future__ import annotations

import pytest

from tests.protocol.test_session_list import check_paging

pytest.importorskip("psycopg", reason="psycopg is not installed (.[postgresql])")

pytestmark = pytest.mark.e2e


async def test_postgresql_lists_both_workers_across_a_restart(tmp_path, postgres_url):
    logs = [tmp_path / "w1.jsonl", tmp_path / "w2.jsonl"]
    await check_paging(logs, [["--store", postgres_url], ["--store", postgres_url]])
