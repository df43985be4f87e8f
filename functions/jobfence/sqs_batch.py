"""The input edge of an SQS worker: which records of a Lambda SQS event can be processed at all.

A record the batch processor can handle has a string `messageId` (what a
partial batch response names), a string `receiptHandle` and a string `body`. Lambda never sends
anything else, but a hand-made invocation can (`{"Records": [{}]}`); such a
record cannot be reported back by id, so it is dropped with a count instead
of raising a `KeyError` out of the handler. An event that is not
`{"Records": [...]}` at all is an `InvalidEvent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobfence.errors import InvalidEvent

MAX_RECORDS = 10_000  # Lambda's largest SQS batch; more is not an SQS event


@dataclass(frozen=True)
class SqsRecords:
    """The processable records, and how many were dropped as malformed."""

    records: tuple[dict[str, Any], ...]
    malformed: int

    def event(self) -> dict[str, Any]:
        """An SQS event of the processable records only (for Powertools' batch processor)."""
        return {"Records": list(self.records)}


def _processable(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("messageId"), str)
        and record["messageId"] != ""
        and isinstance(record.get("receiptHandle"), str)
        and isinstance(record.get("body"), str)
    )


def split_records(event: Any) -> SqsRecords:
    """The records of an SQS event that carry a message id and a body; raise `InvalidEvent` for a non-SQS event."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list) or len(records) > MAX_RECORDS:
        raise InvalidEvent('an SQS worker takes an SQS batch event {"Records": [...]}')
    good = tuple(r for r in records if _processable(r))
    return SqsRecords(good, len(records) - len(good))
