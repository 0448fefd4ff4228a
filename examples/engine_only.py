"""The engine without ACP: sessions, changes, a switch offered and settled, a refusal.

``python examples/engine_only.py LOG`` prints each step and writes the transition log.
"""

from __future__ import annotations

import asyncio
import sys

from modefsm import LogStore, ModeEngine, TransitionLog, UnknownModeError, preset


async def main(log_path: str) -> None:
    """Walk one session through the seed preset, printing what the engine says."""
    log = TransitionLog.to_file(log_path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    try:
        session = engine.new_session("sess_1")
        print(f"new session in {session.state}")
        await engine.set_mode("sess_1", "architect")
        print(f"set_mode -> {engine.get('sess_1').state}")
        offer = await engine.offer_switch("sess_1", tool_call_id="call_1")
        print(f"{offer.title}:", ", ".join(f"{o.option_id}={o.target}" for o in offer.options))
        result = await engine.settle_switch(offer, "code")  # the user's answer
        state = engine.get("sess_1").state
        print(f"settled {result.option_id}: approved={result.approved} -> {state}")
        try:
            await engine.set_mode("sess_1", "nowhere")
        except UnknownModeError as exc:
            print(f"refused: {exc}")
    finally:
        log.close()


if __name__ == "__main__":
    try:
        (log,) = sys.argv[1:]
    except ValueError:
        sys.exit("usage: python examples/engine_only.py LOG")
    asyncio.run(main(log))
