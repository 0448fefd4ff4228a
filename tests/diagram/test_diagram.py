"""Diagrams: the format-free model, escaping, the log overlay, the Markdown page, the CLI.

The tests that need Node, Graphviz or Chromium are in ``test_diagram_tools.py``.
"""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modefsm import ModeSpec, preset, preset_names
from modefsm.cli._main import main
from modefsm.diagram import (
    Diagram,
    Traffic,
    TransitionKey,
    build_diagram,
    read_traffic,
    render,
    to_dot,
    to_markdown,
    to_mermaid,
)
from modefsm.diagram.renderers._dot import _html, _quoted
from modefsm.diagram.renderers._markdown import _md
from modefsm.diagram.renderers._mermaid import _mermaid_text
from modefsm.diagram.renderers._text import _visible
from modefsm.errors import DiagramError, LogError
from tests.diagram._diagram_support import hard_spec, write_permission_log


def spec_transitions(spec: ModeSpec) -> Counter[TransitionKey]:
    """Every transition the spec allows, each once, as the diagram counts them."""
    keys: Counter[TransitionKey] = Counter([("start", "", spec.initial)])
    keys.update(("client_change", s, d) for s in spec.mode_ids for d in spec.client_targets(s))
    keys.update(
        ("switch_mode", source, o.option_id)
        for sw in spec.switches
        for source in sw.source
        for o in sw.options
    )
    keys.update(
        ("restore", m, spec.restore_target(m)) for m in spec.mode_ids if spec.restore_target(m) != m
    )
    return keys


def drawn_transitions(diagram: Diagram) -> Counter[TransitionKey]:
    """The transitions the diagram draws (a switch's entry arrow repeats its options': skipped)."""
    drawn: Counter[TransitionKey] = Counter()
    for edge in diagram.edges:
        if edge.kind != "switch":
            drawn.update(edge.transitions)
    for group in diagram.groups:
        drawn.update(group.transitions)
    return drawn


def clique_tie_spec() -> ModeSpec:
    """Two 3-mode cliques sharing ``c``: {a, b, c} and {c, d, e}."""
    return ModeSpec.from_data(
        {
            "name": "tie",
            "initial": "c",
            "modes": [{"id": m, "name": m.upper()} for m in "abcde"],
            "client_changes": {"a": ["b", "c"], "b": ["a", "c"], "d": ["c", "e"], "e": ["c", "d"]},
        }
    )


SPECS = {name: preset(name) for name in preset_names()} | {
    "hard": hard_spec(),
    "tie": clique_tie_spec(),
}


