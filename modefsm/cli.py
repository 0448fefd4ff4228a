"""The ``modefsm`` command line: ``demo``, ``serve``, ``diagram``, ``replay``.

Each command has an ``_add_<command>`` function that declares its arguments and a
``_run_<command>`` function that runs it. A user mistake prints one line on stderr and
exits non-zero; anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from modefsm.errors import ModefsmError
from modefsm.spec import ModeSpec, load_spec, preset, preset_names

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
        print(f"modefsm {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2


def _one_line(message: str) -> str:
    r"""*message* with control characters escaped, so that it stays one line.

    A spec's keys and mode ids come from the user; one with a newline must not split the
    error line.

    >>> _one_line('initial: mode "a\nb" is not in modes (a)')
    'initial: mode "a\\nb" is not in modes (a)'
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = []


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run a stdio ACP agent hosting a spec",
        description="Serve a spec as an ACP agent over stdio. stdout carries only ACP "
        "messages; the transition log goes to --log (JSON lines) or stderr.",
    )
    _add_spec_arguments(parser)
    parser.add_argument(
        "--log", type=Path, help="the JSON-lines transition log (read back on load)"
    )
    parser.add_argument("--fsync", action="store_true", help="sync each record to disk")
    parser.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from modefsm.serve import serve  # noqa: PLC0415 - keep `modefsm --help` fast

    return serve(_spec_from(args), args.log, fsync=args.fsync)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the ACP Session Modes story against `modefsm serve`",
        description="Spawn `modefsm serve` and drive it with the official ACP client "
        "through the Session Modes story, printing every JSON-RPC frame.",
    )
    parser.add_argument("--log", type=Path, help="the transition log (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON-RPC frames")
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from modefsm.demo import run_demo  # noqa: PLC0415

    return run_demo(args.log, raw=args.json)


def _add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--spec", type=Path, help="a spec file (.toml or .json)")
    group.add_argument("--preset", help=f"a shipped spec: {', '.join(preset_names())}")


def _spec_from(args: argparse.Namespace) -> ModeSpec:
    if args.spec is not None:
        return load_spec(args.spec)
    return preset(args.preset or "seed")


_COMMANDS += [_add_demo, _add_serve]
