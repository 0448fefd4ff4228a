"""``python -m modefsm`` and the ``modefsm`` command: the command line, Ctrl-C included.

Ctrl-C (SIGINT) at any moment after the interpreter has started, imports included, ends
the command with one line on stderr (``modefsm: interrupted``) and exit status 130. It
ends the process at once, as a crash would: every record is written by one ``write``
before its change takes effect, so nothing acknowledged is lost (README, Durability).
A process started with SIGINT ignored keeps ignoring it (``modefsm demo`` starts its
agents so: they end at the end of their input, when the demo exits).
"""

import os
import select
import signal
import sys
from types import FrameType

_LINE = b"modefsm: interrupted\n"


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """End the process: one line on stderr (if it has room now), exit status 130."""
    del signum, frame
    try:
        poller = select.poll()
        poller.register(2, select.POLLOUT)
        if poller.poll(0):
            os.write(2, _LINE)
    except OSError:
        pass
    os._exit(130)


def run() -> None:
    """Run the command line with ``sys.argv`` and exit with its status."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    from modefsm.cli import main  # noqa: PLC0415 - after the handler: imports take a while

    sys.exit(main())


if __name__ == "__main__":
    run()
