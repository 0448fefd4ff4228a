"""A host with a config option of its own (a model picker) beside modefsm's mode option.

Declared once, the ``model`` option is handled as the mode option is: every
``configOptions`` list is complete (``mode``, then ``model``), ``session/set_config_option``
checks the value, logs it, announces it (``config_option_update``) and answers the list,
and ``session/load``/``session/resume`` bring it back after a restart.
``python examples/host_config_option.py STORE`` serves it on stdio to v1 and v2 clients.
"""

from __future__ import annotations

import asyncio
import sys

from modefsm import FileStore, HostOption, ModeAgent, preset, serve_negotiated

MODEL = HostOption(
    id="model",
    name="Model",
    category="model",
    choices=[("fast", "Fast"), ("smart", "Smart")],
    default="fast",
)


def main(store_path: str) -> None:
    """Serve the seed preset and the ``model`` option on stdio, the store at *store_path*."""
    store = FileStore(store_path)
    agent = ModeAgent(preset("seed"), store=store, unstable=True, config_options=[MODEL])
    try:
        asyncio.run(serve_negotiated(agent))
    finally:
        store.close()


if __name__ == "__main__":
    try:
        (store,) = sys.argv[1:]
    except ValueError:
        sys.exit("usage: python examples/host_config_option.py STORE")
    main(store)
