"""Diagrams show what each mode allows (its ``tools`` rules) and the tool calls decided.

The rules as a label in DOT and Mermaid (one line per decision) and as a table per mode on
the Markdown page; with a log, the decision records counted per mode and kind. Graphviz
and Mermaid drawing them is in ``test_diagram_tools.py`` and ``test_screenshots.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from modefsm import LogStore, ModeEngine, ModeSpec, SpecError, TransitionLog, preset
from modefsm.cli._main import main
from modefsm.diagram import (
    ToolCount,
    build_diagram,
    read_traffic,
    rule_lines,
    to_dot,
    to_markdown,
    to_mermaid,
)
from modefsm.diagram._build import NAMES_MAX
from modefsm.spec import TOOL_KINDS
from tests.diagram._diagram_support import write_permission_log
from tests.replay.tools_support import Decider

if TYPE_CHECKING:
    from pathlib import Path

X = "\N{MULTIPLICATION SIGN}"


def lines_of(spec: ModeSpec) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Each mode's rule lines as ``(decision, targets)``."""
    return {
        n.mode_id: [(line.decision, line.targets) for line in n.rules]
        for n in build_diagram(spec).nodes
        if n.mode_id is not None
    }


def one_mode(tools: list[dict[str, Any]], default: str = "ask") -> ModeSpec:
    """A spec whose mode ``m`` has *tools* and *default*, and a plain mode ``n``."""
    return ModeSpec.from_data(
        {
            "name": "rules",
            "initial": "m",
            "modes": [
                {"id": "m", "name": "M", "tools": tools, "tools_default": default},
                {"id": "n", "name": "N"},
            ],
        }
    )


def node_line(text: str, node_id: str) -> str:
    """The line of DOT or Mermaid *text* that declares *node_id*."""
    [line] = [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith((f"{node_id} [", f"{node_id}("))
    ]
    return line


def between(page: str, first: str, last: str) -> str:
    """The text of *page* from *first* up to *last*."""
    return page[page.index(first) : page.index(last)]


@pytest.fixture
def permission_log(tmp_path: Path) -> Path:
    path = tmp_path / "permission.jsonl"
    write_permission_log(path)
    return path


# -- the label -----------------------------------------------------------------------------


class TestRuleLines:
    """One line per decision: kinds, the name patterns deciding first, ``*`` for the default."""

    def test_every_preset_mode(self):
        read4 = ("read", "search", "think", "fetch")
        change4 = ("edit", "delete", "move", "execute")
        assert {name: lines_of(preset(name)) for name in ("permission", "sandbox", "seed")} == {
            "permission": {
                "default": [("allow", read4), ("ask", ("*",))],
                "acceptEdits": [
                    ("allow", ("read", "edit", "move", "search", "think", "fetch")),
                    ("ask", ("*",)),
                ],
                "plan": [("allow", read4), ("deny", change4), ("ask", ("*",))],
                "bypassPermissions": [("allow", ("*",))],
            },
            "sandbox": {
                "read-only": [("allow", ("read", "search", "think")), ("ask", ("*",))],
                "auto": [
                    (
                        "allow",
                        ("read", "edit", "delete", "move", "search", "execute", "think"),
                    ),
                    ("ask", ("*",)),
                ],
                "full-access": [("allow", ("*",))],
            },
            "seed": {
                "ask": [("allow", read4), ("ask", ("*",))],
                "architect": [
                    ("allow", read4),
                    ("deny", change4),
                    ("ask", ('edit "*_plan"', "*")),
                ],
                "code": [("allow", ("*",))],
            },
        }

    def test_a_mode_without_rules_shows_nothing_and_the_legend_no_key(self):
        spec = one_mode([])
        diagram = build_diagram(spec)

        assert [n.rules for n in diagram.nodes] == [(), (), ()]
        assert "rules" not in [e.kind for e in diagram.legend]
        assert node_line(to_dot(diagram), "s0") == (
            's0 [class="mode initial", shape=box, style="rounded,filled", '
            'fillcolor="#ffffff", color="#57606a", penwidth=2, margin="0.14,0.08", '
            'label=<<B>M</B><BR/><FONT FACE="Courier New,Courier,monospace" POINT-SIZE="9" '
            'COLOR="#57606a">m</FONT>>];'
        )
        assert node_line(to_mermaid(diagram), "s0") == 's0("<b>M</b><br>m")'
        assert "tools rules" not in to_markdown(diagram, spec)

    def test_no_rules_and_another_default_is_one_line(self):
        assert lines_of(one_mode([], "deny"))["m"] == [("deny", ("*",))]

    def test_patterns_decide_first_and_are_left_out_where_they_change_nothing(self):
        spec = one_mode(
            [
                {"kind": ["read", "search"], "decision": "allow"},
                {"name": "mcp__*", "decision": "deny"},  # any kind but read and search
                {"kind": ["edit"], "name": "*_plan", "decision": "allow"},
                {"kind": ["edit"], "name": "tmp_*", "decision": "ask"},  # edit asks anyway
                {"kind": ["edit", "delete"], "decision": "ask"},
            ],
            "deny",
        )

        assert lines_of(spec)["m"] == [
            ("allow", ("read", "search", 'edit "*_plan"')),
            ("ask", ("edit", "delete")),
            ("deny", ('edit/delete "mcp__*"', "*")),
        ]

    def test_a_pattern_for_any_kind_is_shown_alone(self):
        spec = one_mode([{"name": "Bash", "decision": "deny"}], "allow")

        assert lines_of(spec)["m"] == [("deny", ('"Bash"',)), ("allow", ("*",))]

    def test_a_long_line_names_the_first_targets_and_counts_the_rest(self):
        tools = [{"name": f"tool{i}", "decision": "allow"} for i in range(NAMES_MAX + 8)]

        spec = one_mode(tools, "deny")

        [allow, deny] = rule_lines(spec, spec.mode("m"))

        assert allow.targets == (*(f'"tool{i}"' for i in range(NAMES_MAX)), "and 8 more")
        assert (deny.decision, deny.targets) == ("deny", ("*",))

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(
            st.fixed_dictionaries(
                {
                    "decision": st.sampled_from(["allow", "ask", "deny"]),
                    "kind": st.none()
                    | st.lists(st.sampled_from(TOOL_KINDS), min_size=1, max_size=4, unique=True),
                    "name": st.none() | st.sampled_from(["Edit", "mcp__*"]),
                }
            ).filter(lambda rule: rule["kind"] is not None or rule["name"] is not None),
            max_size=6,
        ),
        st.sampled_from(["allow", "ask", "deny"]),
    )
    def test_a_kind_gets_the_decision_its_line_shows(self, rules, default):
        tools = [{k: v for k, v in rule.items() if v is not None} for rule in rules]
        try:
            spec = one_mode(tools, default)
        except SpecError:  # a rule an earlier one covers: not a spec
            reject()

        lines = rule_lines(spec, spec.mode("m"))
        shown = {"*": "ask"} if not lines else {}  # no lines: the default, every call asked
        for line in lines:
            for target in line.targets:
                shown[target] = line.decision
        for kind in TOOL_KINDS:
            expected = spec.rules.judge("m", kind).decision
            assert shown.get(kind, shown.get("*")) == expected, (kind, tools, default)


