"""What each mode allows: prompts, tool rules, meta, grants; judging a tool call."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any, get_args

import pytest
from acp import schema
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from modefsm import ModeSpec, SpecError, load_spec, preset
from modefsm.spec import (
    DECISIONS,
    TOOL_KINDS,
    GrantMemory,
    ToolRule,
    Verdict,
)
from modefsm.spec._grants import MAX_GRANTS
from modefsm.spec._model import MAX_META, MAX_PROMPT
from modefsm.spec._rules import NAMED_MAX
from tests.doc_blocks import DOCS, blocks


def spec_data(*modes: dict[str, Any], **top: Any) -> dict[str, Any]:
    listed = list(modes) or [{"id": "a", "name": "A"}]
    return {"name": "t", "initial": listed[0]["id"], "modes": listed, **top}


def problems(data: dict[str, Any], base: Path | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        ModeSpec.from_data(data, base=base)
    return [str(p) for p in info.value.problems]


class TestKinds:
    """The tool kinds and decisions are ACP's."""

    def test_tool_kinds_are_the_sdk_schema_tool_kinds(self):
        assert TOOL_KINDS == get_args(schema.ToolKind)

    def test_decisions(self):
        assert DECISIONS == ("allow", "ask", "deny")


class TestPresets:
    """The presets' rules, mode by mode (kind -> decision, ``None``: decided by name)."""

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            pytest.param(
                "permission",
                {
                    "default": "allow ask ask ask allow ask allow allow ask ask",
                    "acceptEdits": "allow allow ask allow allow ask allow allow ask ask",
                    "plan": "allow deny deny deny allow deny allow allow ask ask",
                    "bypassPermissions": "allow allow allow allow allow allow allow allow allow "
                    "allow",
                },
                id="permission",
            ),
            pytest.param(
                "sandbox",
                {
                    "read-only": "allow ask ask ask allow ask allow ask ask ask",
                    "auto": "allow allow allow allow allow allow allow ask ask ask",
                    "full-access": "allow allow allow allow allow allow allow allow allow allow",
                },
                id="sandbox",
            ),
            pytest.param(
                "seed",
                {
                    "ask": "allow ask ask ask allow ask allow allow ask ask",
                    "architect": "allow None deny deny allow deny allow allow ask ask",
                    "code": "allow allow allow allow allow allow allow allow allow allow",
                },
                id="seed",
            ),
        ],
    )
    def test_decisions_by_kind(self, name: str, expected: dict[str, str]):
        spec = preset(name)
        got = {m: " ".join(str(d) for d in spec.rules.decisions(m).values()) for m in spec.mode_ids}
        assert got == expected

    def test_plan_refuses_edits_with_its_reason(self):
        assert preset("permission").rules.judge("plan", "edit", "Edit") == Verdict(
            "deny", 0, "Plan mode: no edits and no commands"
        )

    def test_architect_asks_before_writing_its_plan_and_refuses_other_edits(self):
        rules = preset("seed").rules
        assert rules.judge("architect", "edit", "write_plan") == Verdict(
            "ask", 0, "Architect mode writes its plan, with permission"
        )
        assert rules.judge("architect", "edit", "Edit") == Verdict(
            "deny", 1, "Architect mode designs without implementation: no edits, no commands"
        )
        assert rules.judge("architect", "edit") == rules.judge("architect", "edit", "Edit")

    def test_presets_without_new_keys_keep_their_hash(self):
        # A spec using none of the mode-meaning keys hashes as before they existed.
        spec = ModeSpec.from_data(
            spec_data({"id": "a", "name": "A"}, {"id": "b", "name": "B", "restorable": False})
        )
        assert spec.content_hash == "sha256:5b84fd21e98b54c4"


