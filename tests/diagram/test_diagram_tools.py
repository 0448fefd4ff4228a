"""Diagrams checked by the real tools: Mermaid (under Node and in Chromium), Graphviz, Chromium.

The screenshots are compared in ``test_screenshots.py``.

Where a tool is missing the test is skipped, or fails in CI (see
``tests/diagram/_diagram_support``).
"""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pytest

from modefsm import ModeSpec, preset, preset_names
from modefsm.diagram import (
    Diagram,
    build_diagram,
    read_traffic,
    to_dot,
    to_mermaid,
    to_png,
    to_svg,
)
from modefsm.diagram._build import rule_lines
from modefsm.diagram.renderers._text import _edge_text, _rule_text, _wrapped
from tests.diagram._diagram_support import (
    HARD_MODES,
    HARD_OPTION_NAMES,
    HARD_SWITCH_TITLE,
    ROOT,
    TIMEOUT,
    draw_mermaid,
    hard_spec,
    mermaid_parse,
    need_dot,
    run_chromium,
    write_permission_log,
)

if TYPE_CHECKING:
    from pathlib import Path

    from tests.diagram._browser import Browser

SVG_NS = "{http://www.w3.org/2000/svg}"
X = "\N{MULTIPLICATION SIGN}"


def mode_label(spec: ModeSpec, mode_id: str) -> str:
    """The text a mode node shows: its name, its id, whether load restores it, its rules."""
    mode = spec.mode(mode_id)
    label = f"{mode.name}\n{mode.id}"
    if not mode.restorable:
        label += f"\nnot restored, load gives {spec.mode(spec.restore_target(mode.id)).name}"
    return label + "".join(f"\n{_rule_text(line)}" for line in rule_lines(spec, mode))


def as_drawn(text: str) -> str:
    """What a reader sees: a no-break space is a space, a word joiner is nothing."""
    return text.replace("\xa0", " ").replace("\u2060", "")


def expected_mermaid_edges(diagram: Diagram) -> list[tuple[str, str, str]]:
    """Each group's spokes (its hub to a mode, no label), then every arrow of the diagram."""
    spokes = [(g.id, m, "") for g in diagram.groups for m in g.members]
    return spokes + [(e.source, e.dest, as_drawn(_edge_text(e))) for e in diagram.edges]


# -- Mermaid under Node ---------------------------------------------------------------------


class TestMermaidParser:
    """The Mermaid text parses with the real parser and keeps every name."""

    def test_every_hard_mode_name_and_id_survives(self):
        spec = hard_spec()

        [parsed] = mermaid_parse([to_mermaid(build_diagram(spec))])

        assert parsed["ok"], parsed
        labels = {n["id"]: as_drawn(n["label"]) for n in parsed["nodes"]}
        assert [mode_label(spec, m) for m in spec.mode_ids] == [
            labels[f"s{i}"] for i in range(len(HARD_MODES))
        ]

    def test_every_hard_edge_survives_with_its_label(self):
        diagram = build_diagram(hard_spec())

        [parsed] = mermaid_parse([to_mermaid(diagram)])

        drawn = [(e["start"], e["end"], as_drawn(e["label"])) for e in parsed["edges"]]
        assert expected_mermaid_edges(diagram) == drawn
        assert f"{HARD_OPTION_NAMES[2]}\n(reject_once)" in [label for _, _, label in drawn]

    def test_the_switch_title_is_in_its_diamond(self):
        [parsed] = mermaid_parse([to_mermaid(build_diagram(hard_spec()))])

        assert [(n["id"], n["shape"], as_drawn(n["label"])) for n in parsed["nodes"]][-4:] == [
            ("c0", "diamond", _wrapped(HARD_SWITCH_TITLE)),
            ("p0", "roundedRect", ("the mode before:\nPlan-mode, Say \"hi\" 'there', "
             "<tag> & </tag> &amp;, Two  words  , first line\nsecond line, Café ☕ 日本語 "
             "Ωmega, a:b, %% not a comment; [*] --> {x} | end note `tick` $$x$$ \\n \\N, "
             "*bold* _it_ **x** __init__ snake_case")),
            ("start", "circle", " "),
            ("g0", "stadium", "set_mode between\nany two of these"),
        ]  # fmt: skip

    @pytest.mark.parametrize("name", preset_names())
    def test_preset_parses_as_a_flowchart(self, name):
        diagram = build_diagram(preset(name))

        [parsed] = mermaid_parse([to_mermaid(diagram)])

        assert (parsed["ok"], parsed["type"]) == (True, "flowchart-v2")
        drawn = [(e["start"], e["end"], e["label"]) for e in parsed["edges"]]
        assert expected_mermaid_edges(diagram) == drawn

    def test_diagram_with_a_log_parses(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        write_permission_log(log)
        spec = preset("permission")
        traffic = read_traffic(spec, [log], session_id="sess_a")

        [parsed] = mermaid_parse([to_mermaid(build_diagram(spec, traffic))])

        assert parsed["ok"], parsed

    def test_broken_text_is_reported_not_accepted(self):
        [parsed] = mermaid_parse(["flowchart LR\n    s0 -->|x| \n    subgraph {\n"])

        assert False is parsed["ok"]


# -- Mermaid drawn in Chromium --------------------------------------------------------------


class TestMermaidInChromium:
    """Mermaid draws every name exactly as written (it reads labels as HTML and KaTeX)."""

    def test_every_hard_name_is_drawn_as_written(self, browser: Browser, page: Path):
        spec = hard_spec()

        drawn = draw_mermaid(browser, page, to_mermaid(build_diagram(spec)))

        nodes = drawn["nodes"]
        assert [mode_label(spec, m) for m in spec.mode_ids] == [
            as_drawn(nodes[f"s{i}"]) for i in range(len(HARD_MODES))
        ]
        assert as_drawn(nodes["c0"]) == _wrapped(HARD_SWITCH_TITLE)
        edges = [as_drawn(e) for e in drawn["edges"]]
        assert [
            f"{HARD_OPTION_NAMES[0]}\n(allow_once)",
            f"{HARD_OPTION_NAMES[2]}\n(reject_once)",
        ] == [e for e in edges if e.endswith(("(allow_once)", "(reject_once)"))]

    def test_every_preset_is_drawn(self, browser: Browser, page: Path):
        for spec in [preset(name) for name in preset_names()]:
            drawn = draw_mermaid(browser, page, to_mermaid(build_diagram(spec)))

            nodes = drawn["nodes"]
            assert [mode_label(spec, m) for m in spec.mode_ids] == [
                nodes[f"s{i}"] for i in range(len(spec.modes))
            ]

    def test_mode_rules_and_tool_calls_decided_are_drawn_as_written(
        self, browser: Browser, page: Path, tmp_path: Path
    ):
        log = tmp_path / "modes.jsonl"
        write_permission_log(log)
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [log]))

        drawn = draw_mermaid(browser, page, to_mermaid(diagram))

        assert [drawn["nodes"]["s1"], drawn["nodes"]["s3"]] == [
            (
                "Accept Edits\nacceptEdits\nallow: read, edit, move, search, think, fetch\nask: *\n"
                f"entered {X}2\nedit: allow {X}1\nexecute: ask {X}1 (reject_once 1)"
            ),
            (
                "Bypass Permissions\nbypassPermissions\nnot restored, load gives Default\n"
                f"allow: *\nentered {X}1\nexecute: allow {X}1"
            ),
        ]


