"""A fenced transaction: a pynamodb `TransactWrite` that commits only inside a live lease term.

`RunContext.transaction()` opens one with the lease check first; a store adds
its own conditional writes with the ordinary pynamodb calls (`save`, `update`,
`delete`, `condition_check`), or hands the job a prepared `Write` to add later,
so every expression of a table stays in its store module and no caller builds
low-level `TransactWriteItems` entries:

    with ctx.transaction() as tx:          # entry 0: lease_id = mine AND expires_at > now
        orders.cancel_op(row)(tx)          # caller entry 0
        operations.create_op(...)(tx)      # caller entry 1
    # committed here; a refusal raises one of:
    #   LeaseLost        the lease check failed (this term was taken over or expired): nothing applied
    #   ConditionFailed  caller entry i's own condition failed (its old image attached): nothing applied
    #   StoreError       anything else (throttled, unavailable, reply lost, rejected), classified by jobfence.dynamo

pynamodb sends condition checks, deletes, puts and updates in that order, not
in the order they were added; the transaction remembers the caller's order so
`ConditionFailed.index` counts the caller's entries as they were added. Every
entry asks for `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a refusal is
explained without a second read.

Not retried here: botocore re-sends a request whose reply was lost with the
same client token, which DynamoDB deduplicates; a second transaction of ours
would carry a new token. A job that must retry judges the refusal of its own
earlier try from the old image (`jobfence.retried`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pynamodb.connection import Connection
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from jobfence.dynamo import (
    REASON_CONDITION_FAILED,
    cancellation_reasons,
    classify,
    is_aws_error,
    plain,
    raise_store_error,
)
from jobfence.errors import ConditionFailed, ErrorKind, LeaseLost, StoreError

ALL_OLD = "ALL_OLD"
MAX_ENTRIES = 99  # TransactWriteItems takes 100 entries; one is the lease check
_KINDS = ("check", "delete", "put", "update")  # pynamodb's wire order


class FencedTransaction(TransactWrite):
    """A `TransactWrite` whose first entry is a lease check (the lease store's `ConditionCheck`)."""

    def __init__(self, job: str, lease_id: str, lease_check: Mapping[str, Any], connection: Connection) -> None:
        super().__init__(connection=connection)
        self._job = job
        self._lease_id = lease_id
        self._condition_check_items.append(dict(lease_check))
        self._added: list[tuple[str, int]] = []  # (kind, position within its kind) in the caller's order

    def __len__(self) -> int:
        """Caller entries added so far (the lease check not counted)."""
        return len(self._added)

    def condition_check(
        self, model_cls: type[Model], hash_key: Any, range_key: Any = None, condition: Condition | None = None
    ) -> None:
        """Add a check of the item at `hash_key`/`range_key` under `condition`; refused, it reports the old image."""
        self._note("check", len(self._condition_check_items))
        super().condition_check(model_cls, hash_key, range_key=range_key, condition=condition)
        self._condition_check_items[-1]["ReturnValuesOnConditionCheckFailure"] = ALL_OLD

    def delete(self, model: Model, condition: Condition | None = None, *, add_version_condition: bool = True) -> None:
        """Add a delete of `model`'s item under `condition`; refused, it reports the old image."""
        self._note("delete", len(self._delete_items))
        super().delete(model, condition, add_version_condition=add_version_condition)
        self._delete_items[-1]["ReturnValuesOnConditionCheckFailure"] = ALL_OLD

    def save(self, model: Model, condition: Condition | None = None, return_values: str | None = ALL_OLD) -> None:
        """Add a put of `model` under `condition`; refused, it reports the old image."""
        self._note("put", len(self._put_items))
        super().save(model, condition, return_values)

    def update(
        self,
        model: Model,
        actions: Sequence[Action],
        condition: Condition | None = None,
        return_values: str | None = ALL_OLD,
        *,
        add_version_condition: bool = True,
    ) -> None:
        """Add an update of `model`'s item with `actions` under `condition`; refused, it reports the old image."""
        self._note("update", len(self._update_items))
        super().update(model, list(actions), condition, return_values, add_version_condition=add_version_condition)

    def add(self, *writes: Write) -> None:
        """Add prepared `Write`s in the caller's order (a refusal's `ConditionFailed.index` counts in this order)."""
        for write in writes:
            write(self)

    def _note(self, kind: str, position: int) -> None:
        if len(self._added) >= MAX_ENTRIES:
            raise ValueError(f"a fenced transaction takes at most {MAX_ENTRIES} entries (one slot is the lease check)")
        self._added.append((kind, position))

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        # pynamodb's own exit sends `_commit()` unmapped; an error inside the block sends nothing
        if exc_type is None:
            self.commit()

    def commit(self) -> None:
        """Send the transaction (nothing when no entry was added); map a refusal to the errors above."""
        if not self._added:
            return
        try:
            self._commit()
        except Exception as exc:
            if not is_aws_error(exc) or classify(exc) is not ErrorKind.TRANSACTION_CANCELED:
                raise_store_error(exc, f"fenced write on {self._job!r}")
            raise self._refusal(exc) from None

    def _refusal(self, exc: Exception) -> Exception:
        sizes = {
            "check": len(self._condition_check_items),
            "delete": len(self._delete_items),
            "put": len(self._put_items),
            "update": len(self._update_items),
        }
        wire: list[tuple[str, int]] = [(kind, i) for kind in _KINDS for i in range(sizes[kind])]
        reasons = cancellation_reasons(exc)
        for position, reason in enumerate(reasons):
            if reason.get("Code") != REASON_CONDITION_FAILED or position >= len(wire):
                continue
            if wire[position] == ("check", 0):
                return LeaseLost(self._job, self._lease_id, plain(reason.get("Item")))
            return ConditionFailed(self._added.index(wire[position]), plain(reason.get("Item")))
        codes = ",".join(str(r.get("Code")) for r in reasons)
        return StoreError(f"fenced write on {self._job!r} was cancelled: {codes}", classify(exc))


Write = Callable[[TransactWrite], None]
"""A conditional write a store prepared, added to a transaction later (`tx.add(write)`).

A job that commits several stores' changes and their events together collects
`Write`s, then adds them all inside one `ctx.transaction()`.
"""


def update_write(item: Model, actions: Sequence[Action], condition: Condition | None = None) -> Write:
    """A `Write` updating `item` (a key-only model instance) with `actions` under `condition`."""
    return lambda tx: tx.update(item, actions=list(actions), condition=condition)


def save_write(item: Model, condition: Condition | None = None) -> Write:
    """A `Write` putting `item` under `condition`."""
    return lambda tx: tx.save(item, condition=condition)


def delete_write(item: Model, condition: Condition | None = None) -> Write:
    """A `Write` deleting `item` (a key-only model instance) under `condition`."""
    return lambda tx: tx.delete(item, condition=condition)
