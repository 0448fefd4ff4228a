"""Policy safety in the engine: resolved switch options, stale approvals, previous on restart."""

from __future__ import annotations

import pytest

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog, preset
from modefsm.diagram import build_diagram, to_markdown
from modefsm.engine import OfferedOption, SwitchResult
from modefsm.errors import StaleOptionError, TransitionNotAllowedError
from modefsm.protocol.v1 import config_options as v1_options
from modefsm.protocol.v1 import mode_state
from modefsm.replay import replay
from modefsm.replay._replayer import last_points
from tests.conftest import read_log

PERMISSION = preset("permission")
KEEP = OfferedOption("keep_planning", "No, keep planning", "reject_once", None)
ACCEPT = OfferedOption(
    "exit_plan_accept_edits", "Yes, and auto-accept edits", "allow_always", "acceptEdits"
)
DEFAULT = OfferedOption(
    "exit_plan_default", "Yes, and manually approve edits", "allow_once", "default"
)


def previous(name: str, target: str) -> OfferedOption:
    return OfferedOption(
        "exit_plan_previous", f"Yes, and return to the mode I was in ({name})", "allow_once", target
    )


BACK_TO_BYPASS = previous("Bypass Permissions", "bypassPermissions")


def in_plan_from(engine: ModeEngine, session_id: str, *modes: str) -> None:
    engine.new_session(session_id)
    for mode in (*modes, "plan"):
        engine.change(session_id, mode, "set_mode")


LETTERS = ModeSpec(
    name="letters",
    initial="a",
    modes=[
        {"id": "a", "name": "Alpha"},
        {"id": "b", "name": "Bravo"},
        {"id": "c", "name": "Charlie", "restorable": False},
        {"id": "p", "name": "Plan"},
    ],
    switches=[
        {
            "source": ["p"],
            "title": "Leave plan",
            "options": [
                {"option_id": "back", "name": "Back to {mode}", "kind": "allow_once",
                 "target": "$previous"},
                {"option_id": "go_b", "name": "Go on in {mode}", "kind": "allow_once",
                 "target": "b"},
                {"option_id": "stay", "name": "Stay", "kind": "reject_once"},
            ],
        }
    ],
)  # fmt: skip


class TestOffer:
    """$previous is resolved when the request is built and names its concrete mode."""

    @pytest.mark.parametrize(
        ("before", "options"),
        [
            (("bypassPermissions",), [ACCEPT, BACK_TO_BYPASS, DEFAULT, KEEP]),
            (("acceptEdits",), [ACCEPT, DEFAULT, KEEP]),  # the same target as "auto-accept"
            ((), [ACCEPT, DEFAULT, KEEP]),  # default: the same target as "manually approve"
        ],
    )  # fmt: skip
    async def test_permission_preset(self, before, options):
        engine = ModeEngine(PERMISSION)
        in_plan_from(engine, "s1", *before)
        offer = await engine.offer_switch("s1")
        assert (offer.proposed_in, offer.seq, offer.title, list(offer.options)) == (
            "plan",
            2 + len(before),
            "Exit plan mode",
            options,
        )

    async def test_mode_placeholder_names_every_target(self):
        engine = ModeEngine(LETTERS)
        engine.new_session("s1")
        engine.change("s1", "p", "set_mode")
        assert list((await engine.offer_switch("s1")).options) == [
            OfferedOption("back", "Back to Alpha", "allow_once", "a"),
            OfferedOption("go_b", "Go on in Bravo", "allow_once", "b"),
            OfferedOption("stay", "Stay", "reject_once", None),
        ]

    async def test_previous_is_not_offered_without_one(self):
        engine = ModeEngine(LETTERS)
        engine.restore_session("s1", "p", 4)
        assert [o.option_id for o in (await engine.offer_switch("s1")).options] == ["go_b", "stay"]


