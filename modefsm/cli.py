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

from modefsm.diagram import FORMATS, Format, render
from modefsm.errors import DiagramError, ModefsmError
from modefsm.spec import load_spec, preset, preset_names

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


# -- diagram -------------------------------------------------------------------------------

_SUFFIX_FORMATS: dict[str, Format] = {
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
    ".dot": "dot",
    ".gv": "dot",
    ".svg": "svg",
    ".png": "png",
    ".md": "md",
}


def _add_diagram(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "diagram",
        help="draw a mode spec as a state diagram",
        description="Draw a mode spec as a state diagram, optionally with what the sessions "
        "of a transition log did.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("spec", nargs="?", metavar="SPEC", help="a spec file (.toml or .json)")
    source.add_argument(
        "--preset", metavar="NAME", help=f"a shipped preset ({', '.join(preset_names())})"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="output format (default: from the suffix of -o FILE, else mermaid)",
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )
    parser.add_argument(
        "--log",
        metavar="FILE",
        action="append",
        default=[],
        help="a JSON-lines transition log: count the transitions taken (may be repeated)",
    )
    parser.add_argument(
        "--session", metavar="ID", help="highlight this session's steps and current mode"
    )
    parser.set_defaults(run=_run_diagram)


def _run_diagram(args: argparse.Namespace) -> int:
    spec = preset(args.preset) if args.preset is not None else load_spec(args.spec)
    fmt: Format = args.format or "mermaid"
    if args.format is None and args.output is not None:
        suffix = Path(args.output).suffix.lower()
        if suffix not in _SUFFIX_FORMATS:
            msg = f"cannot tell the format of {args.output!r} from its suffix; give --format"
            raise DiagramError(msg)
        fmt = _SUFFIX_FORMATS[suffix]
    if fmt == "png" and args.output is None:
        msg = "png output is binary: give -o FILE"
        raise DiagramError(msg)
    data = render(spec, fmt, logs=args.log, session_id=args.session)
    if args.output is None:
        out = getattr(sys.stdout, "buffer", None)
        if out is None:  # a text-only stream
            sys.stdout.write(data.decode("utf-8"))
        else:
            sys.stdout.flush()
            out.write(data)
            out.flush()
        return 0
    try:
        Path(args.output).write_bytes(data)
    except OSError as exc:
        msg = f"cannot write {args.output!r}: {exc.strerror or exc}"
        raise DiagramError(msg) from None
    return 0


_COMMANDS.append(_add_diagram)
