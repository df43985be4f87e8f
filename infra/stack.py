"""`JobfenceStack`: composes the constructs; every resource is derived from the catalog.

Order matters only where one resource's name feeds another's environment:
tables, then every queue, then secrets, then the functions that use them.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from jobfence.registry import CatchUp
from jobs.club.catalog import SIGNING_KEY_SECRET, VERIFY_KEY_SECRET

from infra.access import CatalogResources
from infra.code import FunctionCode
from infra.health_api import HEALTH_HANDLER, HealthApi
from infra.monitoring import Monitoring
from infra.scheduled_job import ScheduledJob
from infra.rotation import SigningKeyRotation
from infra.secrets import CatalogSecrets
from infra.tables import CatalogTables, pascal
from infra.validation import deployable, handler_file
from infra.work_queue import WorkQueue


class JobfenceStack(Stack):
    """Attributes: `catalog`, `tables`, `queues`, `secrets`, `jobs`, `rotation` (or None), `health` (or None),
    `monitoring`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Any,
        prefix: str = "jobfence",
        schedules_enabled: bool = True,
        health: bool | None = None,
        **kwargs: Any,
    ) -> None:
        # Refuse a bad catalog before any construct exists, with a message naming the entry.
        self.catalog = deployable(catalog, prefix)
        super().__init__(scope, construct_id, **kwargs)
        specs = [*self.catalog.jobs.values(), *self.catalog.queues.values()]

        self.tables = CatalogTables(self, "Tables", catalog=self.catalog, prefix=prefix)
        self.queues = {
            name: WorkQueue(self, f"Queue{pascal(name)}", spec=spec, prefix=prefix)
            for name, spec in sorted(self.catalog.queues.items())
        }
        self.secrets = CatalogSecrets(self, "Secrets", names=[s for spec in specs for s in spec.secrets], prefix=prefix)
        self.resources = CatalogResources(
            tables=self.tables.tables,
            indexes={name: tuple(i.name for i in spec.indexes) for name, spec in self.catalog.tables.items()},
            keyed_by_job=frozenset(name for name, spec in self.catalog.tables.items() if spec.keyed_by_job),
            queues={name: q.queue for name, q in self.queues.items()},
            secrets=self.secrets.grantable,
            prefix=prefix,
        )

        code = FunctionCode(self, "Code")
        self.jobs = {
            name: ScheduledJob(
                self,
                f"Job{pascal(name)}",
                spec=spec,
                code=code,
                resources=self.resources,
                prefix=prefix,
                enabled=schedules_enabled,
            )
            for name, spec in sorted(self.catalog.jobs.items())
        }
        for job in self.jobs.values():  # the missed-run auditor may invoke the jobs it catches up, and no other
            for name in job.spec.audits:
                if self.catalog.job(name).catch_up == CatchUp.ONCE:
                    job.may_catch_up(self.jobs[name])
        for queue in self.queues.values():
            queue.attach_worker(code=code, resources=self.resources)
        # The signing pair jobfence owns is rotated on a schedule (SMG4 met, not acknowledged).
        self.rotation = None
        if {SIGNING_KEY_SECRET, VERIFY_KEY_SECRET} <= set(self.secrets.secrets):
            self.rotation = SigningKeyRotation(self, "SigningKeyRotation", code=code, prefix=prefix, secrets=self.secrets)
            for name in (SIGNING_KEY_SECRET, VERIFY_KEY_SECRET):
                self.resources.readers.setdefault(name, []).append(self.rotation.role)
        self.secrets.admit_only(self.resources.readers)
        # The health handler is optional: without handlers/health.py the app still deploys.
        if health is None:
            health = handler_file(HEALTH_HANDLER).is_file()
        self.health = (
            HealthApi(self, "HealthApi", code=code, prefix=prefix) if health else None
        )
        self.monitoring = Monitoring(
            self, "Monitoring", prefix=prefix, jobs=self.jobs.values(), queues=self.queues.values()
        )
