"""`clean_operator_access_ledger` (seed 000, hourly, backoffice's own function, rule and table).

Deletes expired ledger entries, 1,000 a batch, at most 20 batches a run. It
reads keys only (from the expiry index) and reports counts only, so it never
exposes operator sessions; no API function is granted this table.
"""

from __future__ import annotations

from typing import Any, Iterator

from jobfence.scheduled import JobDeps, RunContext
from jobs.backoffice.operator_ledger import OperatorLedgerStore

LEDGER_BATCH = 1_000
LEDGER_MAX_BATCHES = 20


def clean_operator_access_ledger(store: OperatorLedgerStore, ctx: RunContext) -> Iterator[dict[str, Any]]:
    """Delete expired entries, 1,000 a batch, at most 20 batches."""
    for _ in range(LEDGER_MAX_BATCHES):
        deleted = store.delete_expired(LEDGER_BATCH)
        yield {"ledger_deleted": deleted}
        if deleted < LEDGER_BATCH:
            return


def build_clean_operator_access_ledger(deps: JobDeps):
    store = OperatorLedgerStore(deps.settings.table("operator_access_ledger"), deps.clock)
    return lambda ctx: clean_operator_access_ledger(store, ctx)
