"""Lazy package attributes: a name is imported from its module on first use."""

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for *package* that imports each name of *exports* on first use.

    Args:
        package: the package's ``__name__``.
        exports: each name, and the module that defines it.

    Returns:
        The function to assign to the package's ``__getattr__``; it stores each value it
        imports in the package, so that the next use is a plain attribute look-up, and
        raises :class:`AttributeError` for any other name.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's own name
        module = exports.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
