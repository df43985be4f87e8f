"""The work store: the batches and items tables of one pipeline, by role.

`WorkStore` only composes the three role stores over one pair of tables (and one
session: built under a tenant's credentials, every model of each role signs with
them); each caller uses the role it needs:

    items    ItemStore (jobfence.work.items): the item rows: puts, claims, outcomes, the reclaimer's
             requeue and fail, reopening failed items
    batches  BatchStore (jobfence.work.batches): the batch rows: open, checkpoint, reads, describe,
             recount and finalize, the cancel's record, retry-failed's reopening, the open batches
    rollups  Rollups (jobfence.work.rollup): the roll-up tallies beside the batch rows
"""

from __future__ import annotations

from typing import Any

from jobfence.clock import Clock
from jobfence.quota import QuotaStore
from jobfence.work.batches import BatchStore
from jobfence.work.items import ItemStore
from jobfence.work.rollup import Rollups


class WorkStore:
    """The role stores of one pipeline's batches and items tables: `items`, `batches` and `rollups`.

    `items` is its `ItemStore`, `batches` its `BatchStore` (which recounts through `items`), `rollups`
    its `Rollups`; `quota` is the `QuotaStore` they were built over. Built under a tenant's session
    (`jobfence.tenants`), every one of them signs with it.
    """

    def __init__(self, batches_table: str, items_table: str, quota: QuotaStore, clock: Clock) -> None:
        self.quota = quota  # the tenants' units the item rows hold (reserved at the put or the claim)
        self.items = ItemStore(items_table, quota, clock)
        self.rollups = Rollups(batches_table, clock)
        self.batches = BatchStore(batches_table, self.items, self.rollups, clock)

    def clients(self) -> list[Any]:
        """The botocore clients the role stores send their requests through (for a meter or a fault injector)."""
        return [*self.items.clients(), *self.batches.clients(), *self.rollups.clients()]
