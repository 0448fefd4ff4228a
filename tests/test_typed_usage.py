"""The Python examples of the README and the documentation: imported only from modefsm, and
typed for ``mypy --strict``."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .doc_blocks import README, all_blocks, blocks

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "tests" / "typed_usage" / "readme_examples.py"


def readme_blocks() -> list[str]:
    return [block.text for block in all_blocks("python")]


def imported_from(code: str) -> list[tuple[str, str]]:
    """``(module, name)`` for every import in *code* (``name`` empty for ``import module``)."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.module or "", a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names]
    return found


def test_readme_examples_import_only_from_modefsm():
    examples = readme_blocks()
    assert len(examples) >= 2  # the agent and the restore examples
    allowed = {"modefsm", "acp.schema"}  # acp.schema: the wire models a prompt returns
    outside = [
        (module, name)
        for example in examples
        for module, name in imported_from(example)
        if not (module in allowed and name)  # from modefsm import ...
        and module.split(".")[0] not in sys.stdlib_module_names
    ]
    assert outside == []


def test_the_typed_file_holds_every_readme_import():
    used = set(imported_from(USAGE.read_text(encoding="utf-8")))
    readme = {pair for block in readme_blocks() for pair in imported_from(block)}
    assert readme - used == set()


def _mypy(path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    return subprocess.run(
        # as a user runs it: no project configuration, no pydantic plugin
        [mypy, "--strict", "--config-file", "", "--cache-dir", str(cache), str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=False,
    )


def test_readme_examples_pass_mypy_strict_as_user_code(tmp_path: Path):
    user = tmp_path / "user_code.py"
    user.write_text(USAGE.read_text(encoding="utf-8"), encoding="utf-8")
    result = _mypy(user, tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found in 1 source file")

    # the same check fails on a user's type mistake: modefsm's types reach user code
    wrong = user.read_text(encoding="utf-8") + (
        "\n\ndef wrong() -> int:\n    return ModeEngine(preset('seed')).new_session('s')\n"
    )
    user.write_text(wrong, encoding="utf-8")
    result = _mypy(user, tmp_path / "cache")
    assert result.returncode == 1
    assert "Incompatible return value type" in result.stdout, result.stdout


def test_the_readme_example_passes_mypy_strict_as_written(tmp_path: Path):
    [example] = [block.text for block in blocks(README, "python")]
    user = tmp_path / "my_agent.py"
    user.write_text(example, encoding="utf-8")
    result = _mypy(user, tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found in 1 source file")


def test_every_documented_example_passes_mypy_strict_as_written(tmp_path: Path):
    """A reader pastes a page's example into a file of their own and type-checks it."""
    examples = all_blocks("python")
    folder = tmp_path / "pasted"
    folder.mkdir()
    for number, block in enumerate(examples):
        (folder / f"example_{number}.py").write_text(block.text, encoding="utf-8")
    result = _mypy(folder, tmp_path / "cache")
    failed = re.sub(  # name the page's block: docs/embedding.md:61, line 10 of the block
        r"(?:pasted/)?example_(\d+)\.py:(\d+)",
        lambda m: f"{examples[int(m[1])].where}, line {m[2]} of the block",
        result.stdout,
    )
    assert result.returncode == 0, failed + result.stderr
    assert result.stdout.startswith(f"Success: no issues found in {len(examples)} source files")


MISTAKES = ROOT / "tests" / "typed_usage" / "host_mistakes.py"


def test_mypy_strict_rejects_a_misspelled_option_and_a_bare_hook(tmp_path: Path):
    lines = MISTAKES.read_text(encoding="utf-8").splitlines()
    expected = []
    for number, line in enumerate(lines, 1):
        code, marker, comment = line.partition("  # type: ignore[")
        if marker:
            lines[number - 1] = code
            expected.append((number, comment.rstrip("]")))
    assert [code for _, code in expected] == [
        "call-arg",
        "arg-type",
        "call-arg",
        "call-arg",
        "arg-type",
        "call-arg",
        "arg-type",
    ]
    user = tmp_path / "user_code.py"
    user.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = _mypy(user, tmp_path / "cache")
    found = re.findall(
        r"^user_code\.py:(\d+): error: .*\[([a-z-]+)\]$", result.stdout, re.MULTILINE
    )
    assert [(int(number), code) for number, code in found] == expected, result.stdout
    assert (
        result.stdout.splitlines()[-1]
        == f"Found {len(expected)} errors in 1 file (checked 1 source file)"
    )
    assert 'Unexpected keyword argument "after_chnage" for "ModeAgent"' in result.stdout
