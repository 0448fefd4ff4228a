"""The fenced code blocks of the README and of the documentation pages (``docs/``).

One reader for every test that runs or checks what the documentation shows: the README's
embedding example (``tests/test_readme.py``), the typed Python examples
(``tests/test_typed_usage.py``), the shell blocks (``tests/test_docs.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(
    r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<text>.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE
)


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line of its opening fence, its language and text."""

    page: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The README and every page of the documentation site, in a fixed order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path, *langs: str) -> list[Block]:
    """The fenced blocks of *page* in the languages *langs* (every block if none is given)."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, match.start()) + 1, match["lang"], match["text"])
        for match in _FENCE.finditer(text)
        if not langs or match["lang"] in langs
    ]


def all_blocks(*langs: str) -> list[Block]:
    """The blocks in *langs* of the README and every documentation page."""
    return [block for page in pages() for block in blocks(page, *langs)]