class TestModel:
    """build_diagram turns a spec into nodes, groups and edges, with no syntax."""

    def test_modes_become_nodes_with_synthetic_ids_in_spec_order(self):
        diagram = build_diagram(preset("permission"))

        assert [(n.id, n.kind, n.label, n.mode_id) for n in diagram.nodes] == [
            ("s0", "mode", "Default", "default"),
            ("s1", "mode", "Accept Edits", "acceptEdits"),
            ("s2", "mode", "Plan", "plan"),
            ("s3", "mode", "Bypass Permissions", "bypassPermissions"),
            ("c0", "choice", "Exit plan mode", None),
            ("start", "start", "", None),
        ]

    def test_permission_edges_are_drawn_in_a_stable_order(self):
        diagram = build_diagram(preset("permission"))

        assert [(e.kind, e.source, e.dest, e.label, e.line) for e in diagram.edges] == [
            ("start", "start", "s0", "session/new", "solid"),
            ("client_change", "g0", "s2", "set_mode\nfrom any", "solid"),
            ("client_change", "s2", "s0", "set_mode", "solid"),
            ("switch", "s2", "c0", "switch_mode", "dashed"),
            ("option", "c0", "s1", "Yes, and auto-accept edits\n(allow_always)", "dashed"),
            (
                "option",
                "c0",
                "s3",
                "Yes, and return to the mode I was in (Bypass Permissions)\n(allow_once)",
                "dashed",
            ),
            ("option", "c0", "s0", "Yes, and manually approve edits\n(allow_once)", "dashed"),
            ("reject", "c0", "s2", "No, keep planning\n(reject_once)", "dashed"),
            ("restore", "s3", "s0", "on load/resume", "dotted"),
        ]

    def test_mutually_reachable_modes_are_one_group_not_n_squared_arrows(self):
        diagram = build_diagram(preset("seed"))

        assert [(g.id, g.members) for g in diagram.groups] == [("g0", ("s0", "s1", "s2"))]
        assert [e for e in diagram.edges if e.kind == "client_change"] == []

    def test_two_mutually_reachable_modes_keep_their_two_arrows(self):
        spec = ModeSpec.from_data(
            {
                "name": "two",
                "initial": "a",
                "modes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
            }
        )

        diagram = build_diagram(spec)

        assert diagram.groups == ()
        assert [(e.source, e.dest) for e in diagram.edges if e.kind == "client_change"] == [
            ("s0", "s1"),
            ("s1", "s0"),
        ]

    def test_a_tie_between_groups_goes_to_the_modes_first_in_the_spec(self):
        diagram = build_diagram(clique_tie_spec())

        assert [g.members for g in diagram.groups] == [("s0", "s1", "s2")]

    def test_arrow_from_a_whole_group_stands_for_each_member(self):
        diagram = build_diagram(preset("permission"))
        hub = diagram.edges[1]

        assert hub.transitions == (
            ("client_change", "default", "plan"),
            ("client_change", "acceptEdits", "plan"),
            ("client_change", "bypassPermissions", "plan"),
        )

    def test_unrestorable_mode_names_the_mode_restored_instead(self):
        diagram = build_diagram(preset("sandbox"))

        assert [(n.id, n.restore_to) for n in diagram.nodes if n.restore_to is not None] == [
            ("s2", "Auto")
        ]
        assert [(e.source, e.dest) for e in diagram.edges if e.kind == "restore"] == [("s2", "s1")]

    def test_initial_mode_is_marked_and_entered_from_the_start_dot(self):
        diagram = build_diagram(preset("sandbox"))

        assert diagram.initial.id == "s1"
        assert [(e.source, e.dest) for e in diagram.edges if e.kind == "start"] == [("start", "s1")]

    def test_legend_lists_only_what_is_drawn(self):
        diagram = build_diagram(preset("seed"))

        assert [e.kind for e in diagram.legend] == ["start", "group", "switch", "reject", "rules"]

    @pytest.mark.parametrize("name", SPECS)
    def test_every_transition_of_the_spec_is_drawn_exactly_once(self, name):
        spec = SPECS[name]

        assert spec_transitions(spec) == drawn_transitions(build_diagram(spec))

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def test_any_client_policy_is_drawn_exactly_once(self, data):
        size = data.draw(st.integers(min_value=2, max_value=7), label="modes")
        ids = [f"m{i}" for i in range(size)]
        changes = {
            source: [d for d in ids if d != source and data.draw(st.booleans(), label=source + d)]
            for source in ids[1:]  # m0 may change to any mode, so every mode is reachable
        }
        spec = ModeSpec.from_data(
            {
                "name": "random",
                "initial": "m0",
                "modes": [{"id": m, "name": m.upper()} for m in ids],
                "client_changes": changes,
            }
        )

        assert spec_transitions(spec) == drawn_transitions(build_diagram(spec))

    @pytest.mark.parametrize("name", SPECS)
    def test_the_same_spec_always_gives_the_same_text(self, name):
        first, second = build_diagram(SPECS[name]), build_diagram(SPECS[name])

        assert to_mermaid(first) == to_mermaid(second)
        assert to_dot(first) == to_dot(second)
        assert to_markdown(first, SPECS[name]) == to_markdown(second, SPECS[name])


