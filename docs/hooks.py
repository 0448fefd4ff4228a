"""Build hooks of the documentation site (``mkdocs.yml``: ``hooks``).

The site shows files that live elsewhere in the repository, read at build time so that
nothing is copied into ``docs/`` to drift: the committed diagrams of the presets
(``diagrams/*.svg``, made by ``modefsm.diagram.write_preset_diagrams`` and checked by
``tests/diagram/test_diagrams_folder.py``), the programs of ``examples/`` (run by
``tests/test_examples.py``) and the changelog (``CHANGELOG.md``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DIAGRAMS = ROOT / "diagrams"
CHANGELOG = ROOT / "CHANGELOG.md"
EXAMPLES = ROOT / "examples"


def on_files(files: Files, *, config: Any) -> Files:
    """Add the committed SVG diagrams (as ``diagrams/NAME.svg``) and the changelog page."""
    for svg in sorted(DIAGRAMS.glob("*.svg")):
        files.append(File.generated(config, f"diagrams/{svg.name}", abs_src_path=str(svg)))
    files.append(
        File.generated(config, "changelog.md", content=CHANGELOG.read_text(encoding="utf-8"))
    )
    files.append(File.generated(config, "examples.md", content=examples_page()))
    return files


def examples_page() -> str:
    """The Examples page: each program of ``examples/``, whole, after its docstring's summary."""
    intro = (
        "# Examples\n\nSmall programs, each run by the test suite (`tests/test_examples.py`)"
        " with the\noutput it checks. Run one from a checkout with"
        " `.venv/bin/python examples/NAME.py` and the\narguments its docstring names"
        " (`LOG`: the transition log file to write or read).\n"
    )
    parts = [intro]
    for program in sorted(EXAMPLES.glob("*.py")):
        source = program.read_text(encoding="utf-8")
        summary = ast.get_docstring(ast.parse(source)) or ""
        parts.append(
            f"\n## `{program.name}`\n\n{summary.split(chr(10) * 2)[0]}\n\n```python\n{source}```\n"
        )
    return "".join(parts)
