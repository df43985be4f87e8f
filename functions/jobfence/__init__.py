"""jobfence runtime: fenced leases, the scheduled-job runner, durable batches.

Public API: `Clock`, `SystemClock`, `FrozenClock`, `LeaseStore`, `Lease`,
`ScheduledRunner`, `Outcome`, `RunContext`, `JobDeps`, `Registry`, `JobSpec`,
`TableSpec`, `QueueSpec` and the errors in `jobfence.errors`.
"""

from jobfence.exports import on_demand, public_names

_MODULES = {
    "jobfence.clock": "Clock FrozenClock SystemClock",
    "jobfence.lease": "Lease LeaseStore",
    "jobfence.registry": "IndexSpec JobSpec QueueSpec Registry TableSpec",
    "jobfence.scheduled": "JobDeps Outcome RunContext ScheduledRunner",
}
# Importing `jobfence.clock` runs this file first: it must load nothing (docs/benchmarks.md, cold start).
__getattr__ = on_demand(__name__, _MODULES)
__all__ = public_names(_MODULES)
