"""Screenshots of the diagrams, taken in Chromium and compared with committed PNGs.

Each picture a reader sees is drawn in headless Chromium at one CSS pixel per image pixel
and compared with its PNG in ``tests/diagram/screenshots/``: the Mermaid text rendered by
the real Mermaid (``tests/diagram/js``), and the SVG drawn by Graphviz shown as an image.
The presets are taken from the committed ``diagrams/`` folder (what GitHub shows); the
permission preset with a log is drawn here.

The comparison is the one a person makes: both images are cut into blocks of
:data:`BLOCK` x :data:`BLOCK` pixels and each block's mean red, green and blue are compared.
A block differs where one channel's means differ by more than :data:`THRESHOLD` (of 255).
Antialiasing and sub-pixel placement of text and lines move single pixels, which a
block's mean barely feels (a whole picture shifted by one pixel differs by at most 27); a
moved node, a relabelled arrow or a recoloured reject arrow changes whole blocks. The
pictures must have the same size within :data:`SIZE_SLACK` pixels (a text measured one
pixel taller) and no block may differ. On a failure the new screenshot and a copy marking
the differing blocks in red are written next to the test's temporary files.

The PNGs depend on the Chromium that drew them (its fonts and rasteriser) and, for the
SVGs drawn here, on Graphviz: ``screenshots/drawn-by.json`` names both, and the
comparison is skipped where this machine has other versions. To regenerate the PNGs
after changing the diagrams (and look at every one of them before committing)::

    MODEFSM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/diagram/test_screenshots.py
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modefsm import preset, preset_names
from modefsm.diagram import build_diagram, read_traffic, to_mermaid, to_svg
from tests.diagram._diagram_support import ROOT, need_dot, write_permission_log

if TYPE_CHECKING:
    from tests.diagram._browser import Browser

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
DRAWN_BY = SCREENSHOTS / "drawn-by.json"
DIAGRAMS = ROOT / "diagrams"
REGENERATE = os.environ.get("MODEFSM_REGEN_GOLDEN") == "1"

BLOCK = 8
"""The side of a compared block, in pixels."""
THRESHOLD = 40
"""How far (0-255) a block's mean red, green or blue may move before the block differs."""
SIZE_SLACK = 2
"""How many pixels the width or height may differ."""

PICTURES = [f"{name}.{kind}" for name in preset_names() for kind in ("mermaid", "svg")]
PICTURES += ["permission-log.mermaid", "permission-log.svg"]


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def screenshot_mermaid(browser: Browser, page: Path, text: str, css: str = "") -> bytes:
    """Draw Mermaid *text* on a fresh *page* (the holder styled with *css*) and shoot it."""
    browser.open(page)
    if css:
        browser.evaluate(f"holder.style.cssText += {json.dumps(css)}")
    width, height = browser.evaluate(f"drawMermaid({json.dumps(text)})")["size"]
    return browser.screenshot(width, height)


def screenshot_svg(browser: Browser, page: Path, svg: Path) -> bytes:
    """Show the SVG file *svg* as an image on a fresh *page* and shoot it."""
    browser.open(page)
    width, height = browser.evaluate(f"showImage({json.dumps(svg.as_uri())})")["size"]
    return browser.screenshot(width, height)


def compare(browser: Browser, expected: bytes, actual: bytes) -> Any:
    """The page's block comparison of two PNGs (see the module docstring)."""
    return browser.evaluate(
        f"compare({json.dumps(data_url(expected))}, {json.dumps(data_url(actual))}, "
        f"{BLOCK}, {THRESHOLD})"
    )


def alike(result: Any) -> bool:
    """Whether a :func:`compare` result passes: sizes within the slack, no block differing."""
    sizes = zip(result["expected"], result["actual"], strict=True)
    return all(abs(a - b) <= SIZE_SLACK for a, b in sizes) and result["differing"] == 0


def graphviz_version() -> str:
    need_dot()
    result = subprocess.run(["dot", "-V"], capture_output=True, text=True, check=True, timeout=60)
    found = re.search(r"graphviz version (\S+)", result.stderr + result.stdout)
    assert found is not None, result.stderr
    return found.group(1)


