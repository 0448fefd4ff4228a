"""The engine: one transition function, write-ahead records, notifications in commit order."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

import pytest

from modefsm import (
    HookError,
    InvalidValueError,
    LogError,
    LogStore,
    ModeChange,
    ModeEngine,
    ModeSpec,
    SessionExistsError,
    TransitionLog,
    TransitionNotAllowedError,
    TransitionRecord,
    UnknownConfigOptionError,
    UnknownModeError,
    UnknownSessionError,
    preset,
)
from modefsm.engine import ModeChanged
from modefsm.log import SpecRecord
from modefsm.protocol.v1 import config_options as v1
from modefsm.protocol.v1 import session_updates
from tests.conftest import Recorder, announced, mode_option, read_log, spec_with

SEED = preset("seed")
SPEC = {"spec": "seed", "spec_hash": SEED.content_hash}


def created(session_id: str = "s1", mode: str = "ask", **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "seq": 1,
        "from_mode": None,
        "to_mode": mode,
        "origin": "new",
        **extra,
        **SPEC,
        "event": "modefsm.session_created",
        "level": "info",
    }


def changed(
    seq: int, source: str, dest: str, origin: str, session_id: str = "s1", **extra: Any
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "seq": seq,
        "from_mode": source,
        "to_mode": dest,
        "origin": origin,
        **extra,
        **SPEC,
        "event": "modefsm.mode_changed",
        "level": "info",
    }


def rejected(
    source: str, dest: str | None, origin: str, reason: str, session_id: str = "s1", **extra: Any
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "seq": None,
        "from_mode": source,
        "to_mode": dest,
        "origin": origin,
        **extra,
        **SPEC,
        "reason": reason,
        "event": "modefsm.change_rejected",
        "level": "warning",
    }


class TestClientChanges:
    """set_mode and set_config_option go through the same transition and announce it twice."""

    async def test_set_mode_logs_and_announces_on_both_channels(
        self, make_engine, recorder, log_path
    ):
        engine = make_engine()
        engine.new_session("s1", request_id=0)
        change = await engine.set_mode("s1", "architect", request_id=1)
        assert change == ModeChange("s1", 2, "ask", "architect", "set_mode", 1)
        assert recorder.sent == announced(SEED, "s1", "architect")
        assert read_log(log_path) == [
            created(request_id=0),
            changed(2, "ask", "architect", "set_mode", request_id=1),
        ]

    async def test_set_config_option_returns_the_complete_list(
        self, make_engine, recorder, log_path
    ):
        engine = make_engine()
        engine.new_session("s1")
        options = await engine.set_config_option("s1", "mode", "code", request_id=7)
        wire = [o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in v1(options)]
        assert wire == [mode_option(SEED, "code")]
        assert recorder.sent == announced(SEED, "s1", "code")
        assert read_log(log_path)[1] == changed(2, "ask", "code", "set_config_option", request_id=7)

    async def test_setting_the_current_mode_changes_nothing(self, make_engine, recorder, log_path):
        engine = make_engine()
        engine.new_session("s1")
        assert await engine.set_mode("s1", "ask") is None
        assert recorder.sent == []
        assert read_log(log_path) == [created()]
        assert engine.get("s1").seq == 1

    async def test_every_mode_of_every_preset_can_be_set(self, tmp_path: Path):
        for name in ("seed", "permission", "sandbox"):
            spec = preset(name)
            for target in spec.mode_ids:
                engine = ModeEngine(spec)
                session = engine.new_session("s")
                path = [m for m in spec.mode_ids if target in spec.client_targets(m)]
                if spec.initial != target:
                    if path and spec.initial not in path:
                        await engine.set_mode("s", path[0])
                    await engine.set_mode("s", target)
                assert session.state == target, (name, target)


class TestWildcardModeIds:
    """Mode ids that mean something to transitions ('*', '=') are ordinary modes here."""

    async def test_star_is_not_every_mode(self):
        spec = spec_with(
            ["safe", "*", "yolo"], client_changes={"safe": ["*"], "*": ["safe", "yolo"]}
        )
        engine = ModeEngine(spec)
        engine.new_session("s")
        with pytest.raises(TransitionNotAllowedError):
            await engine.set_mode("s", "yolo")
        await engine.set_mode("s", "*")
        assert engine.get("s").state == "*"
        await engine.set_mode("s", "yolo")
        assert engine.get("s").state == "yolo"

    async def test_equals_sign_is_a_real_change(self, make_engine, log_path, recorder):
        engine = make_engine(spec_with(["a", "="]))
        engine.new_session("s")
        change = await engine.set_mode("s", "=")
        assert (change.from_mode, change.to_mode, engine.get("s").state) == ("a", "=", "=")
        assert read_log(log_path)[-1]["to_mode"] == "="
        assert recorder.sent[0]["update"]["currentModeId"] == "="


class TestRejections:
    """A rejected request changes nothing, notifies nothing, and is logged as a rejection."""

    async def test_unknown_mode(self, make_engine, recorder, log_path):
        engine = make_engine()
        engine.new_session("s1")
        with pytest.raises(UnknownModeError) as info:
            await engine.set_mode("s1", "does-not-exist", request_id=3)
        assert info.value.to_data() == {
            "field": "modeId",
            "value": "does-not-exist",
            "valid": ["ask", "architect", "code"],
            "message": "modeId: unknown mode 'does-not-exist'; "
            "available modes: 'ask', 'architect', 'code'",
        }
        assert engine.get("s1").state == "ask"
        assert engine.get("s1").seq == 1
        assert recorder.sent == []
        assert read_log(log_path) == [
            created(),
            rejected("ask", "does-not-exist", "set_mode", "unknown_mode", request_id=3),
        ]

    async def test_not_allowed_by_policy(self, make_engine, recorder, log_path):
        engine = make_engine("permission")
        engine.new_session("s1")
        await engine.set_mode("s1", "plan")
        recorder.sent.clear()
        with pytest.raises(TransitionNotAllowedError) as info:
            await engine.set_mode("s1", "bypassPermissions")
        assert info.value.to_data()["valid"] == ["default"]
        assert str(info.value) == (
            "modeId: set_mode may not change session 's1' from mode 'plan' to "
            "'bypassPermissions'; allowed from 'plan': 'default'"
        )
        assert engine.get("s1").state == "plan"
        assert recorder.sent == []
        assert read_log(log_path)[-1]["reason"] == "not_allowed"
        assert read_log(log_path)[-1]["seq"] is None

    async def test_unknown_config_option(self, make_engine, recorder):
        engine = make_engine()
        engine.new_session("s1")
        with pytest.raises(UnknownConfigOptionError) as info:
            await engine.set_config_option("s1", "model", "code")
        assert info.value.to_data()["field"] == "configId"
        assert info.value.to_data()["valid"] == ["mode"]
        assert recorder.sent == []

    async def test_boolean_value(self, make_engine, recorder):
        engine = make_engine()
        engine.new_session("s1")
        with pytest.raises(InvalidValueError) as info:
            await engine.set_config_option("s1", "mode", value=True)
        assert info.value.field == "value"
        assert engine.get("s1").state == "ask"

    async def test_config_value_that_is_not_a_mode_names_value(self, make_engine):
        engine = make_engine()
        engine.new_session("s1")
        with pytest.raises(UnknownModeError) as info:
            await engine.set_config_option("s1", "mode", "nope")
        assert info.value.field == "value"

    async def test_unknown_session_logs_nothing(self, make_engine, log_path):
        engine = make_engine()
        with pytest.raises(UnknownSessionError) as info:
            await engine.set_mode("nope", "code")
        assert info.value.session_id == "nope"
        assert not log_path.exists() or log_path.read_bytes() == b""

    def test_duplicate_session_id(self, make_engine):
        engine = make_engine()
        engine.new_session("s1")
        with pytest.raises(SessionExistsError):
            engine.new_session("s1")

    async def test_closed_session_is_gone(self, make_engine):
        engine = make_engine()
        engine.new_session("s1")
        engine.close_session("s1")
        assert "s1" not in engine
        with pytest.raises(UnknownSessionError):
            await engine.set_mode("s1", "code")


class TestSwitches:
    """Approved switch_mode changes carry their tool call and option; targets resolve."""

    async def test_approved_switch(self, make_engine, recorder, log_path):
        engine = make_engine()
        engine.new_session("s1")
        await engine.set_mode("s1", "architect")
        recorder.sent.clear()
        offer = await engine.offer_switch("s1", tool_call_id="call_1")
        result = await engine.settle_switch(offer, "code", request_id=0)
        await engine.flush()
        assert (result.tool_call_id, result.option_id, result.reason) == ("call_1", "code", None)
        assert result.change == ModeChange(
            "s1", 3, "architect", "code", "switch_mode", 0, "call_1", "code"
        )
        assert recorder.sent == announced(SEED, "s1", "code")
        assert read_log(log_path)[-1] == changed(
            3,
            "architect",
            "code",
            "switch_mode",
            request_id=0,
            tool_call_id="call_1",
            option_id="code",
        )

    async def test_previous_target_returns_to_the_mode_before(self, make_engine):
        engine = make_engine("permission")
        engine.new_session("s1")
        await engine.set_mode("s1", "bypassPermissions")
        await engine.set_mode("s1", "plan")
        switch = engine.spec.switch_from("plan")
        previous = next(o for o in switch.options if o.target == "$previous")
        offer = await engine.offer_switch("s1")
        assert offer.targets[previous.option_id] == "bypassPermissions"
        result = await engine.settle_switch(offer, previous.option_id)
        assert (result.reason, engine.get("s1").state) == (None, "bypassPermissions")

    async def test_previous_target_without_history(self, make_engine):
        engine = make_engine("permission")
        engine.restore_session("s1", "plan", 3)  # in plan with no history
        switch = engine.spec.switch_from("plan")
        previous = next(o for o in switch.options if o.target == "$previous")
        offer = await engine.offer_switch("s1")
        assert offer.get(previous.option_id) is None
        reject = next(o for o in switch.options if not o.allows)
        assert offer.targets[reject.option_id] is None

    async def test_switch_after_a_meanwhile_change_records_where_it_was_proposed(
        self, make_engine, log_path
    ):
        engine = make_engine()
        engine.new_session("s1")
        await engine.set_mode("s1", "architect")
        offer = await engine.offer_switch("s1", tool_call_id="t")
        await engine.set_mode("s1", "ask")  # the client moved while the request was pending
        assert (await engine.settle_switch(offer, "code")).reason is None
        assert read_log(log_path)[-1] == changed(
            4,
            "ask",
            "code",
            "switch_mode",
            tool_call_id="t",
            option_id="code",
            proposed_in="architect",
        )

    async def test_switch_the_policy_forbids_changes_nothing(self, make_engine, recorder, log_path):
        spec = ModeSpec(
            name="locked",
            initial="a",
            modes=[{"id": "a", "name": "A"}, {"id": "b", "name": "B"}, {"id": "c", "name": "C"}],
            client_changes={"a": ["b"], "b": ["a"], "c": ["a"]},
            switches=[
                {
                    "source": ["a"],
                    "title": "go",
                    "options": [
                        {"option_id": "c", "name": "C", "kind": "allow_once", "target": "c"}
                    ],
                }
            ],
        )
        engine = make_engine(spec)
        engine.new_session("s1")
        offer = await engine.offer_switch("s1", tool_call_id="t")
        await engine.set_mode("s1", "b")  # the client left a while the request was pending
        recorder.sent.clear()
        result = await engine.settle_switch(offer, "c")
        assert (result.change, result.reason) == (None, "stale_option")
        assert isinstance(result.error, TransitionNotAllowedError)
        assert result.error.to_data()["field"] == "optionId"
        assert result.error.to_data()["valid"] == ["a"]
        assert (engine.get("s1").state, engine.get("s1").seq) == ("b", 2)
        await engine.flush()
        assert recorder.sent == []
        last = read_log(log_path)[-1]
        assert (
            last["event"],
            last["reason"],
            last["from_mode"],
            last["to_mode"],
            last["proposed_in"],
        ) == ("modefsm.change_rejected", "stale_option", "b", "c", "a")

    async def test_declined_switch_is_logged(self, make_engine, log_path, recorder):
        engine = make_engine()
        engine.new_session("s1")
        engine.reject_switch("s1", "option_rejected", tool_call_id="t", option_id="reject")
        assert read_log(log_path)[-1] == rejected(
            "ask", None, "switch_mode", "option_rejected", tool_call_id="t", option_id="reject"
        )
        assert recorder.sent == []


class TestRestore:
    """Restoring a session brings back its mode, or its fallback through the restore trigger."""

    async def test_restorable_mode_comes_back_silently(self, make_engine, recorder, log_path):
        engine = make_engine()
        session = engine.restore_session("s1", "code", 4)
        await engine.flush()
        assert (session.state, session.seq) == ("code", 4)
        assert recorder.sent == []
        assert not log_path.exists() or read_log(log_path) == []

    async def test_non_restorable_mode_falls_back_and_is_logged(
        self, make_engine, recorder, log_path
    ):
        engine = make_engine("permission")
        session = engine.restore_session("s1", "bypassPermissions", 4, request_id=2)
        await engine.flush()
        assert (session.state, session.seq) == ("default", 5)
        spec = preset("permission")
        assert recorder.sent == announced(spec, "s1", "default")
        record = read_log(log_path)[0]
        assert record == {
            **changed(5, "bypassPermissions", "default", "restore", request_id=2),
            "spec": "permission",
            "spec_hash": spec.content_hash,
        }

    async def test_mode_no_longer_in_the_spec_restores_the_initial_mode(
        self, make_engine, log_path
    ):
        engine = make_engine()
        session = engine.restore_session("s1", "removed-mode", 9)
        assert (session.state, session.seq) == ("ask", 10)
        assert read_log(log_path)[0] == changed(10, "removed-mode", "ask", "restore")

    def test_live_session_is_returned_unchanged(self, make_engine):
        engine = make_engine()
        live = engine.new_session("s1")
        assert engine.restore_session("s1", "code", 9) == live
        assert live.state == "ask"

    def test_refused_fallback_leaves_the_session_unknown(self, make_engine):
        def refuse(change: ModeChange) -> None:
            raise RuntimeError("no")

        engine = make_engine("permission", before_change=[refuse])
        with pytest.raises(HookError):
            engine.restore_session("s1", "bypassPermissions", 4)
        assert "s1" not in engine


class TestHooks:
    """Host callbacks run around the commit; a failing one never leaves a half change."""

    async def test_before_and_after_hooks_see_the_change(self, make_engine):
        seen: list[tuple[str, ModeChange]] = []
        engine = make_engine(
            before_change=[lambda c: seen.append(("before", c))],
            after_change=[lambda c: seen.append(("after", c))],
        )
        engine.new_session("s1")
        change = await engine.set_mode("s1", "code")
        assert seen == [("before", change), ("after", change)]

    async def test_failing_before_hook_cancels_the_change(self, make_engine, recorder, log_path):
        def refuse(change: ModeChange) -> None:
            raise RuntimeError("no " + change.to_mode)

        engine = make_engine(before_change=[refuse])
        engine.new_session("s1")
        with pytest.raises(HookError, match="refused the change: RuntimeError\\('no code'\\)"):
            await engine.set_mode("s1", "code")
        assert (engine.get("s1").state, engine.get("s1").seq) == ("ask", 1)
        assert recorder.sent == []
        assert read_log(log_path)[-1] == rejected("ask", "code", "set_mode", "hook_failed")

    async def test_failing_after_hook_keeps_the_committed_change(
        self, make_engine, recorder, log_path
    ):
        def broken(change: ModeChange) -> None:
            raise RuntimeError("boom")

        engine = make_engine(after_change=[broken])
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        assert engine.get("s1").state == "code"
        assert recorder.sent == announced(SEED, "s1", "code")
        lines = read_log(log_path)
        assert lines[1] == changed(2, "ask", "code", "set_mode")
        assert lines[2]["event"] == "modefsm.hook_failed"
        assert lines[2]["error"] == "RuntimeError('boom')"
        assert lines[2]["level"] == "warning"

    async def test_policy_rejection_never_reaches_the_hook(self, make_engine):
        seen: list[ModeChange] = []
        engine = make_engine("permission", before_change=[seen.append])
        engine.new_session("s")
        await engine.set_mode("s", "plan")
        with pytest.raises(TransitionNotAllowedError):
            await engine.set_mode("s", "bypassPermissions")
        assert [c.to_mode for c in seen] == ["plan"]


class TestLog:
    """Records are write-ahead: a change whose record cannot be written does not happen."""

    async def test_failed_write_changes_nothing(self, tmp_path: Path, recorder):
        read_end, write_end = os.pipe()
        os.close(read_end)  # every write now fails with EPIPE
        stream = open(write_end, "wb", buffering=0)  # noqa: SIM115
        store = LogStore(TransitionLog.to_stream(io.BytesIO()))
        engine = ModeEngine(SEED, store=store, sink=recorder)
        engine.new_session("s1")
        store.log = TransitionLog.to_stream(stream, path="broken")
        with pytest.raises(LogError, match="broken: cannot write the transition log"):
            await engine.set_mode("s1", "code")
        stream.close()
        assert (engine.get("s1").state, engine.get("s1").seq) == ("ask", 1)
        assert recorder.sent == []

    def test_unwritable_log_path(self, tmp_path: Path):
        with pytest.raises(LogError, match="cannot open the transition log"):
            TransitionLog.to_file(tmp_path / "missing-dir" / "log.jsonl")

    async def test_records_parse_with_the_record_model(self, make_engine, log_path):
        engine = make_engine()
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        with pytest.raises(UnknownModeError):
            await engine.set_mode("s1", "x")
        header, *lines = log_path.read_bytes().splitlines()
        assert SpecRecord.model_validate_json(header).spec_hash == engine.spec.content_hash
        records = [TransitionRecord.model_validate_json(line) for line in lines]
        assert [(r.event, r.seq, r.to_mode) for r in records] == [
            ("modefsm.session_created", 1, "ask"),
            ("modefsm.mode_changed", 2, "code"),
            ("modefsm.change_rejected", None, "x"),
        ]
        assert records[1].timestamp.endswith("Z")

    async def test_fsync_log_writes_the_same_lines(self, tmp_path: Path):
        path = tmp_path / "synced.jsonl"
        log = TransitionLog.to_file(path, fsync=True)
        engine = ModeEngine(SEED, store=LogStore(log))
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        log.close()
        assert read_log(path) == [created(), changed(2, "ask", "code", "set_mode")]

    async def test_nothing_reaches_stdout(self, make_engine, capsys):
        engine = make_engine()
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        assert capsys.readouterr() == ("", "")

    def test_lines_are_what_a_structlog_bytes_logger_writes(self):
        import orjson

        from tests.log.test_writer import structlog_reference

        fields = {"timestamp": "t", "session_id": "s1", "seq": None, "from_mode": None}
        written = io.BytesIO()
        expected, bound = structlog_reference()
        log = TransitionLog.to_stream(written)
        log.write("modefsm.mode_changed", fields)
        log.write("modefsm.change_rejected", fields)
        first, second = (orjson.loads(line) for line in written.getvalue().splitlines())
        chain = [{"prev": line["prev"], "digest": line["digest"]} for line in (first, second)]
        bound.info("modefsm.mode_changed", **fields, **chain[0])
        bound.warning("modefsm.change_rejected", **fields, **chain[1])
        assert written.getvalue() == expected.getvalue()

    async def test_host_logger_receives_the_records(self):
        import structlog.testing

        capture = structlog.testing.LogCapture()
        logger = structlog.wrap_logger(None, processors=[capture])
        engine = ModeEngine(SEED, store=LogStore(TransitionLog(logger)))
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        header, *entries = capture.entries
        assert (header["event"], header["spec_hash"]) == ("modefsm.spec", SEED.content_hash)
        events = [(e["event"], e["seq"], e["to_mode"], e["log_level"]) for e in entries]
        assert events == [
            ("modefsm.session_created", 1, "ask", "info"),
            ("modefsm.mode_changed", 2, "code", "info"),
        ]

    def test_host_logger_that_drops_info_is_refused(self):
        import logging

        import structlog

        logger = structlog.wrap_logger(
            None, wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
        )
        with pytest.raises(LogError, match="drops INFO events"):
            TransitionLog(logger)


class TestOrdering:
    """Concurrent changes are serialized; notifications leave in seq order, each once."""

    async def test_concurrent_changes_notify_in_commit_order(self, log_path):
        order: list[tuple[str, str, str]] = []

        async def slow_sink(session_id: str, event: Any) -> None:
            await asyncio.sleep(0)
            for update in session_updates(event):
                current = (
                    getattr(update, "current_mode_id", None)
                    or update.config_options[0].current_value
                )
                order.append((session_id, update.session_update, current))

        log = TransitionLog.to_file(log_path)
        engine = ModeEngine(SEED, store=LogStore(log), sink=slow_sink)
        for sid in ("a", "b"):
            engine.new_session(sid)
        targets = ["architect", "code", "ask", "code", "architect"]
        await asyncio.gather(*(engine.set_mode(sid, t) for t in targets for sid in ("a", "b")))
        log.close()
        for sid in ("a", "b"):
            mine = [(kind, mode) for s, kind, mode in order if s == sid]
            expected = []
            for mode in targets:
                expected += [("current_mode_update", mode), ("config_option_update", mode)]
            assert mine == expected
        seqs = [(r["session_id"], r["seq"]) for r in read_log(log_path)]
        assert [s for sid, s in seqs if sid == "a"] == [1, 2, 3, 4, 5, 6]

    async def test_broken_sink_drops_the_notification_and_keeps_going(self, make_engine, log_path):
        calls: list[tuple[str, int]] = []

        async def flaky(session_id: str, event: Any) -> None:
            calls.append((event.mode_id, event.seq))
            if len(calls) == 1:
                raise ConnectionError("client gone")

        engine = make_engine()
        engine.sink = flaky
        engine.new_session("s1")
        await engine.set_mode("s1", "code")
        await engine.set_mode("s1", "architect")
        assert calls == [("code", 2), ("architect", 3)]
        assert engine.pending() == 0
        failed = [r for r in read_log(log_path) if r["event"] == "modefsm.notify_failed"]
        assert [(r["update"], r["error"]) for r in failed] == [
            ("ModeChanged", "ConnectionError('client gone')")
        ]

    async def test_uneven_sink_keeps_commit_order(self):
        sent: list[str] = []

        async def sink(session_id: str, event: Any) -> None:
            for update in session_updates(event):
                mode = getattr(update, "current_mode_id", None)
                await asyncio.sleep(0.002 if mode == "architect" else 0)
                current = mode or update.config_options[0].current_value
                sent.append(f"{update.session_update}:{current}")

        engine = ModeEngine(preset("seed"), sink=sink)
        engine.new_session("s")
        await asyncio.gather(engine.set_mode("s", "architect"), engine.set_mode("s", "code"))
        assert sent == [
            "current_mode_update:architect",
            "config_option_update:architect",
            "current_mode_update:code",
            "config_option_update:code",
        ]

    async def test_response_waits_for_its_own_notifications(self):
        order: list[str] = []

        async def sink(session_id: str, event: Any) -> None:
            for update in session_updates(event):
                await asyncio.sleep(0.001)
                order.append(update.session_update)

        engine = ModeEngine(preset("seed"), sink=sink)
        engine.new_session("s")

        async def request(mode: str) -> None:
            await engine.set_mode("s", mode)
            order.append(f"response:{mode}")

        await asyncio.gather(request("architect"), request("code"))
        # Both changes commit before the first flush finishes; that flush drains both, in
        # commit order, and each response leaves after its own notifications.
        assert order == [
            "current_mode_update",
            "config_option_update",
            "current_mode_update",
            "config_option_update",
            "response:architect",
            "response:code",
        ]


def test_recorder_records_exact_wire_dicts():
    recorder = Recorder()
    option = ModeEngine(SEED).views["ask"].mode_option
    asyncio.run(recorder("s", ModeChanged("s", "ask", 1, (option,))))
    assert recorder.sent == announced(SEED, "s", "ask")