class TestRestart:
    """A remembered previous mode obeys the restore rules across a restart."""

    async def test_non_restorable_previous_is_not_carried(self):
        engine = ModeEngine(PERMISSION)
        session = engine.restore_session("s1", "plan", 3, previous="bypassPermissions")
        assert (session.state, session.previous) == ("plan", None)
        assert list((await engine.offer_switch("s1")).options) == [ACCEPT, DEFAULT, KEEP]

    async def test_restorable_previous_is_carried(self):
        engine = ModeEngine(LETTERS)
        session = engine.restore_session("s1", "p", 3, previous="a")
        assert session.previous == "a"
        assert [o.name for o in (await engine.offer_switch("s1")).options] == [
            "Back to Alpha",
            "Go on in Bravo",
            "Stay",
        ]

    def test_restore_from_a_non_restorable_mode_keeps_a_restorable_previous(self):
        engine = ModeEngine(LETTERS)
        session = engine.restore_session("s1", "c", 3, previous="b")
        assert (session.state, session.seq, session.previous) == ("a", 4, "b")

    def test_previous_survives_a_restart(self, make_engine, log_path):
        engine = make_engine("permission")
        engine.new_session("s1")
        engine.change("s1", "acceptEdits", "set_mode")
        engine.change("s1", "plan", "set_mode")
        point = last_points([log_path])["s1"]
        assert (point.mode, point.seq, point.previous) == ("plan", 3, "acceptEdits")
        fresh = make_engine("permission")
        session = fresh.restore_session("s1", point.mode, point.seq, previous=point.previous)
        assert session.previous == "acceptEdits"

    def test_fallback_is_not_a_previous_mode(self, make_engine):
        engine = make_engine("permission")
        session = engine.restore_session("s1", "bypassPermissions", 4, previous="plan")
        assert (session.state, session.previous) == ("default", "plan")


class TestStaleApproval:
    """An approval after the session changed applies exactly what it showed, or nothing."""

    async def test_stale_return_to_bypass_is_refused_and_logged(self, log_path):
        log = TransitionLog.to_file(log_path)
        engine = ModeEngine(PERMISSION, store=LogStore(log))
        in_plan_from(engine, "s1", "bypassPermissions")
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        engine.change("s1", "default", "set_mode")  # while the dialog is open
        result = await engine.settle_switch(offer, "exit_plan_previous")
        log.close()
        assert (result.change, result.reason) == (None, "stale_option")
        assert isinstance(result.error, StaleOptionError)
        assert result.error.to_data()["valid"] == ["acceptEdits", "plan"]
        assert (engine.get("s1").state, engine.get("s1").seq) == ("default", 4)
        last = read_log(log_path)[-1]
        assert (
            last["event"], last["reason"], last["from_mode"], last["to_mode"],
            last["option_id"], last["proposed_in"],
        ) == (
            "modefsm.change_rejected", "stale_option", "default", "bypassPermissions",
            "exit_plan_previous", "plan",
        )  # fmt: skip

    async def test_stale_approval_is_never_re_resolved(self, log_path):
        log = TransitionLog.to_file(log_path)
        engine = ModeEngine(LETTERS, store=LogStore(log))
        engine.new_session("s1")
        engine.change("s1", "p", "set_mode")
        offer = await engine.offer_switch("s1", tool_call_id="t1")  # "Back to Alpha"
        engine.change("s1", "b", "set_mode")
        engine.change("s1", "p", "set_mode")  # back in p: previous is now b
        change = (await engine.settle_switch(offer, "back")).change
        log.close()
        assert change is not None
        assert (change.from_mode, change.to_mode, change.proposed_in) == ("p", "a", "p")
        report = replay([log_path], [LETTERS], verify=True)
        assert (report.session("s1").mode, report.violations) == ("a", ())

    async def test_fresh_approval_of_a_named_non_restorable_mode_applies(self):
        engine = ModeEngine(PERMISSION)
        in_plan_from(engine, "s1", "bypassPermissions")
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        change = (await engine.settle_switch(offer, "exit_plan_previous")).change
        assert change is not None
        assert (change.to_mode, change.proposed_in) == ("bypassPermissions", None)

    @pytest.mark.parametrize("option_id", ["exit_plan_previous", "nope"])
    async def test_an_option_the_offer_did_not_show_is_refused(self, option_id):
        engine = ModeEngine(PERMISSION)
        in_plan_from(engine, "s1", "acceptEdits")  # exit_plan_previous left out: a duplicate
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        result = await engine.settle_switch(offer, option_id)
        assert (result.change, result.reason) == (None, "option_not_offered")
        assert isinstance(result.error, TransitionNotAllowedError)
        assert result.error.to_data()["valid"] == ["exit_plan_accept_edits", "exit_plan_default"]
        assert engine.get("s1").state == "plan"

    async def test_a_reject_option_changes_nothing(self):
        engine = ModeEngine(PERMISSION)
        in_plan_from(engine, "s1", "acceptEdits")
        offer = await engine.offer_switch("s1", tool_call_id="t1")
        result = await engine.settle_switch(offer, "keep_planning")
        assert result == SwitchResult("t1", "keep_planning", None, "option_rejected", None)
        assert engine.get("s1").state == "plan"


