"""The golden transition logs: written by the real engine, then edited, one fault each.

Every log comes from :func:`clean_lines` (or another engine run), with a fixed clock so
that the bytes are stable; each fault is an edit of those lines, done here so that it is
reviewable and the files can be written again when the record format changes
(``MODEFSM_REGEN_GOLDEN=1 pytest tests/replay/test_golden.py``).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import orjson

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog, preset
from modefsm.errors import ModefsmError
from modefsm.log._records import record_digest
from tests.conftest import settle_now

HOST_JSON = b'{"event":"http request","method":"GET","path":"/health","level":"info"}'
HOST_TEXT = b"2026-01-01 00:00:00 INFO host: agent started (modefsm.serve)"


@contextlib.contextmanager
def fixed_clock() -> Iterator[None]:
    """Make the engine's timestamps 2026-01-01T00:00:01Z, 00:00:02Z, ..."""
    ticks = iter(range(1, 10_000))

    def now() -> str:
        second = next(ticks)
        return f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}.000000Z"

    with mock.patch("modefsm.engine._engine.utc_timestamp", now):
        yield


def _run(spec: ModeSpec, script: Callable[[ModeEngine], None]) -> list[bytes]:
    buffer = io.BytesIO()
    with fixed_clock():
        script(ModeEngine(spec, store=LogStore(TransitionLog.to_stream(buffer))))
    return buffer.getvalue().splitlines()


def _seed_script(engine: ModeEngine) -> None:
    engine.new_session("sess_a", request_id=0)
    engine.new_session("sess_b", request_id=1)
    engine.change("sess_a", "architect", "set_mode", request_id=2)
    settle_now(engine, "sess_a", "code", tool_call_id="call_1")
    engine.change("sess_b", "architect", "set_config_option", request_id=3)
    with contextlib.suppress(ModefsmError):
        engine.change("sess_a", "debug", "set_mode", request_id=4)
    engine.reject_switch("sess_b", "option_rejected", tool_call_id="call_2", option_id="reject")
    engine.change("sess_a", "ask", "set_config_option", request_id=5)
    engine.change("sess_b", "code", "set_mode", request_id=6)


def clean_lines() -> list[bytes]:
    """Two seed sessions with every origin, a rejection, and two host lines mixed in.

    Lines: 1 the header (the seed spec), then records 1 a created, 2 b created,
    3 a ask->architect, 4 a switch ->code, 5 b ->architect, 6 a rejected, 7 b switch
    rejected, 8 a ->ask, 9 b ->code (line 3 is a host's JSON line, line 8 its text).
    """
    header, *records = _run(preset("seed"), _seed_script)
    return [header, records[0], HOST_JSON, *records[1:5], HOST_TEXT, *records[5:]]


def rechain(lines: list[bytes]) -> list[bytes]:
    """Recompute every record's ``prev``/``digest``: what a forger rewriting the log does."""
    out, head = [], None
    for line in lines:
        data = orjson.loads(line) if line.startswith(b"{") else None
        if not isinstance(data, dict) or "digest" not in data:
            out.append(line)
            continue
        data["prev"] = head
        data.pop("digest")
        data["digest"] = head = record_digest(data)
        out.append(orjson.dumps(data))
    return out


def _edit(line: bytes, **changes: object) -> bytes:
    data = orjson.loads(line)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return orjson.dumps(data)


def torn_tail() -> list[bytes]:
    """A crash while writing a tenth record: its line is cut short, with no newline."""

    def script(engine: ModeEngine) -> None:
        _seed_script(engine)
        engine.change("sess_a", "code", "set_mode")

    return [*clean_lines(), _run(preset("seed"), script)[-1][:90]]


def gap() -> list[bytes]:
    """sess_a's seq 3 (its approved switch, line 6) is gone."""
    lines = clean_lines()
    del lines[5]
    return lines


def duplicate() -> list[bytes]:
    """sess_b's seq 2 (line 7) appears twice."""
    lines = clean_lines()
    lines.insert(7, lines[6])
    return lines


def reorder() -> list[bytes]:
    """sess_a's seq 2 and seq 3 (lines 5 and 6) are swapped."""
    lines = clean_lines()
    lines[4], lines[5] = lines[5], lines[4]
    return lines


def edited_mode() -> list[bytes]:
    """sess_a's seq 2 (line 5) was edited to say ask -> code instead of ask -> architect."""
    lines = clean_lines()
    lines[4] = _edit(lines[4], to_mode="code")
    return lines


def deleted_record() -> list[bytes]:
    """sess_a's rejection (line 9) is gone: no seq is missing, only the chain shows it."""
    lines = clean_lines()
    del lines[8]
    return lines


