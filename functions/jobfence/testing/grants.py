"""What a job really calls on DynamoDB, checked against what its catalog entry is granted.

`recorded_actions()` records every DynamoDB request of the process (boto3 and
pynamodb both go through botocore's `BaseClient._make_api_call`), except a lazy
table's creation by the test (`jobfence.testing.tables`), as
(table, IAM action) pairs, expanding batches and transactions into the action
IAM checks for each item (a TransactWriteItems `Put` needs `PutItem`, ...).
`ungranted(...)` lists the pairs a job's grant does not cover: the access it
declares per table (`jobfence.registry.access_actions`) plus the core stores'
own items (`jobfence.core_access`). `JobHarness` runs every tick under
it, so a store that starts calling a verb its entry does not declare fails the
job's tests instead of failing in AWS. What a test does in the middle of a tick
on behalf of another function (the dead-run sweep, an operator) goes inside
`another_party()`, which nothing records.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.client import BaseClient

from jobfence.core_access import core_access
from jobfence.registry import access_actions
from jobfence.testing.tables import created_tables, creating_tables

_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _actions(operation: str, params: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if operation in ("BatchGetItem", "BatchWriteItem"):
        for table in params.get("RequestItems", {}):
            yield table, f"dynamodb:{operation}"
    elif operation in ("TransactWriteItems", "TransactGetItems"):
        for item in params.get("TransactItems", []):
            for kind, body in item.items():
                yield body["TableName"], f"dynamodb:{_TRANSACT_ACTIONS[kind]}"
    else:
        yield params.get("TableName", "*"), f"dynamodb:{operation}"


_party = threading.local()  # set while this thread acts as another function than the job under test


@contextlib.contextmanager
def another_party() -> Iterator[None]:
    """Calls made inside the block are another function's (a sweep, an operator), not the job's: none is recorded.

    For a test that plays a concurrent party from inside a job's tick; the job's own calls stay checked.
    """
    previous = getattr(_party, "active", False)
    _party.active = True
    try:
        yield
    finally:
        _party.active = previous


def acting_for_another() -> bool:
    """Whether this thread is inside `another_party()` now (its calls are not the job's)."""
    return bool(getattr(_party, "active", False))


@contextlib.contextmanager
def recorded_actions() -> Iterator[set[tuple[str, str]]]:
    """Record the (physical table, IAM action) pairs of every DynamoDB request made inside the block."""
    calls: set[tuple[str, str]] = set()
    lock = threading.Lock()
    original = BaseClient._make_api_call

    def recording(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb" and not creating_tables() and not acting_for_another():
            with lock:
                calls.update(_actions(operation_name, api_params))
        return original(client, operation_name, api_params)

    BaseClient._make_api_call = recording
    try:
        yield calls
    finally:
        BaseClient._make_api_call = original


def ungranted(
    calls: set[tuple[str, str]], tables: Mapping[str, str], declared: Mapping[str, str], audits: bool = False
) -> set[tuple[str, str]]:
    """The recorded (logical table, action) pairs that a job declaring `declared` is not granted.

    `tables` maps logical names to the physical names the test created; `audits`: the job audits
    others (the missed-run auditor), so it also has their grant on the lease and run tables.
    """
    granted = {
        core.table: set(access_actions(core.own)) | (set(access_actions(core.audit)) if audits else set())
        for core in core_access()
    }
    granted |= {name: set(access_actions(access)) for name, access in declared.items()}
    # only tables that exist can have been called (and reading a lazy catalog's items would create the rest)
    existing = created_tables(tables)
    logical = {physical: name for name, physical in existing.items()}
    return {
        (logical.get(table, table), action)
        for table, action in calls
        if action not in granted.get(logical.get(table, ""), set())
    }


@contextlib.contextmanager
def within_grant(
    tables: Mapping[str, str], declared: Mapping[str, str], who: str, audits: bool = False
) -> Iterator[None]:
    """Fail if the block calls DynamoDB beyond what an entry declaring `declared` (and auditing, if so) is granted."""
    with recorded_actions() as calls:
        yield
    missing = ungranted(calls, tables, declared, audits)
    assert not missing, f"{who} called DynamoDB beyond its catalog grant: {sorted(missing)}"
