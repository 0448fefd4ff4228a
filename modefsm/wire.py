"""Deprecated: import from :mod:`modefsm` instead (this module is gone in the next release).

Before the package layout, this module held what :mod:`modefsm.protocol` holds now; it
re-exports the same names and warns on import.
"""

import warnings

from modefsm.protocol.transport import _stdio as _moved
from modefsm.protocol.transport._stdio import *  # noqa: F403

__all__ = list(_moved.__all__)

warnings.warn(
    "modefsm.wire is deprecated; import its names from modefsm",
    DeprecationWarning,
    stacklevel=2,
)
