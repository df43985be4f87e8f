"""`retry_email_intake` (seed 002): the Email Worker's own 5-minute job over retryable intake records.

Each due record is first authenticated (`email_auth`: SPF, DKIM and DMARC
PASS and a From address on the job's `receipt_senders` allowlist); one that
is not is quarantined with the reason, kept and never parsed. An authentic
record is parsed into a receipt and delivered (the receipt recorded and the
record marked delivered in one fenced transaction). A parse failure backs off
exponentially; the attempt that reaches the cap makes the record dead,
keeping the reason. One bad record never holds up the others.

    pending --not authentic--> quarantined (reason kept)
    pending --parse ok--> delivered
       |  \\--fails, attempts < cap--> pending (next_attempt_at = now + backoff)
       \\----fails, attempts = cap--> dead (last_error kept)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import commit_plain
from jobs.club.email_auth import RECEIPT_SENDERS, SenderAllowlist, quarantine_reason
from jobs.club.email_receipts import ReceiptRejected, parse_receipt
from jobs.club.stores.email_intake import EmailIntakeStore, IntakeStatus
from jobs.club.stores.receipts import ReceiptStore

ATTEMPTS_CAP = 5
BACKOFF_BASE_MS = 5 * 60_000
BACKOFF_MAX_MS = 6 * 3_600_000
BATCH = 25
MAX_BATCHES = 20


def backoff_ms(attempts: int) -> int:
    """Delay before the next attempt after `attempts` failed ones: 5, 10, 20, 40 min ... at most 6 h."""
    return min(BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_MS)


def retry_email_intake(
    intake: EmailIntakeStore, receipts: ReceiptStore, senders: SenderAllowlist, ctx: RunContext
) -> Iterator[dict[str, Any] | LastBatch]:
    """Deliver due authentic intake records; quarantine the rest; back off failures; dead at the cap."""
    for n in range(1, MAX_BATCHES + 1):
        now = ctx.now_ms()
        ids = intake.due(now, BATCH)
        counts = {"delivered": 0, "retried": 0, "dead": 0, "quarantined": 0, "skipped": 0}
        for intake_id in ids:
            row = intake.get(intake_id)
            if row is None or row.status != IntakeStatus.PENDING.value or int(row.next_attempt_at) > now:
                counts["skipped"] += 1
                continue
            reason = quarantine_reason(row.raw, intake.verdicts(row), senders)
            if reason is not None:
                outcome = "quarantined" if commit_plain(ctx, [intake.quarantined_op(row, reason, now)]) else "skipped"
                counts[outcome] += 1
                continue
            try:
                receipt = parse_receipt(row.raw)
            except ReceiptRejected as exc:
                attempts = int(row.attempts) + 1
                if attempts >= ATTEMPTS_CAP:
                    outcome, ops = "dead", [intake.dead_op(row, str(exc), now)]
                else:
                    outcome, ops = "retried", [intake.retry_op(row, str(exc), now + backoff_ms(attempts), now)]
            else:
                outcome, ops = (
                    "delivered",
                    [receipts.record_op(receipt, intake_id), intake.delivered_op(row, receipt.receipt_id, now)],
                )
            counts[outcome if commit_plain(ctx, ops) else "skipped"] += 1
        if len(ids) < BATCH or counts["skipped"] == len(ids) or n == MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts


def build_retry_email_intake(deps: JobDeps):
    intake = EmailIntakeStore(deps.settings.table("club_email_intake"), deps.clock)
    receipts = ReceiptStore(deps.settings.table("club_receipts"), deps.clock)
    senders = SenderAllowlist(deps.settings.setting(RECEIPT_SENDERS))
    return lambda ctx: retry_email_intake(intake, receipts, senders, ctx)
