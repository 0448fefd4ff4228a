"""Every rendering shows where each switch option leads, and only there.

One function (``option_reach``) states where an approval can lead; the Mermaid, DOT, SVG
and Markdown renderers all read it from the diagram. It is checked here against the
engine itself: an exhaustive walk over every session state a small spec allows (client
changes, approved switches, restarts) offers each option exactly the targets it names.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from modefsm import ModeEngine, ModeSpec, preset, preset_names
from modefsm.diagram import (
    OptionReach,
    build_diagram,
    to_dot,
    to_markdown,
    to_mermaid,
    write_preset_diagrams,
)
from modefsm.errors import SpecError
from tests.conftest import offer_now, settle_now
from tests.diagram._diagram_support import (
    TIMEOUT,
    hard_spec,
    mermaid_parse,
    need_dot,
)

DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"

LETTERS = ModeSpec.from_data(
    {
        "name": "letters",
        "initial": "a",
        "modes": [
            {"id": "a", "name": "Alpha"},
            {"id": "b", "name": "Bravo"},
            {"id": "c", "name": "Charlie", "restorable": False, "fallback": "p"},
            {"id": "p", "name": "Plan"},
        ],
        "client_changes": {"a": ["b", "c"], "b": ["a", "p"], "c": ["a", "b"], "p": ["a"]},
        "switches": [
            {
                "source": ["p"],
                "title": "Leave",
                "options": [
                    {"option_id": "back", "name": "Back", "kind": "allow_once",
                     "target": "$previous"},
                    {"option_id": "go_b", "name": "To {mode}", "kind": "allow_once",
                     "target": "b"},
                    {"option_id": "stay", "name": "Stay", "kind": "reject_once"},
                ],
            }
        ],
    }
)  # fmt: skip
"""Only Bravo enters Plan, and ``go_b`` names Bravo; Charlie falls back to Plan on load, so
Plan's ``$previous`` returns to Alpha (who entered Charlie), and only after a restart."""


def rows(reach: tuple[OptionReach, ...]) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
    return [(r.choice, r.source, r.option_id, r.target, r.reaches) for r in reach]


# -- the model, against the engine ---------------------------------------------------------


def engine_after(spec: ModeSpec, path: tuple[tuple[str, str], ...]) -> ModeEngine:
    """A fresh engine whose session ``s`` has taken the steps of *path*."""
    engine = ModeEngine(spec)
    engine.new_session("s")
    for step, arg in path:
        if step == "set_mode":
            engine.change("s", arg, "set_mode")
        elif step == "approve":
            settle_now(engine, "s", arg)
        else:  # a restart: a new process loads the session from its last record
            session = engine.get("s")
            mode, seq, previous = session.state, session.seq, session.previous
            engine = ModeEngine(spec)
            engine.restore_session("s", mode, seq, previous=previous)
    return engine


def offered_targets(spec: ModeSpec) -> dict[tuple[str, str], set[str]]:
    """For each (source, optionId) of an allow option, every target the engine ever offers.

    A breadth-first walk over the session states (mode, previous mode) reachable by client
    changes, approved switch options and restarts.
    """
    seen: set[tuple[str, str | None]] = set()
    queue: deque[tuple[tuple[str, str], ...]] = deque([()])
    offered: dict[tuple[str, str], set[str]] = {}
    while queue:
        path = queue.popleft()
        engine = engine_after(spec, path)
        session = engine.get("s")
        if (session.state, session.previous) in seen:
            continue
        seen.add((session.state, session.previous))
        steps = [("set_mode", d) for d in spec.table.targets("client_change", session.state)]
        steps.append(("restart", ""))
        if spec.switch_from(session.state) is not None:
            for option in offer_now(engine, "s").options:
                if option.target is not None:
                    offered.setdefault((session.state, option.option_id), set()).add(option.target)
                    steps.append(("approve", option.option_id))
        queue.extend((*path, step) for step in steps)
    return offered


def reached(spec: ModeSpec) -> dict[tuple[str, str], set[str]]:
    return {(r.source, r.option_id): set(r.reaches) for r in build_diagram(spec).reach if r.reaches}


