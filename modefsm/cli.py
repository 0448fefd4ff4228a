"""The ``modefsm`` command line: ``demo``, ``serve``, ``diagram``, ``replay``.

Each command has an ``_add_<command>`` function that declares its arguments and a
``_run_<command>`` function that runs it. A user mistake prints one line on stderr and
exits non-zero; anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from modefsm.errors import ModefsmError

__all__ = ["main"]

Runner = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default: ``sys.argv[1:]``) and return the exit status."""
    parser = argparse.ArgumentParser(
        prog="modefsm",
        description="ACP session modes as explicit, logged, replayable state machines.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(commands)
    args = parser.parse_args(argv)
    run: Runner = args.run
    try:
        return run(args)
    except ModefsmError as exc:
        print(f"modefsm {args.command}: {exc}", file=sys.stderr)
        return 2


_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = []
