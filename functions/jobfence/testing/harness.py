"""`JobHarness`: one catalog job run by the real runner on moto, on a frozen clock, inside its grant.

    harness = JobHarness(session, CATALOG, "clean_reports", clock)   # leases, runs and the entry's own tables
    tick = harness.tick()                                            # the job built by its factory, one tick
    tick.assert_ran(deleted=3)                                       # outcome, run row and summary agree
    event = harness.scheduled_event()                                # the Scheduled Event its rule sends now
    clock.advance(hours=1); harness.tick().assert_outcome(Outcome.RAN)

Only the tables the job's catalog entry names are created (with the leases
and runs tables), the job's factory gets the environment infra would give its
function, and every tick runs under the grant guard (`jobfence.testing.grants`):
a store that calls DynamoDB beyond the entry's declared access fails the test,
and so does a write to one of the job's catalog tables made outside
`ctx.transaction()` (`jobfence.testing.fence`), naming the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from jobfence.binding import new_session
from jobfence.clock import FrozenClock
from jobfence.config import (
    DEFAULT_PREFIX,
    ENV_RULE_ARN,
    ScheduledSettings,
    config_env,
    queue_env,
    secret_env,
    table_env,
)
from jobfence.dynamo import deserialized
from jobfence.lease import LeaseStore
from jobfence.registry import JobSpec, Registry
from jobfence.runs import RunState, RunStore
from jobfence.scheduled import Job, JobDeps, LambdaContextLike, Outcome, RunResult, ScheduledRunner, load_job
from jobfence.testing.fence import fenced_writes_only
from jobfence.testing.grants import within_grant
from jobfence.testing.tables import create_tables
from jobfence.triggers import Trigger, scheduled_event

if TYPE_CHECKING:
    import boto3.session

ACCOUNT = "123456789012"  # moto's default account: the one the harness's resources live in


@dataclass(frozen=True)
class RunRow:
    """A run row as the runs table holds it (`jobfence.runs`), typed."""

    job: str
    run_id: str
    outcome: RunState
    trigger: str
    fence: int
    started_at: int
    finished_at: int | None
    summary: Mapping[str, Any]
    error: str | None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> RunRow:
        """The row of a runs-table item (plain values, as `JobHarness.rows` returns them)."""
        return cls(
            item["job"],
            item["run_id"],
            RunState(item["outcome"]),
            item.get("trigger", ""),
            int(item["fence"]),
            int(item["started_at"]),
            item.get("finished_at"),
            dict(item.get("summary") or {}),
            item.get("error"),
        )


@dataclass(frozen=True)
class Tick:
    """One tick's result and, when it took the lease, its run row."""

    result: RunResult
    row: RunRow | None

    @property
    def outcome(self) -> Outcome:
        """What the tick came to."""
        return self.result.outcome

    @property
    def summary(self) -> Mapping[str, Any]:
        """The tick's summed batch counts (`batches` and the job's own), as its run row holds them."""
        return self.result.summary

    def assert_outcome(self, outcome: Outcome) -> Tick:
        """The tick came to `outcome`; a run that took the lease has a row that says the same; a skip has none."""
        assert self.outcome is outcome, f"the tick came to {self.outcome.value}, expected {outcome.value}"
        if outcome.value.startswith("skipped") or outcome is Outcome.BUFFERED:
            assert self.row is None, f"a {outcome.value} tick wrote a run row: {self.row}"
        else:
            assert self.row is not None, f"a {outcome.value} run has no run row"
            assert self.row.outcome.value == outcome.value, (
                f"the run row says {self.row.outcome.value}, the tick {outcome.value}"
            )
        return self

    def assert_ran(self, **summary: Any) -> Tick:
        """The tick ran, its row says `ran` with the same summary, which holds each of `summary`'s counts."""
        self.assert_outcome(Outcome.RAN)
        assert self.row is not None  # assert_outcome saw it
        assert dict(self.row.summary) == dict(self.result.summary), (
            f"the run row's summary {dict(self.row.summary)} is not the tick's {dict(self.result.summary)}"
        )
        wrong = {k: self.summary.get(k) for k, v in summary.items() if self.summary.get(k) != v}
        assert not wrong, f"summary {dict(self.summary)}: expected {summary}, these differ: {wrong}"
        return self


