"""What the diagram tests share: hard specs, a transition log, and the external tools.

A test that needs ``node`` with ``tests/diagram/js/node_modules`` (``npm ci`` in
``tests/diagram/js``), Graphviz's ``dot`` (Debian package ``graphviz``) or Chromium
(Debian package ``chromium``) is skipped with the reason where it is missing, unless the
environment variable
``MODEFSM_DIAGRAM_TOOLS`` is ``required`` (``.ci/run`` sets it): then it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog, preset
from tests.conftest import settle_now
from tests.replay.tools_support import Decider

if TYPE_CHECKING:
    from tests.diagram._browser import Browser

HARD_MODES: tuple[tuple[str, str], ...] = (
    ("plan-mode", "Plan-mode"),
    ('say "hi"', "Say \"hi\" 'there'"),
    ("#1", "#quot; not an entity #35;"),
    ("<b>x</b>", "<tag> & </tag> &amp;"),
    ("with space", "Two  words  "),
    ("multi\nline", "first line\nsecond line"),
    ("state", "state"),
    ("café-ünï", "Café ☕ 日本語 Ωmega"),
    ("a:b", "a:b"),
    ("%%c", "%% not a comment; [*] --> {x} | end note `tick` $$x$$ \\n \\N"),
    ("_it_", "*bold* _it_ **x** __init__ snake_case"),
)
"""``(id, name)`` of modes whose ids and names have every character diagram tools trip on."""

HARD_SWITCH_TITLE = 'Go "on" <now> #1; a:b'
HARD_OPTION_NAMES = ("Yes <b>&amp;</b> #quot;", "Back\nto before", "No; stay %% here")


def hard_spec() -> ModeSpec:
    """A valid spec using :data:`HARD_MODES`, with a group, a switch and a restore fallback.

    Every mode but ``#1`` may change to any other; ``#1`` may change only to ``<b>x</b>``.
    The switch from ``#1`` has an allow option to ``state``, a ``$previous`` option and a
    reject option. ``%%c`` is not restorable and falls back to ``say "hi"``.
    """
    modes: list[dict[str, object]] = [
        {"id": mode_id, "name": name, "description": f"about {name}"}
        for mode_id, name in HARD_MODES
    ]
    modes[9] |= {"restorable": False, "fallback": HARD_MODES[1][0]}
    return ModeSpec.from_data(
        {
            "name": 'hard "spec" <#1>',
            "initial": HARD_MODES[0][0],
            "modes": modes,
            "client_changes": {"#1": ["<b>x</b>"]},
            "switches": [
                {
                    "source": ["#1"],
                    "title": HARD_SWITCH_TITLE,
                    "options": [
                        {
                            "option_id": "x:y",
                            "name": HARD_OPTION_NAMES[0],
                            "kind": "allow_once",
                            "target": "state",
                        },
                        {
                            "option_id": "p",
                            "name": HARD_OPTION_NAMES[1],
                            "kind": "allow_always",
                            "target": "$previous",
                        },
                        {"option_id": "n", "name": HARD_OPTION_NAMES[2], "kind": "reject_once"},
                    ],
                }
            ],
        }
    )


def write_permission_log(path: Path) -> None:
    """Write a transition log of three ``permission`` sessions, with tool calls, to *path*.

    ``sess_a``: created; reads (allowed) and edits (asked, allowed once) in default; to
    plan (set_mode); an edit (denied) and a read there; keep planning (rejected option);
    exit plan to acceptEdits (approved switch); an edit (allowed) and a command (asked,
    rejected once) there; to bypassPermissions (set_config_option); a command (allowed);
    restored on load to default. ``sess_b``: created; to plan; a command (denied); back to
    default; two commands (asked: always allowed, then granted); to acceptEdits.
    ``sess_c``: created. The decisions are made as a host makes them
    (``tests/replay/tools_support.Decider``), so replay finds the log clean.
    """
    log = TransitionLog.to_file(path)
    engine = ModeEngine(preset("permission"), store=LogStore(log))
    tools = Decider(engine, log)
    for session_id in ("sess_a", "sess_b", "sess_c"):
        engine.new_session(session_id)
    tools.decide("sess_a", "read", "Read")
    tools.decide("sess_a", "edit", "Edit", "allow_once")
    engine.change("sess_a", "plan", "set_mode")
    tools.decide("sess_a", "edit", "Edit")
    tools.decide("sess_a", "read", "Read")
    engine.reject_switch("sess_a", "option_rejected", option_id="keep_planning", tool_call_id="t1")
    settle_now(engine, "sess_a", "exit_plan_accept_edits", tool_call_id="t2")
    tools.decide("sess_a", "edit", "Edit")
    tools.decide("sess_a", "execute", "Bash", "reject_once")
    engine.change("sess_a", "bypassPermissions", "set_config_option")
    tools.decide("sess_a", "execute", "Bash")
    engine.change("sess_b", "plan", "set_mode")
    tools.decide("sess_b", "execute", "Bash")
    engine.change("sess_b", "default", "set_mode")
    tools.decide("sess_b", "execute", "Bash", "allow_always")
    tools.decide("sess_b", "execute", "Bash")
    engine.change("sess_b", "acceptEdits", "set_mode")
    engine.close_session("sess_a")
    engine.restore_session("sess_a", "bypassPermissions", 4)
    log.close()


# -- external tools ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "diagram" / "js"
MERMAID_JS = JS / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
TIMEOUT = 180  # seconds, for one external program


def need(available: bool, reason: str) -> None:
    """Skip (or, where the tools are required, fail) unless *available*."""
    if available:
        return
    if os.environ.get("MODEFSM_DIAGRAM_TOOLS") == "required":
        pytest.fail(f"required tool missing: {reason}")
    pytest.skip(reason)


def need_node() -> None:
    need(shutil.which("node") is not None, "node is not installed")
    need(MERMAID_JS.exists(), "run `npm ci` in tests/diagram/js to install mermaid")


def need_dot() -> None:
    need(
        shutil.which("dot") is not None,
        "Graphviz's dot is not installed (apt-get install graphviz)",
    )


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    need(found is not None, "Chromium is not installed (apt-get install chromium)")
    assert found is not None
    return found


def run_chromium(url: str, profile: Path) -> str:
    """Open *url* in headless Chromium and return the DOM once scripts have run."""
    result = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            "--allow-file-access-from-files",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=30000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    return result.stdout


def mermaid_parse(texts: list[str]) -> Any:
    """What the real Mermaid parser (``js/parse-mermaid.mjs`` under Node) reads from each
    of *texts*; skips the test when Node or Mermaid is missing."""
    need_node()
    result = subprocess.run(
        ["node", str(JS / "parse-mermaid.mjs")],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    return json.loads(result.stdout)


# -- pictures in Chromium ------------------------------------------------------------------

PAGE = """<!doctype html><html><head><meta charset="utf-8">
<style>body {{ margin: 0; background: #ffffff; }}
#holder {{ display: inline-block; padding: 8px; }}</style>
</head><body><div id="holder"></div>
<script src="{mermaid}"></script>
<script>
mermaid.initialize({{startOnLoad: false}});
const holder = document.getElementById('holder');
const textOf = (g) => {{
  const label = g.querySelector('foreignObject div');
  return label ? label.innerText : g.textContent;
}};
// Draw a Mermaid text at its natural size: its size and the texts of its nodes and arrows.
async function drawMermaid(text) {{
  const {{svg}} = await mermaid.render('diagram', text);
  holder.innerHTML = svg;
  const drawn = holder.querySelector('svg');
  const box = drawn.viewBox.baseVal;
  drawn.style.maxWidth = 'none';
  drawn.setAttribute('width', box.width);
  drawn.setAttribute('height', box.height);
  const nodes = {{}};
  for (const g of holder.querySelectorAll('g.node')) {{
    const id = g.id.match(/-flowchart-(.+)-\\d+$/);
    if (id) nodes[id[1]] = textOf(g);
  }}
  const edges = [...holder.querySelectorAll('g.edgeLabel')].map(textOf);
  return {{size: size(), nodes, edges}};
}}
// Show a picture file (an SVG) at its natural size.
async function showImage(url) {{
  holder.innerHTML = '<img id="image">';
  const image = document.getElementById('image');
  image.src = url;
  await image.decode();
  return {{size: size()}};
}}
function size() {{
  const box = holder.getBoundingClientRect();
  return [Math.ceil(box.width), Math.ceil(box.height)];
}}
// Compare two PNGs (data URLs) as a person would: in blocks of BLOCK x BLOCK pixels, the
// mean of each colour channel; a block differs where one channel's means differ by more
// than THRESHOLD (0-255). See tests/diagram/test_screenshots.py.
async function compare(expected, actual, block, threshold) {{
  const load = async (url) => {{
    const image = new Image();
    image.src = url;
    await image.decode();
    const canvas = document.createElement('canvas');
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0);
    return context.getImageData(0, 0, canvas.width, canvas.height);
  }};
  const [a, b] = [await load(expected), await load(actual)];
  const width = Math.min(a.width, b.width), height = Math.min(a.height, b.height);
  const means = (data, x0, y0) => {{
    const sum = [0, 0, 0];
    let n = 0;
    for (let y = y0; y < Math.min(y0 + block, height); y++) {{
      for (let x = x0; x < Math.min(x0 + block, width); x++) {{
        const i = (y * data.width + x) * 4;
        for (let c = 0; c < 3; c++) sum[c] += data.data[i + c];
        n++;
      }}
    }}
    return sum.map((s) => s / n);
  }};
  const diff = document.createElement('canvas');
  diff.width = width;
  diff.height = height;
  const paint = diff.getContext('2d');
  paint.putImageData(b, 0, 0);
  paint.fillStyle = 'rgba(255, 0, 0, 0.5)';
  let blocks = 0, differing = 0, worst = 0;
  for (let y = 0; y < height; y += block) {{
    for (let x = 0; x < width; x += block) {{
      blocks++;
      const [ma, mb] = [means(a, x, y), means(b, x, y)];
      const distance = Math.max(...ma.map((m, c) => Math.abs(m - mb[c])));
      worst = Math.max(worst, distance);
      if (distance > threshold) {{
        differing++;
        paint.fillRect(x, y, block, block);
      }}
    }}
  }}
  return {{
    expected: [a.width, a.height], actual: [b.width, b.height], blocks, differing,
    worst: Math.round(worst), diff: diff.toDataURL('image/png'),
  }};
}}
</script></body></html>
"""
"""The page every picture is drawn on: Mermaid's own script, then the functions above."""


def picture_page(directory: Path) -> Path:
    """Write :data:`PAGE` into *directory* (after :func:`need_node`) and return its path."""
    need_node()
    page = directory / "pictures.html"
    page.write_text(PAGE.format(mermaid=MERMAID_JS.as_uri()), encoding="utf-8")
    return page


def draw_mermaid(browser: Browser, page: Path, text: str) -> Any:
    """Draw *text* with the real Mermaid on a fresh *page*: its size, node and arrow texts."""
    browser.open(page)
    return browser.evaluate(f"drawMermaid({json.dumps(text)})")
