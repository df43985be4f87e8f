"""Store of equipment loans (`club_equipment_loans`): which member has which item until when.

loan_id (key) | member_id | item | due_back_at | returned_at
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import get_row, put_row, update_row
from jobfence.transaction import Write


class _Loan(Model):
    class Meta:
        table_name = "unbound"

    loan_id = UnicodeAttribute(hash_key=True)
    member_id = UnicodeAttribute()
    item = UnicodeAttribute()
    due_back_at = NumberAttribute()
    returned_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class Loan:
    """One loan as read, built by the store from its row."""

    loan_id: str
    member_id: str
    item: str
    due_back_at: int
    returned_at: int | None  # None while the item is out


class LoanStore(ModelStore):
    """Record and read loans."""

    _model_class = _Loan

    def put(self, loan_id: str, member_id: str, item: str, due_back_at: int) -> None:
        put_row(
            self._model(loan_id, member_id=member_id, item=item, due_back_at=due_back_at),
            None,
            f"recording loan {loan_id}",
        )

    def mark_returned(self, loan_id: str) -> None:
        """Record the return; the first applied time stays (a copy re-sent or asked again never moves it)."""
        m = self._model
        update_row(
            m(loan_id),
            [m.returned_at.set(m.returned_at | self._clock.now_ms())],
            m.loan_id.exists(),
            f"returning loan {loan_id}",
        ).or_raise()

    def still_out_op(self, loan_id: str) -> Write:
        """A check that the loan exists and is not returned: a reminder's send commits only together with it."""
        m = self._model
        return lambda tx: tx.condition_check(m, loan_id, condition=m.loan_id.exists() & m.returned_at.does_not_exist())

    def get(self, loan_id: str) -> Loan | None:
        row = get_row(self._model, loan_id, what="reading a row of loans")
        if row is None:
            return None
        returned = None if row.returned_at is None else int(row.returned_at)
        return Loan(row.loan_id, row.member_id, row.item, int(row.due_back_at), returned)
