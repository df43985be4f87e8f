"""`JobfenceJobs`: composes the constructs of one catalog; every resource is derived from the catalog.

A construct, so an app adds jobfence to a stack it already has (`JobfenceStack` is a stack holding one);
a table the app already has is passed in (`tables`) instead of created.
Order matters only where one resource's name feeds another's environment:
tables, then every queue, then secrets, then the functions that use them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from jobfence.registry import CatchUp, JobSpec, QueueSpec, Registry
from jobfence_cdk.access import CatalogResources
from jobfence_cdk.code import ARCHITECTURE, RUNTIME, FunctionCode, python_version, wheel_platform
from jobfence_cdk.health_api import HEALTH_HANDLER, HealthApi
from jobfence_cdk.monitoring import Monitoring
from jobfence_cdk.rotation import SigningKeyRotation
from jobfence_cdk.scheduled_job import ScheduledJob
from jobfence_cdk.secrets import CatalogSecrets
from jobfence_cdk.tables import CatalogTables, check_existing, pascal
from jobfence_cdk.validation import SCHEDULED_HANDLER, deployable, handler_file
from jobfence_cdk.work_queue import WorkQueue


class JobfenceJobs(Construct):
    """The whole app of one catalog, in any stack: `catalog` is the app's `Registry`, `functions_dir` its code
    asset (the directory holding `handlers/`, the job packages and `requirements.txt`), `prefix` the stage that
    names every resource (two `JobfenceJobs` of one stack need two prefixes).

    `runtime` (a Lambda Python runtime, default python3.14) and `architecture` (default arm64) are every
    function's, and the layer's wheels are pip's for them; `handler` is the scheduled jobs' handler
    ("module.function" under `functions_dir`, default `handlers.scheduled.handler`). `tables` maps a catalog
    table's logical name to a table the app already has (`dynamodb.Table.from_table_name(...)`, or a `Table`
    of its own): it is used, not created, and granted exactly as a created one.
    `signing_keys` ((signing, verify), ...) names the secret pairs of the catalog that jobfence rotates on a
    schedule (`SigningKeyRotation`, one function for all pairs; the asset must hold
    `handlers/rotate_signing_key.py`); a single pair `(signing, verify)` is also accepted; `health` adds
    the health API (default: when the asset holds `handlers/health.py`). `rejections` maps a work queue
    to the metric its worker counts rejected messages with: each gets an alarm (`Monitoring`).
    A bad catalog, runtime, architecture or table is refused (`CatalogError`, `ValueError`) before any
    construct is added.

    Attributes: `catalog`, `tables` (`CatalogTables`), `queues`, `secrets`, `resources`, `code`, `jobs`,
    `rotation` (or None), `health` (or None), `monitoring`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Registry,
        functions_dir: pathlib.Path,
        prefix: str = "jobfence",
        schedules_enabled: bool = True,
        health: bool | None = None,
        signing_keys: Sequence[tuple[str, str]] | tuple[str, str] | None = None,
        rejections: Mapping[str, str] | None = None,
        runtime: lambda_.Runtime = RUNTIME,
        architecture: lambda_.Architecture = ARCHITECTURE,
        handler: str = SCHEDULED_HANDLER,
        tables: Mapping[str, dynamodb.ITable] | None = None,
    ) -> None:
        # Refuse a bad catalog before any construct exists, with a message naming the entry.
        self.catalog = deployable(catalog, prefix, functions_dir, handler)
        check_existing(self.catalog, tables or {})
        python_version(runtime)
        wheel_platform(architecture)
        super().__init__(scope, construct_id)
        specs: list[JobSpec | QueueSpec] = [*self.catalog.jobs.values(), *self.catalog.queues.values()]

        self.tables = CatalogTables(self, "Tables", catalog=self.catalog, prefix=prefix, existing=tables)
        self.queues = {
            name: WorkQueue(self, f"Queue{pascal(name)}", spec=spec, prefix=prefix)
            for name, spec in sorted(self.catalog.queues.items())
        }
        names = [s for spec in specs for s in spec.secrets]
        # The signing pairs jobfence owns are rotated on a schedule (SMG4 met, not acknowledged).
        pairs = [pair for pair in _pairs(signing_keys) if set(pair) <= set(names)]
        self.secrets = CatalogSecrets(self, "Secrets", names=names, prefix=prefix, rotated=pairs)
        self.resources = CatalogResources(
            tables=self.tables.tables,
            indexes={name: tuple(i.name for i in spec.indexes) for name, spec in self.catalog.tables.items()},
            keyed_by_job=frozenset(name for name, spec in self.catalog.tables.items() if spec.keyed_by_job),
            tenant_scoped=frozenset(name for name, spec in self.catalog.tables.items() if spec.tenant_scoped),
            queues={name: q.queue for name, q in self.queues.items()},
            secrets=self.secrets.grantable,
            prefix=prefix,
        )

        self.code = code = FunctionCode(
            self, "Code", functions_dir=functions_dir, runtime=runtime, architecture=architecture
        )
        self.jobs = {
            name: ScheduledJob(
                self,
                f"Job{pascal(name)}",
                spec=spec,
                code=code,
                resources=self.resources,
                prefix=prefix,
                enabled=schedules_enabled,
                handler=handler,
            )
            for name, spec in sorted(self.catalog.jobs.items())
        }
        for job in self.jobs.values():  # the missed-run auditor may invoke the jobs it catches up, and no other
            for name in job.spec.audits:
                if self.catalog.job(name).catch_up == CatchUp.ONCE:
                    job.may_catch_up(self.jobs[name])
        for queue in self.queues.values():
            queue.attach_worker(code=code, resources=self.resources)
        self.rotation = None
        if pairs:
            self.rotation = SigningKeyRotation(
                self, "SigningKeyRotation", code=code, prefix=prefix, secrets=self.secrets, signing_keys=pairs
            )
            for name in {n for pair in pairs for n in pair}:
                self.resources.readers.setdefault(name, []).append(self.rotation.role)
        self.secrets.admit_only(
            self.resources.readers,
            rotation=self.rotation.role if self.rotation is not None else None,
            rotated=[n for pair in pairs for n in pair],
        )
        # The health handler is optional: without handlers/health.py the app still deploys.
        if health is None:
            health = handler_file(HEALTH_HANDLER, functions_dir).is_file()
        self.health = HealthApi(self, "HealthApi", code=code, prefix=prefix) if health else None
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            prefix=prefix,
            jobs=self.jobs.values(),
            queues=self.queues.values(),
            rejections={q: m for q, m in (rejections or {}).items() if q in self.queues},
            rotation=self.rotation.function if self.rotation is not None else None,
        )


def _pairs(signing_keys: Sequence[tuple[str, str]] | tuple[str, str] | None) -> list[tuple[str, str]]:
    """The (signing, verify) pairs asked for: none, one pair, or a sequence of pairs."""
    if not signing_keys:
        return []
    items = list(signing_keys)
    if len(items) == 2 and isinstance(items[0], str) and isinstance(items[1], str):
        return [(items[0], items[1])]
    return [(str(pair[0]), str(pair[1])) for pair in items]
