"""`expire_agent_invitations` (seed 000, hourly): only removes expired invitations.

Bounded batches of 500 expired pending invitations, at most 20 a run, each
delete conditioned on the row still being pending and expired. It never sends
an invitation and never cleans up a delegated session at the provider: those
are explicit requests of the API, and this module has no port for either.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.commerce.agent_invitations import AgentInvitationStore

INVITATION_BATCH = 500
INVITATION_MAX_BATCHES = 20


def expire_agent_invitations(store: AgentInvitationStore, ctx: RunContext) -> Iterator[Mapping[str, int]]:
    """Delete expired pending invitations, 500 a batch, at most 20 batches."""
    for n in range(1, INVITATION_MAX_BATCHES + 1):
        deleted, scanned = store.delete_expired(INVITATION_BATCH)
        counts = {"invitations_deleted": deleted, "invitations_scanned": scanned}
        if scanned < INVITATION_BATCH or n == INVITATION_MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts


def build_expire_agent_invitations(deps: JobDeps):
    store = AgentInvitationStore(deps.settings.table("agent_invitations"), deps.clock)
    return lambda ctx: expire_agent_invitations(store, ctx)
