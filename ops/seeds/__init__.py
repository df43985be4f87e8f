"""Seed data for the local runtime's demo: rows every job of the catalog can act on.

`seed_domains(runtime)` writes, through the jobs' own store modules into the
tables the deployed template created, what the commerce and club jobs need to
change something during the simulated day, and registers the matching state in
the provider stubs (approved PayPal orders, existing Discord messages).
"""

from __future__ import annotations

from typing import Any

from ops.seeds.club import seed_for_runtime as seed_club
from ops.seeds.commerce import seed_for_runtime as seed_commerce


def tables_of(runtime: Any) -> dict[str, str]:
    """Logical -> physical table names, read from the deployed functions' environments."""
    from jobfence.config import ENV_TABLE_PREFIX

    tables: dict[str, str] = {}
    for function in runtime.topology.functions.values():
        for key, value in function.environment.items():
            if key.startswith(ENV_TABLE_PREFIX) and value:
                tables[key[len(ENV_TABLE_PREFIX) :].lower()] = value
    return tables


def stub_of(runtime: Any, provider: str) -> Any | None:
    """The loopback stub the runtime started for a provider, if any."""
    started = runtime.providers.stubs.get(provider)
    return started.stub if started else None


def seed_domains(runtime: Any) -> dict[str, int]:
    """Seed commerce and club rows; return what was written, by kind."""
    tables = tables_of(runtime)
    counts: dict[str, int] = {}
    counts.update(seed_commerce(tables, runtime.clock, stub_of(runtime, "paypal")))
    counts.update(seed_club(tables, runtime.clock, stub_of(runtime, "discord")))
    return counts
