"""One conditional fenced write, retried on a store error and judged from the old image.

The claim-before-call pattern of the jobs that call a provider (the safety net,
financial recovery) writes each step as one conditional entry in a fenced
transaction:

    claim    open -> in progress, conditioned on what the job read (a change since refuses it)
    call     the provider, with the record's stable idempotency key
    settle   in progress -> outcome, conditioned on the claim still being in place

Each write is retried on a transient error as every write is (`jobfence.dynamo`:
the same transaction under its own ClientRequestToken, applied at most once).
A refusal is then read from the old image DynamoDB returns: `mine(old)` says
whether the competing row is our own earlier write (a try whose reply was lost
beyond the token's reach, or an earlier run's), so an applied-but-unanswered
write is recognised instead of counted as someone else's change.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

from jobfence.dynamo import is_aws_error
from jobfence.errors import ConditionFailed, StoreError
from jobfence.scheduled import RunContext
from jobfence.transaction import Write


class WriteResult(enum.Enum):
    """A conditional write after its retries."""

    APPLIED = "applied"  # applied now, or earlier by a try whose reply was lost (recognised in the old image)
    REFUSED = "refused"  # the condition failed against someone else's change
    UNKNOWN = "unknown"  # it ended in a store error (after every try): it may or may not have been applied


def fenced_write_retried(ctx: RunContext, write: Write, mine: Callable[[Mapping[str, Any]], bool]) -> WriteResult:
    """Apply one conditional `Write` in a fenced transaction; `mine(old image)` recognises our own earlier write."""
    try:
        with ctx.transaction() as tx:
            tx.add(write)
    except ConditionFailed as refused:
        return WriteResult.APPLIED if mine(refused.item) else WriteResult.REFUSED
    except Exception as exc:
        if not (isinstance(exc, StoreError) or is_aws_error(exc)):
            raise  # LeaseLost (the term is over: the job stops) and anything that is not the store
        return WriteResult.UNKNOWN
    return WriteResult.APPLIED