class TestJudge:
    """``judge``: first match wins; the kind table and the scan agree."""

    def spec(self, *rules: dict[str, Any], default: str = "ask") -> ModeSpec:
        return ModeSpec.from_data(
            spec_data({"id": "a", "name": "A", "tools": list(rules), "tools_default": default})
        )

    def test_first_match_wins(self):
        spec = self.spec(
            {"kind": ["execute"], "decision": "deny", "reason": "no"},
            {"kind": ["execute", "read"], "decision": "allow"},
        )
        assert spec.rules.judge("a", "execute") == Verdict("deny", 0, "no")
        assert spec.rules.judge("a", "read") == Verdict("allow", 1, None)
        assert spec.rules.judge("a", "edit") == Verdict("ask", None, None)

    def test_name_patterns_are_case_sensitive_globs(self):
        spec = self.spec({"name": "Bash(git *)", "decision": "allow"}, default="deny")
        judge = spec.rules.judge
        assert judge("a", "execute", "Bash(git status)") == Verdict("allow", 0, None)
        assert judge("a", "execute", "bash(git status)") == Verdict("deny", None, None)
        assert judge("a", "execute", None) == Verdict("deny", None, None)

    def test_a_rule_with_kind_and_name_needs_both(self):
        spec = self.spec({"kind": ["edit"], "name": "*.md", "decision": "allow"}, default="deny")
        assert spec.rules.judge("a", "edit", "notes.md").decision == "allow"
        assert spec.rules.judge("a", "read", "notes.md").decision == "deny"

    def test_no_kind_is_other(self):
        spec = self.spec({"kind": ["other"], "decision": "deny"})
        assert spec.rules.judge("a", None) == Verdict("deny", 0, None)

    def test_unknown_mode_and_kind(self):
        spec = self.spec()
        with pytest.raises(ValueError, match=r"^mode 'x' is not a mode of the spec$"):
            spec.rules.judge("x", "read")
        with pytest.raises(ValueError, match=r"^tool kind 'write' is not an ACP ToolKind \(read,"):
            spec.rules.judge("a", "write")

    def test_answers_kept_for_names_stay_right_past_the_bound(self):
        spec = self.spec({"name": "rm*", "decision": "deny"}, default="allow")
        names = [f"rm{i}" if i % 2 else f"cat{i}" for i in range(NAMED_MAX + 10)]
        for _ in range(2):
            assert [spec.rules.judge("a", "execute", n).decision for n in names] == [
                "deny" if n.startswith("rm") else "allow" for n in names
            ]

    def test_a_kind_after_a_name_pattern_is_scanned(self):
        spec = self.spec(
            {"name": "rm*", "decision": "deny"}, {"kind": ["read"], "decision": "allow"}
        )
        assert spec.rules.decisions("a")["read"] is None
        assert spec.rules.judge("a", "read", "rm_all") == Verdict("deny", 0, None)
        assert spec.rules.judge("a", "read", "cat") == Verdict("allow", 1, None)


_NAMES = st.sampled_from(["Bash", "bash", "Edit", "write_plan", "Read", "rm -rf", "a?b", "x"])
_PATTERNS = st.sampled_from(["Bash", "*", "*_plan", "[Bb]ash", "R*", "a?b", "[!E]*", "rm *"])


def _present(rule: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rule.items() if v is not None}


_RULES = st.builds(
    dict,
    kind=st.none() | st.lists(st.sampled_from(TOOL_KINDS), min_size=1, max_size=4),
    name=st.none() | _PATTERNS,
    decision=st.sampled_from(DECISIONS),
).map(_present)
_MODES = st.lists(
    st.fixed_dictionaries(
        {"tools": st.lists(_RULES, max_size=6), "tools_default": st.sampled_from(DECISIONS)}
    ),
    min_size=1,
    max_size=4,
)


def _reference(rules: list[ToolRule], default: str, kind: str | None, name: str | None) -> Any:
    """The rules' meaning, read naively: the first rule matching both kind and name."""
    kind = kind or "other"
    for i, rule in enumerate(rules):
        if rule.kind is not None and kind not in rule.kind:
            continue
        if rule.name is not None and (name is None or not fnmatch.fnmatchcase(name, rule.name)):
            continue
        return rule.decision, i
    return default, None


class TestJudgeProperty:
    """Over random specs and tool calls, the kind table, the scan and a naive reading agree."""

    @settings(max_examples=300, deadline=None)
    @given(
        modes=_MODES,
        calls=st.lists(
            st.tuples(
                st.integers(0, 3), st.none() | st.sampled_from(TOOL_KINDS), st.none() | _NAMES
            ),
            max_size=20,
        ),
    )
    def test_table_scan_and_reference_agree(self, modes: list[dict[str, Any]], calls: list[Any]):
        data = [
            {"id": f"m{i}", "name": f"M{i}", **m}
            for i, m in enumerate(modes)
            if all("kind" in r or "name" in r for r in m["tools"])
        ]
        if not data:
            return
        try:
            spec = ModeSpec.from_data(spec_data(*data))
        except SpecError as exc:  # a rule an earlier one covers: not a spec
            assert all("never matches" in p.message for p in exc.problems)  # noqa: PT017
            reject()
        for index, kind, name in calls:
            mode = spec.modes[index % len(spec.modes)]
            verdict = spec.rules.judge(mode.id, kind, name)
            assert verdict == spec.rules.scan(mode.id, kind, name)
            expected = _reference(list(mode.tools), mode.tools_default, kind, name)
            assert (verdict.decision, verdict.rule_index) == expected


