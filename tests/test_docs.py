"""The documentation site: built with every warning an error, its links and the README's
checked offline, and every shell block of the README and the pages run."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from .doc_blocks import README, ROOT, Block, blocks, pages

BIN = Path(sys.executable).parent
"""The running suite's environment: the ``.venv/bin`` of the commands the pages show."""

DOCS_URL = "https://modefsm.readthedocs.io/en/latest/"
"""Where the site is published (``site_url`` in ``mkdocs.yml``); the README links there,
so that its links also work on PyPI."""


# -- The build ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built by ``mkdocs build --strict`` (warnings are errors), offline."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = shutil.which("mkdocs", path=str(BIN))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed (pip install -e '.[test]' installs it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def test_site_has_every_page_and_the_committed_diagrams(site: Path):
    nav = nav_pages(ROOT / "mkdocs.yml")
    for page in nav:
        built = site / (page.removesuffix(".md").removesuffix("index") + "/index.html")
        if page == "index.md":
            built = site / "index.html"
        assert built.is_file(), page
    for svg in sorted((ROOT / "diagrams").glob("*.svg")):
        assert (site / "diagrams" / svg.name).read_bytes() == svg.read_bytes()
    changelog = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    first_entry = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").split("\n## ", 2)[1]
    assert html_id(first_entry.splitlines()[0]) in ids_of(changelog)


def nav_pages(config: Path) -> list[str]:
    """The pages named in ``mkdocs.yml``'s ``nav`` (its ``.md`` values)."""
    return re.findall(r":\s+(\S+\.md)\s*$", config.read_text(encoding="utf-8"), re.MULTILINE)


