"""Store of membership receipts (`club_receipts`): what grants a member a role, and until when.

    member_id (key) | receipt_id (sort) | role_id | valid_from | valid_until | intake_id | recorded_at

Receipts arrive through the email intake; role reconciliation reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import each_row, put_row
from jobfence.transaction import Write, save_write


@dataclass(frozen=True)
class Receipt:
    """A membership receipt, as parsed from an intake email."""

    receipt_id: str
    member_id: str
    role_id: str
    valid_from: int
    valid_until: int


class _Receipt(Model):
    class Meta:
        table_name = "unbound"

    member_id = UnicodeAttribute(hash_key=True)
    receipt_id = UnicodeAttribute(range_key=True)
    role_id = UnicodeAttribute()
    valid_from = NumberAttribute()
    valid_until = NumberAttribute()
    intake_id = UnicodeAttribute(null=True)
    recorded_at = NumberAttribute()


class ReceiptStore(ModelStore):
    """Record receipts and read the roles they grant."""

    _model_class = _Receipt

    def _row(self, receipt: Receipt, intake_id: str | None) -> Any:
        return self._model(
            receipt.member_id,
            receipt.receipt_id,
            role_id=receipt.role_id,
            valid_from=receipt.valid_from,
            valid_until=receipt.valid_until,
            intake_id=intake_id,
            recorded_at=self._clock.now_ms(),
        )

    def put(self, receipt: Receipt, intake_id: str | None = None) -> None:
        """Record a receipt directly (seed data, operators)."""
        put_row(self._row(receipt, intake_id), None, f"recording receipt {receipt.receipt_id}")

    def record_op(self, receipt: Receipt, intake_id: str) -> Write:
        """A `Put` recording the receipt; re-recording the same receipt from the same email is harmless."""
        return save_write(self._row(receipt, intake_id))

    def for_member(self, member_id: str) -> list[Receipt]:
        return [
            Receipt(r.receipt_id, r.member_id, r.role_id, int(r.valid_from), int(r.valid_until))
            for r in each_row(
                self._model.query(member_id, consistent_read=True), f"reading the receipts of {member_id}"
            )
        ]

    def granted_roles(self, member_id: str, now_ms: int) -> set[str]:
        """Roles granted by the member's receipts that are valid now."""
        return {r.role_id for r in self.for_member(member_id) if r.valid_from <= now_ms < r.valid_until}
