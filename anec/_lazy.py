"""Package attributes imported on first use (keeps ``import anec`` and ``import anec.ir`` light)."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, table: dict[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``name`` comes from module ``table[name]``
    the first time it is asked for, and is then cached in ``namespace``."""

    def __getattr__(name: str) -> Any:
        modname = table.get(name)
        if modname is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(modname), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
