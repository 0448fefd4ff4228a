"""``python -m benchmarks.launch SEED MODULE ARGS...``: run MODULE as ``__main__``, laid out anew.

Before MODULE (and everything it imports) is loaded, this allocates a random number of
small objects of random sizes, chosen by SEED, and keeps them, so that every later
allocation lands at other addresses. Processes of the same agent can differ in speed by
10-20% for their whole life; where a process's objects land is one cause (another was
stale bytecode: see :func:`benchmarks.harness.child_env`). A fresh process per sample,
each laid out anew, turns that into noise that the median of the samples removes.
"""

from __future__ import annotations

import random
import runpy
import sys


def main(argv: list[str]) -> None:
    """Allocate the seeded ballast, then run ``argv[1]`` with ``argv[2:]`` as its arguments."""
    rng = random.Random(int(argv[0]))
    ballast = [bytes(rng.randrange(1, 512)) for _ in range(rng.randrange(64, 8192))]
    sys.argv = [argv[1], *argv[2:]]
    try:
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    finally:
        del ballast


if __name__ == "__main__":
    main(sys.argv[1:])
