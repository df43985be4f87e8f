"""jobfence runtime: fenced leases, the scheduled-job runner, durable batches.

Public API: `Clock`, `SystemClock`, `FrozenClock`, `LeaseStore`, `Lease`,
`ScheduledRunner`, `Outcome`, `RunContext`, `JobDeps`, `Registry`, `JobSpec`,
`TableSpec`, `QueueSpec` and the errors in `jobfence.errors`.
"""

from jobfence.clock import Clock, FrozenClock, SystemClock
from jobfence.lease import Lease, LeaseStore
from jobfence.registry import IndexSpec, JobSpec, QueueSpec, Registry, TableSpec
from jobfence.scheduled import JobDeps, Outcome, RunContext, ScheduledRunner

__all__ = [
    "Clock",
    "FrozenClock",
    "IndexSpec",
    "JobDeps",
    "JobSpec",
    "Lease",
    "LeaseStore",
    "Outcome",
    "QueueSpec",
    "Registry",
    "RunContext",
    "ScheduledRunner",
    "SystemClock",
    "TableSpec",
]
