"""What a `jobfence.tenants.TenantScopes` has done since it was built: the benchmark's and the tests' meter,
loaded by `TenantScopes.counts` (no function's tick asks, docs/benchmarks.md "Cold start")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SessionCounts:
    """What a `TenantScopes` has done since it was built (the benchmark's and the tests' meter)."""

    assumed: int  # AssumeRole calls that returned credentials
    reused: int  # lookups answered from the cache
    tenants: int  # tenants cached now
