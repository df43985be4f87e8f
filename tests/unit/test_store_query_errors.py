"""Store queries, scans and plain writes under a lost reply or a throttle: a classified `StoreError`, never a raw pynamodb error.

pynamodb's queries and scans are lazy: each page is a call made while the
result is iterated, so an error surfaces in the loop, as pynamodb's raw
`QueryError`/`ScanError`, unless the iteration itself is classified
(`jobfence.dynamo.each_row` and `jobfence.dynamo.one_page`). The fault simulator found
a club job whose schedule query raised a raw `QueryError` on a read timeout.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from jobfence.dynamo import classify
from jobfence.errors import ErrorKind
from jobfence.errors import StoreError
from jobs.backoffice.operator_ledger import OperatorLedgerStore
from jobs.club.stores.memberships import MembershipStore
from jobs.club.stores.outbox import OutboxStore
from jobs.club.stores.photo_requests import PhotoRequestStore
from jobs.club.stores.reminders import ReminderStore
from jobs.club.stores.schedule import DARKROOM, DarkroomChange, ScheduleStore
from jobs.commerce.deferred_payments import DeferredPaymentStore
from jobs.commerce.orders import OrderStore
from tests.aws_faults import Faults, throttled
from tests.support import create_catalog_tables

# Each case: (table, store class, the call that reads, the operation it sends).
CASES: dict[str, tuple[str, type, Callable[[Any, int], Any], str]] = {
    "schedule": ("club_schedule", ScheduleStore, lambda s, now: s.started(DARKROOM, now, (DarkroomChange.PENDING,), 10), "Query"),
    "schedule_entries": ("club_schedule", ScheduleStore, lambda s, now: list(s.entries(DARKROOM)), "Query"),
    "outbox": ("club_outbox", OutboxStore, lambda s, now: list(s.pending("a_job", 10)), "Query"),
    "due_reminders": ("club_equipment_reminders", ReminderStore, lambda s, now: s.due(now, 10), "Query"),
    "membership_scan": ("club_memberships", MembershipStore, lambda s, now: s.page(None, 10), "Scan"),
    "expiry_index": ("club_photo_requests", PhotoRequestStore, lambda s, now: s.expirable(now, 10), "Query"),
    "orders": ("orders", OrderStore, lambda s, now: s.pending_cancellations(now, 10), "Query"),
    "payment_intents_page": ("payment_intents", DeferredPaymentStore, lambda s, now: s.capturing(10), "Query"),
    "operator_ledger_put": ("operator_access_ledger", OperatorLedgerStore,
                            lambda s, now: s.record("e1", "op", "login", "session", now + 60_000), "PutItem"),
}

FAULTS = {
    "read_timeout": ErrorKind.REPLY_LOST,
    "throttle": ErrorKind.THROTTLED,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failed_query_page_is_a_classified_store_error(dynamodb, clock, case, fault):
    table, store_class, read, operation = CASES[case]
    tables = create_catalog_tables(dynamodb, names={table})
    store = store_class(tables[table], clock)
    faults = Faults(store.clients()[0])
    if fault == "read_timeout":
        faults.reply_lost(operation, times=100)
    else:
        faults.refused_before(operation, throttled(operation), times=100)

    with pytest.raises(StoreError) as raised:
        read(store, clock.now_ms())

    assert faults.fired, "the fault never fired: the read sent no request"
    error = raised.value
    assert error.kind is FAULTS[fault]
    assert error.kind is classify(error.__cause__)
    assert ("ReadTimeoutError" if fault == "read_timeout" else "ProvisionedThroughputExceededException") in str(error)
