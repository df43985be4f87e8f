"""`JobfenceStack`: composes the constructs; every resource is derived from the catalog."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from infra.access import CatalogResources
from infra.code import FunctionCode
from infra.scheduled_job import ScheduledJob
from infra.tables import CatalogTables, _construct_id
from infra.validation import deployable


class JobfenceStack(Stack):
    """Attributes: `catalog`, `tables`, `jobs` (name -> ScheduledJob), `resources`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Any,
        prefix: str = "jobfence",
        schedules_enabled: bool = True,
        **kwargs: Any,
    ) -> None:
        # Refuse a bad catalog before any construct exists, with a message naming the entry.
        self.catalog = deployable(catalog, prefix)
        super().__init__(scope, construct_id, **kwargs)
        self.tables = CatalogTables(self, "Tables", catalog=self.catalog, prefix=prefix)
        self.resources = CatalogResources(
            tables=self.tables.tables,
            indexes={name: tuple(i.name for i in spec.indexes) for name, spec in self.catalog.tables.items()},
        )
        code = FunctionCode(self, "Code")
        self.jobs = {
            name: ScheduledJob(
                self,
                f"Job{_construct_id(name)}",
                spec=spec,
                code=code,
                resources=self.resources,
                prefix=prefix,
                enabled=schedules_enabled,
            )
            for name, spec in sorted(self.catalog.jobs.items())
        }