class TestReach:
    """``Diagram.reach``: one item per allow option and source, exactly the engine's targets."""

    def test_permission_preset(self):
        reach = build_diagram(preset("permission")).reach

        assert rows(reach) == [
            ("c0", "plan", "exit_plan_accept_edits", "acceptEdits", ("acceptEdits",)),
            ("c0", "plan", "exit_plan_previous", "$previous", ("bypassPermissions",)),
            ("c0", "plan", "exit_plan_default", "default", ("default",)),
        ]
        assert [r.stale for r in reach] == [("acceptEdits",), (), ("default",)]
        assert [list(build_diagram(preset("permission")).never_reached(r)) for r in reach] == [
            ["default", "plan", "bypassPermissions"],
            ["default", "acceptEdits", "plan"],
            ["acceptEdits", "plan", "bypassPermissions"],
        ]

    def test_previous_reaches_a_mode_only_a_restore_fallback_enters_from(self):
        reach = build_diagram(LETTERS).reach

        assert rows(reach) == [
            ("c0", "p", "back", "$previous", ("a",)),
            ("c0", "p", "go_b", "b", ("b",)),
        ]

    @pytest.mark.parametrize("name", [*preset_names(), "letters", "hard"])
    def test_is_what_the_engine_offers(self, name):
        spec = {"letters": LETTERS, "hard": hard_spec()}.get(name) or preset(name)

        offered = offered_targets(spec)

        assert reached(spec) == offered
        assert offered  # the walk met every switch

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_never_reached_modes_are_never_offered_in_random_specs(self, data):
        spec = data.draw(small_specs())
        listed = reached(spec)

        offered = offered_targets(spec)

        beyond = {key: targets - listed.get(key, set()) for key, targets in offered.items()}
        assert beyond == {key: set() for key in offered}


@st.composite
def small_specs(draw: st.DrawFn) -> ModeSpec:
    """Specs of 2 to 4 modes with random client lists, restore fallbacks and switches.

    ``m0``, the initial mode, may change to any mode, so every mode is reachable.
    """
    count = draw(st.integers(2, 4))
    ids = [f"m{i}" for i in range(count)]
    lost = draw(st.sets(st.sampled_from(ids[1:])))
    kept = [m for m in ids if m not in lost]
    modes: list[dict[str, Any]] = [
        {"id": m, "name": m.upper()}
        | ({"restorable": False, "fallback": draw(st.sampled_from(kept))} if m in lost else {})
        for m in ids
    ]
    client = {
        m: draw(st.lists(st.sampled_from(ids), unique=True, max_size=count))
        for m in draw(st.lists(st.sampled_from(ids[1:]), unique=True))
    }
    switches = []
    for source in draw(st.lists(st.sampled_from(ids), unique=True, max_size=2)):
        others = [m for m in ids if m != source]
        targets = draw(st.lists(st.sampled_from([*others, "$previous"]), unique=True, min_size=1))
        options = [
            {"option_id": f"o{i}", "name": f"To {t}", "kind": "allow_once", "target": t}
            for i, t in enumerate(targets)
        ]
        options.append({"option_id": "no", "name": "No", "kind": "reject_once"})
        switches.append({"source": [source], "title": "Switch", "options": options})
    try:
        return ModeSpec.from_data(
            {
                "name": "random",
                "initial": "m0",
                "modes": modes,
                "client_changes": client,
                "switches": switches,
            }
        )
    except SpecError:
        assume(False)  # noqa: FBT003 - an invalid draw
        raise


# -- what each renderer shows ---------------------------------------------------------------

TWO_SOURCES = ModeSpec.from_data(
    {
        "name": "two-sources",
        "initial": "a",
        "modes": [
            {"id": "a", "name": "Alpha"},
            {"id": "b", "name": "Bravo"},
            {"id": "p", "name": "Plan"},
        ],
        "client_changes": {"a": ["b", "p"], "b": ["p"], "p": []},
        "switches": [
            {
                "source": ["p"],
                "title": "Leave plan",
                "options": [
                    {"option_id": "back", "name": "Back to {mode}", "kind": "allow_once",
                     "target": "$previous"},
                    {"option_id": "stay", "name": "Stay", "kind": "reject_once"},
                ],
            },
            {
                "source": ["a", "b"],
                "title": "Plan first?",
                "options": [
                    {"option_id": "plan", "name": "Yes, {mode}", "kind": "allow_always",
                     "target": "p"},
                    {"option_id": "no", "name": "No", "kind": "reject_once"},
                ],
            },
        ],
    }
)  # fmt: skip
"""One switch from two modes; Plan's ``$previous`` can be Alpha or Bravo."""

