"""Store of diagnostic captures: parents with an expiry, their children, and the charge they retain.

One table, one partition per capture, plus one usage row per account:

    capture_id (key) | part (sort)
    <capture>        | parent      account_id, expires_at, expiry_shard, retained_charge_cents,
                                   minute_write_cents, charge_released_at, ttl
    <capture>        | ref#0001..  one row per recorded reference
    <capture>        | header      the captured request header
    <capture>        | token       the captured token digest
    usage#<account>  | usage       retained_cents (released on expiry), minute_write_cents (never refunded)

Recording a capture adds its retained charge and its minute write charge to the
account's usage. When the parent expires, retention releases the retained
charge back **exactly once**: the release is one transaction whose first entry
sets `charge_released_at` on the parent under the condition that it is not set
yet, so a second run, an overlapping run or a retry cannot release twice.
Minute write charges are never refunded. Only parents carry `expiry_shard`, so
the sparse `by_expiry` index lists expired parents, never children. Readers
apply live expiry through the parent, also to rows restored from a backup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, client_of
from jobfence.clock import ttl_seconds
from jobfence.dynamo import Transaction, aws_call, caller_reads, delete_row, each_row, get_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live
from jobfence.transaction import Write, update_write

PARENT = "parent"
HEADER = "header"
TOKEN = "token"
USAGE = "usage"


def _usage_key(account_id: str) -> str:
    return f"usage#{account_id}"


class _Diagnostic(Model):
    class Meta:
        table_name = "unbound"

    capture_id = UnicodeAttribute(hash_key=True)
    part = UnicodeAttribute(range_key=True)
    account_id = UnicodeAttribute(null=True)
    body = UnicodeAttribute(null=True)
    expires_at = NumberAttribute(null=True)
    expiry_shard = UnicodeAttribute(null=True)
    retained_charge_cents = NumberAttribute(null=True)
    minute_write_cents = NumberAttribute(null=True)
    charge_released_at = NumberAttribute(null=True)
    retained_cents = NumberAttribute(null=True)
    ttl = NumberAttribute(null=True)
    by_expiry = expiry_index()


@dataclass(frozen=True)
class ExpiredCapture:
    """An expired capture's parent as retention reads it, built by the store from its row."""

    capture_id: str
    account_id: str  # whose usage row holds the retained charge (empty: none named, so none to give back to)
    retained_charge_cents: int  # 0 when the capture retained nothing
    charge_released_at: int | None  # set by the one release of the retained charge


def _expired_capture(row: _Diagnostic) -> ExpiredCapture:
    return ExpiredCapture(
        capture_id=row.capture_id,
        account_id=row.account_id or "",
        retained_charge_cents=int(row.retained_charge_cents or 0),
        charge_released_at=None if row.charge_released_at is None else int(row.charge_released_at),
    )


