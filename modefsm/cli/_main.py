"""The ``modefsm`` command line: ``demo``, ``serve``, ``diagram``, ``replay``, ``store``.

Each command has an ``_add_<command>`` function that declares its arguments and a
``_run_<command>`` function that runs it. A user mistake prints one line on stderr and
exits non-zero; anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from modefsm.diagram import FORMATS, Format
from modefsm.errors import DiagramError, LogError, ModefsmError
from modefsm.spec import preset_names

if TYPE_CHECKING:
    from modefsm.spec import ModeSpec

__all__ = ["main"]

Runner = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default: ``sys.argv[1:]``) and return the exit status."""
    parser = argparse.ArgumentParser(
        prog="modefsm",
        description="ACP session modes as explicit, logged, replayable state machines.",
        epilog="Exit status: 0 success; 2 a usage or input error (one line on stderr); "
        "demo: 1 a step did not behave as ACP says; serve: 1 its output closed; "
        "replay: 1 violations, 3 spec mismatch (see modefsm replay --help).",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show program's version number and exit"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(commands)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage line, not the top level's
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    run: Runner = args.run
    if hasattr(signal, "SIGXFSZ"):  # past the file size limit a write fails (EFBIG), not us
        with contextlib.suppress(ValueError):  # not the main thread: cannot set handlers
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return run(args)
    except ModefsmError as exc:
        print(f"modefsm {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`modefsm replay LOG | head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout
        return 0


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def _version() -> str:
    import importlib.metadata  # noqa: PLC0415 - only for --version

    try:
        return importlib.metadata.version("modefsm")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "(not installed)"


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
        help="run an ACP agent hosting a spec (stdio, or HTTP and WebSocket)",
        description="Serve a spec (default: --preset seed) as an ACP agent. Its prompt "
        "turn is a fixed script: a prompt whose every line is a tool line (read PATH, edit "
        "PATH, delete PATH, move PATH, search TEXT, run COMMAND, fetch URL, think TEXT; at "
        "most 32) acts those tool calls out, each decided by the session's mode (asked "
        "with session/request_permission where the mode says ask; the tools only "
        "pretend); otherwise, in a mode with a switch it proposes the switch, else it "
        "answers with the current mode. Transports: stdio (the default; stdout carries "
        "only ACP messages), or with --http HOST:PORT the SDK's streamable HTTP and "
        "WebSocket on the same endpoint, http://HOST:PORT/acp and ws://HOST:PORT/acp "
        "(needs the http extra; all connections share one engine, log and store, so a "
        "session made on one connection can be loaded or resumed and changed on another, "
        "and its updates reach every connection holding it; bodies, connections, sockets "
        "and idle time are bounded; every request needs the bearer token, written at start "
        "to a new 0600 file whose path is printed with the listening line, or read from "
        "--token-file; Host and Origin are checked). The transition log "
        "goes to --log (JSON lines, with a restore index and a conversation journal "
        "beside it, so session/load after a restart restores the mode and replays the "
        "conversation) or to stderr (no restore, the conversation kept in memory). "
        "Protocol versions (every transport): each connection's initialize.protocolVersion "
        "chooses. ACP v1 "
        "(protocolVersion 1): modes, session/set_mode and the mode config option, "
        "session/load and session/resume. ACP v2 (Preview, protocolVersion 2 or more): the "
        'mode is only the config option with category "mode" (session/set_config_option '
        'with type "id"), switches report state_update, session/resume restores. '
        "protocolVersion 0 is answered -32022. Both versions share the log: a session made "
        "over one can be resumed over the other, in the same mode. Serve and demo need "
        "the ACP SDK (pip install 'modefsm[acp]'); ACP v2 and --http need SDK 1.0 (on "
        "SDK 0.12 both serves v1 only).",
    )
    _add_spec_arguments(parser)
    parser.add_argument(
        "--protocol",
        choices=("1", "2", "both"),
        default="both",
        help="the ACP versions served (default: both; 1 serves a v2 client as v1; "
        "2 answers a v1 initialize with -32022)",
    )
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="the JSON-lines transition log (read back on load); with a postgresql:// "
        "--store, this worker's own file of its records (default: stderr)",
    )
    parser.add_argument(
        "--store",
        metavar="TARGET",
        help="the shared session store: a log file path (the same as --log; give one) "
        "or a postgresql:// URL",
    )
    parser.add_argument("--fsync", action="store_true", help="sync each record to disk")
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=_address,
        help="serve streamable HTTP and WebSocket at http://HOST:PORT/acp instead of stdio "
        "(PORT 0 picks a free port; the URL is printed on stderr once it listens)",
    )
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="with --http: the bearer token clients must send, read from FILE (0600; "
        "a missing FILE is created with a new token and kept); default: a new token in a "
        "new 0600 file, removed at exit",
    )
    auth.add_argument(
        "--no-auth",
        action="store_true",
        help="with --http on a loopback address only: no token (any local user, process "
        "or allowed web page can then drive the agent)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        type=_origin,
        metavar="ORIGIN",
        help="with --http: also accept requests from this browser origin, exactly "
        "scheme://host[:port] (repeatable; loopback origins are always accepted)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        type=_host,
        metavar="HOST",
        help="with --http: also answer requests for this Host, HOST or HOST:PORT (repeatable; "
        "e.g. the name a reverse proxy forwards; loopback names and the bound address are "
        "always answered)",
    )
    parser.set_defaults(run=_run_serve)