OPTION_ARROWS = {
    "permission": [
        '    c0 -.->|"Yes, and auto-accept edits<br>(allow_always)"| s1',
        ('    c0 -.->|"Yes, and return to the mode I was in (Bypass Permissions)<br>'
         '(allow_once)"| s3'),
        '    c0 -.->|"Yes, and manually approve edits<br>(allow_once)"| s0',
        '    c0 -.->|"No, keep planning<br>(reject_once)"| s2',
    ],
    "sandbox": [
        '    c0 -.->|"Yes, work in the workspace<br>(allow_once)"| s1',
        '    c0 -.->|"No, stay read-only<br>(reject_once)"| s0',
    ],
    "seed": [
        '    c0 -.->|"Yes, and auto-accept all actions<br>(allow_always)"| s2',
        '    c0 -.->|"Yes, and manually accept actions<br>(allow_once)"| s0',
        '    c0 -.->|"No, stay in architect mode<br>(reject_once)"| s1',
    ],
}  # fmt: skip
"""Each preset's arrows out of its permission request, in Mermaid."""


def arrows_from(text: str, node: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"    {node} -")]


def dot_lines(text: str, node: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"    {node} ")]


class TestRenderers:
    """Mermaid, DOT and Markdown draw ``Diagram.reach``: each option's arrow goes where it leads."""

    @pytest.mark.parametrize("name", preset_names())
    def test_each_option_of_a_preset_is_an_arrow_to_where_it_leads(self, name):
        diagram = build_diagram(preset(name))

        mermaid = to_mermaid(diagram)

        assert arrows_from(mermaid, "c0") == OPTION_ARROWS[name]
        page = to_markdown(diagram, preset(name))
        dot = to_dot(diagram)
        never = [re.findall(r"never [A-Z]", text) for text in (mermaid, page, dot)]
        assert never == [[], [], []]
        assert "Never reaches" not in page
        assert [re.findall(r"\bp\d+\b", text) for text in (mermaid, dot)] == [[], []]

    def test_a_previous_option_with_one_possible_mode_leads_to_it_in_every_format(self):
        spec = preset("permission")
        diagram = build_diagram(spec)

        dot = to_dot(diagram)
        page = to_markdown(diagram, spec)

        assert [n.id for n in diagram.nodes if n.kind == "previous"] == []
        assert [line.split(" [")[0] for line in dot_lines(dot, "c0")] == [
            "    c0",
            "    c0 -> s1",
            "    c0 -> s3",
            "    c0 -> s0",
            "    c0 -> s2",
        ]
        assert (
            'label=<Yes, and return to the mode I was in (Bypass Permissions)<BR ALIGN="LEFT"/>'
            '(allow_once)<BR ALIGN="LEFT"/>>'
        ) in dot
        assert (
            "| Plan | Exit plan mode | Yes, and return to the mode I was in (Bypass Permissions) "
            "| <code>exit\\_plan\\_previous</code> | allow\\_once | Bypass Permissions |"
        ) in page.splitlines()

    def test_a_previous_option_with_several_modes_leads_to_a_box_naming_them(self):
        diagram = build_diagram(TWO_SOURCES)

        mermaid = to_mermaid(diagram)
        dot = to_dot(diagram)

        assert [(n.id, n.kind, n.label) for n in diagram.nodes if n.kind == "previous"] == [
            ("p0", "previous", "the mode before:\nAlpha, Bravo")
        ]
        assert arrows_from(mermaid, "c0") == [
            '    c0 -.->|"Back to the previous mode<br>(allow_once)"| p0',
            '    c0 -.->|"Stay<br>(reject_once)"| s2',
        ]
        assert '    p0("the mode before#58;<br>Alpha, Bravo")' in mermaid.splitlines()
        assert "label=<the mode before:<BR/>Alpha, Bravo>];" in dot_lines(dot, "p0")[0]

    def test_a_switch_from_two_modes_is_one_diamond_with_an_arrow_from_each(self):
        diagram = build_diagram(TWO_SOURCES)

        mermaid = to_mermaid(diagram)

        assert [(n.id, n.label) for n in diagram.nodes if n.kind == "choice"] == [
            ("c0", "Leave plan"),
            ("c1", "Plan first?"),
        ]
        assert [line for line in mermaid.splitlines() if re.search(r"\bc1\b", line)] == [
            '    c1{"Plan first?"}',
            '    s0 -.->|"switch_mode"| c1',
            '    s1 -.->|"switch_mode"| c1',
            '    c1 -.->|"Yes, Plan<br>(allow_always)"| s2',
            '    c1 -.->|"No<br>(reject_once)"| s0',
            '    c1 -.->|"No<br>(reject_once)"| s1',
            "    class c0,c1 choice",
        ]
        dot = to_dot(diagram).splitlines()
        assert [line.split(" [")[0] for line in dot if re.search(r"\bc1\b", line)] == [
            "    c1",
            "    s0 -> c1",
            "    s1 -> c1",
            "    c1 -> s2",
            "    c1 -> s0",
            "    c1 -> s1",
        ]

    def test_a_mode_placeholder_is_filled_in_every_format(self):
        diagram = build_diagram(LETTERS)

        texts = [to_mermaid(diagram), to_dot(diagram), to_markdown(diagram, LETTERS)]

        assert ["{mode}" in text for text in texts] == [False] * 3
        assert ["To Bravo" in text for text in texts] == [True] * 3
        assert ["Back (Alpha)" in text for text in texts] == [True] * 3

    def test_reject_arrows_are_red_and_dashed_apart_from_approvals(self):
        diagram = build_diagram(TWO_SOURCES)

        mermaid = to_mermaid(diagram).splitlines()
        dot = to_dot(diagram)

        assert [line for line in mermaid if line.startswith("    linkStyle")] == [
            "    linkStyle 0,1,2,3 stroke:#24292f,color:#24292f,stroke-width:1.5px",
            (
                "    linkStyle 4,5,7,8,9 stroke:#7a3fb0,color:#7a3fb0,stroke-width:1.5px,"
                "stroke-dasharray:6 4"
            ),
            (
                "    linkStyle 6,10,11 stroke:#b42318,color:#b42318,stroke-width:1.5px,"
                "stroke-dasharray:6 4"
            ),
        ]
        arrows = [line for line in mermaid if re.search(r" (-{2,3}>|-\.->)\|", line)]
        assert [arrows[i] for i in (6, 10, 11)] == [
            '    c0 -.->|"Stay<br>(reject_once)"| s2',
            '    c1 -.->|"No<br>(reject_once)"| s0',
            '    c1 -.->|"No<br>(reject_once)"| s1',
        ]
        assert [
            line.split(", label")[0] for line in dot.splitlines() if 'class="reject"' in line
        ] == [
            '    c0 -> s2 [class="reject"',
            '    c1 -> s0 [class="reject"',
            '    c1 -> s1 [class="reject"',
        ]
        assert dot.count('color="#b42318", fontcolor="#b42318", penwidth=1.2, style=dashed') == 3

    def test_a_spec_without_switches_has_no_diamond(self):
        spec = ModeSpec.from_data(
            {
                "name": "two",
                "initial": "a",
                "modes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
            }
        )
        diagram = build_diagram(spec)

        assert (diagram.reach, [n for n in diagram.nodes if n.kind == "choice"]) == ((), [])
        texts = (to_mermaid(diagram), to_dot(diagram))
        assert [re.findall(r"\bc0\b", text) for text in texts] == [[], []]

    def test_every_renderer_reads_the_diagrams_reach(self):
        spec = preset("permission")
        diagram = build_diagram(spec)
        told = diagram.reach[1].model_copy(update={"reaches": ("default", "acceptEdits")})
        diagram = build_diagram(spec).model_copy(update={"reach": (told,)})

        page = to_markdown(diagram, spec)

        table = page[page.index("### Where each approval can lead") :].splitlines()
        assert [row for row in table if row.startswith("| Plan |")] == [
            (
                "| Plan | <code>exit\\_plan\\_previous</code> | the mode before this one (Default, "
                "Accept Edits), named in the option when asked; not offered if another option "
                "leads there or there is none (a non-restorable mode is not remembered across a "
                "restart) | refused |"
            )
        ]
        assert (
            "| Plan | Exit plan mode | Yes, and return to the mode I was in | "
            "<code>exit\\_plan\\_previous</code> | allow\\_once | the previous mode |"
        ) in page.splitlines()

    def test_long_lists_name_twelve_modes_and_count_the_rest(self):
        ids = [f"m{i}" for i in range(20)]
        spec = ModeSpec.from_data(
            {
                "name": "wide",
                "initial": "m0",
                "modes": [{"id": m, "name": m.upper()} for m in ids],
                "switches": [
                    {
                        "source": ["m0"],
                        "title": "Go",
                        "options": [
                            {"option_id": "one", "name": "One", "kind": "allow_once",
                             "target": "m19"},
                            {"option_id": "back", "name": "Back", "kind": "allow_once",
                             "target": "$previous"},
                        ],
                    }
                ],
            }
        )  # fmt: skip

        diagram = build_diagram(spec)

        back = ", ".join(f"M{i}" for i in range(1, 13))
        assert [(n.id, n.label) for n in diagram.nodes if n.kind == "previous"] == [
            ("p0", f"the mode before:\n{back} and 6 more")
        ]
        assert arrows_from(to_mermaid(diagram), "c0") == [
            '    c0 -.->|"One<br>(allow_once)"| s19',
            '    c0 -.->|"Back<br>(allow_once)"| p0',
        ]


