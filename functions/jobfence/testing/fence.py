"""The fence, enforced: a job's writes to its catalog tables go through `ctx.transaction()`.

`fenced_writes_only(tables, job)` watches every DynamoDB request made inside
the block (boto3 and pynamodb both go through botocore's
`BaseClient._make_api_call`, so a store's own client is seen too) and fails the
test when a write to one of the catalog tables in `tables` was sent outside a
fenced transaction:

    PutItem, UpdateItem, DeleteItem, BatchWriteItem    always (a condition on the row is not a fence)
    TransactWriteItems                                  unless its first entry is the ConditionCheck on the
                                                        leases table that `ctx.transaction()` adds

A write the job keeps its condition on but sends outside `ctx.transaction()`
applies even when its term was taken over (a run paused past its TTL, a
re-sent request): faults alone show that only on the seeds that pause a run at
that very write; this check catches it on the first write, whatever the seed.

Allowed: the runner's own writes (the leases and runs tables), a table the job's
catalog entry lists in `JobSpec.unfenced` (a write that is safe from any term, with
the reason), a lazy table's creation (`jobfence.testing.tables`) and whatever runs
inside `jobfence.testing.grants.another_party()`. `JobHarness` runs every tick
under it (`fence=False` turns it off for a test of the runner itself), and
`simulate` every tick of every seed (`watching_writes`: a breach is a violation
of invariant 2 in that seed's report, naming the call).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.client import BaseClient

from jobfence.registry import LEASES_TABLE, RUNS_TABLE
from jobfence.testing.grants import acting_for_another
from jobfence.testing.tables import created_tables, creating_tables

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"})
TRANSACTION = "TransactWriteItems"
CORE_TABLES = frozenset({LEASES_TABLE.name, RUNS_TABLE.name})


@dataclass(frozen=True)
class UnfencedWrite:
    """One request that wrote to a catalog table outside `ctx.transaction()`."""

    operation: str  # the DynamoDB operation, e.g. "UpdateItem"
    table: str  # the catalog (logical) name of the table it wrote
    physical: str  # the table's physical name in the test
    caller: str = ""  # where the request came from: the innermost frame outside jobfence and the AWS SDKs

    def __str__(self) -> str:
        return f"{self.operation} on {self.table!r} ({self.physical}){' from ' + self.caller if self.caller else ''}"


def _dirs(*modules: str) -> set[str]:
    found = set()
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            found |= {os.path.dirname(file) + os.sep, os.path.dirname(os.path.realpath(file)) + os.sep}
    return found


# Frames that are not "the call": the AWS SDKs, and jobfence's own write helpers (`jobfence.dynamo.write`, ...)
# and this kit; a frame in any other module (an app's store, a jobfence store such as the reclaimer's) is.
_JOBFENCE = _dirs("jobfence")
_NOT_THE_CALL = (
    *sorted(_dirs("botocore", "jobfence.testing")),
    *(f"{d}{f}" for d in sorted(_JOBFENCE) for f in ("dynamo.py", "once.py", "retried.py", "transaction.py")),
    f"{os.sep}boto3{os.sep}",
    f"{os.sep}pynamodb{os.sep}",
)


def _caller() -> str:
    """The innermost frame outside the AWS SDKs and jobfence's write helpers: the job's or its store's line."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith("<") and not any(part in path for part in _NOT_THE_CALL):
            return f"{os.path.basename(path)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def _written_tables(operation: str, params: Mapping[str, Any]) -> list[str]:
    """The physical tables a request writes (none for a read)."""
    if operation in WRITES:
        if operation == "BatchWriteItem":
            return list(params.get("RequestItems", {}))
        return [params.get("TableName", "")]
    if operation == TRANSACTION:
        return [body.get("TableName", "") for entry in params.get("TransactItems", []) for body in entry.values()]
    return []