def illegal_edge() -> list[bytes]:
    """A permission-preset log whose approved exit from plan was rewritten as a client
    set_mode to acceptEdits (plan allows the client only default), digests recomputed."""

    def script(engine: ModeEngine) -> None:
        engine.new_session("sess_p")
        engine.change("sess_p", "plan", "set_mode", request_id=1)
        settle_now(engine, "sess_p", "exit_plan_accept_edits", tool_call_id="call_9")
        engine.change("sess_p", "default", "set_mode", request_id=2)

    lines = _run(preset("permission"), script)  # line 1: the header
    lines[3] = _edit(lines[3], origin="set_mode", tool_call_id=None, option_id=None, request_id=7)
    return rechain(lines)


def _custom_spec() -> ModeSpec:
    return ModeSpec.from_data(
        {
            "name": "review",
            "initial": "draft",
            "modes": [{"id": "draft", "name": "Draft"}, {"id": "review", "name": "Review"}],
        }
    )


def _review_script(engine: ModeEngine) -> None:
    engine.new_session("sess_r")
    engine.change("sess_r", "review", "set_mode")
    engine.change("sess_r", "draft", "set_mode")


def custom_spec() -> list[bytes]:
    """A log written with a spec that is not shipped: its header holds it."""
    return _run(_custom_spec(), _review_script)


def unknown_spec() -> list[bytes]:
    """:func:`custom_spec` without its header (written before headers), no spec given."""
    return rechain(custom_spec()[1:])


def header_edited() -> list[bytes]:
    """:func:`custom_spec` whose header's mode ``review`` was renamed ``approve`` in its
    definition, the digest chain recomputed: the definition no longer has its hash."""
    header, *records = custom_spec()
    data = orjson.loads(header)
    data["definition"]["modes"][1]["id"] = "approve"
    return rechain([orjson.dumps(data), *records])


def _older_seed() -> ModeSpec:
    data = preset("seed").model_dump(by_alias=True)
    data["modes"] = [*data["modes"], {"id": "debug", "name": "Debug"}]
    return ModeSpec.from_data(data)


def _debug_script(engine: ModeEngine) -> None:
    engine.new_session("sess_s")
    engine.change("sess_s", "debug", "set_mode")


def spec_changed() -> list[bytes]:
    """A log written, before headers, with an older seed that also had a ``debug`` mode."""
    return rechain(_run(_older_seed(), _debug_script)[1:])


def spec_mismatch() -> list[bytes]:
    """:func:`spec_changed` with its header: replayed against today's seed."""
    return _run(_older_seed(), _debug_script)


def interleaved() -> list[bytes]:
    """Two processes appending to one file: the second opened it after two records."""
    with tempfile.TemporaryDirectory() as folder, fixed_clock():
        path = Path(folder) / "shared.jsonl"
        first_log = TransitionLog.to_file(path)
        first = ModeEngine(preset("seed"), store=LogStore(first_log))
        first.new_session("sess_1")
        first.change("sess_1", "architect", "set_mode")
        second_log = TransitionLog.to_file(path)
        second = ModeEngine(preset("seed"), store=LogStore(second_log))
        first.change("sess_1", "code", "set_mode")
        second.new_session("sess_2")
        first.change("sess_1", "ask", "set_mode")
        second.change("sess_2", "code", "set_mode")
        first_log.close()
        second_log.close()
        return path.read_bytes().splitlines()


def wrong_shape() -> list[bytes]:
    """sess_b's seq 2 (line 7) has ``seq: "two"``; sess_a's seq 4 (line 11) lost a quote."""
    lines = clean_lines()
    lines[6] = _edit(lines[6], seq="two")
    lines[10] = lines[10].replace(b'"to_mode":"ask"', b'"to_mode":ask"')
    return lines


CASES: dict[str, Callable[[], list[bytes]]] = {
    "clean": clean_lines,
    "torn_tail": torn_tail,
    "gap": gap,
    "duplicate": duplicate,
    "reorder": reorder,
    "edited_mode": edited_mode,
    "deleted_record": deleted_record,
    "illegal_edge": illegal_edge,
    "custom_spec": custom_spec,
    "unknown_spec": unknown_spec,
    "header_edited": header_edited,
    "spec_changed": spec_changed,
    "spec_mismatch": spec_mismatch,
    "interleaved": interleaved,
    "wrong_shape": wrong_shape,
}
"""Each golden log's name and how it is made."""


def render(name: str) -> bytes:
    """The bytes of golden log *name*: its lines, each ended by a newline but a torn last."""
    lines = CASES[name]()
    data = b"\n".join(lines)
    return data if name == "torn_tail" else data + b"\n"
