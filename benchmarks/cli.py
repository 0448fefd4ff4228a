"""The benchmarks' command line: run them, print the table, write the JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.cases import (  # noqa: F401 - they register
    catch_up,
    changes,
    decide,
    log_size,
    replay,
    roundtrip,
    roundtrip_http,
    sessions,
    spec_size,
    startup,
    store,
)
from benchmarks.harness import BENCHMARKS, FULL, QUICK, TINY, Result, format_table, machine

__all__ = ["main"]

SIZES = {size.name: size for size in (FULL, QUICK, TINY)}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks chosen by *argv*; return the exit status (0, or 2 for bad usage)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure modefsm against its baselines and the alternatives, in one run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smaller run (about a minute): --size quick"
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="full",
        help="full (docs/performance.md's figures), quick, or tiny (the test suite's smoke run)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        help="run only this benchmark (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"the JSON results (default: {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    size = QUICK if args.quick else SIZES[args.size]
    keys = args.only or sorted(BENCHMARKS, key=lambda key: BENCHMARKS[key].title)
    info = machine()
    print(f"modefsm benchmarks, {size.name} size, on {info['nproc']} cores ({info['cpu']})")
    results: list[Result] = []
    started = time.perf_counter()
    for key in keys:
        bench = BENCHMARKS[key]
        print(f"running {bench.title} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        results.append(bench.run(size))
        print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    print(format_table(results, info))
    print(f"\ntotal {elapsed:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "size": size.name,
        "machine": info,
        "seconds": elapsed,
        "results": [result.to_json() for result in results],
    }
    args.out.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {args.out}")
    return 0
