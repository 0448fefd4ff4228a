"""The shipped mode specs (TOML package data); load them with :func:`modefsm.spec.preset`.

Exports: nothing (data only).

May import: nothing.
"""
