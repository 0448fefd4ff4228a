"""modefsm's benchmarks: ``python -m benchmarks [--quick] [--out FILE.json]``.

Each benchmark measures modefsm and its baseline (and the alternatives) in the same run and
reports medians, extremes and ratios; see docs/performance.md.
"""
