"""What a worker gets and claims: the wake-up body (`parse_wakeup`), the provider call's request (`WorkRequest`,
`Perform`) and the claim's outcome (`ClaimState`, `Claim`).

Only a worker claims (`jobfence.work.worker`, which loads this module and the claim's transactions at its
init); the reclaimer, the producer and the operator's tools never load them (docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobfence.errors import InvalidEvent, bounded
from jobfence.work.keys import ID_PATTERN, MAX_SHARDS, ItemKey, shard_of

FIELD_ECHO_MAX = 64  # a field name an InvalidEvent echoes, at most


class _Keys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(pattern=ID_PATTERN)
    batch: str = Field(pattern=ID_PATTERN)
    item: str = Field(pattern=ID_PATTERN)
    # absent in a wake-up sent before batches recorded their count: every batch then had MAX_SHARDS
    shard: int | None = Field(default=None, ge=0, lt=MAX_SHARDS, strict=True)


def parse_wakeup(body: str) -> ItemKey:
    """The keys of an SQS message body, or `InvalidEvent` saying what is wrong (never echoing the body).

    The message is bounded: field names are cut to `FIELD_ECHO_MAX` characters, values never appear.

    A body without `shard` was sent before batches recorded their shard
    count, when every batch had `MAX_SHARDS`: its row's shard is the item's
    under that count. A shard that is not the row's finds no row (NOT_FOUND,
    a batch item failure); nothing is written through it.
    """
    try:
        keys = _Keys.model_validate_json(body)
    except ValidationError as exc:
        # an unknown field's name is the sender's: each name is bounded, so is the whole message
        where = "; ".join(
            f"{'.'.join(bounded(p, FIELD_ECHO_MAX) for p in err['loc']) or 'body'}: {err['type']}"
            for err in exc.errors()[:3]
        )
        raise InvalidEvent(f"message body is not a wake-up {{tenant, batch, item, shard}}: {where}") from None
    shard = shard_of(keys.item, MAX_SHARDS) if keys.shard is None else keys.shard
    return ItemKey(keys.tenant, keys.batch, keys.item, shard)


@dataclass(frozen=True)
class WorkRequest:
    """What a provider call gets: the item's keys, its input and a key that makes retries idempotent."""

    key: ItemKey
    kind: str
    attempt: int
    payload: Mapping[str, Any]

    @property
    def idempotency_key(self) -> str:
        """`tenant:batch_id:item_id`: what the provider call sends as its idempotency key.

        Per item, not per attempt: a retry after a lost reply carries the same key, so it does not act twice.
        """
        return f"{self.key.tenant}:{self.key.batch_id}:{self.key.item_id}"


Perform = Callable[[WorkRequest, float], str]  # (request, timeout seconds) -> result reference


class ClaimState(str, enum.Enum):
    """How one wake-up's claim came out."""

    CLAIMED = "claimed"  # this worker holds the item: process it
    DUPLICATE = "duplicate"  # not pending (done, running elsewhere, failed): acknowledge
    NOT_FOUND = "not_found"  # no such item under this tenant and batch: a batch item failure
    WRONG_PIPELINE = "wrong_pipeline"  # the item belongs to the other queue: a batch item failure
    QUOTA_EXHAUSTED = "quota_exhausted"  # failed terminally, nothing reserved: acknowledge
    CONTENDED = "contended"  # the claim lost every round to races: a batch item failure (redelivered)
    CANCELLED = "cancelled"  # claimed after its batch was cancelled: cancelled unrun (refunded): acknowledge
    ERRORED = "claim_error"  # the claim's write failed (a store error, its reason): a batch item failure


@dataclass(frozen=True)
class Claim:
    key: ItemKey
    state: ClaimState
    token: str | None = None
    attempts: int = 0
    payload: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""
