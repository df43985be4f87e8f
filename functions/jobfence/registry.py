"""The job and table catalog types, and the registry built from them.

The catalog itself lives in `jobs/catalog.py`. It is read by two parties: the
runtime (a function's `JOB_NAME` must name a registered job, else it fails
closed) and `infra/jobfence_cdk/` (which derives every rule, function, environment variable
and grant from it). Validation happens here, so a bad entry is refused both at
synthesis and at cold start, with a message naming the entry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jobfence.errors import JobfenceError, UnknownJob

# Table access a catalog entry declares: "+"-joined verbs, each one DynamoDB action, so a grant is
# what the entry's stores call and nothing more ("query+delete", "get+update", "read+scan").
# "read" and "write" are the two bundles. Scan is a verb of its own: no bundle holds it, so only an
# entry that declares a scanning store gets it. A table keyed by job (partition key `job`) is granted
# under `dynamodb:LeadingKeys` = the job's own name, so no job reaches another job's rows there.
AccessVerb = Literal["get", "batch_get", "query", "check", "scan", "put", "update", "delete", "batch_write"]
"""One verb of a table grant, each one DynamoDB action (IAM `dynamodb:<Action>`).

`get` GetItem, `batch_get` BatchGetItem, `query` Query (a count too), `check` ConditionCheckItem (a
condition-only entry of a transaction), `scan` Scan, `put` PutItem (a transaction's Put too), `update`
UpdateItem, `delete` DeleteItem, `batch_write` BatchWriteItem.
"""

Access = str
"""A table grant of a catalog entry: "+"-joined `AccessVerb`s and bundles, e.g. "query+update" or "read+scan".

The bundles: "read" is get, batch_get, query and check; "write" is put, update, delete and batch_write.
Scan is in no bundle (only an entry that declares a scanning store gets it). The registry validates
every grant: a wrong one is a `CatalogError` naming the entry and the table.
"""

ACCESS_VERBS: dict[AccessVerb, str] = {
    "get": "dynamodb:GetItem",
    "batch_get": "dynamodb:BatchGetItem",
    "query": "dynamodb:Query",  # also a `count` (Select=COUNT)
    "check": "dynamodb:ConditionCheckItem",  # a condition-only item of a TransactWriteItems
    "scan": "dynamodb:Scan",
    "put": "dynamodb:PutItem",  # also a TransactWriteItems Put
    "update": "dynamodb:UpdateItem",
    "delete": "dynamodb:DeleteItem",
    "batch_write": "dynamodb:BatchWriteItem",
}
ACCESS_BUNDLES: dict[str, tuple[AccessVerb, ...]] = {
    "read": ("get", "batch_get", "query", "check"),
    "write": ("put", "update", "delete", "batch_write"),
}
# What the core stores call on the two core tables, always under LeadingKeys = the job: the lease
# store (peek, acquire, renew, release, settle; a fenced write adds a ConditionCheck) and the run
# store (start = put, finish and died = update, a read after a refusal without old image, recent).
LEASE_ACCESS = "get+update+check"
RUN_ACCESS = "get+put+query+update"
# And what the missed-run auditor calls on the jobs it `audits` (their lease items' rule toggles in
# one read, their run rows in a window), under LeadingKeys = those jobs.
AUDIT_LEASE_ACCESS = "batch_get"
AUDIT_RUN_ACCESS = "query"


def access_verbs(access: Access) -> frozenset[AccessVerb]:
    """The verbs of a declared access ("read+scan" -> get, batch_get, query, check, scan). Raises CatalogError."""
    tokens = access.split("+") if isinstance(access, str) else [None]
    verbs: set[AccessVerb] = set()
    for token in tokens:
        if token in ACCESS_BUNDLES:
            verbs.update(ACCESS_BUNDLES[token])
        elif token in ACCESS_VERBS:
            verbs.add(token)
        else:
            known = ", ".join([*ACCESS_BUNDLES, *ACCESS_VERBS])
            raise CatalogError(f'access {str(access)[:60]!r} is not "+"-joined verbs of: {known}')
    return frozenset(verbs)


def access_actions(access: Access) -> tuple[str, ...]:
    """The IAM actions of a declared access, sorted."""
    return tuple(sorted(ACCESS_VERBS[verb] for verb in access_verbs(access)))


JOB_KEY = "job"  # the partition key name that marks a table as keyed by job
KeyType = Literal["S", "N"]

CATCH_UP_WINDOW_MAX_S = 31 * 24 * 3600  # the ledger reads at most 31 days
LEASE_MARGIN_S = 60  # a lease must outlive the function timeout by at least this much
INTERVAL_TOLERANCE = 0.9  # seed 001: a tick a few ms early must still run


SHARED_SUBSYSTEM = "shared"


class CatchUp(str, enum.Enum):
    """A job's catch-up policy after an outage or a disabled period (docs/guarantees.md)."""

    NONE = "none"  # the next tick is the catch-up (the default)
    ONCE = "once"  # one coalesced run for the last missed or disabled tick inside the window


class Overlap(str, enum.Enum):
    """What a tick that meets a live holder does (docs/guarantees.md)."""

    SKIP = "skip"  # nothing: no write (the default)
    BUFFER_ONE = "buffer_one"  # one pending request on the lease item; the holder runs once more or hands over


class CatalogError(JobfenceError):
    """A catalog entry that cannot be deployed or run."""


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index of a catalog table."""

    name: str
    partition_key: tuple[str, KeyType]
    sort_key: tuple[str, KeyType] | None = None
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"


@dataclass(frozen=True)
class TableSpec:
    """A DynamoDB table: its logical name, owning subsystem, keys, TTL and indexes."""

    name: str
    subsystem: str
    partition_key: tuple[str, KeyType]
    sort_key: tuple[str, KeyType] | None = None
    ttl_attribute: str | None = None
    indexes: tuple[IndexSpec, ...] = ()
    description: str = ""
    # Every partition key value is a tenant id or starts with one and '#' (ids never hold '#'): the table is
    # granted to no function's role, only to its tenant role under `dynamodb:LeadingKeys` (`jobfence.tenants`).
    tenant_scoped: bool = False

    @property
    def keyed_by_job(self) -> bool:
        """Whether each job owns its own partition (granted under `dynamodb:LeadingKeys`)."""
        return self.partition_key[0] == JOB_KEY


@dataclass(frozen=True)
class JobSpec:
    """One scheduled job: everything needed to deploy and run it.

    `entry` is "module:factory"; the factory takes `JobDeps` and returns the job
    (a callable from `RunContext` to an iterator of per-batch summaries). It is
    imported lazily so a function only loads its own job's code. The registry
    validates every field (a `CatalogError` names the entry and the field).
    """

    name: str
    """The job's name, lower_snake_case: its function's `JOB_NAME`, its lease item and run rows' key, its rule."""
    subsystem: str
    """The part of the app it belongs to: it may use that subsystem's tables (and the shared ones); its metrics'
    `service` dimension."""
    entry: str
    """The job's factory as "module:function": called with `JobDeps` at cold start, it returns the job."""
    schedule: str
    """The EventBridge expression of its rule: `rate(15 minutes)` or `cron(0 3 * * ? *)` (UTC)."""
    interval_s: int | None = None
    """The interval gate: a tick starts a run only when the last run started at least 0.9 x this long ago (seconds).
    None: the lease alone guards the job."""
    timeout_s: int = 300
    """Its function's timeout, 1..900 seconds."""
    lease_ttl_s: int | None = None
    """How long a term lasts unrenewed (seconds). None (the default) is the function timeout plus
    `LEASE_MARGIN_S`, the shortest allowed: a holder that died is taken over by the first tick after its Lambda
    could no longer be running. After construction it is always an int."""
    tables: Mapping[str, Access] = field(default_factory=dict)
    """The catalog tables it uses and its grant on each (`Access`, e.g. {"orders": "query+update"}): its
    function gets each table's name (`Settings.table`) and exactly those IAM actions."""
    queues: tuple[str, ...] = ()
    """The catalog queues it sends to (`Settings.queue` gives a queue's URL)."""
    secrets: tuple[str, ...] = ()
    """The secrets it may read, by logical name (`Settings.secret` gives the secret's name, not its value)."""
    providers: tuple[str, ...] = ()
    """The external HTTP APIs it calls (their base URLs in `PROVIDER_<NAME>_URL`, `Settings.provider_url`)."""
    config: Mapping[str, str] = field(default_factory=dict)
    """Static settings, lower_snake_case name -> text (`CONFIG_<NAME>`, `Settings.setting`), e.g. an allowlist."""
    batch_budget_s: int = 30
    """A batch starts only with at least this much Lambda time left (seconds, below `timeout_s`): the run ends
    `ran` between batches instead of being killed in one."""
    memory_mb: int = 256
    """Its function's memory."""
    description: str = ""
    """What it does, for operators (the CLI, the console, the docs)."""
    audits: tuple[str, ...] = ()
    """Other jobs whose run rows and rule toggles this one reads (the missed-run auditor, `jobfence.auditor`):
    it is granted query on their run rows and get on their lease items, under LeadingKeys = those jobs."""
    catch_up: CatchUp = CatchUp.NONE
    """After an outage or a disabled period: `CatchUp.ONCE` runs the job one time (coalesced) for the last
    missed or disabled tick of the last `catch_up_window_s` seconds (`jobfence.catchup`); `NONE` waits for the
    next tick."""
    catch_up_window_s: int | None = None
    """How far back a `CatchUp.ONCE` job looks for a missed tick (seconds, at most 31 days); set exactly when
    `catch_up` is `ONCE`."""
    overlap: Overlap = Overlap.SKIP
    """What a tick that meets a live holder does: `Overlap.SKIP` writes nothing; `Overlap.BUFFER_ONE` leaves one
    pending request on the lease item, and the holder runs once more, or hands over, before it releases."""
    unfenced: Mapping[str, str] = field(default_factory=dict)
    """Tables of `tables` this job writes outside `ctx.transaction()` on purpose, each with why a late write of a
    term that was taken over is harmless there (e.g. every write re-checks the row exactly as it was read, or
    deletes only expired rows). The test kit fails any other write to a catalog table made outside the fenced
    transaction (`jobfence.testing.fence`)."""

    def __post_init__(self) -> None:
        if self.lease_ttl_s is None:  # after construction lease_ttl_s is always an int
            object.__setattr__(self, "lease_ttl_s", self.timeout_s + LEASE_MARGIN_S)

    @property
    def interval_ms(self) -> int | None:
        """The interval gate in ms (None: the lease alone guards the job)."""
        return self.interval_s * 1000 if self.interval_s else None

    @property
    def lease_ttl_ms(self) -> int:
        """The term's length in ms (`lease_ttl_s`, or the timeout plus `LEASE_MARGIN_S` when not given)."""
        assert self.lease_ttl_s is not None  # filled in by __post_init__
        return self.lease_ttl_s * 1000


@dataclass(frozen=True)
class QueueSpec:
    """An SQS work queue and the worker that consumes it."""

    name: str
    subsystem: str
    handler: str  # "handlers.module.handler"
    worker_timeout_s: int
    visibility_timeout_s: int
    max_receive_count: int = 5
    batch_size: int = 10
    max_concurrency: int = 3
    tables: Mapping[str, Access] = field(default_factory=dict)
    queues: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()  # external HTTP APIs its worker calls (base URL in PROVIDER_<NAME>_URL)
    memory_mb: int = 256
    description: str = ""


LEASES_TABLE = TableSpec(
    name="leases",
    subsystem=SHARED_SUBSYSTEM,
    partition_key=("job", "S"),
    description="one item per job: the fenced lease term, its fence counter and the interval-gate stamp",
)
RUNS_TABLE = TableSpec(
    name="runs",
    subsystem=SHARED_SUBSYSTEM,
    partition_key=("job", "S"),
    sort_key=("run_key", "S"),
    ttl_attribute="ttl",
    description="one row per run that took the lease",
)
AUDIT_TABLE = TableSpec(
    name="audit",
    subsystem=SHARED_SUBSYSTEM,
    partition_key=("month", "S"),
    sort_key=("entry", "S"),
    ttl_attribute="ttl",
    indexes=(IndexSpec("by_subject", ("subject", "S"), ("entry", "S")),),
    description="one row per operator action (console or CLI): who, what, on what, when, the result; "
    "written by operators only, granted to no function",
)
CORE_TABLES = (LEASES_TABLE, RUNS_TABLE, AUDIT_TABLE)


class Registry:
    """The validated catalog: jobs, queues and tables by name (the core tables included)."""

    def __init__(self, tables: Iterable[TableSpec], jobs: Iterable[JobSpec], queues: Iterable[QueueSpec] = ()) -> None:
        self.tables: dict[str, TableSpec] = _unique("table", [*CORE_TABLES, *tables])
        self.jobs: dict[str, JobSpec] = _unique("job", jobs)
        self.queues: dict[str, QueueSpec] = _unique("queue", queues)
        for job in self.jobs.values():
            self._check_job(job)
        for queue in self.queues.values():
            self._check_queue(queue)

    def job(self, name: str) -> JobSpec:
        """The registered job of that name; anything else fails closed."""
        try:
            return self.jobs[name]
        except KeyError:
            raise UnknownJob(f"JOB_NAME {name!r} is not a registered job") from None

    def queue(self, name: str) -> QueueSpec:
        """The registered queue of that name; anything else is a `CatalogError` naming the catalog's queues."""
        try:
            return self.queues[name]
        except KeyError:
            known = ", ".join(sorted(self.queues)) or "none"
            raise CatalogError(
                f"queue {str(name)[:80]!r} is not a queue of the catalog (its queues: {known})"
            ) from None

    def _check_job(self, job: JobSpec) -> None:
        where = f"catalog entry {job.name!r}"
        if job.lease_ttl_ms < (job.timeout_s + LEASE_MARGIN_S) * 1000:
            raise CatalogError(
                f"{where}: lease ttl {job.lease_ttl_s}s must be at least the function timeout "
                f"{job.timeout_s}s plus a {LEASE_MARGIN_S}s margin"
            )
        if not (job.schedule.startswith("cron(") or job.schedule.startswith("rate(")) or not job.schedule.endswith(")"):
            raise CatalogError(
                f"{where}: schedule {job.schedule!r} is not an EventBridge cron(...) or rate(...) expression"
            )
        if job.interval_s is not None and job.interval_s <= 0:
            raise CatalogError(f"{where}: interval must be positive")
        if not 1 <= job.timeout_s <= 900:
            raise CatalogError(f"{where}: timeout {job.timeout_s}s is outside Lambda's 1..900s")
        if job.batch_budget_s >= job.timeout_s:
            raise CatalogError(
                f"{where}: batch budget {job.batch_budget_s}s must be below the timeout {job.timeout_s}s"
            )
        for key, value in job.config.items():
            if (
                not (key.replace("_", "").isalnum() and key.lower() == key)
                or not isinstance(value, str)
                or len(value) > 2000
            ):
                raise CatalogError(f"{where}: config {str(key)[:40]!r} must be lower_snake_case with a text value")
        _check_policies(where, job)
        self._check_uses(where, job.subsystem, job.tables, job.queues, job_scoped=True)
        for table_name, why in job.unfenced.items():
            if table_name not in job.tables or not isinstance(why, str) or not why.strip():
                raise CatalogError(
                    f"{where}: unfenced {str(table_name)[:60]!r} must be one of its tables, with the reason "
                    "a stale term's late write there is harmless"
                )
        for audited in job.audits:
            if audited not in self.jobs or audited == job.name:
                raise CatalogError(f"{where}: audits {str(audited)[:60]!r}, which is not another registered job")

    def _check_queue(self, queue: QueueSpec) -> None:
        where = f"queue entry {queue.name!r}"
        if queue.visibility_timeout_s < 6 * queue.worker_timeout_s:
            raise CatalogError(
                f"{where}: visibility timeout {queue.visibility_timeout_s}s is under 6 x the worker timeout "
                f"{queue.worker_timeout_s}s"
            )
        if queue.max_receive_count < 5:
            raise CatalogError(f"{where}: maxReceiveCount {queue.max_receive_count} is under 5")
        self._check_uses(where, queue.subsystem, queue.tables, queue.queues, job_scoped=False)

    def _check_uses(
        self, where: str, subsystem: str, tables: Mapping[str, Access], queues: Iterable[str], *, job_scoped: bool
    ) -> None:
        for table_name, access in tables.items():
            table = self.tables.get(table_name)
            if table is None:
                raise CatalogError(f"{where}: unknown table {table_name!r}")
            try:
                verbs = access_verbs(access)
            except CatalogError as exc:
                raise CatalogError(f"{where}: on {table_name!r}: {exc}") from None
            if table.keyed_by_job and ("scan" in verbs or not job_scoped):
                raise CatalogError(
                    f"{where}: table {table_name!r} is keyed by job: only a job may use it, "
                    "through its own partition (no scan)"
                )
            if table.tenant_scoped and "scan" in verbs:
                raise CatalogError(
                    f"{where}: table {table_name!r} is tenant-scoped: a scan names no partition key (no scan)"
                )
            if table.subsystem not in (subsystem, SHARED_SUBSYSTEM):
                raise CatalogError(
                    f"{where}: table {table_name!r} belongs to subsystem {table.subsystem!r}, not {subsystem!r}"
                )
        for queue_name in queues:
            if queue_name not in self.queues:
                raise CatalogError(f"{where}: unknown queue {queue_name!r}")


def _check_policies(where: str, job: JobSpec) -> None:
    """The catch-up and overlap policies of an entry: known values, and a window exactly where one is used."""
    if job.catch_up not in tuple(CatchUp):
        raise CatalogError(
            f"{where}: catch_up {str(job.catch_up)[:40]!r} is not one of {', '.join(c.value for c in CatchUp)}"
        )
    window = job.catch_up_window_s
    if job.catch_up == CatchUp.NONE and window is not None:
        raise CatalogError(
            f"{where}: catch_up_window_s is set but catch_up is 'none' (set catch_up='once', or drop the window)"
        )
    if job.catch_up == CatchUp.ONCE and (
        isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= CATCH_UP_WINDOW_MAX_S
    ):
        raise CatalogError(
            f"{where}: catch_up 'once' needs catch_up_window_s, whole seconds in 1..{CATCH_UP_WINDOW_MAX_S}; "
            f"got {str(window)[:40]}"
        )
    if job.overlap not in tuple(Overlap):
        raise CatalogError(
            f"{where}: overlap {str(job.overlap)[:40]!r} is not one of {', '.join(o.value for o in Overlap)}"
        )


def _unique(kind: str, specs: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name in out:
            raise CatalogError(f"duplicate {kind} name {spec.name!r} in the catalog")
        out[spec.name] = spec
    return out


def metric_dimensions(job: JobSpec) -> dict[str, str]:
    """The dimensions every metric of a job's run carries (alarms must match them exactly)."""
    return {"service": job.subsystem, "job": job.name}
