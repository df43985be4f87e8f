"""Who did what, on what, when, and what came of it: the operators' audit table (console and CLI alike).

Every operator action (run now, disable, enable, catch up, stop and resume
everything, pause and resume the workers, retry failed, cancel, submit a
batch, grant quota) is one row of
the stack's `audit` table (`jobfence.registry.AUDIT_TABLE`), written with the
operator's credentials; no function is granted it.

    month (key: "YYYY-MM" of `at`, UTC) | entry (sort: zero-padded at + "#" + entry id)
    | entry_id | at | actor | caller | label | action | subject | run_id | result | source | ttl
    index by_subject: subject (key: "job:NAME", "batch:TENANT/BATCH", "tenant:T", "everything", "workers") | entry

Who (`Operator`): the *actor* is the caller's identity, never a typed name:
the AWS principal's ARN from STS for a real account, `local:<login>` for the
local runtime (its emulator answers STS with one fixed account for everyone),
or the user an authenticating proxy named (`jobfence console
--trusted-proxy-header`); the *caller* is the principal the calls ran as; the
CLI's `--as` is a *label* kept beside them, never instead.

One call writes one row (`record`); `audited` runs an action and records it
with its result or its error. The entry id and time are chosen before the
write, and the put is conditional on the row not existing, so a re-sent write
(a retry after a timeout) lands on the same row, never a second one. A write
that fails is returned (`AuditWrite.error`), never raised over the action's
own result or error: the caller says both.
"""

from __future__ import annotations

import getpass
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from jobfence.dynamo import caller_reads, deserialized, error_code, write
from jobfence.errors import JobfenceError, StoreError
from jobfence.registry import AUDIT_TABLE
from jobfence.trigger_requests import REQUESTED_BY_MAX
from jobfence_ops.targets import AwsTarget, OperatorError, Target

T = TypeVar("T")
RETENTION_DAYS = 400  # a year and a bit: a yearly review still finds last year's entries (TTL deletes later)
MAX_TEXT = 500  # a result or an error is cut here: one line for a page
MAX_ACTOR = 256
SUBJECT_INDEX = AUDIT_TABLE.indexes[0].name
DAY_MS = 86_400_000

# what an action is about (`subject`)
EVERYTHING = "everything"
WORKERS = "workers"


def job_subject(job: str) -> str:
    return f"job:{job}"


def batch_subject(ref: object) -> str:
    return f"batch:{ref}"


def tenant_subject(tenant: str) -> str:
    return f"tenant:{tenant}"


@dataclass(frozen=True)
class Operator:
    """Who acts: `actor` (recorded as who did it), `caller` (the principal the calls ran as), `label` (`--as`)."""

    actor: str
    caller: str
    label: str | None = None

    @property
    def requested_by(self) -> str:
        """The name a manual run's row carries: the label when one was given, else the actor."""
        return (self.label or self.actor)[:REQUESTED_BY_MAX]  # the full identity stays in `caller` (a long ARN)

    def describe(self) -> str:
        """The actor, with the caller when it differs, and the label: for a page's header and a result line."""
        text = self.actor if self.caller == self.actor else f"{self.actor} (via {self.caller})"
        return f"{text} as {self.label!r}" if self.label else text


PROXY_PREFIX = "proxy:"  # an actor an authenticating proxy named (`jobfence console --trusted-proxy-header`)


def proxied(user: str, caller: str) -> Operator:
    """The user an authenticating proxy named, acting through the console's own caller identity."""
    return Operator(PROXY_PREFIX + user, caller)


def local_login() -> str:
    """The OS login of whoever runs this process ("operator" where there is none, e.g. a bare container)."""
    try:
        return getpass.getuser() or "operator"
    except Exception:  # no login name in a container
        return "operator"


def caller_identity(target: Target) -> str:
    """Who the target's credentials are: the IAM principal's ARN from STS; `local:<login>` for the local runtime."""
    if isinstance(target, AwsTarget):
        return str(target.session.client("sts").get_caller_identity()["Arn"])
    return f"local:{local_login()}"


