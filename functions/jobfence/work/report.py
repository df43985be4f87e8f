"""The operator's report of one batch (`BatchStore.describe_batch`, which loads this module when called; no
function's tick does, docs/benchmarks.md "Cold start")."""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.work.keys import BatchRow, ItemRow, ItemStatus


@dataclass(frozen=True)
class BatchReport:
    """Rows first (seed 003's debugging procedure): the batch, then its items by `updated_at`."""

    batch: BatchRow
    items: list[ItemRow]

    def counts(self) -> dict[str, int]:
        """How many of its items are in each `ItemStatus`, by the status's value (every status present)."""
        out = {s.value: 0 for s in ItemStatus}
        for item in self.items:
            out[item.status.value] += 1
        return out
