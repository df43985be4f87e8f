"""Store of club memberships (`club_memberships`): who is a member until when, and which roles they hold.

    member_id (key) | guild_id | discord_user_id | status | access | ends_at | roles | roles_version | active_shard

`roles` is what the system has applied on Discord (as far as it knows);
`roles_version` increases with every change of it, so reconciliation writes
only over the state it read. `active_shard` exists only while the membership is
active: the sparse index `active_by_end` (active_shard, ends_at) finds the
memberships that have ended without reading the others.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from pynamodb.attributes import ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import get_row, one_page, put_row
from jobfence.transaction import Write, update_write
from jobs.club.catalog import ACTIVE_INDEX_SPEC
from jobs.club.stores.due import due_rows, shard_of
from jobs.club.stores.states import RowRead, RowRef, reads, state_of


class MembershipStatus(str, enum.Enum):
    """Lifecycle of a membership."""

    ACTIVE = "active"  # set when a membership is created or renewed (intake / operators)
    EXPIRED = "expired"  # set by expire_memberships once ends_at has passed; terminal until renewed


class Access(str, enum.Enum):
    """What the membership lets the member use in the club (follows the status)."""

    MEMBER = "member"
    NONE = "none"


class _Membership(Model):
    class Meta:
        table_name = "unbound"

    member_id = UnicodeAttribute(hash_key=True)
    guild_id = UnicodeAttribute()
    discord_user_id = UnicodeAttribute()
    status = UnicodeAttribute()
    access = UnicodeAttribute()
    ends_at = NumberAttribute()
    roles = ListAttribute(of=UnicodeAttribute, default=list)
    roles_version = NumberAttribute(default=0)
    active_shard = UnicodeAttribute(null=True)
    expired_at = NumberAttribute(null=True)
    active_by_end = index(ACTIVE_INDEX_SPEC)


@dataclass(frozen=True)
class Membership:
    """One membership as read, built by the store from its row."""

    member_id: str
    guild_id: str
    discord_user_id: str
    status: MembershipStatus
    access: Access
    ends_at: int
    roles: tuple[str, ...]  # applied on Discord, as far as the system knows
    roles_version: int  # every write of a membership is conditioned on the version read


def _membership(row: _Membership) -> Membership:
    where = RowRef("club_memberships", row.member_id)
    return Membership(
        member_id=row.member_id,
        guild_id=row.guild_id,
        discord_user_id=row.discord_user_id,
        status=state_of(MembershipStatus, row.status, where, "status"),
        access=state_of(Access, row.access, where, "access"),
        ends_at=int(row.ends_at),
        roles=tuple(str(role) for role in row.roles or ()),  # the stubs type a list of strings as attributes
        roles_version=int(row.roles_version or 0),
    )


class MembershipStore(ModelStore):
    """Read memberships and build their conditional updates (applied in fenced transactions)."""

    _model_class = _Membership

    def put(self, member_id: str, guild_id: str, discord_user_id: str, ends_at: int, roles: Iterable[str] = ()) -> None:
        """Create or renew an active membership (seed data and operators)."""
        put_row(
            self._model(
                member_id,
                guild_id=guild_id,
                discord_user_id=discord_user_id,
                status=MembershipStatus.ACTIVE.value,
                access=Access.MEMBER.value,
                ends_at=ends_at,
                roles=sorted(set(roles)),
                roles_version=0,
                active_shard=shard_of(member_id),
            ),
            None,
            f"recording membership {member_id}",
        )

    def get(self, member_id: str) -> Membership | None:
        row = get_row(self._model, member_id, what="reading a row of memberships")
        return None if row is None else _membership(row)

    def ended(self, now_ms: int, limit: int) -> list[str]:
        """Ids of active memberships whose end has passed (from the sparse index; may be stale)."""
        return [row.member_id for row in due_rows(self._model.active_by_end, self._model.ends_at, now_ms, limit)]

    def expire_op(self, row: Membership, now_ms: int) -> Write:
        """Expire an ended membership: access off, recorded roles cleared, out of the active index.

        Conditioned on it still being active and ended, and on the roles we read
        (their removal events go in the same transaction).
        """
        m = self._model
        actions = [
            m.status.set(MembershipStatus.EXPIRED.value),
            m.access.set(Access.NONE.value),
            m.expired_at.set(now_ms),
            m.roles.set([]),
            m.roles_version.set(row.roles_version + 1),
            m.active_shard.remove(),
        ]
        condition = (
            (m.status == MembershipStatus.ACTIVE.value) & (m.ends_at <= now_ms) & (m.roles_version == row.roles_version)
        )
        return update_write(m(row.member_id), actions, condition)

    def page(self, cursor: dict | None, limit: int) -> tuple[list[RowRead[Membership]], dict | None]:
        """One page of memberships (consistent scan), a read per row, and the cursor of the next page (None at the end)."""
        result = self._model.scan(limit=limit, last_evaluated_key=cursor, consistent_read=True, page_size=limit)
        rows, after = one_page(result, "scanning memberships")
        return reads(rows, _membership), after

    def set_roles_op(self, row: Membership, roles: Iterable[str]) -> Write:
        """Record the roles now applied, only over the version that was read."""
        m = self._model
        actions = [m.roles.set(sorted(set(roles))), m.roles_version.set(row.roles_version + 1)]
        condition = m.roles_version == row.roles_version
        return update_write(m(row.member_id), actions, condition)
