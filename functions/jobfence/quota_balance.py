"""One tenant's quota books as a grant or a read returns them (`QuotaStore.grant`, `QuotaStore.balance`): the
producer's, the operator's and the tests' view, loaded by those calls. A worker reserves and a reclaimer refunds
inside transactions and reads no balance, so neither loads it at init (docs/benchmarks.md, "Cold start")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuotaBalance:
    """One tenant's books."""

    tenant: str
    limit: int
    available: int
    reserved: int
    refunded: int

    @property
    def used(self) -> int:
        """Units in use: `limit - available`, which is `reserved - refunded`."""
        return self.limit - self.available
