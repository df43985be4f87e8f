"""Binding pynamodb models to physical tables at the composition root.

Store modules declare their pynamodb model once, unbound. The handler's cold
start calls `bind(Model, settings.table("name"))`, which returns a fresh
subclass (with fresh index objects, so two bindings never share state) whose
Meta names the physical table. Nothing binds a table name at import time.
"""

from __future__ import annotations

from typing import TypeVar

from pynamodb.indexes import Index
from pynamodb.models import Model

M = TypeVar("M", bound=type[Model])


def bind(model: M, table_name: str) -> M:
    """A subclass of `model` bound to `table_name`."""
    meta = type("Meta", (model.Meta,), {"table_name": table_name})
    namespace: dict[str, object] = {"Meta": meta, "__module__": model.__module__}
    for klass in reversed(model.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Index):
                namespace[name] = type(value)()
    return type(model.__name__, (model,), namespace)  # type: ignore[return-value]
