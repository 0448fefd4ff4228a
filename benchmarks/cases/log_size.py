"""Benchmark 7: ``modefsm serve`` start-up with a large log, as ratios between sizes.

Start-up reads the end of the log to find the chain head (and catches the restore index
up). The worst case is a log whose last line is huge: a record torn by a crash followed by
nothing, or a sparse file of zeros. Each is measured at two sizes in the same run, from
spawn until ``initialize`` and ``session/new`` are answered, against a log of one record:

- one record, then zeros to that size (``truncate``: a sparse file whose torn last line is
  as long as the file);
- one record, then a last line of that many bytes that is not JSON.

Linear time makes the ratio of the large size to the small one at most the ratio of the
sizes (4); a constant start-up makes it 1.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from benchmarks.harness import Result, Row, Size, benchmark, serve_startup
from modefsm import LogStore, ModeEngine, TransitionLog, preset

__all__ = ["run"]

TITLE = "7. log size"
MIB = 1 << 20
SIZES = {"full": (256 * MIB, 1024 * MIB), "quick": (64 * MIB, 256 * MIB), "tiny": (MIB, 4 * MIB)}
"""The two log sizes (bytes) of each benchmark size."""
LINEAR_SLACK = 1.5
"""A ratio up to this times the ratio of the sizes counts as linear (noise, caches)."""
BASE_LABEL = "one record"


def _record() -> bytes:
    buffer = io.BytesIO()
    ModeEngine(preset("seed"), store=LogStore(TransitionLog.to_stream(buffer))).new_session("s1")
    return buffer.getvalue()


def _write(path: Path, kind: str, size: int) -> None:
    with path.open("wb") as file:
        file.write(_record())
        if kind == "sparse":
            file.truncate(size)
        elif kind == "long line":
            chunk = b"x" * MIB
            for _ in range(size // MIB):
                file.write(chunk)


@benchmark("log_size", TITLE)
def run(size: Size) -> Result:
    """Start-up with each kind of large log at both sizes, alternated, and the ratios."""
    small, large = SIZES.get(size.name, SIZES["tiny"])
    result = Result("log_size", TITLE)
    repeat = max(1, size.child_repeat)
    metric = "modefsm serve --log: initialize and session/new answered"
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "one.jsonl"
        _write(base, "record", 0)
        serve_startup(
            "--log", str(base)
        )  # compile the bytecode of this run (see child_env) untimed
        for _ in range(repeat):
            samples.setdefault(BASE_LABEL, []).append(serve_startup("--log", str(base)))
            for kind in ("sparse", "long line"):
                for count in (small, large):
                    log = Path(tmp) / f"{kind}-{count}.jsonl"
                    _write(log, kind, count)  # anew each time: start-up repairs the torn line
                    samples.setdefault(f"{kind}, {count // MIB:,} MiB", []).append(
                        serve_startup("--log", str(log))
                    )
                    log.unlink()
                    for index in Path(tmp).glob(f"{log.name}*"):
                        index.unlink()
    result.add(Row(metric, BASE_LABEL, "s", samples[BASE_LABEL], baseline=True))
    for label, values in samples.items():
        if label != BASE_LABEL:
            result.add(Row(metric, label, "s", values))
    bound = LINEAR_SLACK * large / small
    for kind in ("sparse", "long line"):
        big = result.row(metric, f"{kind}, {large // MIB:,} MiB").median
        ratio = big / result.row(metric, f"{kind}, {small // MIB:,} MiB").median
        result.target(
            f"start-up, {kind}: {large // MIB:,} MiB / {small // MIB:,} MiB <= {bound:g} "
            f"(linear: {large // small})",
            met=ratio <= bound,
            measured=f"{ratio:.1f}x",
        )
    result.notes.append(
        f"logs of {small // MIB:,} and {large // MIB:,} MiB (one record, then zeros in a "
        f"sparse file or a line of 'x'), written anew before each start; {repeat} repetitions"
    )
    return result
