"""Store of agent invitations: a customer invites an agent; the invitation expires.

    invitation_id (key) | account_id | agent_email | status | expires_at | expiry_shard | ttl

Pending invitations sit in the sparse `by_expiry` index; accepting removes
`expiry_shard`. Readers apply live expiry. Sending an invitation and cleaning
up a delegated session at the provider are explicit requests of the API; the
store has no method for either, so `expire_agent_invitations` cannot do them.
"""

from __future__ import annotations

import enum
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import caller_reads, delete_row, get_row, put_row, update_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live


class InvitationStatus(str, enum.Enum):
    """Lifecycle of an invitation."""

    PENDING = "pending"  # created by the API; the agent accepting moves it on, or expire_agent_invitations deletes it
    ACCEPTED = "accepted"  # terminal: the agent accepted before expires_at (leaves the expiry index)


class _Invitation(Model):
    class Meta:
        table_name = "unbound"

    invitation_id = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    agent_email = UnicodeAttribute()
    status = UnicodeAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute(null=True)
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class AgentInvitationStore(ModelStore):
    """Create, read (live), accept and delete expired invitations."""

    _model_class = _Invitation

    def create(self, invitation_id: str, account_id: str, agent_email: str, expires_at: int) -> None:
        put_row(
            self._model(
                invitation_id,
                account_id=account_id,
                agent_email=agent_email,
                status=InvitationStatus.PENDING.value,
                expires_at=expires_at,
                expiry_shard=expiry_shard(invitation_id),
                ttl=ttl_seconds(expires_at),
            ),
            None,
            f"creating invitation {invitation_id}",
        )

    def get(self, invitation_id: str) -> Any | None:
        """A pending invitation that has not expired, or an accepted one (live expiry)."""
        row = get_row(self._model, invitation_id, what="reading a row of agent_invitations")
        if row is None:
            return None
        if row.status == InvitationStatus.PENDING.value and not is_live(row, self._clock.now_ms()):
            return None
        return row

    def accept(self, invitation_id: str) -> bool:
        model = self._model
        return update_row(
            model(invitation_id),
            [model.status.set(InvitationStatus.ACCEPTED.value), model.expiry_shard.remove()],
            (model.status == InvitationStatus.PENDING.value) & (model.expires_at > self._clock.now_ms()),
            f"accepting invitation {invitation_id}",
        ).applied

    def delete_expired(self, limit: int) -> tuple[int, int]:
        """Delete up to `limit` expired pending invitations; return (deleted, scanned).

        Each delete is conditioned on the row still being pending and expired.
        """
        model = self._model
        now = self._clock.now_ms()
        rows = list(expired(model, now, limit))
        deleted = 0
        for row in rows:
            deleted += delete_row(
                model(row.invitation_id),
                (model.status == InvitationStatus.PENDING.value) & (model.expires_at <= now),
                f"deleting invitation {row.invitation_id}",
                ours=caller_reads,  # refused: accepted or extended since, or already gone (not counted)
            ).applied
        return deleted, len(rows)