def html_id(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` (and GitHub, for these headings) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"[ ]+", "-", text)


# -- Links ----------------------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if found.get("name") and tag == "a":
            self.ids.add(str(found["name"]))
        for key in ("href", "src"):
            value = found.get(key)
            if value and tag in {"a", "img", "link", "script"}:
                self.links.append(value)


def ids_of(html: str) -> set[str]:
    page = _Page()
    page.feed(html)
    return page.ids


def external_link_problem(url: str) -> str | None:
    """Why *url* is not a well-formed absolute link, or ``None`` (no request is made)."""
    parts = urlsplit(url)
    if parts.scheme == "mailto":
        return None if "@" in parts.path else "mailto without an address"
    if parts.scheme not in {"http", "https"}:
        return f"scheme {parts.scheme!r}"
    if not parts.netloc or " " in url or not re.fullmatch(r"[\w.-]+(:\d+)?", parts.netloc):
        return "no valid host"
    return None


def broken_links(site: Path) -> list[str]:
    """Every link of the built *site* that names a missing file or anchor, or a malformed URL."""
    parsed: dict[Path, _Page] = {}
    for html in site.rglob("*.html"):
        page = _Page()
        page.feed(html.read_text(encoding="utf-8"))
        parsed[html] = page
    problems = []
    for html, page in sorted(parsed.items()):
        where = html.relative_to(site)
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                problem = external_link_problem(link)
                if problem:
                    problems.append(f"{where}: {link}: {problem}")
                continue
            path = unquote(parts.path)
            if path.startswith("/"):  # absolute on the published site (404.html)
                target = site / path.removeprefix(urlsplit(DOCS_URL).path)
            else:
                target = (html.parent / path).resolve() if path else html
            if target.is_dir():
                target /= "index.html"
            if not target.is_file():
                problems.append(f"{where}: {link}: no such file")
            elif parts.fragment and parts.fragment not in parsed.get(target, _Page()).ids:
                problems.append(f"{where}: {link}: no such anchor")
    return problems


def test_every_link_of_the_site_resolves(site: Path):
    assert broken_links(site) == []


def test_the_link_check_finds_broken_links(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "index.html").write_text(
        '<h1 id="top">x</h1><a href="a/">ok</a><a href="#top">ok</a><a href="a/#nope">x</a>'
        '<a href="b/">x</a><a href="https://example.org/x">ok</a><a href="htps:/x">x</a>',
        encoding="utf-8",
    )
    (tmp_path / "a" / "index.html").write_text('<a href="../#top">ok</a>', encoding="utf-8")
    assert broken_links(tmp_path) == [
        "index.html: a/#nope: no such anchor",
        "index.html: b/: no such file",
        "index.html: htps:/x: scheme 'htps'",
    ]


_MD_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def markdown_headings(path: Path) -> set[str]:
    """The anchors of *path*'s headings (outside code blocks)."""
    text = path.read_text(encoding="utf-8")
    for block in blocks(path):
        text = text.replace(block.text, "")
    return {html_id(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def readme_link_problems(site: Path) -> list[str]:
    """README links: files of the repository, its own headings, or pages of the site."""
    text = README.read_text(encoding="utf-8")
    for block in blocks(README):
        text = text.replace(block.text, "")
    problems = []
    for match in _MD_LINK.finditer(text):
        link = match[1] or match[2]
        parts = urlsplit(link)
        if link.startswith(DOCS_URL):
            page = site / unquote(parts.path.removeprefix(urlsplit(DOCS_URL).path))
            page = page / "index.html" if page.is_dir() or not page.suffix else page
            if not page.is_file():
                problems.append(f"{link}: no such page of the site")
            elif parts.fragment and parts.fragment not in ids_of(page.read_text("utf-8")):
                problems.append(f"{link}: no such anchor")
        elif parts.scheme:
            problem = external_link_problem(link)
            if problem:
                problems.append(f"{link}: {problem}")
        else:
            problems.append(f"{link}: relative (PyPI shows the README without the repository)")
    return problems


def test_readme_links_resolve_and_work_on_pypi(site: Path):
    assert readme_link_problems(site) == []
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert f"site_url: {DOCS_URL}\n" in config
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    assert urls["Documentation"] == DOCS_URL


# -- The README -----------------------------------------------------------------------------

DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[acp]' && .venv/bin/modefsm demo"
)
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
)


def test_readme_is_short_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") < 250
    shell = [block.text.strip() for block in blocks(README, "sh")]
    assert DEMO_COMMAND in shell
    assert TEST_COMMAND in shell


# -- Shell blocks ---------------------------------------------------------------------------

NOT_RUN = {
    TEST_COMMAND: "the suite itself: CI runs exactly this (tests/test_project.py)",
    "sudo apt-get install -y postgresql && .venv/bin/python -m pytest tests/store": (
        "part of the suite: tests/store runs in it, against a real server"
    ),
    "python3 -m venv .venv && .venv/bin/pip install -e '.[bench]' && .venv/bin/python -m "
    "benchmarks": "six minutes: tests/test_benchmarks.py runs every benchmark at a tiny size",
    "modefsm serve --http 127.0.0.1:8000 --log modes.jsonl 2> serve.err &": (
        "tests/protocol/test_http_by_hand.py runs it (on a free port) and checks what it prints"
    ),
    "MODEFSM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/diagram/test_screenshots.py": (
        "rewrites the committed screenshots, after a person has looked at them; the suite "
        "compares them (tests/diagram/test_screenshots.py)"
    ),
}
"""Shell blocks not run here (by their first line), each with what runs it instead."""

_INSTALL = re.compile(
    r"^python3 -m venv \.venv && \.venv/bin/pip install -e '?\.(?:\[(?P<extras>[\w,]+)\])?'? && "
)
PG_EXAMPLE = "postgresql://modes@db.internal/modes"


def installed_extras() -> set[str]:
    """The extras the suite's own install (``.[test]``) brings."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    brought = {"test"}
    for requirement in extras["test"]:
        match = re.match(r"modefsm\[([\w,]+)\]", requirement)
        if match:
            brought |= set(match[1].split(","))
    return brought


def runnable(block: Block, postgres: str | None) -> str:
    """*block* as this suite runs it: the install step is the suite's own (it must bring the
    extras the block names), ``.venv/bin`` is the suite's, a PostgreSQL URL the test server's."""
    text = block.text
    install = _INSTALL.match(text)
    if install:
        wanted = set((install["extras"] or "").split(",")) - {""}
        assert wanted <= installed_extras(), f"{block.where}: extras {wanted}"
        text = text[install.end() :]
    text = text.replace(".venv/bin/", f"{BIN}/")
    if PG_EXAMPLE in text:
        assert postgres, f"{block.where}: needs a PostgreSQL server"
        text = text.replace(PG_EXAMPLE, postgres)
    return text


def shell_pages() -> list[Path]:
    """The pages with a shell block to run."""
    return [
        page
        for page in pages()
        if any(first_line(block) not in NOT_RUN for block in blocks(page, "sh"))
    ]


def first_line(block: Block) -> str:
    return block.text.strip().splitlines()[0]


def test_not_run_blocks_exist():
    shown = {first_line(block) for page in pages() for block in blocks(page, "sh")}
    assert set(NOT_RUN) <= shown


def _drain(stream: object, into: list[bytes]) -> None:
    into.append(stream.read())  # type: ignore[attr-defined]


@pytest.fixture
def pg_for_page(request: pytest.FixtureRequest) -> Iterator[str | None]:
    page: Path = request.param
    if any(PG_EXAMPLE in block.text for block in blocks(page, "sh")):
        yield request.getfixturevalue("postgres_url")
    else:
        yield None


@pytest.mark.e2e
@pytest.mark.parametrize(
    "pg_for_page",
    shell_pages(),
    ids=[str(page.relative_to(ROOT)) for page in shell_pages()],
    indirect=True,
)
def test_shell_blocks_of_a_page_run_in_order(pg_for_page: str | None, request, tmp_path: Path):
    """A page's blocks run one after the other in one shell, as a reader types them in one
    terminal (in an empty directory); each must exit 0."""
    page: Path = request.node.callspec.params["pg_for_page"]
    parts = ["set -euo pipefail"]
    ran = []
    for block in blocks(page, "sh"):
        if first_line(block) in NOT_RUN:
            continue
        ran.append(block.where)
        parts += [f"echo '--- {block.where}' >&2", runnable(block, pg_for_page)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    process = subprocess.Popen(
        ["bash", "-c", "\n".join(parts)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=_drain, args=(process.stdout, out)),
        threading.Thread(target=_drain, args=(process.stderr, err)),
    ]
    for reader in readers:
        reader.start()
    with process:
        try:
            status = process.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):  # what a block left running
                os.killpg(process.pid, signal.SIGKILL)
            for reader in readers:
                reader.join(timeout=30)
    stderr = b"".join(err).decode(errors="replace")
    assert status == 0, f"{ran}\n{stderr[-4000:]}\n{b''.join(out).decode(errors='replace')[-2000:]}"


# -- Python examples ------------------------------------------------------------------------


def python_examples() -> list[Block]:
    """The pages' Python blocks that ``tests/test_readme.py`` does not run as agents."""
    return [
        block
        for page in pages()
        if page != README
        for block in blocks(page, "python")
        if "(ModeAgent):" not in block.text
    ]


@pytest.mark.e2e
@pytest.mark.parametrize("block", python_examples(), ids=lambda block: block.where)
def test_python_examples_run(block: Block, tmp_path: Path):
    """Each runs as a script in an empty directory and exits 0; one that serves HTTP (on a
    free port instead of the page's 8000) says where it listens, then stops on SIGINT."""
    serves = "serve_http(" in block.text
    code = block.text.replace('"127.0.0.1", 8000,', '"127.0.0.1", 0,') if serves else block.text
    with subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            if serves:
                assert process.stdout is not None
                ready = process.stdout.readline()
                assert re.fullmatch(r"http://127\.0\.0\.1:\d+/acp\n", ready), ready
                process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 0, f"{block.where}\n{err}\n{out}"