def _lease_checked(params: Mapping[str, Any], leases: str) -> bool:
    """Whether a TransactWriteItems request opens with the lease check (`ctx.transaction()`'s entry 0)."""
    entries = params.get("TransactItems", [])
    first = entries[0] if entries else {}
    check = first.get("ConditionCheck") if isinstance(first, Mapping) else None
    if not isinstance(check, Mapping):
        return False
    return check.get("TableName") == leases and "lease_id" in check.get("ConditionExpression", "")


def unfenced(
    operation: str, params: Mapping[str, Any], tables: Mapping[str, str], allowed: frozenset[str] = frozenset()
) -> list[UnfencedWrite]:
    """The writes of one request to the catalog tables of `tables` (logical -> physical) that no fence covers.

    The leases and runs tables and the logical names in `allowed` are not checked.
    """
    written = _written_tables(operation, params)
    if not written:
        return []
    existing = created_tables(tables)  # (reading a lazy catalog's other names would create them)
    leases = existing.get(LEASES_TABLE.name, "")
    if operation == TRANSACTION and _lease_checked(params, leases):
        return []
    logical = {physical: name for name, physical in existing.items()}
    found: list[UnfencedWrite] = []
    for physical in dict.fromkeys(written):
        name = logical.get(physical)
        if name is not None and name not in CORE_TABLES and name not in allowed:
            found.append(UnfencedWrite(operation, name, physical))
    return found


def breach_message(job: str, writes: list[UnfencedWrite]) -> str:
    """The test failure: which calls wrote outside the fence, and what to do instead."""
    calls = "; ".join(str(w) for w in dict.fromkeys(writes))
    return (
        f"{job} wrote to its catalog tables outside ctx.transaction(): {calls}. A write outside the fenced "
        "transaction applies even after this run's term was taken over (a paused run, a re-sent request), "
        "whatever its own condition says: add it to `with ctx.transaction() as tx:` (tx.update / tx.save / "
        "tx.delete, or a store's prepared Write), or, when a stale writer's late write is harmless, "
        "declare the table in the entry's JobSpec.unfenced with the reason"
    )


@contextlib.contextmanager
def watching_writes(
    tables: Mapping[str, str], allowed: Mapping[str, str] | None, seen: Callable[[UnfencedWrite], None]
) -> Iterator[None]:
    """Hand `seen` every write to a catalog table of `tables` sent outside a fenced transaction in the block.

    The one watch of the kit: `fenced_writes_only` (the harness's ticks) and the fault simulator's scheduled
    scenarios (`jobfence.testing.sim.scheduled`, so `simulate`) both use it. Each write is seen when it is
    sent, before any fault: a request that never reaches DynamoDB is seen too.
    """
    skip = frozenset(allowed or ())
    original = BaseClient._make_api_call

    def watching(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb" and not creating_tables() and not acting_for_another():
            found = unfenced(operation_name, api_params, tables, skip)
            if found:
                caller = _caller()
                for write in found:
                    seen(UnfencedWrite(write.operation, write.table, write.physical, caller))
        return original(client, operation_name, api_params)

    BaseClient._make_api_call = watching
    try:
        yield
    finally:
        BaseClient._make_api_call = original


@contextlib.contextmanager
def fenced_writes_only(tables: Mapping[str, str], job: str, allowed: Mapping[str, str] | None = None) -> Iterator[None]:
    """Fail (AssertionError) if the block wrote to a catalog table of `tables` outside a fenced transaction.

    `allowed`: the tables the entry declares `unfenced` (logical name -> why). The block runs to its end
    (the job's calls behave as in AWS); the failure names every such call, even when the block raised.
    """
    writes: list[UnfencedWrite] = []
    lock = threading.Lock()

    def seen(write: UnfencedWrite) -> None:
        with lock:
            writes.append(write)

    try:
        with watching_writes(tables, allowed, seen):
            yield
    except BaseException as exc:
        if writes:  # the missing fence first; what else failed (the grant, the job's own error) after it
            raise AssertionError(
                f"{breach_message(job, writes)}\n(the tick also raised {type(exc).__name__}: {exc})"
            ) from exc
        raise
    assert not writes, breach_message(job, writes)