# -- Graphviz -------------------------------------------------------------------------------


def dot_json(dot: str) -> Any:
    need_dot()
    result = subprocess.run(
        ["dot", "-Tjson"], input=dot, capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    return json.loads(result.stdout)


def texts(obj: Any) -> list[str]:
    """The lines of text Graphviz drew for a node or an edge, in order."""
    return [op["text"] for op in obj.get("_ldraw_", []) if op["op"] == "T"]


def drawn_graph(graph: Any) -> tuple[dict[str, Any], set[tuple[str, str, str]]]:
    """Nodes by name, and every edge as ``(class, tail, head)`` with group arrows expanded."""
    objects = graph["objects"]
    names: dict[int, str] = {o["_gvid"]: o["name"] for o in objects}
    nodes = {o["name"]: o for o in objects if "nodes" not in o}
    clusters: dict[str, list[str]] = {
        o["name"]: [names[n] for n in o["nodes"]]
        for o in objects
        if "client_group" in str(o.get("class", ""))
    }
    edges: set[tuple[str, str, str]] = set()
    for members in clusters.values():
        edges |= {("client_change", a, b) for a in members for b in members if a != b}
    for edge in graph["edges"]:
        if edge.get("class", "note") == "note":  # a group row's order, or a note's tie
            continue
        tails = clusters.get(edge.get("ltail"), [names[edge["tail"]]])
        heads = clusters.get(edge.get("lhead"), [names[edge["head"]]])
        edges |= {(edge["class"], t, h) for t in tails for h in heads}
    return nodes, edges


def spec_graph(spec: ModeSpec) -> set[tuple[str, str, str]]:
    """The spec's transitions as ``(class, tail, head)`` over the diagram's node ids.

    One choice node per switch. A ``$previous`` option leads to the one mode it can return
    to (``Diagram.reach``, checked against the engine in ``test_diagram_policy``), or else
    to the choice's ``previous`` node.
    """
    ids = {m: f"s{i}" for i, m in enumerate(spec.mode_ids)}
    reach = build_diagram(spec).reach
    edges = {("start", "start", ids[spec.initial])}
    edges |= {
        ("client_change", ids[s], ids[d]) for s in spec.mode_ids for d in spec.client_targets(s)
    }
    for number, switch in enumerate(spec.switches):
        choice = f"c{number}"
        back = {
            m for r in reach if r.choice == choice and r.target == "$previous" for m in r.reaches
        }
        for source in switch.source:
            edges.add(("switch", ids[source], choice))
            for option in switch.options:
                if not option.allows:
                    edges.add(("reject", choice, ids[source]))
                elif option.target == "$previous":
                    edges.add(
                        ("option", choice, ids[back.pop()] if len(back) == 1 else f"p{number}")
                    )
                else:
                    edges.add(("option", choice, ids[option.target or ""]))
    edges |= {
        ("restore", ids[m], ids[spec.restore_target(m)])
        for m in spec.mode_ids
        if spec.restore_target(m) != m
    }
    return edges


GRAPH_SPECS = {"hard": hard_spec()} | {name: preset(name) for name in preset_names()}


class TestDot:
    """The DOT text parses with Graphviz and holds exactly the spec's modes and transitions."""

    @pytest.mark.parametrize("name", GRAPH_SPECS)
    def test_nodes_and_edges_are_exactly_the_specs(self, name):
        spec = GRAPH_SPECS[name]

        nodes, edges = drawn_graph(dot_json(to_dot(build_diagram(spec))))

        modes = sorted(n for n, o in nodes.items() if "mode" in str(o.get("class", "")).split())
        assert sorted(f"s{i}" for i in range(len(spec.modes))) == modes
        assert spec_graph(spec) == edges

    def test_every_hard_name_and_id_is_drawn_exactly(self):
        spec = hard_spec()

        nodes, _ = drawn_graph(dot_json(to_dot(build_diagram(spec))))

        for i, mode in enumerate(spec.modes):
            lines = [*mode.name.split("\n"), *mode.id.split("\n")]
            if not mode.restorable:
                lines.append("not restored on load")
            assert lines == texts(nodes[f"s{i}"])

    def test_mode_rules_and_tool_calls_decided_are_drawn_exactly(self, tmp_path):
        log = tmp_path / "modes.jsonl"
        write_permission_log(log)
        spec = preset("permission")
        diagram = build_diagram(spec, read_traffic(spec, [log]))

        nodes, _ = drawn_graph(dot_json(to_dot(diagram)))

        assert [texts(nodes["s0"]), texts(nodes["s2"])] == [
            [
                "Default",
                "default",
                "allow",
                ": read, search, think, fetch",
                "ask",
                ": *",
                f"entered {X}5",
                f"read: allow {X}1",
                f"edit: ask {X}1 (allow_once 1)",
                f"execute: ask {X}2 (allow_always 1, granted 1)",
            ],
            [
                "Plan",
                "plan",
                "allow",
                ": read, search, think, fetch",
                "deny",
                ": edit, delete, move, execute",
                "ask",
                ": *",
                f"entered {X}2",
                f"read: allow {X}1",
                f"edit: deny {X}1",
                f"execute: deny {X}1",
            ],
        ]

    def test_switch_title_and_option_names_are_drawn_exactly(self):
        graph = dot_json(to_dot(build_diagram(hard_spec())))

        labels = [texts(e) for e in graph["edges"]]

        assert [["switch_mode"]] == [t for t in labels if "switch_mode" in t]
        assert [HARD_OPTION_NAMES[0], "(allow_once)"] in labels
        assert ["Back", "to before", "(allow_always)"] in labels
        assert [HARD_OPTION_NAMES[2], "(reject_once)"] in labels

    def test_the_switch_title_is_drawn_in_its_diamond(self):
        nodes, _ = drawn_graph(dot_json(to_dot(build_diagram(hard_spec()))))

        assert ("diamond", _wrapped(HARD_SWITCH_TITLE).split("\n")) == (
            nodes["c0"]["shape"],
            texts(nodes["c0"]),
        )


class TestSvgAndPng:
    """SVG and PNG come from Graphviz's dot."""

    def test_png_is_a_png_image(self):
        need_dot()

        assert to_png(build_diagram(preset("seed"))).startswith(b"\x89PNG\r\n\x1a\n")

    def test_svg_names_graphviz_by_version_only(self):
        need_dot()
        svg = to_svg(build_diagram(preset("seed")))

        assert re.search(r"\n<!-- Generated by graphviz version [^ ]+ -->\n", svg)
        assert svg == to_svg(build_diagram(preset("seed")))


# -- SVG in Chromium ------------------------------------------------------------------------


class TestSvgInChromium:
    """Each committed preset SVG opens in a browser and shows every mode name as text."""

    @pytest.mark.parametrize("name", preset_names())
    def test_preset_svg_shows_every_mode_name(self, name, tmp_path):
        svg = ROOT / "diagrams" / f"{name}.svg"

        dom = run_chromium(svg.as_uri(), tmp_path / "profile")

        root = ET.fromstring(dom)  # noqa: S314 - the DOM of our own file
        assert f"{SVG_NS}svg" == root.tag
        assert [e for e in root.iter() if e.tag.endswith("parsererror")] == []
        shown = {"".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")}
        spec = preset(name)
        assert set() == {m.name for m in spec.modes} - shown
        assert set() == {m.id for m in spec.modes} - shown
