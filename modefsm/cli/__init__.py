"""modefsm.cli: the ``modefsm`` command.

The last stage: ``modefsm serve`` (stdio, HTTP, WebSocket), ``replay``, ``diagram``,
``demo``, ``store export`` and ``check``, one module per command, each loaded only when
its command runs (``modefsm --help``, ``replay`` and ``diagram`` load no ACP SDK).

Exports: ``main(argv=None) -> int``, the command line (exit 2 for usage and input errors).

May import: ``errors``, ``spec``, ``log``, ``store``, ``engine``, ``replay``, ``diagram``,
``protocol``.
"""

from modefsm.cli._main import main

__all__ = ["main"]
