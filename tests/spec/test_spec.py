"""The mode spec: presets, loading, and validation that reports every problem at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modefsm import ModeSpec, SpecError, load_spec, preset, preset_names
from modefsm.errors import SpecProblem
from modefsm.spec import MAX_SPEC_FILE
from tests.conftest import spec_with


def spec_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "initial": "a",
        "modes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
    }
    data.update(overrides)
    return data


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        ModeSpec.from_data(data)
    return [str(p) for p in info.value.problems]


class TestPresets:
    """The shipped presets load and say what the docs say."""

    def test_preset_names(self):
        assert preset_names() == ("permission", "sandbox", "seed")

    def test_seed_matches_the_acp_example(self):
        spec = preset("seed")
        assert spec.initial == "ask"
        assert [(m.id, m.name, m.description) for m in spec.modes] == [
            ("ask", "Ask", "Request permission before making any changes"),
            ("architect", "Architect", "Design and plan software systems without implementation"),
            ("code", "Code", "Write and modify code with full tool access"),
        ]
        switch = spec.switch_from("architect")
        assert switch is not None
        assert switch.title == "Ready for implementation"
        assert [(o.option_id, o.name, o.kind, o.target) for o in switch.options] == [
            ("code", "Yes, and auto-accept all actions", "allow_always", "code"),
            ("ask", "Yes, and manually accept actions", "allow_once", "ask"),
            ("reject", "No, stay in architect mode", "reject_once", None),
        ]
        assert spec.switch_from("ask") is None

    def test_permission_plan_is_left_through_a_switch(self):
        spec = preset("permission")
        assert spec.client_targets("plan") == ("default",)
        assert spec.switch_targets("plan") == ("default", "acceptEdits", "bypassPermissions")
        assert spec.restore_target("bypassPermissions") == "default"
        assert spec.restore_target("plan") == "plan"

    def test_sandbox_full_access_is_not_restored(self):
        spec = preset("sandbox")
        assert spec.mode_ids == ("read-only", "auto", "full-access")
        assert spec.restore_target("full-access") == "auto"

    def test_unknown_preset_lists_the_presets(self):
        with pytest.raises(
            SpecError, match="unknown preset 'nope'; presets: permission, sandbox, seed"
        ):
            preset("nope")

    def test_content_hash_ignores_the_source(self, tmp_path: Path):
        path = tmp_path / "seed.json"
        path.write_text(json.dumps(preset("seed").model_dump(by_alias=True)))
        assert load_spec(path).content_hash == preset("seed").content_hash
        assert preset("seed").content_hash != preset("sandbox").content_hash


class TestValidation:
    """Every problem is reported at once, with its location."""

    def test_all_semantic_problems_at_once(self):
        data = spec_data(
            initial="z",
            modes=[{"id": "a", "name": "A"}, {"id": "b", "name": "B"}, {"id": "a", "name": "A2"}],
            client_changes={"q": ["a"], "a": ["y"]},
            switches=[
                {
                    "source": ["a", "nope"],
                    "title": "go",
                    "options": [
                        {"option_id": "x", "name": "X", "kind": "allow_once"},
                        {"option_id": "x", "name": "X2", "kind": "reject_once", "target": "b"},
                        {"option_id": "y", "name": "Y", "kind": "allow_always", "target": "w"},
                    ],
                }
            ],
        )
        assert problems(data) == [
            "modes[2].id: duplicate id 'a'",
            'initial: mode "z" is not in modes (a, b, a)',
            'client_changes.q: mode "q" is not in modes (a, b, a)',
            'client_changes.a[0]: mode "y" is not in modes (a, b, a)',
            'switches[0].source[1]: mode "nope" is not in modes (a, b, a)',
            "switches[0].options[0].target: an allow_once option needs a target",
            "switches[0].options[1].option_id: duplicate option_id 'x'",
            "switches[0].options[1].target: a reject_once option has no target",
            'switches[0].options[2].target: mode "w" is not in modes (a, b, a)',
        ]

    def test_shape_problems_at_once(self):
        data = spec_data(modes=[{"id": "", "name": "A"}, {"name": "B", "color": 1}], initial=3)
        assert problems(data) == [
            "modes[0].id: String should have at least 1 character",
            "modes[1].id: Field required",
            "modes[1].color: Extra inputs are not permitted",
            "initial: Input should be a valid string",
        ]

    def test_previous_is_not_a_mode_id(self):
        data = spec_data(modes=[{"id": "a", "name": "A"}, {"id": "$previous", "name": "P"}])
        assert problems(data) == ["modes[1].id: '$previous' is reserved for targets"]

    def test_empty_catalogue(self):
        assert problems(spec_data(modes=[])) == [
            "modes: the catalogue is empty: advertise at least one mode"
        ]

    def test_unreachable_mode(self):
        data = spec_data(
            modes=[{"id": "a", "name": "A"}, {"id": "b", "name": "B"}, {"id": "c", "name": "C"}],
            client_changes={"a": ["b"], "b": ["a"]},
        )
        assert problems(data) == ["modes[2]: mode 'c' is unreachable from the initial mode"]

    def test_mode_reachable_only_by_switch_is_reachable(self):
        data = spec_data(
            client_changes={"a": []},
            switches=[
                {
                    "source": ["a"],
                    "title": "go",
                    "options": [
                        {"option_id": "b", "name": "B", "kind": "allow_once", "target": "b"}
                    ],
                }
            ],
        )
        assert ModeSpec.from_data(data).switch_targets("a") == ("b",)

    def test_switch_without_allow_option(self):
        data = spec_data(
            switches=[
                {
                    "source": ["a"],
                    "title": "go",
                    "options": [{"option_id": "no", "name": "No", "kind": "reject_once"}],
                }
            ]
        )
        assert problems(data) == ["switches[0].options: no allow_* option: nothing to approve"]

    def test_two_switches_from_one_mode(self):
        option = {"option_id": "b", "name": "B", "kind": "allow_once", "target": "b"}
        data = spec_data(
            switches=[
                {"source": ["a"], "title": "one", "options": [option]},
                {"source": ["a"], "title": "two", "options": [option]},
            ]
        )
        assert problems(data) == [
            "switches[1].source[0]: mode 'a' already has a switch (switches[0])"
        ]

    def test_fallback_rules(self):
        data = spec_data(
            modes=[
                {"id": "a", "name": "A", "fallback": "b"},
                {"id": "b", "name": "B", "restorable": False, "fallback": "c"},
            ]
        )
        assert problems(data) == [
            "modes[0].fallback: a fallback needs restorable = false",
            'modes[1].fallback: mode "c" is not in modes (a, b)',
        ]

    def test_spec_is_frozen(self):
        spec = preset("seed")
        with pytest.raises(ValueError, match="frozen"):
            spec.initial = "code"

    def test_previous_does_not_make_a_mode_reachable(self):
        with pytest.raises(SpecError) as info:
            spec_with(
                ["a", "b", "c"],
                client_changes={"a": ["b"], "b": ["a"], "c": ["a"]},
                switches=[
                    {
                        "source": ["b"],
                        "title": "t",
                        "options": [
                            {
                                "option_id": "p",
                                "name": "P",
                                "kind": "allow_once",
                                "target": "$previous",
                            }
                        ],
                    }
                ],
            )
        assert [str(p) for p in info.value.problems] == [
            "modes[2]: mode 'c' is unreachable from the initial mode"
        ]

    def test_option_id_naming_another_mode(self):
        with pytest.raises(SpecError) as info:
            spec_with(
                ["a", "b", "c"],
                switches=[
                    {
                        "source": ["a"],
                        "title": "t",
                        "options": [
                            {"option_id": "b", "name": "B", "kind": "allow_once", "target": "c"}
                        ],
                    }
                ],
            )
        expected = (
            "switches[0].options[0].option_id: 'b' is a mode id but targets 'c': "
            "clients that read option ids as modes would disagree"
        )
        assert [str(p) for p in info.value.problems] == [expected]


class TestLoading:
    """Specs come from TOML, JSON or Python; unusable files give one clear error."""

    def test_toml_and_json_give_the_same_spec(self, tmp_path: Path):
        toml = tmp_path / "s.toml"
        toml.write_text('name = "t"\ninitial = "a"\n[[modes]]\nid = "a"\nname = "A"\n')
        js = tmp_path / "s.json"
        js.write_text('{"name": "t", "initial": "a", "modes": [{"id": "a", "name": "A"}]}')
        assert (
            load_spec(toml)
            == load_spec(js)
            == ModeSpec(name="t", initial="a", modes=[{"id": "a", "name": "A"}])
        )

    def test_option_id_accepts_the_acp_spelling(self):
        option = {"optionId": "b", "name": "B", "kind": "allow_once", "target": "b"}
        spec = ModeSpec.from_data(
            spec_data(switches=[{"source": ["a"], "title": "t", "options": [option]}])
        )
        switch = spec.switch_from("a")
        assert switch is not None
        assert switch.options[0].option_id == "b"

    def test_file_that_does_not_parse(self, tmp_path: Path):
        path = tmp_path / "bad.toml"
        path.write_text("name = \n")
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert info.value.source == str(path)
        assert str(info.value) == f"{path}: not valid TOML: Invalid value (at line 1, column 8)"

    def test_missing_file(self, tmp_path: Path):
        with pytest.raises(SpecError, match=r"missing\.toml: cannot read the spec: No such file"):
            load_spec(tmp_path / "missing.toml")

    @pytest.mark.parametrize("kind", ["fifo", "device", "directory", "too_large"])
    def test_a_spec_that_is_not_a_bounded_regular_file_is_refused(self, tmp_path: Path, kind: str):
        """One line, exit 2, at once: a FIFO blocked the command forever and a device
        (``/dev/zero``) was read until the memory ran out (a traceback)."""
        path = tmp_path / "spec.toml"
        reason = "not a regular file"
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            path = Path("/dev/zero")
        elif kind == "directory":
            path.mkdir()
        else:
            with path.open("wb") as file:
                file.truncate(MAX_SPEC_FILE + 1)  # sparse: no disk taken
            reason = f"larger than {MAX_SPEC_FILE} bytes"
        done = subprocess.run(  # bounded: the old reading of /dev/zero took every byte
            ["prlimit", "--as=2000000000", sys.executable, "-m", "modefsm", "diagram", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            2,
            "",
            f"modefsm diagram: {path}: cannot read the spec: {reason}\n",
        )

    def test_invalid_file_names_the_file_and_location(self, tmp_path: Path):
        path = tmp_path / "s.json"
        path.write_text('{"name": "t", "initial": "b", "modes": [{"id": "a", "name": "A"}]}')
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert info.value.problems == (SpecProblem("initial", 'mode "b" is not in modes (a)'),)
        assert (
            str(info.value)
            == f'{path}: invalid mode spec (1 problem): initial: mode "b" is not in modes (a)'
        )

    def test_top_level_must_be_a_table(self, tmp_path: Path):
        path = tmp_path / "s.json"
        path.write_text("[1, 2]")
        with pytest.raises(SpecError, match="a spec must be a table/object"):
            load_spec(path)