# -- the renderers -------------------------------------------------------------------------


class TestRendered:
    """The exact label in DOT and Mermaid, and the exact tables on the Markdown page."""

    def test_dot_label_colours_each_decision(self):
        dot = to_dot(build_diagram(preset("permission")))

        assert node_line(dot, "s2") == (
            's2 [class="mode", shape=box, style="rounded,filled", fillcolor="#ffffff", '
            'color="#57606a", penwidth=1, margin="0.14,0.08", label=<<B>Plan</B><BR/>'
            '<FONT FACE="Courier New,Courier,monospace" POINT-SIZE="9" COLOR="#57606a">plan'
            '</FONT><BR/><FONT POINT-SIZE="9"><FONT COLOR="#1a7f37"><B>allow</B></FONT>: '
            'read, search, think, fetch</FONT><BR/><FONT POINT-SIZE="9"><FONT COLOR="#b42318">'
            "<B>deny</B></FONT>: edit, delete, move, execute</FONT><BR/>"
            '<FONT POINT-SIZE="9"><FONT COLOR="#9a6700"><B>ask</B></FONT>: *</FONT>>, '
            'tooltip="Read and plan only; no edits, no commands"];'
        )

    def test_dot_label_escapes_a_pattern(self):
        spec = one_mode([{"kind": ["edit"], "name": "<a&b>", "decision": "deny"}])

        assert (
            '<FONT COLOR="#b42318"><B>deny</B></FONT>: edit &quot;&lt;a&amp;b&gt;&quot;</FONT>'
            in node_line(to_dot(build_diagram(spec)), "s0")
        )

    def test_mermaid_label(self):
        mermaid = to_mermaid(build_diagram(preset("seed")))

        assert [node_line(mermaid, node) for node in ("s0", "s1", "s2")] == [
            's0("<b>Ask</b><br>ask<br>allow#58; read, search, think, fetch<br>ask#58; #42;")',
            (
                's1("<b>Architect</b><br>architect<br>allow#58; read, search, think, fetch<br>'
                "deny#58; edit, delete, move, execute<br>"
                'ask#58; edit #34;#42;#95;plan#34;, #42;")'
            ),
            's2("<b>Code</b><br>code<br>allow#58; #42;")',
        ]

    def test_markdown_has_a_table_per_mode(self):
        spec = preset("seed")

        page = to_markdown(build_diagram(spec), spec)

        assert between(page, "## What each mode allows", "## Agent switches") == (
            "## What each mode allows (tools rules)\n"
            "\n"
            "A tool call gets the decision of the first rule that matches its kind "
            "(ACP `ToolKind`)\n"
            "and its tool name, else the mode's `tools_default`; decision records name the "
            "rule\n"
            "by its number.\n"
            "\n"
            "### Ask (<code>ask</code>)\n"
            "\n"
            "| Rule | Kinds | Tool name | Decision | Reason |\n"
            "|---|---|---|---|---|\n"
            "| 0 | read, search, think, fetch | any | allow | |\n"
            "| 1 | edit, delete, move, execute | any | ask | Ask mode requests permission "
            "before making any changes |\n"
            "| tools\\_default | any other | any | ask | |\n"
            "\n"
            "### Architect (<code>architect</code>)\n"
            "\n"
            "| Rule | Kinds | Tool name | Decision | Reason |\n"
            "|---|---|---|---|---|\n"
            "| 0 | edit | <code>\\*\\_plan</code> | ask | Architect mode writes its plan, "
            "with permission |\n"
            "| 1 | edit, delete, move, execute | any | deny | Architect mode designs without "
            "implementation: no edits, no commands |\n"
            "| 2 | read, search, think, fetch | any | allow | |\n"
            "| tools\\_default | any other | any | ask | |\n"
            "\n"
            "### Code (<code>code</code>)\n"
            "\n"
            "| Rule | Kinds | Tool name | Decision | Reason |\n"
            "|---|---|---|---|---|\n"
            "| tools\\_default | any | any | allow | |\n"
            "\n"
        )

    def test_markdown_leaves_out_a_mode_without_rules(self):
        spec = one_mode([{"kind": ["read"], "decision": "allow", "reason": "a|b"}])

        page = to_markdown(build_diagram(spec), spec)

        assert page.endswith(
            "### M (<code>m</code>)\n"
            "\n"
            "| Rule | Kinds | Tool name | Decision | Reason |\n"
            "|---|---|---|---|---|\n"
            "| 0 | read | any | allow | a\\|b |\n"
            "| tools\\_default | any other | any | ask | |\n"
        )