def drawn_by() -> dict[str, str]:
    return dict(json.loads(DRAWN_BY.read_text(encoding="utf-8")))


def take(browser: Browser, page: Path, picture: str, tmp_path: Path) -> bytes:
    """The screenshot of *picture* (``NAME.mermaid`` or ``NAME.svg``)."""
    name, _, kind = picture.partition(".")
    if name != "permission-log":
        if kind == "mermaid":
            text = (DIAGRAMS / f"{name}.mmd").read_text(encoding="utf-8")
            return screenshot_mermaid(browser, page, text)
        return screenshot_svg(browser, page, DIAGRAMS / f"{name}.svg")
    log = tmp_path / "modes.jsonl"
    write_permission_log(log)
    spec = preset("permission")
    diagram = build_diagram(spec, read_traffic(spec, [log], session_id="sess_a"))
    if kind == "mermaid":
        return screenshot_mermaid(browser, page, to_mermaid(diagram))
    svg = tmp_path / "permission-log.svg"
    svg.write_text(to_svg(diagram), encoding="utf-8")
    return screenshot_svg(browser, page, svg)


@pytest.mark.parametrize("picture", PICTURES)
def test_picture_looks_as_committed(picture, browser: Browser, page: Path, tmp_path: Path):
    golden = SCREENSHOTS / f"{picture}.png"
    versions = {"chromium": browser.version(), "graphviz": graphviz_version()}
    if REGENERATE:
        SCREENSHOTS.mkdir(exist_ok=True)
        golden.write_bytes(take(browser, page, picture, tmp_path))
        DRAWN_BY.write_text(json.dumps(versions, indent=2) + "\n", encoding="utf-8")
        return
    if drawn_by() != versions:
        pytest.skip(f"the screenshots were drawn by {drawn_by()}; this machine has {versions}")

    actual = take(browser, page, picture, tmp_path)

    result = compare(browser, golden.read_bytes(), actual)
    if not alike(result):
        (tmp_path / f"{picture}.png").write_bytes(actual)
        (tmp_path / f"{picture}.diff.png").write_bytes(
            base64.b64decode(result["diff"].partition(",")[2])
        )
    assert alike(result), (
        f"{picture}: {result['expected']} committed, {result['actual']} now, "
        f"{result['differing']} of {result['blocks']} blocks differ (worst {result['worst']}); "
        f"see {tmp_path}; if the change is meant, regenerate with MODEFSM_REGEN_GOLDEN=1"
    )


@pytest.fixture
def permission() -> str:
    """The committed Mermaid text of the permission preset."""
    return (DIAGRAMS / "permission.mmd").read_text(encoding="utf-8")


class TestComparison:
    """The comparison passes what antialiasing does and fails what a reader would notice."""

    def test_same_text_drawn_twice_is_alike(self, browser: Browser, page: Path, permission):
        first = screenshot_mermaid(browser, page, permission)

        result = compare(browser, first, screenshot_mermaid(browser, page, permission))

        assert (alike(result), result["differing"], result["worst"]) == (True, 0, 0)

    @pytest.mark.parametrize(
        "css",
        [
            "transform: translate(1px, 0)",
            "transform: translate(0.5px, 0.5px)",
            "text-rendering: geometricPrecision",
        ],
    )
    def test_rendering_noise_is_tolerated(self, browser: Browser, page: Path, permission, css):
        first = screenshot_mermaid(browser, page, permission)

        result = compare(browser, first, screenshot_mermaid(browser, page, permission, css))

        assert (alike(result), result["differing"]) == (True, 0)
        assert 0 < result["worst"] <= THRESHOLD

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            ("No, keep planning", "No, keep planning now"),
            (
                "linkStyle 10 stroke:#b42318,color:#b42318",
                "linkStyle 10 stroke:#7a3fb0,color:#7a3fb0",
            ),
        ],
        ids=["relabelled-arrow", "recoloured-reject-arrow"],
    )
    def test_a_changed_picture_is_caught(self, browser: Browser, page: Path, permission, old, new):
        assert old in permission
        first = screenshot_mermaid(browser, page, permission)

        result = compare(
            browser, first, screenshot_mermaid(browser, page, permission.replace(old, new))
        )

        assert (alike(result), result["differing"] > 0) == (False, True)
