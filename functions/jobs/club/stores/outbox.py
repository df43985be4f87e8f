"""Store of the club outbox (`club_outbox`): Discord events saved with the change they stand for.

    job (key) | nonce (sort) | event (JSON, unsigned) | created_at | ttl

A job puts the outbox rows in the same fenced transaction as the record change,
so a saved change never loses its events and a refused change never emits any.
`drain` then signs and sends each row and deletes it. A crash between send and
delete re-sends the row on the next run with the same nonce; the Discord worker
drops the second copy as a replay.
"""

from __future__ import annotations

from collections.abc import Iterator

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import aws_call, delete_row, each_row
from jobfence.transaction import Write, save_write
from jobs.club.events import Event

RETENTION_MS = 7 * 24 * 3_600_000  # an unsent event older than this is no longer worth sending


class _OutboxRow(Model):
    class Meta:
        table_name = "unbound"

    job = UnicodeAttribute(hash_key=True)
    nonce = UnicodeAttribute(range_key=True)
    event = UnicodeAttribute()
    created_at = NumberAttribute()
    ttl = NumberAttribute()


class OutboxStore(ModelStore):
    """Transaction entries that save events, and the drain that sends them."""

    _model_class = _OutboxRow

    def put_op(self, job: str, event: Event) -> Write:
        """A fenced `Write` saving one event. Idempotent: the same change has the same nonce."""
        now = self._clock.now_ms()
        row = self._model(job, event.nonce, event=event.to_json(), created_at=now, ttl=ttl_seconds(now + RETENTION_MS))
        return save_write(row)

    def pending(self, job: str, limit: int) -> Iterator[tuple[str, Event]]:
        """Up to `limit` unsent events of `job` (strongly consistent: we just wrote them)."""
        for row in each_row(self._model.query(job, consistent_read=True, limit=limit), f"reading the outbox of {job}"):
            yield row.nonce, Event.from_json(row.event)

    def delete(self, job: str, nonce: str) -> None:
        """Forget a sent event."""
        delete_row(self._model(job, nonce), None, f"deleting a sent event of {job}")

    def count(self, job: str) -> int:
        with aws_call(f"counting the outbox of {job}"):
            return self._model.count(job, consistent_read=True)
