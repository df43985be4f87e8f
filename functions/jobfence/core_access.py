"""What every job may call on the core tables (the lease and run tables), for the CDK's grants and the test kit's
grant check; no function reads it at run time, so none loads it (docs/benchmarks.md, "Cold start")."""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.registry import (
    AUDIT_LEASE_ACCESS,
    AUDIT_RUN_ACCESS,
    LEASE_ACCESS,
    LEASES_TABLE,
    RUN_ACCESS,
    RUNS_TABLE,
)


@dataclass(frozen=True)
class CoreAccess:
    """A job's access to one core table: to its own items (`own`), and to its audited jobs' (`audit`)."""

    table: str
    own: str
    audit: str


def core_access() -> tuple[CoreAccess, ...]:
    """What every job may call on the core tables (the CDK grants it, the kit's grant check allows it)."""
    return (
        CoreAccess(LEASES_TABLE.name, LEASE_ACCESS, AUDIT_LEASE_ACCESS),
        CoreAccess(RUNS_TABLE.name, RUN_ACCESS, AUDIT_RUN_ACCESS),
    )
