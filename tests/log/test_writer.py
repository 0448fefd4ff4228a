"""The transition log writer's renderer: structlog's bytes, orjson called directly."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from typing import Any

import orjson
import structlog

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.log._records import record_digest


class _Shown:
    """A value orjson cannot serialize; structlog's renderer asks it how to show itself."""

    def __structlog__(self) -> str:
        return "shown"


def structlog_reference() -> tuple[io.BytesIO, Any]:
    """A structlog ``BytesLogger`` behind ``add_log_level`` and the orjson ``JSONRenderer``."""
    out = io.BytesIO()
    bound = structlog.wrap_logger(
        structlog.BytesLogger(out),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    )
    return out, bound


class TestRenderer:
    """Lines are structlog's own bytes; structlog is loaded only for a value orjson refuses."""

    def test_records_are_written_without_loading_structlog(self):
        script = textwrap.dedent(
            """
            import io, sys
            from modefsm import LogStore, ModeEngine, TransitionLog, preset
            buffer = io.BytesIO()
            engine = ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(buffer)))
            engine.new_session("s1", cwd="/src")
            engine.change("s1", "code", "set_mode")
            engine.store.log.write("modefsm.notify_failed", {"session_id": "s1", "error": "x"})
            print(len(buffer.getvalue().splitlines()), "structlog" in sys.modules)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
        )
        assert done.stdout == "4 False\n"

    def test_a_value_orjson_refuses_is_rendered_by_structlogs_renderer(self):
        written = io.BytesIO()
        log = TransitionLog.to_stream(written)
        fields = {"session_id": "s1", "error": _Shown(), "seen": {3}, "seq": 1}
        log.write("modefsm.notify_failed", fields)
        log.write("modefsm.hook_failed", {"session_id": "s1", "error": "plain"})
        expected, bound = structlog_reference()
        bound.warning("modefsm.notify_failed", **fields)
        bound.warning("modefsm.hook_failed", session_id="s1", error="plain")
        assert written.getvalue() == expected.getvalue()
        assert written.getvalue().splitlines()[0] == (
            b'{"session_id":"s1","error":"shown","seen":"{3}","seq":1,'
            b'"event":"modefsm.notify_failed","level":"warning"}'
        )

    def test_engine_lines_are_structlogs_bytes(self):
        written = io.BytesIO()
        engine = ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(written)))
        engine.new_session("s1", request_id=1, cwd="/caf\u00e9")
        engine.change("s1", "architect", "set_mode", request_id=2)
        lines = [orjson.loads(line) for line in written.getvalue().splitlines()]
        expected, bound = structlog_reference()
        for line in lines:
            fields = {k: v for k, v in line.items() if k not in {"event", "level"}}
            assert line["digest"] == record_digest({**fields, "event": line["event"]})
            bound.info(line["event"], **fields)
        assert written.getvalue() == expected.getvalue()
