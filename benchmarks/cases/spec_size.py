"""Benchmark 6: start-up and diagrams for specs of many modes, as ratios between sizes.

A spec of n modes whose clients may change from any mode to any other has n² transitions;
modefsm compiles it in time linear in n. Each size is measured in the same run:

- start-up in process: ``load_spec`` of the JSON file, ``ModeEngine`` (machine and views),
  one ``session/new`` and one ``set_mode``;
- a diagram: ``build_diagram`` and ``to_mermaid``;

(both with the cyclic garbage collector off, as ``timeit`` does: its full collections
cost more the more objects the process holds, whatever made them);
- ``modefsm serve --spec FILE`` in a fresh process, from spawn until ``initialize`` and
  ``session/new`` (every mode advertised) are answered, against the same for the 3-mode
  preset ``seed`` (Python and the SDK loading, the part that does not depend on the spec).

Linear time makes the ratio of the large size to the small one the ratio of the sizes
(10 at the full size); n² would make it 100.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, Row, Size, benchmark, no_gc, serve_startup
from modefsm import ModeEngine, load_spec
from modefsm.diagram import build_diagram, to_mermaid

__all__ = ["run"]

TITLE = "6. spec size"
SIZES = {"full": (1_000, 10_000), "quick": (1_000, 5_000), "tiny": (20, 200)}
"""The two spec sizes (modes) of each benchmark size."""
LINEAR_SLACK = 1.5
"""A ratio up to this times the ratio of the sizes counts as linear (noise, caches)."""
SERVE_BOUND = 2.0
"""The most ``serve`` with the large spec may take, as a multiple of the 3-mode preset."""
SEED_LABEL = "3 modes (preset seed)"


def spec_data(count: int) -> dict[str, Any]:
    """*count* modes, any to any but for m1 (to m0 and m2 only), a ``$previous`` switch in m0
    and a last mode that is not restorable."""
    modes: list[dict[str, Any]] = [{"id": f"m{i}", "name": f"Mode {i}"} for i in range(count)]
    modes[-1] |= {"restorable": False, "fallback": "m0"}
    options = [
        {"optionId": "back", "name": "Back", "kind": "allow_once", "target": "$previous"},
        {"optionId": "no", "name": "No", "kind": "reject_once"},
    ]
    return {
        "name": f"many-{count}",
        "initial": "m0",
        "modes": modes,
        "client_changes": {"m1": ["m0", "m2"]},
        "switches": [{"source": ["m0"], "title": "Switch?", "options": options}],
    }


def _start(path: Path) -> float:
    with no_gc():
        start = time.perf_counter()
        spec = load_spec(path)
        engine = ModeEngine(spec)
        engine.new_session("s")
        engine.change("s", spec.mode_ids[-2], "set_mode")
        return (time.perf_counter() - start) * 1e3


def _draw(path: Path) -> float:
    spec = load_spec(path)
    with no_gc():
        start = time.perf_counter()
        to_mermaid(build_diagram(spec))
        return (time.perf_counter() - start) * 1e3


@benchmark("spec_size", TITLE)
def run(size: Size) -> Result:
    """Each measurement at both spec sizes, alternated, and the large-to-small ratios."""
    small, large = SIZES.get(size.name, SIZES["tiny"])
    result = Result("spec_size", TITLE)
    repeat = max(1, size.child_repeat)
    labels = {small: f"{small:,} modes", large: f"{large:,} modes"}
    samples: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for count in (small, large):
            files[count] = Path(tmp) / f"spec-{count}.json"
            files[count].write_text(json.dumps(spec_data(count)), encoding="utf-8")
        if size.name != "tiny":  # compile the bytecode of this run (see child_env) untimed
            serve_startup("--preset", "seed")
        for _ in range(repeat):
            for count in (small, large):
                samples.setdefault(("start", count), []).append(_start(files[count]))
                samples.setdefault(("draw", count), []).append(_draw(files[count]))
                samples.setdefault(("serve", count), []).append(
                    serve_startup("--spec", str(files[count]))
                )
            samples.setdefault(("serve", 3), []).append(serve_startup("--preset", "seed"))
    metrics = {
        "start": ("start-up in process: load_spec, ModeEngine, a session, a change", "ms"),
        "draw": ("diagram: build_diagram, to_mermaid", "ms"),
        "serve": ("modefsm serve: initialize and session/new answered", "s"),
    }
    for key, (metric, unit) in metrics.items():
        if key == "serve":
            result.add(Row(metric, SEED_LABEL, unit, samples["serve", 3], baseline=True))
        for count in (small, large):
            baseline = count == small and key != "serve"
            result.add(Row(metric, labels[count], unit, samples[key, count], baseline=baseline))
    bound = LINEAR_SLACK * large / small
    for key, (metric, _) in metrics.items():
        big = result.row(metric, labels[large]).median
        if key == "serve":  # the spec's part is within the noise of Python's start-up
            ratio = big / result.row(metric, SEED_LABEL).median
            result.target(
                f"{metric}: {labels[large]} <= {SERVE_BOUND:g}x the 3-mode preset",
                met=ratio <= SERVE_BOUND,
                measured=f"{ratio:.2f}x",
            )
            continue
        ratio = big / result.row(metric, labels[small]).median
        result.target(
            f"{metric}: {labels[large]} / {labels[small]} <= {bound:g} (linear: {large // small})",
            met=ratio <= bound,
            measured=f"{ratio:.1f}x",
        )
    result.notes.append(
        f"spec: {small:,} or {large:,} modes, any to any but one mode, a switch, a mode not "
        f"restorable (n² = {large * large:,} transitions at the large size); {repeat} "
        "repetitions, sizes alternated; serve in a fresh process each time"
    )
    return result