@dataclass
class LambdaContext:
    """Enough of Lambda's context object for Powertools and the runner (a handler test passes it)."""

    function_name: str = "jobfence-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:jobfence-test"
    aws_request_id: str = "req-0"
    remaining_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        """The time left, fixed at `remaining_ms`."""
        return self.remaining_ms


class CountedMetrics:
    """Powertools `Metrics.add_metric`, counted per name in memory (what the run would publish)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add_metric(self, name: str, unit: MetricUnit | str, value: float, **_: Any) -> None:
        """Record one value of metric `name`."""
        self.values.setdefault(name, []).append(value)

    def count(self, name: str) -> int:
        """How many times `name` was emitted (an outcome's metric is emitted once per tick)."""
        return len(self.values.get(name, []))


@dataclass
class JobHarness:
    """One job of `registry` on moto: its tables, its factory's deps, the real runner, its run rows.

    `session` is a boto3 session inside moto (the `aws` fixture of `jobfence.testing.plugin`).
    Several jobs of one application share its tables and queues when their harnesses are
    given the same `tables` (logical -> physical, e.g. a lazy `CatalogTables`) and `queues`
    (name -> URL); what the job needs and is not given is created for it. `dynamodb` is the
    client the runner and the job's factory use (default: a new one of `session`): give the
    one a test injects faults into.

    A test of the runner itself may tick a `JobSpec` of its own: give it as `entry` (its name is
    `job`; it need not be in `registry`, which then only serves to create missing tables), share
    one `lease_store` and `run_store` (default: new ones on the leases and runs tables) among
    the harnesses of several specs, and give the buffer_one hand-over an `invoke_self`
    (`ScheduledRunner`'s; default: none, a pending request is left for the next tick).
    `session` may then be None when `dynamodb` is given and the job needs no queue and is not
    built by its factory.

    Every tick checks the fence (`jobfence.testing.fence`): a write to one of the catalog's tables
    (not the leases or runs table, nor one the entry declares `unfenced`) sent outside
    `ctx.transaction()` fails the tick with an AssertionError naming the call. `fence=False` turns
    that off, for a test of the runner itself that writes on purpose outside a term.
    """

    session: Any
    registry: Registry
    job: str
    clock: FrozenClock
    logger: Logger = field(default_factory=lambda: Logger(service="jobfence-test"))
    tables: Mapping[str, str] = field(default_factory=dict)
    queues: Mapping[str, str] = field(default_factory=dict)
    dynamodb: Any = None
    entry: JobSpec | None = None
    lease_store: LeaseStore | None = None
    run_store: RunStore | None = None
    invoke_self: Callable[[Mapping[str, Any]], None] | None = None
    fence: bool = True

    def __post_init__(self) -> None:
        if self.entry is not None and self.entry.name != self.job:
            raise ValueError(f"entry {self.entry.name!r} is not the job {self.job!r}")
        self.spec: JobSpec = self.entry if self.entry is not None else self.registry.job(self.job)
        if self.dynamodb is None:
            self.dynamodb = self.session.client("dynamodb")
        missing = {name for name in ("leases", "runs", *self.spec.tables) if name not in self.tables}
        if missing:  # (a lazy `CatalogTables` holds every name: each is created when first read)
            self.tables = {**self.tables, **create_tables(self.dynamodb, self.registry, missing)}
        unmade = [name for name in self.spec.queues if name not in self.queues]
        if unmade:
            sqs = self.session.client("sqs")
            self.queues = {
                **self.queues,
                **{name: sqs.create_queue(QueueName=f"jobfence-{name}")["QueueUrl"] for name in unmade},
            }
        self.metrics = CountedMetrics()
        if self.lease_store is None:
            self.lease_store = LeaseStore(self.dynamodb, self.tables["leases"], self.clock)
        if self.run_store is None:
            self.run_store = RunStore(self.dynamodb, self.tables["runs"])
        self._runs: RunStore = self.run_store
        published: Metrics = self.metrics  # type: ignore[assignment]  # add_metric is all the runner calls
        self.runner = ScheduledRunner(
            self.lease_store, self._runs, self.clock, self.logger, published, invoke_self=self.invoke_self
        )

    @property
    def rule_arn(self) -> str:
        """The ARN of the job's rule in the default stage (what infra gives its function as `RULE_ARN`)."""
        region = getattr(self.session, "region_name", None) or "us-east-1"
        return rule_arn_of(self.spec.name, region)

    def scheduled_event(self, at_ms: int | None = None) -> dict[str, Any]:
        """The Scheduled Event the job's rule sends for its tick at `at_ms` (default: now on the clock)."""
        return scheduled_event(self.rule_arn, self.clock.now_ms() if at_ms is None else at_ms)

    def environ(self) -> dict[str, str]:
        """The environment infra gives the job's function: its name, its rule, the core tables, its tables and queues."""
        env = {"JOB_NAME": self.spec.name, "LEASES_TABLE": self.tables["leases"], "RUNS_TABLE": self.tables["runs"]}
        env[ENV_RULE_ARN] = self.rule_arn
        env.update({table_env(name): self.tables[name] for name in self.spec.tables})
        env.update({queue_env(name): self.queues[name] for name in self.spec.queues})
        env.update({secret_env(name): f"jobfence/{name}" for name in self.spec.secrets})
        env.update({config_env(name): value for name, value in self.spec.config.items()})
        return env

    def deps(self) -> JobDeps:
        """What the job's factory is given at cold start."""
        settings = ScheduledSettings.from_environ(self.environ())
        return JobDeps(settings, self.spec, self.clock, self.session, self.dynamodb, self.logger)

    def build(self) -> Job:
        """The job, built by the factory its catalog entry names."""
        return load_job(self.spec)(self.deps())

    def tick(
        self, job: Job | None = None, *, trigger: Trigger | None = None, context: LambdaContextLike | None = None
    ) -> Tick:
        """One tick now (a scheduled trigger unless given) of `job` (default: built by its factory), in its grant.

        The job's own error is re-raised, as in Lambda; its run row then says `failed` (see `runs`).
        """
        result = self.run(job, trigger=trigger, context=context)
        return Tick(result, self._row(result.run_id))

    def run(
        self, job: Job | None = None, *, trigger: Trigger | None = None, context: LambdaContextLike | None = None
    ) -> RunResult:
        """`tick`'s run alone: its `RunResult`, without reading its row back (a test counting requests sees none).

        The job's own error is re-raised, as in `tick`; a write outside the fence fails it (AssertionError).
        """
        fence = fenced_writes_only(self.tables, self.spec.name, self.spec.unfenced) if self.fence else nullcontext()
        with fence, within_grant(self.tables, self.spec.tables, self.spec.name, audits=bool(self.spec.audits)):
            built = job if job is not None else self.build()
            return self.runner.run(self.spec, built, trigger or Trigger("scheduled", self.clock.now_ms()), context)

    def runs(self) -> list[RunRow]:
        """The job's run rows, newest first."""
        return [RunRow.from_item(item) for item in self._runs.recent(self.spec.name, limit=100)]

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of one of the job's tables (strongly consistent scan), read by `jobfence.dynamo.deserialized`."""
        request: dict[str, Any] = {"TableName": self.tables[table], "ConsistentRead": True}
        items: list[dict[str, Any]] = []
        while True:
            page = self.dynamodb.scan(**request)
            items.extend(deserialized(item) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _row(self, run_id: str | None) -> RunRow | None:
        if run_id is None:
            return None
        found = [row for row in self.runs() if row.run_id == run_id]
        return found[0] if found else None


JobFactory = Callable[[JobDeps], Job]


def rule_arn_of(job: str, region: str = "us-east-1", account: str = ACCOUNT, prefix: str = DEFAULT_PREFIX) -> str:
    """The ARN of a job's rule (`<prefix>-<job>`), as infra names it: what its function accepts ticks from."""
    return f"arn:aws:events:{region}:{account}:rule/{prefix}-{job}"


def aws_session(region_name: str | None = None) -> boto3.session.Session:
    """A fresh boto3 session (in moto under the `aws` fixture) sharing the process's botocore data loader.

    See `jobfence.binding.new_session`: parsing the service models again for every test's session would be
    most of a small test's time.
    """
    import boto3

    return boto3.Session(botocore_session=new_session(), region_name=region_name)