def _origin(text: str) -> str:
    from modefsm.protocol.transport import normal_origin  # noqa: PLC0415 - no SDK import

    try:
        return normal_origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _host(text: str) -> str:
    from modefsm.protocol.transport import normal_host  # noqa: PLC0415 - no SDK import

    try:
        return normal_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``."""
    host, colon, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or int(port) > 65535:  # noqa: PLR2004
        msg = f"not HOST:PORT (e.g. 127.0.0.1:8000): {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return host, int(port)


def _run_serve(args: argparse.Namespace) -> int:
    if args.fsync and args.log is None and args.store is None:
        msg = "--fsync needs --log FILE (the log on stderr is not synced)"
        raise ModefsmError(msg)
    if args.store is not None:
        postgres = args.store.startswith(("postgresql://", "postgres://"))
        if "://" in args.store and not postgres:
            raise ModefsmError(f"--store: not a postgresql:// URL: {args.store!r}")
        if args.log is not None and not postgres:
            raise ModefsmError("--store and --log name the same thing for a file store: give one")
    _check_sdk(args)
    http_only = {
        "--token-file": args.token_file is not None,
        "--no-auth": args.no_auth,
        "--allow-origin": bool(args.allow_origin),
        "--allow-host": bool(args.allow_host),
    }
    if args.http is None and any(http_only.values()):
        flag = next(name for name, given in http_only.items() if given)
        raise ModefsmError(f"{flag} needs --http HOST:PORT")
    # Start-up builds objects that live as long as the process (the SDK's schema, modefsm's
    # modules, the spec): the collector is off while they are built, then they are frozen
    # (gc.freeze), so that no collection walks them, at start-up or later while serving.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from modefsm.cli._serve import HttpAccess, serve  # noqa: PLC0415 - keep --help fast
        from modefsm.protocol import SUPPORTED_PROTOCOLS, require_v2  # noqa: PLC0415

        if args.protocol == "2":
            require_v2("ACP v2 (--protocol 2)")
        protocols = {"1": (1,), "2": (2,), "both": SUPPORTED_PROTOCOLS}[args.protocol]
        spec = _spec_from(args)
        gc.freeze()
    finally:
        if collecting:
            gc.enable()
    try:
        return serve(
            spec,
            args.log,
            fsync=args.fsync,
            store=args.store,
            protocols=protocols,
            http=args.http,
            access=HttpAccess(
                token_file=args.token_file,
                no_auth=args.no_auth,
                allow_hosts=tuple(args.allow_host),
                allow_origins=tuple(args.allow_origin),
            ),
        )
    finally:
        gc.unfreeze()  # for a caller that goes on after main() (a test, an embedding host)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the ACP Session Modes story against `modefsm serve`",
        description="Spawn `modefsm serve` and drive it with the official ACP client "
        "through the Session Modes story, printing every JSON-RPC frame (abridged; --json "
        "prints them whole). Exit status 0 only if every step behaved as ACP says.",
    )
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="the transition log (default: transitions.jsonl in a new temporary directory)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print each JSON-RPC frame whole, one JSON line {"dir": "client->agent" or '
        '"agent->client", "frame": FRAME}',
    )
    parser.add_argument(
        "--protocol",
        choices=("1", "2"),
        default="1",
        help="the ACP version the client speaks (default: 1; 2: ACP v2, the mode as a "
        "config option)",
    )
    parser.set_defaults(run=_run_demo)


def _check_sdk(args: argparse.Namespace) -> None:
    """Refuse ``serve`` and ``demo`` at once when the ACP SDK is not installed.

    The extra named is the one that brings what *args* ask for: ``http`` for ``--http``,
    ``v2`` for ``--protocol 2`` (both need SDK 1.0), ``acp`` otherwise.

    Raises:
        ModefsmError: one line naming the distribution and the extra that brings it.
    """
    from importlib.util import find_spec  # noqa: PLC0415 - serve and demo only

    if find_spec("acp") is None:
        extra = (
            "http"
            if getattr(args, "http", None) is not None
            else ("v2" if args.protocol == "2" else "acp")
        )
        msg = (
            f"the ACP SDK (agent-client-protocol) is not installed: pip install 'modefsm[{extra}]'"
        )
        raise ModefsmError(msg)


def _run_demo(args: argparse.Namespace) -> int:
    _check_sdk(args)
    from modefsm.cli._demo import run_demo  # noqa: PLC0415

    return run_demo(args.log, raw=args.json, protocol=int(args.protocol))


def _add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--spec", type=Path, metavar="FILE", help="a spec file (.toml or .json)")
    group.add_argument(
        "--preset", metavar="NAME", help=f"a shipped spec: {', '.join(preset_names())}"
    )


def _spec_from(args: argparse.Namespace) -> ModeSpec:
    from modefsm.spec import load_spec, preset  # noqa: PLC0415 - keep `--help` fast

    if args.spec is not None:
        return load_spec(args.spec)
    return preset("seed" if args.preset is None else args.preset)


_COMMANDS += [_add_demo, _add_serve]


# -- replay ------------------------------------------------------------------------------

_PROGRESS_MIN = 4 * 1024 * 1024
"""Inputs at least this large (in bytes) get a progress bar, when stderr is a terminal."""


def _add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "replay",
        help="replay transition logs: timeline, final modes, violations",
        description=(
            "Replay modefsm transition logs (oldest first; gzip files and - for stdin "
            "accepted): print every session's timeline and final mode, and check each "
            "change against the spec it was written with. Exit status: 0 clean, "
            "1 violations found, 2 usage error or unusable input (a file that cannot be "
            "read, is not text, or has more lines that are not JSON objects than modefsm "
            "records), 3 spec mismatch (the only violations are records written with a spec "
            "not given, or with an earlier version of one given, or a log's header naming "
            "another spec than the one given). Without --spec or --preset, each log's header "
            "names the spec its records are checked against."
        ),
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="a transition log, or -")
    parser.add_argument(
        "--spec",
        action="append",
        default=[],
        metavar="FILE",
        help="a spec (TOML or JSON) the records may have been written with; repeatable",
    )
    parser.add_argument(
        "--preset",
        action="append",
        default=[],
        metavar="NAME",
        help="a shipped spec the records may have been written with; repeatable "
        "(default, without --spec: the spec each log's header names, and every preset)",
    )
    parser.add_argument("--session", metavar="ID", help="replay only this sessionId")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also verify the digest chain (edited, deleted, inserted, reordered records)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table: the timeline and summary as text (default); json: the same report as "
        "one JSON document",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="leave out the timeline (every record): print the final modes, violations, "
        "notes, chain and verdict; the fast way through a large log",
    )
    parser.add_argument(
        "--rebuild-index",
        metavar="INDEX",
        help="rebuild the restore index INDEX (SQLite) from the logs instead of reporting",
    )
    parser.set_defaults(run=_run_replay)


def _run_replay(args: argparse.Namespace) -> int:
    from modefsm.replay import (  # noqa: PLC0415
        JsonReport,
        TableReport,
        replay,
    )
    from modefsm.store import RestoreIndex  # noqa: PLC0415

    if args.rebuild_index is not None:
        if "-" in args.logs:
            raise LogError("--rebuild-index reads files, not standard input")
        count = RestoreIndex.rebuild(args.rebuild_index, args.logs)
        noun = "session" if count == 1 else "sessions"
        print(f"rebuilt {args.rebuild_index}: {count} {noun} from {len(args.logs)} log(s)")
        return 0
    from modefsm.spec import load_spec, preset  # noqa: PLC0415

    specs = [load_spec(path) for path in args.spec] + [preset(name) for name in args.preset]
    writer = JsonReport(sys.stdout) if args.format == "json" else TableReport(sys.stdout)
    progress = _progress_bar(args.logs)
    try:
        report = replay(
            args.logs,
            specs or None,
            verify=args.verify,
            session_id=args.session,
            keep_timeline=False,
            on_entry=None if args.summary else writer.entry,
            progress=progress,
        )
    finally:
        if progress is not None:
            sys.stderr.write("\r\033[K")
    writer.finish(report)
    for error in report.errors:
        print(f"modefsm replay: {error}", file=sys.stderr)
    return report.exit_status


def _progress_bar(paths: Sequence[str]) -> Callable[[int], None] | None:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += 0 if path == "-" else Path(path).stat().st_size
    if total < _PROGRESS_MIN or not sys.stderr.isatty():
        return None

    def show(done: int) -> None:
        percent = min(100, done * 100 // total)
        sys.stderr.write(f"\rmodefsm replay: {percent:3d}% of {total / 1e6:.1f} MB")
        sys.stderr.flush()

    return show


_COMMANDS.append(_add_replay)


# -- store ---------------------------------------------------------------------------------


def _add_store(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "store",
        help="work with a shared session store: export a PostgreSQL store's records",
        description="Export every record of a PostgreSQL session store as JSON lines, in "
        "commit order (gseq), after a first line naming the export; `modefsm replay "
        "--verify` checks the export as one history per session.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="write every record of the store as JSON lines",
        description="Write every record of a PostgreSQL session store as JSON lines, in "
        "commit order (gseq), after a first line naming the export.",
    )
    export.add_argument("url", metavar="URL", help="the store: postgresql://...")
    export.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="FILE",
        help="write to this file (default: standard output)",
    )
    parser.set_defaults(run=_run_store)


def _run_store(args: argparse.Namespace) -> int:
    """Export into a temporary file, then move it to ``-o FILE`` or copy it to stdout.

    A failure midway (a malformed row, a lost connection) leaves nothing written: no
    partial export on standard output, no file at ``FILE``.
    """
    import shutil  # noqa: PLC0415 - keep other commands' start fast
    import tempfile  # noqa: PLC0415

    from modefsm.store import export_store  # noqa: PLC0415 - psycopg only when asked

    output: Path | None = args.output
    if output is None:
        with tempfile.TemporaryFile() as spool:
            count = _export_or_nothing(export_store, args.url, spool, output)
            spool.seek(0)
            shutil.copyfileobj(spool, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    else:
        if output.exists() or output.is_symlink():
            raise LogError("exists already; give a new file", str(output))
        try:
            handle, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
            os.fchmod(handle, 0o600)  # the records of every session: private
        except OSError as exc:
            raise LogError(f"cannot write: {exc.strerror or exc}", str(output)) from None
        spooled = Path(name)
        try:
            with os.fdopen(handle, "wb") as spool:
                count = _export_or_nothing(export_store, args.url, spool, output)
            os.link(spooled, output)  # never replaces a file that appeared meanwhile
        except FileExistsError:
            raise LogError("exists already; give a new file", str(output)) from None
        except OSError as exc:
            raise LogError(f"cannot write: {exc.strerror or exc}", str(output)) from None
        finally:
            spooled.unlink(missing_ok=True)
    noun = "record" if count == 1 else "records"
    print(f"exported {count} {noun}", file=sys.stderr)
    return 0


def _export_or_nothing(
    export: Callable[[str, BinaryIO], int], url: str, spool: BinaryIO, output: Path | None
) -> int:
    """``export(url, spool)``; a failure to write the spool itself is a :class:`LogError`."""
    try:
        return export(url, spool)
    except OSError as exc:  # the spool (a full disk)
        where = "a temporary file" if output is None else str(output)
        raise LogError(f"cannot write: {exc.strerror or exc}", where) from None


_COMMANDS.append(_add_store)


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
        help="a JSON-lines transition log: count the transitions taken and the tool calls "
        "each mode decided (may be repeated)",
    )
    parser.add_argument(
        "--session", metavar="ID", help="highlight this session's steps and current mode"
    )
    parser.set_defaults(run=_run_diagram)


def _run_diagram(args: argparse.Namespace) -> int:
    from modefsm.spec import load_spec, preset  # noqa: PLC0415

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
    from modefsm.diagram import render  # noqa: PLC0415 - keep other commands' start fast

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
