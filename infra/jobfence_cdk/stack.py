"""`JobfenceStack`: a stack that holds the `JobfenceJobs` of one catalog, and nothing else (what `build_app` adds).

The construct's id is `Default`, which CDK leaves out of logical ids: the template is the one this stack
synthesized when it composed the constructs itself, so a deployed stack updates in place.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from jobfence.registry import Registry
from jobfence_cdk.code import ARCHITECTURE, RUNTIME
from jobfence_cdk.jobfence_jobs import JobfenceJobs
from jobfence_cdk.validation import SCHEDULED_HANDLER


class JobfenceStack(Stack):
    """The whole app of one catalog as its own stack: the arguments of `JobfenceJobs`, then `Stack`'s (`kwargs`).

    Attributes: `jobfence` (the `JobfenceJobs`), and its `catalog`, `tables`, `queues`, `secrets`,
    `resources`, `jobs`, `rotation`, `health`, `monitoring`.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.jobfence = JobfenceJobs(
            self,
            "Default",
            catalog=catalog,
            functions_dir=functions_dir,
            prefix=prefix,
            schedules_enabled=schedules_enabled,
            health=health,
            signing_keys=signing_keys,
            rejections=rejections,
            runtime=runtime,
            architecture=architecture,
            handler=handler,
            tables=tables,
        )
        jobs = self.jobfence
        self.catalog, self.tables, self.queues, self.secrets = jobs.catalog, jobs.tables, jobs.queues, jobs.secrets
        self.resources, self.jobs, self.rotation = jobs.resources, jobs.jobs, jobs.rotation
        self.health, self.monitoring = jobs.health, jobs.monitoring
