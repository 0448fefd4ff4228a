"""The project's own hygiene: lint, types, public API, and the README's commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import modefsm

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


def test_ruff_check_passes():
    result = subprocess.run(
        [_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied():
    result = subprocess.run(
        [_tool("ruff"), "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_passes():
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_all_is_sorted_and_complete():
    assert modefsm.__all__ == sorted(modefsm.__all__, key=lambda n: (not n.isupper(), n))
    exported = set(modefsm.__all__)
    assert all(hasattr(modefsm, name) for name in exported)
    public = {n for n in dir(modefsm) if not n.startswith("_") and n[0].isupper()}
    assert public == {n for n in exported if n[0].isupper()}


def _readme_command(heading: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1]
    match = re.search(r"```sh\n(.+?)\n```", section, re.DOTALL)
    assert match, f"no sh block under {heading}"
    return match.group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_command("Run the tests")
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci_lines[-1] == command
