"""The runs table: one row per run that took the lease. Skipped ticks write nothing.

    job (key) | run_key (sort: zero-padded started_at + "#" + run id) | outcome | trigger
    | scheduled_at | started_at | finished_at | duration_ms | holder | fence | summary | error | ttl
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from jobfence.errors import JobfenceError, StoreError

RUN_ROW_RETENTION_MS = 90 * 24 * 3_600_000
MAX_ERROR_CHARS = 300
MAX_SUMMARY_KEYS = 20
MAX_SUMMARY_VALUE_CHARS = 80

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


@dataclass(frozen=True)
class RunRecord:
    """What one run did."""

    job: str
    run_id: str
    outcome: str
    trigger: str
    scheduled_at: int
    started_at: int
    finished_at: int
    holder: str
    fence: int
    summary: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def run_key(self) -> str:
        return f"{self.started_at:015d}#{self.run_id}"

    @property
    def duration_ms(self) -> int:
        return self.finished_at - self.started_at


def safe_error(exc: BaseException) -> str:
    """Class and message, bounded, and only where the message is known to be safe.

    Our own errors are written never to carry payloads, and an AWS error is
    reduced to its code. Any other exception may quote whatever it was handed
    (a provider's response body, a customer's field), so only its class is kept.
    """
    name = type(exc).__name__
    if isinstance(exc, JobfenceError):
        text = f"{name}: {exc}"
    elif isinstance(exc, ClientError):
        text = f"{name}: {exc.response.get('Error', {}).get('Code', 'Unknown')}"
    else:
        text = name
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


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
    """Write and read run rows."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def record(self, run: RunRecord) -> None:
        """Write the run's row (a put keyed by its unique run id, so a retry is harmless)."""
        item: dict[str, Any] = {
            "job": run.job,
            "run_key": run.run_key,
            "run_id": run.run_id,
            "outcome": run.outcome,
            "trigger": run.trigger,
            "scheduled_at": run.scheduled_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_ms": run.duration_ms,
            "holder": run.holder,
            "fence": run.fence,
            "summary": bounded_summary(run.summary),
            "ttl": (run.finished_at + RUN_ROW_RETENTION_MS) // 1000,
        }
        if run.error:
            item["error"] = run.error[:MAX_ERROR_CHARS]
        try:
            self._client.put_item(
                TableName=self._table,
                Item={k: _serializer.serialize(_decimal_safe(v)) for k, v in item.items()},
            )
        except ClientError as exc:
            raise StoreError(f"recording run of {run.job!r} failed: {exc.response['Error'].get('Code')}") from exc

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
        except ClientError as exc:
            raise StoreError(f"reading runs of {job!r} failed: {exc.response['Error'].get('Code')}") from exc
        return [{k: _plain_number(_deserializer.deserialize(v)) for k, v in i.items()} for i in page.get("Items", [])]


def _decimal_safe(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _decimal_safe(v) for k, v in value.items()}
    return value


def _plain_number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain_number(v) for k, v in value.items()}
    return value
