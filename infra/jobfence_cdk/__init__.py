"""jobfence-cdk: the CDK constructs of jobfence, derived from a job catalog (`jobfence.Registry`).

The public API (everything else in this package is internal and may change):

- `build_app(app, catalog, functions_dir=...)` adds the whole stack of a catalog to a CDK `App`, with
  the cdk-nag packs (AwsSolutions, Serverless) unless the context says `nag=false`; `JobfenceStack` is
  that stack, for an app that composes it itself.
- `JobfenceJobs(scope, id, catalog=..., functions_dir=...)`: the same resources as a construct, for a stack
  the app already has; it takes the functions' `runtime`, `architecture` and scheduled `handler`, and
  `tables`, the catalog tables the app already has (used and granted, not created). `JobfenceStack` is a
  stack holding one.
- `ScheduledJob` (one EventBridge rule -> the job's own function, its dead-letter queue),
  `WorkQueue` (an SQS queue, its dead-letter queue and its worker), `Monitoring` (the alarms and the
  dashboard), `FunctionCode` (the code asset and its dependency layer), `CatalogResources` (the
  environment and the grants of a catalog entry): the pieces `JobfenceJobs` composes.
- `SKIP_BUNDLING_CONTEXT`: the app context that skips building the dependency layer (tests).

An app passes its catalog and its functions directory in; see `examples/invoices/app.py`.
"""

from jobfence_cdk.access import CatalogResources
from jobfence_cdk.app import build_app, schedules_enabled, stack_name
from jobfence_cdk.code import SKIP_BUNDLING_CONTEXT, FunctionCode
from jobfence_cdk.jobfence_jobs import JobfenceJobs
from jobfence_cdk.monitoring import Monitoring
from jobfence_cdk.scheduled_job import ScheduledJob
from jobfence_cdk.stack import JobfenceStack
from jobfence_cdk.work_queue import WorkQueue

__version__ = "0.2.0"
__all__ = [
    "SKIP_BUNDLING_CONTEXT",
    "CatalogResources",
    "FunctionCode",
    "JobfenceJobs",
    "JobfenceStack",
    "Monitoring",
    "ScheduledJob",
    "WorkQueue",
    "build_app",
    "schedules_enabled",
    "stack_name",
]