class TestEscaping:
    """Every human text is escaped for its format, so that it renders as written."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Plan-mode", "Plan-mode"),
            ('say "hi"', "say #34;hi#34;"),
            ("#quot;", "#35;quot#59;"),
            ("<b>&amp;</b>", "#60;b#62;#38;amp#59;#60;/b#62;"),
            ("a:b", "a#58;b"),
            ("two\nlines", "two<br>lines"),
            (" two  spaces ", "#160;two #160;spaces#160;"),
            ("Café ☕ 日本語", "Café ☕ 日本語"),
            ("%% [*] --> {x}", "#37;#37; #91;#42;#93; --#62; #123;x#125;"),
            ("*a* _b_ snake_case", "#42;a#42; #95;b#95; snake_case"),
            ("$$x$$ \\N \\n", "#36;#8288;#36;x#36;#8288;#36; #92;N #92;#8288;n"),
            ("zero\u200bwidth", "zero#8203;width"),
        ],
        ids=[
            "hyphen",
            "quotes",
            "hash",
            "angle-brackets",
            "colon",
            "newline",
            "collapsing-spaces",
            "non-ascii",
            "mermaid-syntax",
            "markdown",
            "katex-and-backslash-n",
            "format-character",
        ],
    )
    def test_mermaid_text(self, text, expected):
        assert expected == _mermaid_text(text)

    def test_graphviz_html_label_escapes_markup_and_doubles_backslashes(self):
        assert _html('<b> & "q" \\N\nx') == "&lt;b&gt; &amp; &quot;q&quot; \\\\N<BR/>x"

    def test_dot_string_keeps_backslash_sequences_literal(self):
        assert _quoted('a "b" \\N\nc') == '"a \\"b\\" \\\\N\\nc"'

    def test_control_characters_become_control_pictures(self):
        assert _visible("a\r\nb\rc\td\x00\x7f") == "a\nb\nc␉d␀␡"

    def test_markdown_text_escapes_punctuation(self):
        assert _md("a|b *c* _d_\n<e> f: g.") == "a\\|b \\*c\\* \\_d\\_<br>\\<e\\> f: g."


@pytest.fixture
def permission_log(tmp_path):
    path = tmp_path / "modes.jsonl"
    write_permission_log(path)
    return path


class TestTraffic:
    """read_traffic counts what sessions did; build_diagram draws it on the picture."""

    def test_counts_creations_changes_and_rejected_options(self, permission_log):
        traffic = read_traffic(preset("permission"), [permission_log])

        assert traffic.counts == {
            ("client_change", "acceptEdits", "bypassPermissions"): 1,
            ("client_change", "default", "acceptEdits"): 1,
            ("client_change", "default", "plan"): 2,
            ("client_change", "plan", "default"): 1,
            ("restore", "bypassPermissions", "default"): 1,
            ("start", "", "default"): 3,
            ("switch_mode", "plan", "exit_plan_accept_edits"): 1,
            ("switch_mode", "plan", "keep_planning"): 1,
        }
        assert (traffic.entered) == {
            "default": 5,
            "acceptEdits": 2,
            "plan": 2,
            "bypassPermissions": 1,
        }
        assert (traffic.sessions, traffic.records, traffic.unmatched) == (3, 11, 0)

    def test_session_path_is_in_log_order_and_ends_in_its_current_mode(self, permission_log):
        traffic = read_traffic(preset("permission"), [permission_log], session_id="sess_a")

        assert traffic.path == (
            ("start", "", "default"),
            ("client_change", "default", "plan"),
            ("switch_mode", "plan", "keep_planning"),
            ("switch_mode", "plan", "exit_plan_accept_edits"),
            ("client_change", "acceptEdits", "bypassPermissions"),
            ("restore", "bypassPermissions", "default"),
        )
        assert traffic.current == "default"

    def test_overlay_puts_counts_and_steps_on_edges(self, permission_log):
        spec = preset("permission")
        traffic = read_traffic(spec, [permission_log], session_id="sess_a")

        diagram = build_diagram(spec, traffic)

        assert [(e.source, e.dest, e.count, e.steps) for e in diagram.edges] == [
            ("start", "s0", 3, (1,)),
            ("g0", "s2", 2, (2,)),
            ("s2", "s0", 1, ()),
            ("s2", "c0", 2, (3, 4)),
            ("c0", "s1", 1, (4,)),
            ("c0", "s3", 0, ()),
            ("c0", "s0", 0, ()),
            ("c0", "s2", 1, (3,)),
            ("s3", "s0", 1, (6,)),
            ("s0", "s1", 1, ()),
            ("s1", "s3", 1, (5,)),
        ]
        assert [e.faded for e in diagram.edges] == [
            False,
            False,
            False,
            False,
            False,
            True,
            True,
            False,
            False,
            False,
            False,
        ]

    def test_overlay_marks_the_current_mode_and_counts_entries(self, permission_log):
        spec = preset("permission")
        traffic = read_traffic(spec, [permission_log], session_id="sess_a")

        diagram = build_diagram(spec, traffic)

        assert [(n.id, n.current, n.entered) for n in diagram.nodes if n.kind == "mode"] == [
            ("s0", True, 5),
            ("s1", False, 2),
            ("s2", False, 2),
            ("s3", False, 1),
        ]
        assert diagram.caption == (
            "From the log: 3 sessions of spec permission, 10 tool calls decided; "
            "session sess_a is in Default"
        )

    def test_records_of_other_specs_are_left_out(self, tmp_path, permission_log):
        seed_line = {
            "event": "modefsm.session_created",
            "timestamp": "2026-11-30T13:45:01.123456Z",
            "session_id": "sess_seed",
            "seq": 1,
            "from_mode": None,
            "to_mode": "ask",
            "origin": "new",
            "spec": "seed",
            "spec_hash": "sha256:0000000000000000",
        }
        mixed = tmp_path / "mixed.jsonl"
        mixed.write_bytes(permission_log.read_bytes() + orjson.dumps(seed_line) + b"\n")

        traffic = read_traffic(preset("permission"), [mixed])

        assert (traffic.sessions, traffic.records) == (3, 11)

    def test_changes_the_spec_does_not_allow_are_counted_as_unmatched(self, tmp_path):
        line = {
            "event": "modefsm.mode_changed",
            "timestamp": "2026-11-30T13:45:01.123456Z",
            "session_id": "s",
            "seq": 2,
            "from_mode": "plan",
            "to_mode": "acceptEdits",
            "origin": "set_mode",
            "spec": "permission",
            "spec_hash": "sha256:0000000000000000",
        }
        path = tmp_path / "old.jsonl"
        path.write_bytes(orjson.dumps(line) + b"\n")

        traffic = read_traffic(preset("permission"), [path])

        assert (traffic.counts, traffic.unmatched) == ({}, 1)
        assert build_diagram(preset("permission"), traffic).caption == (
            "From the log: 1 session of spec permission, 1 record matching no transition "
            "of this spec"
        )

    def test_log_of_other_specs_only_is_refused(self, permission_log):
        with pytest.raises(DiagramError) as caught:
            read_traffic(preset("seed"), [permission_log])

        assert str(caught.value) == "the log has no records of spec 'seed', only of 'permission'"

    def test_unknown_session_is_refused(self, permission_log):
        with pytest.raises(DiagramError) as caught:
            read_traffic(preset("permission"), [permission_log], session_id="sess_z")

        assert str(caught.value) == "session 'sess_z' is not in the log of spec 'permission'"

    def test_missing_log_is_a_log_error(self, tmp_path):
        missing = tmp_path / "missing.jsonl"

        with pytest.raises(LogError) as caught:
            read_traffic(preset("seed"), [missing])

        assert f"{missing}: cannot read the transition log: No such file or directory" == str(
            caught.value
        )

    def test_empty_log_fades_every_edge(self, tmp_path):
        empty = tmp_path / "empty.jsonl"
        empty.write_bytes(b"")
        spec = preset("seed")

        diagram = build_diagram(spec, read_traffic(spec, [empty]))

        assert {True} == {e.faded for e in diagram.edges}

    def test_mermaid_overlay_counts_group_arrows_and_styles_arrows_by_traffic(self, permission_log):
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [permission_log], session_id="sess_a"))

        lines = to_mermaid(diagram).splitlines()

        times = "\N{MULTIPLICATION SIGN}"
        assert [line for line in lines if "-->|" in line and "s2" in line] == [
            f'    g0 -->|"set_mode<br>from any<br>{times}2 (step 2)"| s2',
            f'    s2 -->|"set_mode<br>{times}1"| s0',
        ]
        assert [line for line in lines if line.startswith("    linkStyle")] == [
            "    linkStyle 0,1,2 stroke:#24292f,stroke-width:1.5px",
            "    linkStyle 3,4,13 stroke:#1f6feb,color:#1f6feb,stroke-width:3px",
            "    linkStyle 5,12 stroke:#24292f,color:#24292f,stroke-width:1.5px",
            (
                "    linkStyle 6,7,10 stroke:#1f6feb,color:#1f6feb,stroke-width:3px,"
                "stroke-dasharray:6 4"
            ),
            (
                "    linkStyle 8,9 stroke:#c9ced4,color:#8c959f,stroke-width:1.5px,"
                "stroke-dasharray:6 4"
            ),
            "    linkStyle 11 stroke:#1f6feb,color:#1f6feb,stroke-width:3px,stroke-dasharray:2 4",
        ]


class TestMarkdown:
    """The review page: the Mermaid block, then tables of modes, client changes and switches."""

    def test_page_shows_the_diagram_and_every_mode_and_option(self):
        spec = preset("sandbox")
        diagram = build_diagram(spec)

        page = to_markdown(diagram, spec)

        assert "```mermaid\n" + to_mermaid(diagram) + "```\n" in page
        assert [
            line
            for line in page.splitlines()
            if line.startswith("| ")
            and "---" not in line
            and not line.startswith(("| Mode ", "| From ", "| In ", "| Rule "))
        ] == [
            (
                "| Read Only | <code>read-only</code> | Read files and answer questions; ask "
                "before edits, commands and network access | restored |"
            ),
            (
                "| Auto (initial) | <code>auto</code> | Edit and run commands inside the "
                "workspace; ask to go outside it | restored |"
            ),
            (
                "| Full Access | <code>full-access</code> | Edit and run anything, network "
                "included, without asking | gives Auto |"
            ),
            "| Read Only | any other mode |",
            "| Auto | any other mode |",
            "| Full Access | any other mode |",
            "| 0 | read, search, think | any | allow | |",
            (
                "| 1 | edit, delete, move, execute, fetch | any | ask | Read Only mode asks "
                "before edits, commands and network access |"
            ),
            "| tools\\_default | any other | any | ask | |",
            "| 0 | read, search, think, edit, delete, move, execute | any | allow | |",
            "| 1 | fetch | any | ask | Auto mode asks before network access |",
            "| tools\\_default | any other | any | ask | |",
            "| tools\\_default | any | any | allow | |",
            (
                "| Read Only | Start working | Yes, work in the workspace | <code>auto</code> "
                "| allow\\_once | Auto |"
            ),
            (
                "| Read Only | Start working | No, stay read-only | <code>reject</code> "
                "| reject\\_once | stays |"
            ),
            (
                "| Read Only | <code>auto</code> | Auto "
                "| Auto, if a switch may reach it from the new mode; else refused |"
            ),
        ]

    def test_page_with_a_log_lists_every_transition_and_the_session_steps(self, permission_log):
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [permission_log], session_id="sess_b"))

        page = to_markdown(diagram, spec)

        assert page.endswith(
            "### Steps of session sess\\_b\n\n"
            "1. session/new: Default\n"
            "2. Default to Plan (set\\_mode)\n"
            "3. Plan to Default (set\\_mode)\n"
            "4. Default to Accept Edits (set\\_mode)\n"
        )
        assert "| Plan: switch\\_mode, No, keep planning (reject\\_once) | 1 |" in page
        assert "| Default to Bypass Permissions (set\\_mode) | 0 |" in page


class TestRender:
    """render draws a spec in one format, with or without a log."""

    def test_text_formats_are_utf8(self):
        spec = preset("seed")

        assert to_mermaid(build_diagram(spec)).encode() == render(spec, "mermaid")
        assert to_dot(build_diagram(spec)).encode() == render(spec, "dot")

    def test_session_without_log_is_refused(self):
        with pytest.raises(DiagramError) as caught:
            render(preset("seed"), "mermaid", session_id="sess_1")

        assert str(caught.value) == "a session to highlight needs a transition log (--log FILE)"

    def test_missing_dot_is_one_clear_error(self, monkeypatch, tmp_path):
        monkeypatch.setenv("PATH", str(tmp_path))

        with pytest.raises(DiagramError) as caught:
            render(preset("seed"), "svg")

        assert (
            str(caught.value)
            == "svg output needs Graphviz's dot program: install the Debian package graphviz"
        )


class TestCli:
    """``modefsm diagram [SPEC|--preset NAME] [--format F] [-o FILE] [--log FILE [--session ID]]``."""  # noqa: E501

    def test_mermaid_goes_to_stdout_by_default(self, capsys):
        assert main(["diagram", "--preset", "seed"]) == 0

        assert (to_mermaid(build_diagram(preset("seed"))), "") == capsys.readouterr()

    def test_format_option_chooses_the_format(self, capsys):
        assert main(["diagram", "--preset", "sandbox", "--format", "dot"]) == 0

        assert to_dot(build_diagram(preset("sandbox"))) == capsys.readouterr().out

    @pytest.mark.parametrize(
        ("suffix", "fmt"), [(".mmd", "mermaid"), (".gv", "dot"), (".md", "md")]
    )
    def test_output_suffix_chooses_the_format(self, tmp_path, suffix, fmt):
        out = tmp_path / f"seed{suffix}"

        assert main(["diagram", "--preset", "seed", "-o", str(out)]) == 0

        assert render(preset("seed"), fmt) == out.read_bytes()

    def test_spec_file_is_drawn(self, tmp_path, capsys):
        path = tmp_path / "spec.json"
        path.write_bytes(orjson.dumps(preset("sandbox").model_dump(mode="json")))

        assert main(["diagram", str(path), "--format", "md"]) == 0

        assert render(preset("sandbox"), "md").decode() == capsys.readouterr().out

    def test_log_and_session_are_drawn(self, permission_log, capsys):
        argv = ["diagram", "--preset", "permission", "--log", str(permission_log)]

        assert main([*argv, "--session", "sess_a"]) == 0

        expected = render(
            preset("permission"), "mermaid", logs=[permission_log], session_id="sess_a"
        )
        assert expected.decode() == capsys.readouterr().out

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--preset", "seed", "--format", "png"], "png output is binary: give -o FILE"),
            (
                ["--preset", "seed", "--session", "s"],
                "a session to highlight needs a transition log (--log FILE)",
            ),
            (
                ["--preset", "seed", "-o", "seed.txt"],
                "cannot tell the format of 'seed.txt' from its suffix; give --format",
            ),
            (
                ["--preset", "nope"],
                ("unknown preset 'nope'; presets: permission, sandbox, seed"),
            ),
            (
                ["--preset", "seed", "-o", "no/such/dir/seed.mmd"],
                "cannot write 'no/such/dir/seed.mmd': No such file or directory",
            ),
        ],
        ids=[
            "png-to-stdout",
            "session-without-log",
            "unknown-suffix",
            "unknown-preset",
            "unwritable-output",
        ],
    )
    def test_user_mistake_is_one_line_on_stderr(self, args, message, capsys, monkeypatch, tmp_path):
        monkeypatch.chdir(tmp_path)

        assert main(["diagram", *args]) == 2

        assert ("", f"modefsm diagram: {message}\n") == capsys.readouterr()

    def test_spec_and_preset_exclude_each_other(self, capsys):
        with pytest.raises(SystemExit) as caught:
            main(["diagram", "spec.toml", "--preset", "seed"])

        assert caught.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err


def test_traffic_is_a_frozen_value():
    traffic = Traffic(counts={}, entered={}, sessions=0, records=0)

    with pytest.raises(ValueError, match="frozen"):
        traffic.sessions = 1


def test_diagram_node_lookup_of_an_unknown_id_is_a_key_error():
    with pytest.raises(KeyError):
        build_diagram(preset("seed")).node("s9")
