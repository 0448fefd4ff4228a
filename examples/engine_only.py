"""The engine without ACP: sessions, changes, a switch offered and approved, a refusal.

``python examples/engine_only.py LOG`` prints each step and writes the transition log.
"""

from __future__ import annotations

import sys

from modefsm import LogStore, ModeEngine, TransitionLog, UnknownModeError, preset


def main(log_path: str) -> None:
    """Walk one session through the seed preset, printing what the engine says."""
    log = TransitionLog.to_file(log_path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    try:
        session = engine.new_session("sess_1")
        print(f"new session in {session.state}")
        engine.change("sess_1", "architect", "set_mode")
        print(f"set_mode -> {engine.get('sess_1').state}")
        offer = engine.offer_switch("sess_1")
        print(f"{offer.title}:", ", ".join(f"{o.option_id}={o.target}" for o in offer.options))
        engine.approve_switch(offer, "code", tool_call_id="call_1")
        print(f"approved code -> {engine.get('sess_1').state}")
        try:
            engine.change("sess_1", "nowhere", "set_mode")
        except UnknownModeError as exc:
            print(f"refused: {exc}")
    finally:
        log.close()


if __name__ == "__main__":
    main(sys.argv[1])
