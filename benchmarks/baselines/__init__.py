"""What the benchmarks measure modefsm against: hand-written and SDK-minimal agents and handlers.

Nothing here imports a benchmark case; the cases import these.
"""
