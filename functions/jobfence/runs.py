"""The runs table: one row per run that took the lease, written when it takes it. Skipped ticks write nothing.

    job (key) | run_key (sort: zero-padded started_at + "#" + run id) | run_id | outcome | trigger
    | scheduled_at | started_at | finished_at | duration_ms | holder | fence | summary | error | ttl
    | requested_by | caller (a manual run's: the operator's name as given, the IAM principal ARN)

Timeline of one row (every write keyed by the run id, so a re-sent copy lands on the same row):

    acquire   the lease item names the run (run_id); the row does not exist yet
    start     put outcome=running, holder, fence      condition: no row yet
    ...       the job's batches
    finish    outcome=ran|failed|lease_lost, finished_at, summary, error
                                                      condition: no row, running, died, or this same outcome
                                                      (and ran -> lease_lost: the release after it was refused)
    release   the term ends only after its row is finished
    died      set by whoever sees the term end unfinished: the next acquire (its
              item shows the term it replaced still had a holder) or the dead-run
              sweep                     condition: no row or running (a finished row never changes)

`finish` and `died` are upserts (UpdateItem creates the row), so a run whose
`start` never landed still gets its row. `finish` may overwrite `died`: the
observer only inferred it, the runner knows what happened (it was paused
past its term, not dead). A `start` refused because the row says `died`
tells the runner its term was declared over before it began.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from jobfence.capacity import Cost, meter_client
from jobfence.dynamo import (
    SAFE_ERROR_CHARS,
    Applied,
    Ours,
    Refused,
    caller_reads,
    deserialized,
    raise_store_error,
    retry_transient,
    write,
)
from jobfence.errors import ErrorKind, StoreError, bounded
from jobfence.lease import Term
from jobfence.triggers import who_fields

RUN_ROW_RETENTION_MS = 90 * 24 * 3_600_000
MAX_ERROR_CHARS = SAFE_ERROR_CHARS  # a run row's error text: what `safe_error` gives, at most
MAX_SUMMARY_KEYS = 20
MAX_SUMMARY_VALUE_CHARS = 80
UNKNOWN_TRIGGER = "unknown"  # a `died` row created without its `start` (the runner died in between)

_serializer = TypeSerializer()


class RunState(str, enum.Enum):
    """A run row's outcome. The comment says who moves it on."""

    RUNNING = "running"  # the runner wrote it on taking the lease; the runner finishes it, or an observer marks died
    RAN = "ran"  # finished by the runner: batches done (or stopped early); final
    LEASE_LOST = "lease_lost"  # finished by the runner: its term was taken over or expired mid-run; final
    FAILED = "failed"  # finished by the runner: the job (or its run row) raised; final
    DIED = "died"  # set by the next acquire or the sweep: the term ended unfinished; the runner may still finish it

    @property
    def finished(self) -> bool:
        return self not in (RunState.RUNNING, RunState.DIED)


@dataclass(frozen=True)
class RunStart:
    """What is known about a run when it takes the lease."""

    job: str
    run_id: str
    trigger: str
    scheduled_at: int
    started_at: int
    holder: str
    fence: int
    requested_by: str | None = None  # a manual run: the operator's name, exactly as given
    caller: str | None = None  # a manual run: the caller's identity (IAM principal ARN)

    @property
    def run_key(self) -> str:
        return run_key(self.started_at, self.run_id)


def run_key(started_at: int, run_id: str) -> str:
    """The sort key of a run row: newest last, unique per run."""
    return f"{started_at:015d}#{run_id}"


