"""Two processes starting with the same new ``--token-file`` agree on one token.

The first process is slowed inside its write of the new token (``strace`` delays each
``write`` system call by 1.5 s); the second starts once the first has begun creating the
file. Neither may see an empty or half-written token file: both end with the same token,
exactly one of them made it, and nothing but the token file is left in the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

_READ = """
import sys
from pathlib import Path
from modefsm.errors import ModefsmError
from modefsm.protocol.transport._access import read_token_file
try:
    token, created = read_token_file(Path(sys.argv[1]))
except ModefsmError as exc:
    print("error:", exc, flush=True)
else:
    print(token, int(created), flush=True)
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")
def test_a_process_reading_a_token_file_being_written_waits_for_the_whole_token(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    path = folder / "token"
    slow = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=write",
         "-e", "inject=write:delay_enter=1500000", sys.executable, "-c", _READ, str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(folder.iterdir()):  # the slow process has begun making the file
        assert slow.poll() is None, slow.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    fast = subprocess.run(
        [sys.executable, "-c", _READ, str(path)],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    slow_out = slow.communicate(timeout=60)[0].strip()
    fast_out = fast.stdout.strip()
    token = path.read_text("ascii").strip()
    assert sorted([fast_out, slow_out]) == sorted([f"{token} 1", f"{token} 0"])
    assert [entry.name for entry in folder.iterdir()] == ["token"]
    assert (path.stat().st_mode & 0o777) == 0o600