def operator_of(target: Target, label: str | None = None) -> Operator:
    """The operator of this process: the caller identity (asked once), with the CLI's optional label."""
    who = caller_identity(target)
    return Operator(who, who, label)


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit table."""

    entry_id: str
    at: int  # epoch ms
    actor: str
    caller: str
    action: str  # run now | disable | enable | catch up | stop everything | resume everything | retry failed | ...
    subject: str  # job:NAME | batch:TENANT/BATCH | everything | workers
    result: str
    label: str | None = None
    run_id: str | None = None  # a run now that ran: its run
    source: str = "cli"  # cli | console

    @property
    def key(self) -> dict[str, str]:
        return {"month": month_of(self.at), "entry": f"{self.at:015d}#{self.entry_id}"}

    @classmethod
    def of(cls, row: dict[str, Any]) -> AuditEntry:
        return cls(
            entry_id=row["entry_id"],
            at=int(row["at"]),
            actor=row["actor"],
            caller=row.get("caller", row["actor"]),
            action=row["action"],
            subject=row["subject"],
            result=row.get("result", ""),
            label=row.get("label"),
            run_id=row.get("run_id"),
            source=row.get("source", "cli"),
        )


@dataclass(frozen=True)
class AuditWrite:
    """What became of one audit write: the entry, and why it was not written (None: written)."""

    entry: AuditEntry
    error: str | None = None

    @property
    def written(self) -> bool:
        return self.error is None


def month_of(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m")


def new_entry_id() -> str:
    """Unique, and in the order the entries were made among those of one `at` (a simulated clock stands still):
    the wall clock's nanoseconds (16 hex digits), then random."""
    return f"{time.time_ns():016x}{secrets.token_hex(4)}"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class AuditLog:
    """Write and read the audit table."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def write(self, entry: AuditEntry) -> None:
        """Put the entry unless its row exists (a re-sent write of the same entry is a no-op). Raises on failure."""
        item: dict[str, Any] = {
            **{k: {"S": v} for k, v in entry.key.items()},
            "entry_id": {"S": entry.entry_id},
            "at": {"N": str(entry.at)},
            "actor": {"S": entry.actor[:MAX_ACTOR]},
            "caller": {"S": entry.caller[:MAX_ACTOR]},
            "action": {"S": entry.action},
            "subject": {"S": entry.subject},
            "result": {"S": _cut(entry.result)},
            "source": {"S": entry.source},
            "ttl": {"N": str(entry.at // 1000 + RETENTION_DAYS * 86_400)},
        }
        for name, value in (("label", entry.label), ("run_id", entry.run_id)):
            if value:
                item[name] = {"S": value}
        request = {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#e)",
            "ExpressionAttributeNames": {"#e": "entry"},
        }
        key = {"month": item["month"], "entry": item["entry"]}
        # refused: the row exists, so this entry was written already (a retry): nothing to add
        write(self._client, "put_item", request, "writing an audit entry", ours=caller_reads, key=key)

    def recent(
        self,
        now_ms: int,
        limit: int = 100,
        *,
        actor: str | None = None,
        action: str | None = None,
        subject: str | None = None,
    ) -> list[AuditEntry]:
        """The newest entries first (at most `limit`), optionally only one actor's, action's or subject's."""
        if subject:
            found = self._query_subject(subject, 0, now_ms + DAY_MS, limit * 4)
        else:
            found = []
            for month in _months_back(now_ms, RETENTION_DAYS // 28 + 2):
                found += self._query(
                    {
                        "KeyConditionExpression": "#m = :m",
                        "ExpressionAttributeNames": {"#m": "month"},
                        "ExpressionAttributeValues": {":m": {"S": month}},
                    },
                    limit * 4,
                )
                if len([e for e in found if _matches(e, actor, action)]) >= limit:
                    break
        return [e for e in found if _matches(e, actor, action)][:limit]

    def about(self, subject: str, since_ms: int, until_ms: int, limit: int = 50) -> list[AuditEntry]:
        """The entries about one subject in [since, until], newest first."""
        return self._query_subject(subject, since_ms, until_ms, limit)

    def _query_subject(self, subject: str, since_ms: int, until_ms: int, limit: int) -> list[AuditEntry]:
        return self._query(
            {
                "IndexName": SUBJECT_INDEX,
                "KeyConditionExpression": "#s = :s AND #e BETWEEN :a AND :b",
                "ExpressionAttributeNames": {"#s": "subject", "#e": "entry"},
                "ExpressionAttributeValues": {
                    ":s": {"S": subject},
                    ":a": {"S": f"{max(since_ms, 0):015d}"},
                    ":b": {"S": f"{until_ms:015d}~"},
                },
            },
            limit,
        )

    def _query(self, request: dict[str, Any], limit: int) -> list[AuditEntry]:
        out: list[AuditEntry] = []
        start: dict[str, Any] | None = None
        while len(out) < limit:
            page = self._client.query(
                TableName=self._table,
                ScanIndexForward=False,
                Limit=min(limit, 500),
                **request,
                **({"ExclusiveStartKey": start} if start else {}),
            )
            out += [AuditEntry.of(deserialized(item)) for item in page.get("Items", [])]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        return out[:limit]


def _matches(entry: AuditEntry, actor: str | None, action: str | None) -> bool:
    return (not actor or actor.lower() in entry.actor.lower() or actor.lower() in (entry.label or "").lower()) and (
        not action or entry.action == action
    )


def _months_back(now_ms: int, count: int) -> Iterable[str]:
    year, month = (int(p) for p in month_of(now_ms).split("-"))
    for _ in range(count):
        yield f"{year:04d}-{month:02d}"
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)


