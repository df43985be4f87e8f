"""The retention branch of `recover_financial_operations`: diagnostics and customer activity.

Diagnostic chunks select at most 1,000 expired parents (through the sparse
expiry index), release each parent's recorded retained charge exactly once
(a fenced transaction conditioned on the parent's `charge_released_at` not
being set), then delete its refs/header/token children and finally the parent.
Minute write charges are never refunded. Customer activity older than 30 days
is deleted in batches of 1,000; orders and payment records are other tables and
are never touched. Every chunk is one batch (a renewal checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from aws_lambda_powertools import Logger

from jobfence.errors import ConditionFailed
from jobfence.expiry import deletion_batches
from jobfence.scheduled import RunContext
from jobs.commerce.customer_activity import CustomerActivityStore
from jobs.commerce.diagnostics import DiagnosticStore

DIAGNOSTIC_CHUNK = 1_000
DIAGNOSTIC_MAX_CHUNKS = 10
ACTIVITY_BATCH = 1_000
ACTIVITY_MAX_BATCHES = 20


@dataclass(frozen=True)
class DiagnosticChunk:
    """One chunk of expired captures (every field in the run row)."""

    diagnostics_expired: int  # expired parents read
    charges_released: int  # retained charges this run gave back (each exactly once, ever)
    diagnostic_rows_deleted: int  # parents and children deleted

    def summary(self) -> dict[str, int]:
        return asdict(self)


def retention_batches(
    diagnostics: DiagnosticStore, activity: CustomerActivityStore, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Diagnostic chunks first, then activity batches; each yield is one bounded batch."""
    for _ in range(DIAGNOSTIC_MAX_CHUNKS):
        parents = diagnostics.expired_parents(DIAGNOSTIC_CHUNK)
        released = 0
        rows_deleted = 0
        for parent in parents:
            if diagnostics.needs_release(parent):
                try:
                    with ctx.transaction() as tx:
                        tx.add(*diagnostics.release_ops(parent))
                    released += 1
                except ConditionFailed as exc:
                    if exc.index != 0:
                        # the usage row is missing: keep the parent (its delete is conditioned on the release)
                        logger.error("retained charge has no usage row", extra={"capture_id": parent.capture_id})
                    # index 0: already released by an earlier or overlapping run -> never twice
            rows_deleted += diagnostics.delete_capture(parent)
        yield DiagnosticChunk(len(parents), released, rows_deleted).summary()
        if len(parents) < DIAGNOSTIC_CHUNK:
            break
    yield from deletion_batches(activity.delete_expired, ACTIVITY_BATCH, ACTIVITY_MAX_BATCHES, "activity_deleted")