def bounded_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Counts and short labels only: at most 20 keys, strings cut to 80 characters."""
    out: dict[str, Any] = {}
    for key in sorted(summary)[:MAX_SUMMARY_KEYS]:
        value = summary[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = str(value)[:MAX_SUMMARY_VALUE_CHARS]
        out[str(key)[:MAX_SUMMARY_VALUE_CHARS]] = value
    return out


class RunStore:
    """Write and read run rows. Every write is retried on a transient error (it is idempotent)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = meter_client(client)
        self._table = table_name

    def start(self, run: RunStart) -> bool:
        """Write the `running` row. False when the row already exists and is not ours running (it says `died`)."""
        item = {
            "job": run.job,
            "run_key": run.run_key,
            "run_id": run.run_id,
            "outcome": RunState.RUNNING.value,
            "trigger": run.trigger,
            "scheduled_at": run.scheduled_at,
            "started_at": run.started_at,
            "holder": run.holder,
            "fence": run.fence,
            "ttl": _ttl(run.started_at),
            **who_fields(run.requested_by, run.caller),
        }
        request = dict(
            TableName=self._table, Item=_serialize(item), ConditionExpression="attribute_not_exists(run_key)"
        )
        outcome = write(
            self._client,
            "put_item",
            request,
            f"starting the run row of {run.job!r}",
            ours=lambda seen: seen.get("outcome") == RunState.RUNNING.value,  # our own put, its reply lost
            key=_row_key(run.job, run.run_key),
        )
        return isinstance(outcome, Applied)

    def finish(
        self,
        run: RunStart,
        outcome: RunState,
        finished_at: int,
        summary: Mapping[str, Any],
        error: str | None,
        cost: Cost | None = None,
    ) -> None:
        """Finish the row with the runner's outcome (creating it if `start` never landed), and what it cost."""
        if not outcome.finished:
            raise ValueError(f"{outcome.value} does not finish a run")
        fields: dict[str, Any] = {
            "run_id": run.run_id,
            "outcome": outcome.value,
            "trigger": run.trigger,
            "scheduled_at": run.scheduled_at,
            "started_at": run.started_at,
            "finished_at": finished_at,
            "duration_ms": finished_at - run.started_at,
            "holder": run.holder,
            "fence": run.fence,
            "summary": bounded_summary(summary),
            "ttl": _ttl(finished_at),
            **who_fields(run.requested_by, run.caller),
            **(cost.fields() if cost is not None else {}),
        }
        removed = []
        if error:
            fields["error"] = _bounded(error)
        else:
            removed.append("error")  # a `died` row's guess, overwritten by what the runner knows
        # open: no row yet, running, or died; or this very outcome (our own copy, re-sent); and
        # `ran` may still become lease_lost (the release after it was refused: the term was over)
        amends = RunState.RAN if outcome is RunState.LEASE_LOST else outcome
        condition = "attribute_not_exists(#outcome) OR #outcome IN (:running, :died, :final, :amends)"
        extra = {
            ":running": RunState.RUNNING.value,
            ":died": RunState.DIED.value,
            ":final": outcome.value,
            ":amends": amends.value,
        }
        doing = f"finishing the run row of {run.job!r}"
        if isinstance(self._update(run.job, run.run_key, fields, condition, extra, doing, removed=removed), Refused):
            raise StoreError(f"the run row of {run.job!r} was already finished otherwise", ErrorKind.CONDITION_FAILED)

    def mark_died(self, term: Term, observed_at: int, ended_at: int | None = None) -> bool:
        """Record the run of a term that ended unfinished as `died`. False if its row was already finished.

        `ended_at` is when the term is known to have ended (its expiry, by
        default); `observed_at` is when this observer saw it.
        """
        ended = term.expires_at if ended_at is None else ended_at
        key = run_key(term.acquired_at, term.run_id)
        fields = {
            "run_id": term.run_id,
            "outcome": RunState.DIED.value,
            "started_at": term.acquired_at,
            "finished_at": ended,
            "duration_ms": max(0, ended - term.acquired_at),
            "holder": term.holder,
            "fence": term.fence,
            "error": _bounded(
                f"died: the term (fence {term.fence}) ended without the run finishing; seen at {observed_at}"
            ),
            "ttl": _ttl(ended),
        }
        kept = {"trigger": UNKNOWN_TRIGGER, "scheduled_at": term.acquired_at, "summary": {}}  # the start row's, if any
        condition = "attribute_not_exists(#outcome) OR #outcome = :running"
        outcome = self._update(
            term.job,
            key,
            fields,
            condition,
            {":running": RunState.RUNNING.value},
            f"marking a run of {term.job!r} died",
            kept=kept,
            ours=caller_reads,  # a refusal (finished, or died by another observer or our own lost copy) changes nothing
        )
        return isinstance(outcome, Applied)

    def get(self, job: str, started_at: int, run_id: str) -> dict[str, Any] | None:
        """One run's row, strongly consistent, as plain values (None when there is none)."""
        try:
            item = self._consistent_row(job, run_key(started_at, run_id))
        except Exception as exc:
            raise_store_error(exc, f"reading a run row of {job!r}")
        return deserialized(item) if item else None

    def recent(self, job: str, limit: int = 20) -> list[dict[str, Any]]:
        """The job's latest runs, newest first."""
        try:
            page = self._client.query(
                TableName=self._table,
                KeyConditionExpression="job = :job",
                ExpressionAttributeValues={":job": {"S": job}},
                ScanIndexForward=False,
                Limit=limit,
            )
        except Exception as exc:
            raise_store_error(exc, f"reading runs of {job!r}")
        return [deserialized(i) for i in page.get("Items", [])]

    def started_between(self, job: str, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
        """The job's runs started in [since, until], oldest first: one range query on the sort key, every page."""
        low, high = f"{since_ms:015d}#", f"{until_ms:015d}#\uffff"  # run_key = zero-padded started_at + "#" + id
        kwargs: dict[str, Any] = dict(
            TableName=self._table,
            KeyConditionExpression="job = :job AND run_key BETWEEN :low AND :high",
            ExpressionAttributeValues={":job": {"S": job}, ":low": {"S": low}, ":high": {"S": high}},
            ScanIndexForward=True,
        )
        rows: list[dict[str, Any]] = []
        while True:
            try:
                page = retry_transient(lambda: self._client.query(**kwargs))  # a read: safe to repeat
            except Exception as exc:
                raise_store_error(exc, f"reading runs of {job!r}")
            rows.extend(deserialized(i) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- low level ----------------------------------------------------------------------------

    def _update(
        self,
        job: str,
        key: str,
        fields: Mapping[str, Any],
        condition: str,
        extra: Mapping[str, str],
        doing: str,
        kept: Mapping[str, Any] | None = None,
        removed: list[str] | None = None,
        ours: Ours | None = None,
    ) -> Applied | Refused:
        """One conditional UpdateItem on a row (`write`): SET `fields`, SET `kept` only where absent, REMOVE `removed`."""
        names = {"#outcome": "outcome"}
        values: dict[str, Any] = {k: {"S": v} for k, v in extra.items()}
        sets = []
        for i, (name, value) in enumerate(fields.items()):
            names[f"#f{i}"], values[f":f{i}"] = name, _serializer.serialize(_decimal_safe(value))
            sets.append(f"#f{i} = :f{i}")
        for i, (name, value) in enumerate((kept or {}).items()):
            names[f"#k{i}"], values[f":k{i}"] = name, _serializer.serialize(_decimal_safe(value))
            sets.append(f"#k{i} = if_not_exists(#k{i}, :k{i})")
        update = "SET " + ", ".join(sets)
        if removed:
            for i, name in enumerate(removed):
                names[f"#r{i}"] = name
            update += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removed)))
        request = dict(
            TableName=self._table,
            Key=_row_key(job, key),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
        return write(self._client, "update_item", request, doing, ours=ours)

    def _consistent_row(self, job: str, key: str) -> Mapping[str, Any] | None:
        return self._client.get_item(TableName=self._table, Key=_row_key(job, key), ConsistentRead=True).get("Item")


def _row_key(job: str, key: str) -> dict[str, Any]:
    return {"job": {"S": job}, "run_key": {"S": key}}


def _ttl(epoch_ms: int) -> int:
    return (epoch_ms + RUN_ROW_RETENTION_MS) // 1000


def _bounded(text: str) -> str:
    return bounded(text, MAX_ERROR_CHARS)


def _serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(_decimal_safe(v)) for k, v in item.items()}


def _decimal_safe(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _decimal_safe(v) for k, v in value.items()}
    return value