class DiagnosticStore(ModelStore):
    """Record captures, read them (live only), and retire expired ones."""

    _model_class = _Diagnostic

    # -- the API side -----------------------------------------------------------------------

    def record(
        self,
        capture_id: str,
        account_id: str,
        refs: list[str],
        header: str,
        token: str,
        expires_at: int,
        retained_charge_cents: int,
        minute_write_cents: int,
    ) -> None:
        """Write a parent, its children and the account's charges in one transaction."""
        model = self._model
        ttl = ttl_seconds(expires_at)
        # one token for the whole transaction: a retry after a lost reply is applied at most once (the charges too)
        tx = Transaction(client_of(model), f"recording diagnostic {capture_id}")
        tx.save(
            model(
                capture_id,
                PARENT,
                account_id=account_id,
                expires_at=expires_at,
                expiry_shard=expiry_shard(capture_id),
                retained_charge_cents=retained_charge_cents,
                minute_write_cents=minute_write_cents,
                ttl=ttl,
            ),
            condition=model.capture_id.does_not_exist(),
        )
        for i, ref in enumerate(refs):
            tx.save(model(capture_id, f"ref#{i:04d}", body=ref, ttl=ttl))
        tx.save(model(capture_id, HEADER, body=header, ttl=ttl))
        tx.save(model(capture_id, TOKEN, body=token, ttl=ttl))
        tx.update(
            model(_usage_key(account_id), USAGE),
            actions=[
                model.retained_cents.add(retained_charge_cents),
                model.minute_write_cents.add(minute_write_cents),
            ],
        )
        tx.commit().or_raise()

    def read(self, capture_id: str) -> dict[str, Any] | None:
        """A live capture's parts by name, or None if unknown or expired (live expiry via the parent)."""
        parts = each_row(self._model.query(capture_id, consistent_read=True), f"reading diagnostic {capture_id}")
        rows = {row.part: row for row in parts}
        parent = rows.get(PARENT)
        if parent is None or not is_live(parent, self._clock.now_ms()):
            return None
        return {part: row.body for part, row in rows.items() if part != PARENT}

    def usage(self, account_id: str) -> tuple[int, int]:
        """(retained_cents, minute_write_cents) currently charged to the account."""
        row = get_row(self._model, _usage_key(account_id), USAGE, what="reading a row of diagnostics")
        if row is None:
            return 0, 0
        return int(row.retained_cents or 0), int(row.minute_write_cents or 0)

    # -- retention --------------------------------------------------------------------------

    def expired_parents(self, limit: int) -> list[ExpiredCapture]:
        """Up to `limit` expired parents, full rows (keys from the index, then BatchGetItem)."""
        now = self._clock.now_ms()
        keys = [(row.capture_id, row.part) for row in expired(self._model, now, limit)]
        if not keys:
            return []
        rows = list(each_row(self._model.batch_get(keys, consistent_read=True), "reading expired diagnostics"))
        # a row restored or extended after the index read must not be retired
        return [_expired_capture(row) for row in rows if row.part == PARENT and not is_live(row, now)]

    def needs_release(self, parent: ExpiredCapture) -> bool:
        return bool(parent.retained_charge_cents) and parent.charge_released_at is None

    def release_ops(self, parent: ExpiredCapture) -> list[Write]:
        """Fenced `Write`s releasing a parent's retained charge once.

        Write 0 is the parent's marker (condition: expired, not released yet);
        write 1 gives the retained amount back on the account's usage row.
        """
        m = self._model
        now = self._clock.now_ms()
        return [
            update_write(
                m(parent.capture_id, PARENT),
                [m.charge_released_at.set(now)],
                m.charge_released_at.does_not_exist() & (m.expires_at <= now),
            ),
            update_write(
                m(_usage_key(parent.account_id), USAGE),
                [m.retained_cents.add(-int(parent.retained_charge_cents))],
                m.retained_cents.exists(),
            ),
        ]

    def delete_capture(self, parent: ExpiredCapture) -> int:
        """Delete the children (refs, header, token), then the parent; return rows deleted.

        The parent goes last and only if it is still expired and holds no
        unreleased charge, so a crash in between leaves it in the index and
        the next chunk finishes the cascade.
        """
        model = self._model
        parts = model.query(parent.capture_id, attributes_to_get=["capture_id", "part"], consistent_read=True)
        children = [row for row in each_row(parts, f"reading diagnostic {parent.capture_id}") if row.part != PARENT]
        with aws_call(f"deleting the parts of diagnostic {parent.capture_id}"), model.batch_write() as batch:
            for row in children:
                batch.delete(model(row.capture_id, row.part))
        now = self._clock.now_ms()
        still_expired_and_settled = (model.expires_at <= now) & (
            model.charge_released_at.exists()
            | model.retained_charge_cents.does_not_exist()
            | (model.retained_charge_cents == 0)
        )
        parent_row = model(parent.capture_id, PARENT)
        deleted = delete_row(
            parent_row, still_expired_and_settled, f"deleting diagnostic {parent.capture_id}", ours=caller_reads
        )
        if not deleted.applied:  # extended, charged or already gone: the children only
            return len(children)
        return len(children) + 1
