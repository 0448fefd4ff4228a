"""``modefsm demo`` lets each agent it started end on its own once its input ends."""

from __future__ import annotations

import sys
from pathlib import Path

from modefsm.cli._demo import DemoClient, _agent

SLOW_TO_EXIT = """
import sys, time
sys.stdin.buffer.read()  # the end of its input: the demo is done with this agent
time.sleep(3)  # an agent slow to end, as on a loaded machine
with open(sys.argv[1], "w") as done:
    done.write("ended on its own")
"""


async def test_the_demo_waits_for_an_agent_slow_to_exit(tmp_path: Path) -> None:
    done = tmp_path / "done"
    command = (sys.executable, "-c", SLOW_TO_EXIT, str(done))
    async with _agent(DemoClient(), command, []):
        pass
    # the SDK's default gives an agent 2 s, then terminates it (and, when the agent ends
    # just then, raises ProcessLookupError out of the demo: a traceback and exit 1)
    assert done.read_text() == "ended on its own"
