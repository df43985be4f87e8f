"""A fenced transaction: a `jobfence.dynamo.Transaction` that commits only inside a live lease term.

`RunContext.transaction()` opens one with the lease check first; a store adds
its own conditional writes with pynamodb's transaction vocabulary (`save`, `update`,
`delete`, `condition_check`, built by pynamodb's public request builders), or hands
the job a prepared `Write` to add later,
so every expression of a table stays in its store module and no caller builds
low-level `TransactWriteItems` entries:

    with ctx.transaction() as tx:          # entry 0: lease_id = mine AND expires_at > now
        orders.cancel_op(row)(tx)          # caller entry 0
        operations.create_op(...)(tx)      # caller entry 1
    # committed here; a refusal raises one of:
    #   LeaseLost        the lease check failed (this term was taken over or expired): nothing applied
    #   ConditionFailed  caller entry i's own condition failed (its old image attached): nothing applied
    #   StoreError       anything else (throttled, unavailable, reply lost, rejected), classified by jobfence.dynamo

Entries are sent in the order they were added, so `ConditionFailed.index`
counts the caller's entries as they were added. Every entry asks for
`ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a refusal is explained
without a second read.

Retried as every write is (`jobfence.dynamo`): a transient error sends the same
request again under the transaction's own ClientRequestToken, which DynamoDB
applies at most once. A job that must judge a refusal of an earlier
transaction of its own reads the old image (`jobfence.retried`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobfence.dynamo import MAX_ENTRIES, Refused, Transaction
from jobfence.errors import ConditionFailed, LeaseLost

MAX_CALLER_ENTRIES = MAX_ENTRIES - 1  # one slot is the lease check


class FencedTransaction(Transaction):
    """A `Transaction` whose first entry is a lease check (the lease store's `ConditionCheck`)."""

    def __init__(self, job: str, lease_id: str, lease_check: Mapping[str, Any], client: Any) -> None:
        super().__init__(client, f"fenced write on {job!r}")
        self._job = job
        self._lease_id = lease_id
        self.add_entry("ConditionCheck", lease_check)

    def __len__(self) -> int:
        """Caller entries added so far (the lease check not counted)."""
        return super().__len__() - 1

    def add_entry(self, kind: str, body: Mapping[str, Any]) -> None:
        """A low-level entry, within the caller's `MAX_CALLER_ENTRIES` (the lease check takes one slot)."""
        if super().__len__() >= MAX_ENTRIES:
            raise ValueError(
                f"a fenced transaction takes at most {MAX_CALLER_ENTRIES} entries (one slot is the lease check)"
            )
        super().add_entry(kind, body)

    def add(self, *writes: Write) -> None:
        """Add prepared `Write`s in the caller's order (a refusal's `ConditionFailed.index` counts in this order)."""
        for write in writes:
            write(self)

    def __enter__(self) -> FencedTransaction:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        """Commit on a clean exit (an error inside the block sends nothing); a refusal raises `LeaseLost`
        (the lease check: nothing applied) or `ConditionFailed` (caller entry i: nothing applied)."""
        if exc_type is not None or not len(self):
            return
        outcome = self.commit()
        if isinstance(outcome, Refused):
            if outcome.index == 0:
                raise LeaseLost(self._job, self._lease_id, outcome.item)
            raise ConditionFailed(outcome.index - 1, outcome.item)


Write = Callable[[FencedTransaction], None]
"""A conditional write a store prepared, added to a transaction later (`tx.add(write)`).

A job that commits several stores' changes and their events together collects
`Write`s, then adds them all inside one `ctx.transaction()`.
"""


def update_write(item: Any, actions: Sequence[Any], condition: Any = None) -> Write:
    """A `Write` updating `item` (a key-only model instance) with `actions` under `condition`."""
    return lambda tx: tx.update(item, actions=list(actions), condition=condition)


def save_write(item: Any, condition: Any = None) -> Write:
    """A `Write` putting `item` under `condition`."""
    return lambda tx: tx.save(item, condition=condition)


def delete_write(item: Any, condition: Any = None) -> Write:
    """A `Write` deleting `item` (a key-only model instance) under `condition`."""
    return lambda tx: tx.delete(item, condition=condition)
