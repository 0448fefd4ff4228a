"""The specs shipped with modefsm, as TOML package data (see :func:`modefsm.preset`)."""