# -- with the real tools --------------------------------------------------------------------


class TestRealTools:
    """The real Mermaid parser and Graphviz read the options' arrows as written."""

    def test_mermaid_parses_each_presets_options(self):
        names = preset_names()

        parsed = mermaid_parse([to_mermaid(build_diagram(preset(n))) for n in names])

        for name, result in zip(names, parsed, strict=True):
            assert (result["ok"], result["type"]) == (True, "flowchart-v2"), result
            drawn = [
                f'    c0 -.->|"{e["label"].replace(chr(10), "<br>")}"| {e["end"]}'
                for e in result["edges"]
                if e["start"] == "c0"
            ]
            assert drawn == OPTION_ARROWS[name]

    def test_graphviz_draws_one_diamond_per_switch_and_its_arrows(self):
        need_dot()
        dot = to_dot(build_diagram(TWO_SOURCES))

        result = subprocess.run(
            ["dot", "-Tjson"],
            input=dot,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        )

        graph = json.loads(result.stdout)
        names = {o["_gvid"]: o["name"] for o in graph["objects"]}
        diamonds = [
            (o["name"], [op["text"] for op in o["_ldraw_"] if op["op"] == "T"])
            for o in graph["objects"]
            if o.get("shape") == "diamond"
        ]
        assert diamonds == [("c0", ["Leave plan"]), ("c1", ["Plan first?"])]
        arrows = sorted(
            (e["class"], names[e["tail"]], names[e["head"]])
            for e in graph["edges"]
            if "c1" in (names[e["tail"]], names[e["head"]])
        )
        assert arrows == [
            ("option", "c1", "s2"),
            ("reject", "c1", "s0"),
            ("reject", "c1", "s1"),
            ("switch", "s0", "c1"),
            ("switch", "s1", "c1"),
        ]


