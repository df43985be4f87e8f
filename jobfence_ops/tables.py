"""Catalog tables created directly in an emulator (the lease scenario, benchmarks, the simulator).

The requests are built by the test kit (`jobfence.testing.tables`) from the
catalog's `TableSpec`s; this binds them to this application's catalog.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobfence.registry import Registry
from jobfence.testing.tables import create_tables, table_request

__all__ = ["create_catalog_tables", "table_request"]


def create_catalog_tables(
    client: Any, names: Iterable[str] | None = None, suffix: str | None = None, registry: Registry | None = None
) -> dict[str, str]:
    """Create this application's catalog tables (all, or the named ones); return logical -> physical.

    `registry`: another catalog's tables instead (a job author's, in `jobfence.testing.simulate`).
    """
    if registry is None:
        from jobfence_ops.app import default_app

        registry = default_app().catalog
    return create_tables(client, registry, names, suffix)
