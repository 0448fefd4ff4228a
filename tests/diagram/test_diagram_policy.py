"""Every rendering shows each switch option's resolved target and the modes it never reaches.

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
            engine.approve_switch(engine.offer_switch("s"), arg, tool_call_id="t")
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
            for option in engine.offer_switch("s").options:
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

PERMISSION_NOTE = [
    "Where each approval leads",
    "• Yes, and auto-accept edits → Accept Edits; never Default, Plan, Bypass Permissions",
    (
        "• Yes, and return to the mode I was in → $previous, the mode before: "
        "Bypass Permissions; never Default, Accept Edits, Plan"
    ),
    "• Yes, and manually approve edits → Default; never Accept Edits, Plan, Bypass Permissions",
]
NOTES = {
    "permission": PERMISSION_NOTE,
    "sandbox": [
        "Where each approval leads",
        "• Yes, work in the workspace → Auto; never Read Only, Full Access",
    ],
    "seed": [
        "Where each approval leads",
        "• Yes, and auto-accept all actions → Code; never Ask, Architect",
        "• Yes, and manually accept actions → Ask; never Architect, Code",
    ],
}  # fmt: skip


def mermaid_notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("    note right of c")]


class TestRenderers:
    """Mermaid, DOT and Markdown draw ``Diagram.reach``: a note by each permission request."""

    @pytest.mark.parametrize("name", preset_names())
    def test_mermaid_note_of_each_preset(self, name):
        notes = mermaid_notes(to_mermaid(build_diagram(preset(name))))

        escaped = "<br>".join(NOTES[name]).replace(";", "#59;").replace(":", "#58;")
        assert notes == [f"    note right of c0 : {escaped.replace('$', '#36;')}"]

    def test_dot_note_of_the_permission_preset(self):
        dot = to_dot(build_diagram(preset("permission"))).splitlines()

        left = '<BR ALIGN="LEFT"/>'
        label = f"<B>{PERMISSION_NOTE[0]}</B>{left}" + left.join(PERMISSION_NOTE[1:]) + left
        assert [line for line in dot if "c0_note" in line] == [
            (
                '    c0_note [class="reach", shape=note, style=filled, fillcolor="#f4ecfb", '
                'color="#7a3fb0", fontsize=9, margin="0.12,0.06", '
                f"label=<{label}>];"
            ),
            '    c0 -> c0_note [class="note", style=dotted, arrowhead=none, color="#7a3fb0"];',
        ]

    def test_a_spec_without_switches_has_no_note(self):
        spec = ModeSpec.from_data(
            {
                "name": "two",
                "initial": "a",
                "modes": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
            }
        )
        diagram = build_diagram(spec)

        assert (diagram.reach, mermaid_notes(to_mermaid(diagram))) == ((), [])
        assert "_note" not in to_dot(diagram)

    def test_every_renderer_reads_the_diagrams_reach(self):
        spec = preset("permission")
        diagram = build_diagram(spec)
        told = diagram.reach[1].model_copy(update={"reaches": ("default", "acceptEdits")})
        diagram = diagram.model_copy(update={"reach": (told,)})

        line = (
            "• Yes, and return to the mode I was in → $previous, the mode before: "
            "Default, Accept Edits; never Plan, Bypass Permissions"
        )
        mermaid = to_mermaid(diagram)
        assert mermaid_notes(mermaid) == [
            "    note right of c0 : Where each approval leads<br>"
            + line.replace(";", "#59;").replace(":", "#58;").replace("$", "#36;")
        ]
        assert f'<BR ALIGN="LEFT"/>{line}<BR ALIGN="LEFT"/>' in to_dot(diagram)
        page = to_markdown(diagram, spec)
        table = page[page.index("### Where each approval can lead") :].splitlines()[9:]
        assert table == [
            (
                "| Plan | <code>exit\\_plan\\_previous</code> | the mode before this one (Default, "
                "Accept Edits), named in the option when asked; not offered if another option "
                "leads there or there is none (a non-restorable mode is not remembered across a "
                "restart) | Plan, Bypass Permissions | refused |"
            )
        ]

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

        [note] = mermaid_notes(to_mermaid(build_diagram(spec)))

        first = ", ".join(f"M{i}" for i in range(12))
        back = ", ".join(f"M{i}" for i in range(1, 13))
        assert note.split("<br>")[1:] == [
            f"• One → M19#59; never {first} and 7 more",
            f"• Back → #36;previous, the mode before#58; {back} and 6 more#59; never M0, M19",
        ]


# -- with the real tools --------------------------------------------------------------------


class TestRealTools:
    """The real Mermaid parser and Graphviz read the notes as written."""

    def test_mermaid_parses_each_presets_note(self):
        names = preset_names()

        parsed = mermaid_parse([to_mermaid(build_diagram(preset(n))) for n in names])

        for name, result in zip(names, parsed, strict=True):
            assert (result["ok"], result["type"]) == (True, "stateDiagram"), result
            notes = [n["label"] for n in result["nodes"] if n["id"].startswith("c0----note")]
            assert notes == ["\n".join(NOTES[name])]

    def test_graphviz_draws_the_note_by_its_request(self):
        need_dot()
        dot = to_dot(build_diagram(preset("permission")))

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
        [note] = [o for o in graph["objects"] if o.get("class") == "reach"]
        drawn = [op["text"] for op in note["_ldraw_"] if op["op"] == "T"]
        assert (note["name"], drawn) == ("c0_note", PERMISSION_NOTE)
        ties = [
            (names[e["tail"]], names[e["head"]]) for e in graph["edges"] if e.get("class") == "note"
        ]
        assert ties == [("c0", "c0_note")]


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