# -- the committed folder -------------------------------------------------------------------


def test_diagrams_folder_is_exactly_what_the_presets_give(tmp_path):
    """Regenerate every file of ``diagrams/`` and compare the whole folder byte for byte."""
    need_dot()
    committed = {p.name: p.read_bytes() for p in DIAGRAMS.iterdir()}
    drawn_by = re.search(rb"<!-- Generated by graphviz version (\S+) -->", committed["seed.svg"])
    version = subprocess.run(["dot", "-V"], capture_output=True, text=True, check=True).stderr
    assert drawn_by is not None
    if f"graphviz version {drawn_by.group(1).decode()} " not in version:
        pytest.skip(f"the SVGs were drawn by Graphviz {drawn_by.group(1).decode()}: {version}")

    written = write_preset_diagrams(tmp_path)

    assert [p.name for p in written] == sorted(committed)
    assert {p.name: p.read_bytes() for p in written} == committed


# -- the package's one-way layout -----------------------------------------------------------

DIAGRAM = Path(__file__).resolve().parents[2] / "modefsm" / "diagram"
STAGES = {
    "modefsm.diagram._formats": 0,
    "modefsm.diagram._model": 0,
    "modefsm.diagram._build": 1,
    "modefsm.diagram._traffic": 1,
    "modefsm.diagram.renderers._text": 2,
    "modefsm.diagram.renderers._dot": 3,
    "modefsm.diagram.renderers._mermaid": 3,
    "modefsm.diagram.renderers._graphviz": 4,
    "modefsm.diagram.renderers._markdown": 4,
    "modefsm.diagram.renderers": 5,
    "modefsm.diagram._files": 6,
    "modefsm.diagram": 7,
}
"""model -> building -> shared text -> renderers -> the renderers' package -> files -> facade."""


def diagram_imports() -> dict[str, set[str]]:
    """For each module of ``modefsm.diagram``, the modules of the package it imports (any kind)."""
    found: dict[str, set[str]] = {}
    for path in sorted(DIAGRAM.rglob("*.py")):
        parts = path.relative_to(DIAGRAM.parent.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = found.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "modefsm.diagram"
            ):
                targets.add(node.module or "")
    return found


def test_the_diagram_package_imports_one_way():
    found = diagram_imports()

    assert set(found) == set(STAGES)  # a new module gets a stage here
    upward = sorted(
        (module, target)
        for module, targets in found.items()
        for target in targets
        if STAGES[target] >= STAGES[module] and target != module
    )
    assert upward == []
    assert found["modefsm.diagram._model"] == set()  # the model reads no other part
