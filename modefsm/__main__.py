"""``python -m modefsm`` and the ``modefsm`` command: the command line, Ctrl-C included.

Ctrl-C (SIGINT) at any moment after the interpreter has started, imports included, ends
the command with one line on stderr (``modefsm: interrupted``) and exit status 130. It
ends the process at once, as a crash would: every record is written by one ``write``
before its change takes effect, so nothing acknowledged is lost (docs/durability.md).
A process started with SIGINT ignored keeps ignoring it (``modefsm demo`` starts its
agents so: they end at the end of their input, when the demo exits).
"""

# Only modules loaded with the interpreter (os, sys) and built into it (_signal): until
# run() has set the handler, Ctrl-C would end this module with a traceback.
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from types import FrameType
else:
    import _signal  # signal's own core; the signal module would import enum

_LINE = b"modefsm: interrupted\n"


def _interrupted(signum: int, frame: "FrameType | None") -> None:
    """End the process: one line on stderr (if it has room now), exit status 130."""
    del signum, frame
    try:
        import select  # noqa: PLC0415 - only when interrupted: see the imports above

        poller = select.poll()
        poller.register(2, select.POLLOUT)
        if poller.poll(0):
            os.write(2, _LINE)
    except OSError:
        pass
    os._exit(130)


def run() -> None:
    """Run the command line with ``sys.argv`` and exit with its status."""
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _interrupted)
    from modefsm.cli import main  # noqa: PLC0415 - after the handler: imports take a while

    status = main()
    # Everything the command opened is closed by now: end without the interpreter's
    # teardown of every module and object (most of a second on a busy machine, the last
    # part of `serve --http`'s stop), once what is buffered is written.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream: the teardown reports nothing more
        sys.exit(status)
    os._exit(status)


if __name__ == "__main__":
    run()
