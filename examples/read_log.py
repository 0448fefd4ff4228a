"""Reading a transition log with the replay API: final modes, each change, the verdict.

``python examples/read_log.py LOG...`` prints every session's changes and final mode, any
violation, and exits with :attr:`~modefsm.ReplayReport.exit_status` (0 clean, 1
violations, 2 unusable input, 3 spec mismatch), as ``modefsm replay`` does.
"""

from __future__ import annotations

import sys

from modefsm import replay


def main(paths: list[str]) -> int:
    """Replay *paths* (oldest first), digests verified; print the report; its status."""
    report = replay(paths, verify=True)
    for session in report.sessions:
        steps = " -> ".join(r.to_mode or "?" for r in session.changes)
        print(f"{session.session_id}: {steps} (now {session.mode}, seq {session.seq})")
    for violation in report.violations:
        print(f"violation: {violation}")
    chain = report.chain
    if chain is not None:
        print(f"chain: {chain.verified} records verified")
    print(f"exit status: {report.exit_status}")
    return report.exit_status


if __name__ == "__main__":
    if not sys.argv[1:]:
        sys.exit("usage: python examples/read_log.py LOG...")
    sys.exit(main(sys.argv[1:]))