class TestValidation:
    """The new keys are validated with locations, every problem at once."""

    def test_rule_problems(self):
        data = spec_data(
            {
                "id": "a",
                "name": "A",
                "tools": [
                    {"decision": "allow"},
                    {"kind": ["write"], "decision": "maybe"},
                    {"kind": [], "decision": "deny", "when": "always"},
                ],
                "tools_default": "sometimes",
            }
        )
        assert problems(data) == [
            (
                "modes[0].tools[1].kind[0]: Input should be 'read', 'edit', 'delete', 'move', "
                "'search', 'execute', 'think', 'fetch', 'switch_mode' or 'other'"
            ),
            "modes[0].tools[1].decision: Input should be 'allow', 'ask' or 'deny'",
            "modes[0].tools[2].when: Extra inputs are not permitted",
            "modes[0].tools_default: Input should be 'allow', 'ask' or 'deny'",
        ]

    def test_semantic_rule_problems(self):
        data = spec_data(
            {
                "id": "a",
                "name": "A",
                "tools": [{"decision": "allow"}, {"kind": [], "decision": "deny"}],
            }
        )
        assert problems(data) == [
            "modes[0].tools[0]: a rule needs a kind or a name (tools_default decides the rest)",
            "modes[0].tools[1].kind: an empty list matches nothing",
        ]

    def test_a_rule_an_earlier_rule_covers_is_a_problem(self):
        """First match wins: a later rule an earlier one covers whole never decides (the
        spec's author meant it to; edits here would be allowed, not denied)."""
        data = spec_data(
            {
                "id": "a",
                "name": "A",
                "tools": [
                    {"kind": ["edit", "delete"], "decision": "allow"},
                    {"kind": ["edit"], "decision": "deny"},
                    {"name": "bash", "decision": "ask"},
                    {"kind": ["execute"], "name": "bash", "decision": "deny"},
                    {"kind": ["execute"], "name": "bash*", "decision": "deny"},
                    {"kind": ["delete", "move"], "decision": "deny"},
                ],
            }
        )
        shadowed = "never matches: rule {} matches every call it would (the first rule that "
        assert problems(data) == [
            f"modes[0].tools[1]: {shadowed.format(0)}matches decides)",
            f"modes[0].tools[3]: {shadowed.format(2)}matches decides)",
        ]

    def test_meta_is_kept_and_bounded(self):
        meta = {"icon": "plan", "order": 2, "tags": ["safe", None], "nested": {"x": 1.5}}
        spec = ModeSpec.from_data(spec_data({"id": "a", "name": "A", "meta": meta}))
        assert spec.modes[0].meta == meta
        big = {"blob": "x" * MAX_META}
        assert problems(spec_data({"id": "a", "name": "A", "meta": big})) == [
            f"modes[0].meta: {MAX_META + 11} bytes of JSON, more than {MAX_META}"
        ]

    def test_meta_must_be_an_object(self):
        assert problems(spec_data({"id": "a", "name": "A", "meta": [1]})) == [
            "modes[0].meta: Input should be a valid dictionary"
        ]

    def test_unknown_mode_keys_are_still_refused(self):
        assert problems(spec_data({"id": "a", "name": "A", "color": "red"})) == [
            "modes[0].color: Extra inputs are not permitted"
        ]

    def test_grants(self):
        spec = ModeSpec.from_data(
            spec_data(
                {"id": "a", "name": "A", "grants": {"scope": "session", "persist": True}},
                {"id": "b", "name": "B"},
                grants={"persist": True},
            )
        )
        assert (spec.grants_in("a").scope, spec.grants_in("a").persist) == ("session", True)
        assert (spec.grants_in("b").scope, spec.grants_in("b").persist) == ("mode", True)
        assert problems(spec_data({"id": "a", "name": "A", "grants": {"scope": "global"}})) == [
            "modes[0].grants.scope: Input should be 'mode' or 'session'"
        ]

    def test_inline_prompt_is_bounded(self):
        data = spec_data({"id": "a", "name": "A", "prompt": "é" * (MAX_PROMPT // 2 + 1)})
        assert problems(data) == [f"modes[0].prompt: longer than {MAX_PROMPT} bytes"]


class TestPromptFile:
    """``prompt_file``: read at load, relative to the spec file, bounded, located errors."""

    def write_spec(self, tmp_path: Path, prompt_line: str) -> Path:
        path = tmp_path / "specs" / "modes.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            'name = "t"\ninitial = "a"\n'
            f'[[modes]]\nid = "a"\nname = "A"\n{prompt_line}\n'
            '[[modes]]\nid = "b"\nname = "B"\nprompt = "Be brief."\n',
            encoding="utf-8",
        )
        return path

    def test_read_relative_to_the_spec_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        path = self.write_spec(tmp_path, 'prompt_file = "prompts/a.md"')
        (path.parent / "prompts").mkdir()
        (path.parent / "prompts" / "a.md").write_text("You plan.\n", encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        spec = load_spec(path)
        assert (spec.prompt_for("a"), spec.prompt_for("b")) == ("You plan.\n", "Be brief.")
        inline = ModeSpec.from_data(
            spec_data(
                {"id": "a", "name": "A", "prompt": "You plan.\n"},
                {"id": "b", "name": "B", "prompt": "Be brief."},
            )
        )
        assert spec.content_hash == inline.content_hash

    def test_problems_name_the_mode_and_the_file(self, tmp_path: Path):
        path = self.write_spec(tmp_path, 'prompt_file = "missing.md"')
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert str(info.value) == (
            f"{path}: invalid mode spec (1 problem): modes[0].prompt_file: cannot read "
            "'missing.md': No such file or directory"
        )

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            pytest.param(
                b"x" * (MAX_PROMPT + 1), f"'p.md' is larger than {MAX_PROMPT} bytes", id="big"
            ),
            pytest.param(b"\xff\xfe", "'p.md' is not UTF-8 text", id="binary"),
            pytest.param(None, "'p.md' is not a regular file", id="directory"),
        ],
    )
    def test_unusable_files(self, tmp_path: Path, content: bytes | None, message: str):
        if content is None:
            (tmp_path / "p.md").mkdir()
        else:
            (tmp_path / "p.md").write_bytes(content)
        data = spec_data({"id": "a", "name": "A", "prompt_file": "p.md"})
        assert problems(data, base=tmp_path) == [f"modes[0].prompt_file: {message}"]

    def test_a_fifo_is_not_read(self, tmp_path: Path):
        os.mkfifo(tmp_path / "p.md")
        data = spec_data({"id": "a", "name": "A", "prompt_file": "p.md"})
        assert problems(data, base=tmp_path) == [
            "modes[0].prompt_file: 'p.md' is not a regular file"
        ]

    @pytest.mark.parametrize(
        "name", ["../secret.md", "ABSOLUTE", "link.md", "prompts/../../secret.md"]
    )
    def test_a_file_outside_the_specs_folder_is_not_read(self, tmp_path: Path, name: str):
        """A spec from elsewhere (a cloned repository) cannot pull a file of the user's into
        the prompt the host sends its model, nor into the log's header."""
        (tmp_path / "secret.md").write_text("the user's secret", encoding="utf-8")
        folder = tmp_path / "specs"
        (folder / "prompts").mkdir(parents=True)
        (folder / "link.md").symlink_to(tmp_path / "secret.md")
        name = str(tmp_path / "secret.md") if name == "ABSOLUTE" else name
        data = spec_data({"id": "a", "name": "A", "prompt_file": name})
        assert problems(data, base=folder) == [
            f"modes[0].prompt_file: {name!r} is outside the spec's folder"
        ]

    def test_a_link_inside_the_specs_folder_is_read(self, tmp_path: Path):
        (tmp_path / "prompts").mkdir()
        (tmp_path / "prompts" / "plan.md").write_text("You plan.", encoding="utf-8")
        (tmp_path / "p.md").symlink_to(tmp_path / "prompts" / "plan.md")
        spec = ModeSpec.from_data(
            spec_data({"id": "a", "name": "A", "prompt_file": "p.md"}), base=tmp_path
        )
        assert spec.prompt_for("a") == "You plan."

    def test_prompt_and_prompt_file_together_with_other_problems(self, tmp_path: Path):
        data = spec_data(
            {"id": "a", "name": "A", "prompt": "x", "prompt_file": "p.md"},
            {"id": "b", "name": "B", "prompt_file": 3},
            initial="z",
        )
        assert problems(data, base=tmp_path) == [
            "modes[0].prompt_file: give prompt or prompt_file, not both",
            "modes[1].prompt_file: a file name (a non-empty string) is needed",
            'initial: mode "z" is not in modes (a, b)',
        ]
        assert "prompt_file" in data["modes"][0]  # the caller's data is left as it was


class TestGrantMemory:
    """Remembered ``allow_always`` answers, scoped and persisted as the spec says."""

    def spec(self) -> ModeSpec:
        return ModeSpec.from_data(
            spec_data(
                {"id": "a", "name": "A"},
                {"id": "b", "name": "B", "grants": {"scope": "session", "persist": True}},
                {"id": "c", "name": "C"},
            )
        )

    def test_a_mode_grant_is_valid_in_its_mode_only(self):
        grants = GrantMemory(self.spec())
        assert grants.remember("a", "execute", "Bash")
        assert grants.covers("a", "execute", "Bash")
        assert not grants.covers("c", "execute", "Bash")
        assert not grants.covers("a", "execute", "Edit")
        assert not grants.covers("a", "edit", "Bash")

    def test_a_session_grant_is_valid_in_every_mode(self):
        grants = GrantMemory(self.spec())
        grants.remember("b", "edit", None)
        assert [grants.covers(m, "edit", None) for m in "abc"] == [True, True, True]

    def test_restart_keeps_the_persistent_grants(self):
        grants = GrantMemory(self.spec())
        grants.remember("a", "execute", "Bash")
        grants.remember("b", "edit", "Edit")
        grants.restart()
        assert (len(grants), grants.covers("a", "execute", "Bash")) == (1, False)
        assert grants.covers("c", "edit", "Edit")

    def test_rebuild_from_decisions(self):
        class Facts:
            def __init__(self, mode: str, kind: str, tool: str | None, outcome: str | None):
                self.mode, self.kind, self.tool, self.outcome = mode, kind, tool, outcome

        decisions = [
            Facts("b", "edit", "Edit", "allow_always"),
            Facts("a", "read", "Read", "allow_always"),
            Facts("b", "execute", "Bash", "allow_once"),
            Facts("gone", "edit", "Edit", "allow_always"),
        ]
        grants = GrantMemory.rebuild(self.spec(), decisions)
        assert len(grants) == 1
        assert grants.covers("a", "edit", "Edit")
        assert not grants.covers("b", "execute", "Bash")

    def test_bounded(self):
        grants = GrantMemory(self.spec())
        for i in range(MAX_GRANTS):
            assert grants.remember("a", "execute", f"tool{i}")
        assert not grants.remember("a", "execute", "one more")
        assert grants.remember("a", "execute", "tool0")  # already there
        assert (len(grants), grants.covers("a", "execute", "one more")) == (MAX_GRANTS, False)


class TestDocumentedSpec:
    """The Specs page's spec with every mode-meaning key loads and means what it says."""

    def test_documented_example(self, tmp_path: Path):
        found = [
            b.text
            for b in blocks(DOCS / "specs.md", "toml")
            if b.text.startswith('name = "review"')
        ]
        assert len(found) == 1
        (tmp_path / "review.toml").write_text(found[0], encoding="utf-8")
        (tmp_path / "prompts").mkdir()
        (tmp_path / "prompts" / "plan.md").write_text("You plan.\n", encoding="utf-8")
        spec = load_spec(tmp_path / "review.toml")
        judge = spec.rules.judge
        assert [
            judge("plan", "edit", "write_plan"),
            judge("plan", "edit", "Edit"),
            judge("plan", "read", "Read"),
            judge("plan", None),
            judge("build", "execute", "Bash"),
        ] == [
            Verdict("ask", 0, "Plan mode writes its plan, with permission"),
            Verdict("deny", 1, "Plan mode: no edits and no commands"),
            Verdict("allow", 2, None),
            Verdict("ask", None, None),
            Verdict("allow", None, None),
        ]
        assert (spec.prompt_for("plan"), spec.prompt_for("build")) == (
            "You plan.\n",
            "You implement the plan.",
        )
        assert spec.modes[0].meta == {"icon": "clipboard", "order": 1}
        assert (spec.grants_in("plan").scope, spec.grants_in("build").scope) == ("mode", "session")
