"""Retention jobs of seed 000: `clean_dpop_proofs` and `clean_conversations`.

Each is a generator of bounded batches (see `jobfence.scheduled`): the runner
renews the lease before every batch after the first, and stops the job when
the lease is lost or the trust window closes. The two jobs share this module
but not a store: each builder imports only its own job's store, so one job's
function never loads the other's (docs/benchmarks.md, cold start).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from jobfence.batch import LastBatch
from jobfence.expiry import deletion_batches
from jobfence.scheduled import JobDeps, RunContext

if TYPE_CHECKING:
    from jobs.commerce.conversations import ConversationStore
    from jobs.commerce.dpop_proofs import DpopProofStore

DPOP_BATCH = 1_000
DPOP_MAX_BATCHES = 100
CONVERSATIONS_LIMIT = 100


def clean_dpop_proofs(store: DpopProofStore, ctx: RunContext) -> Iterator[Mapping[str, int]]:
    """Delete expired DPoP proofs, 1,000 a batch, at most 100 batches a run."""
    return deletion_batches(store.delete_expired, DPOP_BATCH, DPOP_MAX_BATCHES, "deleted")


def clean_conversations(store: ConversationStore, ctx: RunContext) -> Iterator[Mapping[str, int]]:
    """One bounded deletion of at most 100 expired conversations (no loop, no checkpoint)."""
    yield LastBatch({"deleted": store.delete_expired(CONVERSATIONS_LIMIT)})


def build_clean_dpop_proofs(deps: JobDeps):
    from jobs.commerce.dpop_proofs import DpopProofStore

    store = DpopProofStore(deps.settings.table("dpop_proofs"), deps.clock)
    return lambda ctx: clean_dpop_proofs(store, ctx)


def build_clean_conversations(deps: JobDeps):
    from jobs.commerce.conversations import ConversationStore

    store = ConversationStore(deps.settings.table("conversations"), deps.clock)
    return lambda ctx: clean_conversations(store, ctx)
