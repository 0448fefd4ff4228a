"""Per-record costs of the transition log: digest chain, restore index, and restore lookups.

Run: python benchmarks/cases/log_costs.py [--records N] [--sessions N]

Prints medians of several timeit runs, in microseconds per record (µs) or per lookup.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.log._records import EVENT_CHANGED, record_digest
from modefsm.log._writer import _bind
from modefsm.store._restore import RestoreIndex

FIELDS = {
    "timestamp": "2026-01-01T00:00:00.000000Z",
    "session_id": "sess_0123456789abcdef0123456789abcdef",
    "seq": 2,
    "from_mode": "ask",
    "to_mode": "architect",
    "origin": "set_mode",
    "request_id": 3,
    "spec": "seed",
    "spec_hash": "sha256:0df565f236717a02",
}


def _median_us(stmt: Callable[[], object], number: int, repeat: int = 5) -> float:
    return statistics.median(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6


def _write_cost(folder: Path, n: int, *, index: bool) -> float:
    path = folder / f"log-{index}-{time.monotonic_ns()}.jsonl"
    log = (
        RestoreIndex.open_log(path, folder / f"i-{time.monotonic_ns()}")
        if index
        else TransitionLog.to_file(path)
    )
    fields = dict(FIELDS)
    counter = iter(range(10**9))

    def write() -> None:
        fields["session_id"] = f"s{next(counter) % 100_000}"
        log.write(EVENT_CHANGED, fields)

    cost = _median_us(write, n)
    log.close()
    return cost


def _unchained_cost(folder: Path, n: int) -> float:
    """The same line without prev/digest: the structlog logger alone (the cost before chaining)."""
    with (folder / "unchained.jsonl").open("ab", buffering=0) as file:
        logger = _bind(file)
        return _median_us(lambda: logger.info(EVENT_CHANGED, **FIELDS), n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args(argv)
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        digest = _median_us(lambda: record_digest({**FIELDS, "event": EVENT_CHANGED}), n)
        unchained = _unchained_cost(folder, n)
        plain = _write_cost(folder, n, index=False)
        indexed = _write_cost(folder, n, index=True)
        print(f"record_digest alone:                 {digest:6.2f} µs/record")
        print(f"structlog line, not chained:         {unchained:6.2f} µs/record")
        print(f"TransitionLog.write (file, chained): {plain:6.2f} µs/record")
        print(f"  + RestoreIndex update:             {indexed:6.2f} µs/record")

        log_path, index_path = folder / "big.jsonl", folder / "big.index"
        log = RestoreIndex.open_log(log_path, index_path)
        engine = ModeEngine(preset("seed"), store=LogStore(log))
        start = time.perf_counter()
        for i in range(args.sessions):
            engine.new_session(f"sess_{i}")
            engine.change(f"sess_{i}", "code", "set_mode")
        per_session = (time.perf_counter() - start) / args.sessions * 1e6
        log.close()
        print(
            f"engine, new_session + change, indexed: {per_session:6.2f} µs/session "
            f"({args.sessions} sessions)"
        )

        start = time.perf_counter()
        index = RestoreIndex(index_path)
        index.catch_up(log_path)
        opened = (time.perf_counter() - start) * 1e3
        lookup = _median_us(lambda: index.restore_point(f"sess_{args.sessions // 2}"), 10_000)
        print(f"restart: open index + catch up:      {opened:6.2f} ms")
        print(f"restore_point with {args.sessions} sessions:  {lookup:6.2f} µs/lookup")
        index.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
