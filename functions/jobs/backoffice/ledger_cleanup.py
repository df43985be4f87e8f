"""`clean_operator_access_ledger` (seed 000, hourly, backoffice's own function, rule and table).

Deletes expired ledger entries, 1,000 a batch, at most 20 batches a run. It
reads keys only (from the expiry index) and reports counts only, so it never
exposes operator sessions; no API function is granted this table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from jobfence.expiry import deletion_batches
from jobfence.scheduled import JobDeps, RunContext
from jobs.backoffice.operator_ledger import OperatorLedgerStore

LEDGER_BATCH = 1_000
LEDGER_MAX_BATCHES = 20


def clean_operator_access_ledger(store: OperatorLedgerStore, ctx: RunContext) -> Iterator[Mapping[str, int]]:
    """Delete expired entries, 1,000 a batch, at most 20 batches."""
    return deletion_batches(store.delete_expired, LEDGER_BATCH, LEDGER_MAX_BATCHES, "ledger_deleted")


def build_clean_operator_access_ledger(deps: JobDeps):
    store = OperatorLedgerStore(deps.settings.table("operator_access_ledger"), deps.clock)
    return lambda ctx: clean_operator_access_ledger(store, ctx)