NEAR_MS = 15 * 60_000  # a run page shows the job's entries this close to the run


def near_run(log: AuditLog, run: Any) -> list[AuditEntry]:
    """The entries about a run's job from a little before it started to a little after it finished (its own
    run now among them: recorded as the action began, before the run took the lease)."""
    started = run.started_at or 0
    finished = run.finished_at or started
    return log.about(job_subject(run.job), started - NEAR_MS, finished + NEAR_MS)


def log_of(target: Target) -> AuditLog:
    """The target's audit table (OperatorError when the stack has none)."""
    table = target.topology.audit_table
    if not table:
        raise OperatorError("the stack has no audit table (deploy this version of jobfence's construct)")
    return AuditLog(target.session.client("dynamodb"), table)


def record(
    target: Target,
    operator: Operator,
    action: str,
    subject: str,
    result: str,
    *,
    run_id: str | None = None,
    source: str = "cli",
    entry_id: str | None = None,
    at: int | None = None,
) -> AuditWrite:
    """Write one audit entry; never raises: a failed write is returned with its reason (say it beside the result).

    `entry_id` and `at`: given when the caller retries the same entry (a re-sent write lands on the same row).
    """
    entry = AuditEntry(
        entry_id=entry_id or new_entry_id(),
        at=at if at is not None else _now_ms(target),
        actor=operator.actor,
        caller=operator.caller,
        action=action,
        subject=subject,
        result=result,
        label=operator.label,
        run_id=run_id,
        source=source,
    )
    try:
        log_of(target).write(entry)
    except StoreError as exc:
        return AuditWrite(entry, f"AWS answered {error_code(exc.__cause__ or exc)}")
    except (ClientError, BotoCoreError) as exc:
        return AuditWrite(entry, f"AWS answered {error_code(exc)}")
    except (OperatorError, JobfenceError) as exc:
        return AuditWrite(entry, str(exc))
    return AuditWrite(entry)


def _now_ms(target: Target) -> int:
    return target.clock.now_ms()  # the target's time: simulated on the local runtime, as its runs' times are


@dataclass(frozen=True)
class Audited(Generic[T]):
    """An action's value and what its audit write did."""

    value: T
    audit: AuditWrite

    def note(self) -> str:
        """'' when the entry was written; else a clause saying it was not (appended to the result line)."""
        return "" if self.audit.written else f"; the audit entry was NOT written ({self.audit.error})"


def error_text(exc: BaseException) -> str:
    """An action's error in one bounded line (an AWS error as its code: its text can quote anything)."""
    if isinstance(exc, (ClientError, BotoCoreError)):
        return f"AWS answered {error_code(exc)}"
    return _cut(f"{exc}" or type(exc).__name__)


class AuditedError(OperatorError):
    """An action that failed and whose audit entry could not be written either: both reasons, in one line."""


def audited(
    target: Target,
    operator: Operator,
    action: str,
    subject: str,
    do: Callable[[], T],
    describe: Callable[[T], str],
    *,
    run_id: Callable[[T], str | None] = lambda _: None,
    source: str = "cli",
) -> Audited[T]:
    """Run `do`, then record it with `describe(value)`, or with its error (re-raised, the audit failure added)."""
    entry_id, at = new_entry_id(), _now_ms(target)  # chosen before anything: a retried write is the same row
    try:
        value = do()
    except Exception as exc:
        written = record(
            target, operator, action, subject, f"error: {error_text(exc)}", source=source, entry_id=entry_id, at=at
        )
        if not written.written:
            raise AuditedError(f"{error_text(exc)}; and the audit entry was NOT written ({written.error})") from exc
        raise
    written = record(
        target,
        operator,
        action,
        subject,
        describe(value),
        run_id=run_id(value),
        source=source,
        entry_id=entry_id,
        at=at,
    )
    return Audited(value, written)
