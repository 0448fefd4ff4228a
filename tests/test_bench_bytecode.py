"""The benchmarks' child processes write and reuse bytecode, whatever this environment says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import child_env


def test_children_cache_bytecode_even_when_the_environment_says_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = child_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    (tmp_path / "probe_module.py").write_text("VALUE = 7\n", encoding="utf-8")
    code = "import sys, probe_module; print(probe_module.VALUE, sys.dont_write_bytecode)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    assert done.stdout == "7 False\n"
    prefix = Path(env["PYTHONPYCACHEPREFIX"])
    cached = [p.name for p in prefix.rglob("probe_module.*.pyc")]
    assert cached == [f"probe_module.{sys.implementation.cache_tag}.pyc"]