# -- with a log ----------------------------------------------------------------------------


EXPECTED_COUNTS = (
    ToolCount(mode="default", kind="read", allow=1),
    ToolCount(mode="default", kind="edit", asked=(("allow_once", 1),)),
    ToolCount(mode="default", kind="execute", asked=(("allow_always", 1), ("granted", 1))),
    ToolCount(mode="acceptEdits", kind="edit", allow=1),
    ToolCount(mode="acceptEdits", kind="execute", asked=(("reject_once", 1),)),
    ToolCount(mode="plan", kind="read", allow=1),
    ToolCount(mode="plan", kind="edit", deny=1),
    ToolCount(mode="plan", kind="execute", deny=1),
    ToolCount(mode="bypassPermissions", kind="execute", allow=1),
)
"""The decisions of ``write_permission_log``, per mode (spec order) and kind (ACP order)."""


class TestDecisionsFromTheLog:
    """``--log``: the decision records counted per mode and kind, ask by its answer."""

    def test_counts_per_mode_and_kind(self, permission_log):
        traffic = read_traffic(preset("permission"), [permission_log])

        assert traffic.tools == EXPECTED_COUNTS
        assert (traffic.decisions, traffic.unmatched_decisions) == (10, 0)
        assert (traffic.records, traffic.sessions) == (11, 3)  # the records, as before

    def test_each_mode_node_holds_its_counts(self, permission_log):
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [permission_log]))

        assert [n.tools for n in diagram.nodes if n.kind == "mode"] == [
            EXPECTED_COUNTS[0:3],
            EXPECTED_COUNTS[3:5],
            EXPECTED_COUNTS[5:8],
            EXPECTED_COUNTS[8:],
        ]
        assert [e.kind for e in diagram.legend][-2:] == ["rules", "tools"]
        assert diagram.caption == (
            "From the log: 3 sessions of spec permission, 10 tool calls decided"
        )

    def test_dot_and_mermaid_labels(self, permission_log):
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [permission_log]))

        assert node_line(to_dot(diagram), "s0") == (
            's0 [class="mode initial", shape=box, style="rounded,filled", fillcolor="#ffffff", '
            'color="#57606a", penwidth=2, margin="0.14,0.08", label=<<B>Default</B><BR/>'
            '<FONT FACE="Courier New,Courier,monospace" POINT-SIZE="9" COLOR="#57606a">default'
            '</FONT><BR/><FONT POINT-SIZE="9"><FONT COLOR="#1a7f37"><B>allow</B></FONT>: read, '
            'search, think, fetch</FONT><BR/><FONT POINT-SIZE="9"><FONT COLOR="#9a6700"><B>ask'
            f'</B></FONT>: *</FONT><BR/><FONT POINT-SIZE="9" COLOR="#57606a">entered {X}5</FONT>'
            f'<BR/><FONT POINT-SIZE="9" COLOR="#24292f"><I>read: allow {X}1</I></FONT><BR/>'
            f'<FONT POINT-SIZE="9" COLOR="#24292f"><I>edit: ask {X}1 (allow_once 1)</I></FONT>'
            f'<BR/><FONT POINT-SIZE="9" COLOR="#24292f"><I>execute: ask {X}2 (allow_always 1, '
            'granted 1)</I></FONT>>, tooltip="Ask before edits and commands"];'
        )  # fmt: skip
        assert [node_line(to_mermaid(diagram), node) for node in ("s0", "s2")] == [
            (
                's0("<b>Default</b><br>default<br>allow#58; read, search, think, fetch<br>'
                f"ask#58; #42;<br>entered {X}5<br>read#58; allow {X}1<br>edit#58; ask {X}1 "
                f'(allow_once 1)<br>execute#58; ask {X}2 (allow_always 1, granted 1)")'
            ),
            (
                's2("<b>Plan</b><br>plan<br>allow#58; read, search, think, fetch<br>deny#58; '
                f"edit, delete, move, execute<br>ask#58; #42;<br>entered {X}2<br>read#58; "
                f'allow {X}1<br>edit#58; deny {X}1<br>execute#58; deny {X}1")'
            ),
        ]  # fmt: skip

    def test_markdown_table_of_tool_calls(self, permission_log):
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [permission_log], session_id="sess_b"))

        page = to_markdown(diagram, spec)

        assert between(page, "### Tool calls decided", "### Steps of session") == (
            "### Tool calls decided\n"
            "\n"
            "| Mode | Kind | allow | ask: answer | deny |\n"
            "|---|---|---|---|---|\n"
            "| Default | read | 1 | 0 | 0 |\n"
            "| Default | edit | 0 | 1 (allow\\_once 1) | 0 |\n"
            "| Default | execute | 0 | 2 (allow\\_always 1, granted 1) | 0 |\n"
            "| Accept Edits | edit | 1 | 0 | 0 |\n"
            "| Accept Edits | execute | 0 | 1 (reject\\_once 1) | 0 |\n"
            "| Plan | read | 1 | 0 | 0 |\n"
            "| Plan | edit | 0 | 0 | 1 |\n"
            "| Plan | execute | 0 | 0 | 1 |\n"
            "| Bypass Permissions | execute | 1 | 0 | 0 |\n"
            "\n"
        )

    def test_a_log_without_decisions_shows_no_counts(self, tmp_path):
        log = TransitionLog.to_file(tmp_path / "plain.jsonl")
        ModeEngine(preset("permission"), store=LogStore(log)).new_session("s")
        log.close()
        spec = preset("permission")

        diagram = build_diagram(spec, read_traffic(spec, [tmp_path / "plain.jsonl"]))

        assert ([n.tools for n in diagram.nodes], diagram.traffic.decisions) == ([()] * 6, 0)
        assert "tools" not in [e.kind for e in diagram.legend]
        assert "### Tool calls decided" not in to_markdown(diagram, spec)
        assert diagram.caption == "From the log: 1 session of spec permission"

    def test_decisions_of_other_specs_and_unknown_modes(self, tmp_path):
        path = tmp_path / "mixed.jsonl"
        log = TransitionLog.to_file(path)
        engine = ModeEngine(preset("permission"), store=LogStore(log))
        engine.new_session("s")
        tools = Decider(engine, log)
        tools.decide("s", "read", "Read")
        tools.decide("s", "read", "Read", mode="gone")
        tools.decide("s", "read", "Read", spec="other")
        log.close()
        spec = preset("permission")

        traffic = read_traffic(spec, [path])

        assert traffic.tools == (ToolCount(mode="default", kind="read", allow=1),)
        assert (traffic.decisions, traffic.unmatched_decisions) == (2, 1)
        assert build_diagram(spec, traffic).caption == (
            "From the log: 1 session of spec permission, 2 tool calls decided "
            "(1 in modes this spec does not have)"
        )

    def test_cli_draws_the_counts(self, permission_log, capsys):
        argv = ["diagram", "--preset", "permission", "--log", str(permission_log)]

        assert main([*argv, "--format", "md"]) == 0

        page = capsys.readouterr().out
        assert "| Default | execute | 0 | 2 (allow\\_always 1, granted 1) | 0 |\n" in page
        assert f"execute#58; ask {X}2 (allow_always 1, granted 1)" in page
