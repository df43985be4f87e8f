"""What an operator does to a batch: look at its rows, retry its failed items, cancel it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from jobfence.errors import StoreError
from jobfence.work.cancel import CancelResult, cancel_batch
from jobfence.work.keys import BatchRef
from jobfence.work.report import BatchReport
from jobfence.work.store import WorkStore
from jobfence.work.wakeups import Wakeups


@dataclass(frozen=True)
class RetryResult:
    """What retry_failed did."""

    retried: int  # items reopened with a fresh budget (and re-enqueued)
    skipped_quota: int  # failed items the tenant's quota could not cover (left failed)
    unsent: int  # wake-ups that could not be sent (the reclaimer's pending sweep re-drives them)


class BatchOperations:
    """What an operator does to a batch: look at its rows, retry its failed items, cancel it."""

    def __init__(self, store: WorkStore, wakeups: Mapping[str, Wakeups], logger: Logger) -> None:
        self._batches = store.batches
        self._items = store.items
        self._wakeups = dict(wakeups)
        self._logger = logger

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch row, then its items ordered by `updated_at`."""
        return self._batches.describe_batch(ref)

    def retry_failed(self, ref: BatchRef, requested_by: str) -> RetryResult:
        """Reopen failed items with a fresh attempts budget, re-reserve quota, re-enqueue them.

        The only thing that ever resets a budget. Recorded on the batch row
        (`retried_by`, `retried_at`, `retries`).
        """
        if not requested_by or len(requested_by) > 128:
            raise ValueError("retry_failed needs who asked (1..128 characters)")
        batch = self._batches.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        reopened = self._batches.reopen_failed(ref, requested_by)
        unsent = self._wakeups[batch.kind].send(reopened.retried) if reopened.retried else []
        result = RetryResult(retried=len(reopened.retried), skipped_quota=reopened.skipped_quota, unsent=len(unsent))
        self._logger.info(
            "retry_failed",
            extra={
                "tenant": ref.tenant,
                "batch": ref.batch_id,
                "requested_by": requested_by,
                "retried": result.retried,
                "skipped_quota": result.skipped_quota,
                "unsent": result.unsent,
            },
        )
        return result

    def cancel(self, ref: BatchRef, requested_by: str) -> CancelResult:
        """Cancel the batch: its pending items end `cancelled` (quota refunded once), running ones finish.

        Recorded on the batch row first (`cancel_requested_by`, `cancel_requested_at`;
        the first asker is kept), so a repeat, or a call after a crashed one,
        continues it; the batch finalizes `cancelled` once no item is live.
        See `jobfence.work.cancel`.
        """
        result = cancel_batch(self._batches, self._items, ref, requested_by)
        self._logger.info(
            "cancel",
            extra={
                "tenant": ref.tenant,
                "batch": ref.batch_id,
                "requested_by": requested_by,
                "status": result.status.value,
                "cancelled": result.cancelled,
                "refunded": result.refunded,
                "running": result.running,
            },
        )
        return result