class TestReviewPage:
    """The Markdown review page says where each approval can lead, and nowhere else."""

    def test_permission_preset_rows(self):
        page = to_markdown(build_diagram(PERMISSION), PERMISSION)
        rows = page[page.index("### Where each approval can lead") :].splitlines()[10:]
        assert rows == [
            (
                "| Plan | <code>exit\\_plan\\_accept\\_edits</code> | Accept Edits "
                "| Accept Edits, if a switch may reach it from the new mode; else refused |"
            ),
            (
                "| Plan | <code>exit\\_plan\\_previous</code> | the mode before this one "
                "(Bypass Permissions), named in the option when asked; not offered if another "
                "option leads there or there is none (a non-restorable mode is not remembered "
                "across a restart) | refused |"
            ),
            (
                "| Plan | <code>exit\\_plan\\_default</code> | Default "
                "| Default, if a switch may reach it from the new mode; else refused |"
            ),
        ]

    def test_previous_reaches_the_modes_a_session_can_come_from(self):
        page = to_markdown(build_diagram(LETTERS), LETTERS)
        row = next(r for r in page.splitlines() if r.startswith("| Plan | <code>back"))
        assert row.endswith(
            "| the mode before this one (Alpha, Charlie), named in the option when asked; not "
            "offered if another option leads there or there is none (a non-restorable mode is "
            "not remembered across a restart) "
            "| Alpha, if a switch may reach it from the new mode; else refused |"
        )


class TestSelectable:
    """The mode option offers the modes a client may select now; ``modes`` keeps them all."""

    def test_plan_offers_only_itself_and_default(self, recorder):
        engine = ModeEngine(PERMISSION, sink=recorder)
        engine.new_session("s")
        engine.change("s", "plan", "set_mode")
        option = v1_options(engine.config_options("s"))[0].model_dump(mode="json", by_alias=True)
        assert (option["currentValue"], [o["value"] for o in option["options"]]) == (
            "plan",
            ["default", "plan"],
        )
        modes = mode_state(engine.view("s")).model_dump(mode="json", by_alias=True)
        assert [m["id"] for m in modes["availableModes"]] == [
            "default",
            "acceptEdits",
            "plan",
            "bypassPermissions",
        ]

    def test_unrestricted_modes_offer_every_mode(self):
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        option = engine.views[engine.get("s").state].mode_option
        assert [o.value for o in option.options] == [m.id for m in PERMISSION.modes]

    def test_every_offered_value_is_accepted_and_a_refused_one_names_the_valid(self):
        for value in ("default", "plan"):
            engine = ModeEngine(PERMISSION)
            engine.new_session("s")
            engine.change("s", "plan", "set_mode")
            engine.set_config_value("s", "mode", value)
            assert engine.get("s").state == value
        engine = ModeEngine(PERMISSION)
        engine.new_session("s")
        engine.change("s", "plan", "set_mode")
        with pytest.raises(TransitionNotAllowedError) as refused:
            engine.set_config_value("s", "mode", "acceptEdits")
        assert refused.value.to_data()["valid"] == ["default"]

    async def test_each_update_offers_what_its_mode_allows(self, recorder):
        engine = ModeEngine(PERMISSION, sink=recorder)
        engine.new_session("s")
        await engine.set_mode("s", "plan")
        await engine.set_mode("s", "default")
        offered = [
            [o["value"] for o in m["update"]["configOptions"][0]["options"]]
            for m in recorder.sent
            if m["update"]["sessionUpdate"] == "config_option_update"
        ]
        assert offered == [
            ["default", "plan"],
            ["default", "acceptEdits", "plan", "bypassPermissions"],
        ]
