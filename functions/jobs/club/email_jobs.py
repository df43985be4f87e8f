"""`retry_email_intake` (seed 002): the Email Worker's own 5-minute job over retryable intake records.

Each due record is first authenticated (`email_auth`: SPF, DKIM and DMARC
PASS and a From address on the job's `receipt_senders` allowlist); one that
is not is quarantined with the reason, kept and never parsed. An authentic
record is parsed into a receipt and delivered (the receipt recorded and the
record marked delivered in one fenced transaction). A parse failure backs off
exponentially; the attempt that reaches the cap makes the record dead,
keeping the reason. One bad record never holds up the others, nor does one
in a status no code writes (counted `invalid`, logged, left as it is).

    pending --not authentic--> quarantined (reason kept)
    pending --parse ok--> delivered
       |  \\--fails, attempts < cap--> pending (next_attempt_at = now + backoff)
       \\----fails, attempts = cap--> dead (last_error kept)
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import commit_plain
from jobs.club.email_auth import RECEIPT_SENDERS, SenderAllowlist, quarantine_reason
from jobs.club.email_receipts import ReceiptRejected, parse_receipt
from jobs.club.stores.email_intake import EmailIntakeStore, IntakeStatus
from jobs.club.stores.receipts import ReceiptStore
from jobs.club.stores.states import UnknownRowState
from jobs.club.sweep import InvalidRows, OutcomeCounts

ATTEMPTS_CAP = 5
BACKOFF_BASE_MS = 5 * 60_000
BACKOFF_MAX_MS = 6 * 3_600_000
BATCH = 25
MAX_BATCHES = 20


class IntakeOutcome(enum.Enum):
    """What one due intake record came to in this run."""

    DELIVERED = "delivered"  # its receipt recorded, the record delivered (one transaction)
    RETRIED = "retried"  # did not parse: another attempt after the back-off
    DEAD = "dead"  # did not parse on the attempt that reached the cap
    QUARANTINED = "quarantined"  # not authentic: kept with the reason, never parsed
    SKIPPED = "skipped"  # a stale index entry, not due yet, or moved on by someone else first


_PROGRESS = set(IntakeOutcome) - {IntakeOutcome.SKIPPED}  # a batch that moved no record is the last


def backoff_ms(attempts: int) -> int:
    """Delay before the next attempt after `attempts` failed ones: 5, 10, 20, 40 min ... at most 6 h."""
    return min(BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_MS)


def retry_email_intake(
    intake: EmailIntakeStore, receipts: ReceiptStore, senders: SenderAllowlist, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Deliver due authentic intake records; quarantine the rest; back off failures; dead at the cap."""
    invalid = InvalidRows(logger, ctx.job)
    for n in range(1, MAX_BATCHES + 1):
        now = ctx.now_ms()
        ids = intake.due(now, BATCH)
        counts = OutcomeCounts(IntakeOutcome)
        for intake_id in ids:
            try:
                row = intake.get(intake_id)
            except UnknownRowState as exc:  # a poison record: left as it is, the others go on
                invalid.met(exc)
                continue
            if row is None or row.status is not IntakeStatus.PENDING or row.next_attempt_at > now:
                counts.add(IntakeOutcome.SKIPPED)
                continue
            reason = quarantine_reason(row.raw, row.verdicts, senders)
            if reason is not None:
                quarantined = commit_plain(ctx, [intake.quarantined_op(row, reason, now)])
                counts.add(IntakeOutcome.QUARANTINED if quarantined else IntakeOutcome.SKIPPED)
                continue
            try:
                receipt = parse_receipt(row.raw)
            except ReceiptRejected as exc:
                attempts = row.attempts + 1
                if attempts >= ATTEMPTS_CAP:
                    outcome, ops = IntakeOutcome.DEAD, [intake.dead_op(row, str(exc), now)]
                else:
                    outcome = IntakeOutcome.RETRIED
                    ops = [intake.retry_op(row, str(exc), now + backoff_ms(attempts), now)]
            else:
                outcome = IntakeOutcome.DELIVERED
                ops = [receipts.record_op(receipt, intake_id), intake.delivered_op(row, receipt.receipt_id, now)]
            counts.add(outcome if commit_plain(ctx, ops) else IntakeOutcome.SKIPPED)
        summary = counts.summary(invalid=invalid.taken())
        if len(ids) < BATCH or not counts.any_of(_PROGRESS) or n == MAX_BATCHES:
            yield LastBatch(summary)
            return
        yield summary


def build_retry_email_intake(deps: JobDeps):
    intake = EmailIntakeStore(deps.settings.table("club_email_intake"), deps.clock)
    receipts = ReceiptStore(deps.settings.table("club_receipts"), deps.clock)
    senders = SenderAllowlist(deps.settings.setting(RECEIPT_SENDERS))
    return lambda ctx: retry_email_intake(intake, receipts, senders, ctx, deps.logger)
