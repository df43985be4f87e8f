"""The producer: create a batch of up to 10,000 items and wake a worker for each."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from jobfence.dynamo import safe_error
from jobfence.errors import JobfenceError, StoreError
from jobfence.work.inputs import ItemInput
from jobfence.work.keys import (
    MAX_ITEMS_PER_BATCH,
    MAX_PAYLOAD_CHARS,
    SEND_CHUNK,
    BatchConflict,
    BatchRef,
    tolerated_failures,
    validate_id,
)
from jobfence.work.store import WorkStore
from jobfence.work.wakeups import Wakeups

# Wake-ups sent between two `enqueued` checkpoints (a write of the batch row each): a producer at
# 10,000 items/s writes its batch row 100 times a second rather than 1,000 (docs/benchmarks.md, "The
# hottest key"). A call that dies between two re-sends at most this many wake-ups when repeated (a
# duplicate wake-up loses the claim and is acknowledged); a call that fails checkpoints first.
CHECKPOINT_EVERY = 100


@dataclass(frozen=True)
class SubmitResult:
    """What one producer call did."""

    ref: BatchRef
    created: bool  # the batch row was created by this call
    rows_written: int
    enqueued: int  # wake-ups sent by this call


class Producer:
    """Create a batch of up to 10,000 items and wake a worker for each.

    Repeating a call is safe, and is how a caller finishes a call that failed
    or died half-way: the batch row is created once (conditional put), only
    missing item rows are written (each put conditional, so a late or re-sent
    put never resets a row workers moved on), and wake-ups resume from the
    batch's `enqueued` checkpoint (advanced every `CHECKPOINT_EVERY` wake-ups, at
    the end, and before a send failure is raised), so a call that completed
    enqueues nothing the second time and one that died re-sends fewer than
    `CHECKPOINT_EVERY`. The batch cannot be
    finalized before all `total` rows exist, so a batch opened by a call that
    died stays open until a repeated call completes it. A pipeline's tolerated
    failure percentage is recorded on the batch row when it is created: past
    it, the batch's pending items are failed and it finalizes `failed_threshold`.
    """

    def __init__(
        self,
        store: WorkStore,
        wakeups: Mapping[str, Wakeups],
        logger: Logger,
        tolerated_failure_pct: Mapping[str, float | None] | None = None,
    ) -> None:
        self._batches = store.batches
        self._items = store.items
        self._wakeups = dict(wakeups)
        self._logger = logger
        self._tolerated_pct = dict(tolerated_failure_pct or {})  # per pipeline (the catalog's); absent: none

    def submit(self, ref: BatchRef, kind: str, items: Sequence[ItemInput], created_by: str) -> SubmitResult:
        """Create (or resume creating) the batch; raise `StoreError` if wake-ups cannot be sent."""
        validate_id(ref.tenant, "tenant")
        validate_id(ref.batch_id, "batch id")
        if kind not in self._wakeups:
            raise ValueError(f"no pipeline {kind!r}")
        if not 1 <= len(items) <= MAX_ITEMS_PER_BATCH:
            raise ValueError(f"a batch has 1..{MAX_ITEMS_PER_BATCH} items, got {len(items)}")
        ids = [validate_id(i.item_id, "item id") for i in items]
        if len(set(ids)) != len(ids):
            raise ValueError("item ids must be unique within a batch")
        for item in items:
            if len(json.dumps(dict(item.payload), separators=(",", ":"))) > MAX_PAYLOAD_CHARS:
                raise ValueError(f"an item's input is limited to {MAX_PAYLOAD_CHARS} characters")
        tolerated = tolerated_failures(self._tolerated_pct.get(kind), len(items))
        batch, created = self._batches.open_batch(ref, kind, len(items), created_by, tolerated)
        if created:
            missing = list(enumerate(items))
        else:
            existing = self._items.existing_item_ids(ref, batch.shards)
            if not existing <= set(ids):
                raise BatchConflict(f"batch {ref} exists with other item ids")
            missing = [(seq, item) for seq, item in enumerate(items) if item.item_id not in existing]
        if batch.status.final:
            # its rows number `total` and none is live: this call was done before (a finalized batch never changes)
            return SubmitResult(ref, False, 0, 0)
        written = self._items.put_items(ref, kind, missing, batch.shards) if missing else 0
        sent = 0
        marked = batch.enqueued  # the checkpoint as this call last wrote (or found) it
        for start in range(batch.enqueued, len(items), SEND_CHUNK):
            chunk = [batch.item_key(i.item_id) for i in items[start : start + SEND_CHUNK]]
            failed = self._wakeups[kind].send(chunk)
            if failed:
                failed = self._wakeups[kind].send(failed)  # one more try for a partial failure
            if failed:
                if start > marked:  # what went out before the failure is not sent again by the repeat
                    try:
                        self._batches.checkpoint_enqueued(ref, start)
                    except (
                        JobfenceError
                    ) as exc:  # best effort: the repeat re-sends a few more; the send error is the news
                        self._logger.warning(
                            "checkpointing wake-ups failed",
                            extra={"tenant": ref.tenant, "batch": ref.batch_id, "reason": safe_error(exc)},
                        )
                raise StoreError(f"{len(failed)} wake-ups of batch {ref} could not be sent; repeat the call to resume")
            sent += len(chunk)
            done = start + len(chunk)
            if done - marked >= CHECKPOINT_EVERY or done == len(items):
                self._batches.checkpoint_enqueued(ref, done)
                marked = done
        self._logger.info(
            "batch submitted",
            extra={
                "tenant": ref.tenant,
                "batch": ref.batch_id,
                "kind": kind,
                "batch_created": created,
                "rows_written": written,
                "enqueued": sent,
            },
        )
        return SubmitResult(ref, created, written, sent)
