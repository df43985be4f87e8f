"""What the reclaimer reads and decides (`jobfence.reclaim`): a pipeline's open batches, the live items past their
stale limit, and what its write did to each.

Only the reclaimer and the operator's stale counts use these; a worker or a producer never loads them
(docs/benchmarks.md, "Cold start"). The store methods that make them (`ItemStore.stale_items`,
`ItemStore.requeue_stale`, `BatchStore.open_batches`) import this module when called.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from jobfence.work.keys import MAX_SHARDS, BatchRef, ItemKey, ItemStatus


class StaleVerdict(str, enum.Enum):
    """What the reclaimer's conditional write did to one stale live item."""

    REQUEUED = "requeued"  # moved to pending (attempts left): wake it
    CAPPED = "capped"  # still exactly as seen but at the attempts cap: fail it
    CHANGED = "changed"  # the row moved on since the sweep read it: left alone


@dataclass(frozen=True)
class OpenBatch:
    """An open batch: its open-index entry (keys and heartbeat) and its item-shard count (its row's)."""

    ref: BatchRef
    updated_at: int
    shards: int = MAX_SHARDS

    def item_partitions(self) -> list[str]:
        """The partition keys its item rows may have (what the reclaimer queries)."""
        return self.ref.item_partitions(self.shards)


@dataclass(frozen=True)
class OpenBatches:
    """One pipeline's open batches, oldest heartbeat first (empty: no live item anywhere in the pipeline).

    A live item's batch is always open, so the reclaimer reads the item rows of
    these batches only (`jobfence.work.items.ItemStore.stale_items`).
    """

    kind: str
    batches: tuple[OpenBatch, ...]


@dataclass(frozen=True)
class StaleCutoffs:
    """When a live item is stale: running before `running`, pending before `pending` (epoch ms, `Timing`'s)."""

    running: int
    pending: int

    def of(self, status: ItemStatus) -> int:
        return self.running if status is ItemStatus.RUNNING else self.pending


@dataclass(frozen=True)
class StaleItem:
    """A live item past its stale limit, as the sweep's read saw it (the write re-checks exactly this)."""

    key: ItemKey
    status: ItemStatus
    updated_at: int
