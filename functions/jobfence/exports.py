"""A package's public names, each imported from its module on first use (PEP 562).

A package `__init__` that imported every public name would load all of its
modules (pynamodb, Powertools, the stores) for a function that needs one of
them: the catalog and a scheduled job's cold start would pay for the rest
(docs/benchmarks.md, cold start). `on_demand` gives the package a module
`__getattr__` instead, so `from jobfence.work import Worker` still works and
loads `jobfence.work.worker` only then.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def on_demand(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `modules` maps a module to its public names (space-separated)."""
    where = {name: module for module, names in modules.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)  # later lookups skip this function
        return value

    return __getattr__


def public_names(modules: Mapping[str, str]) -> list[str]:
    """The `__all__` of a package whose names `on_demand` imports."""
    return sorted(name for names in modules.values() for name in names.split())
