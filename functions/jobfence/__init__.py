"""jobfence runtime: fenced leases, the scheduled-job runner, durable batches.

The public API, by what a job author does with it (each name is imported from
its module on first use, so a function loads only what it touches):

**Time.** `Clock` (the protocol every component takes), `SystemClock` (Lambda),
`FrozenClock` (tests and the simulator: a clock you advance, never a sleep).

**The lease** (`jobfence.lease`). `LeaseStore` takes, renews and releases one
fenced lease per job with conditional writes on the leases table; a `Lease` is
one term (`lease_id`, a `fence` that only grows, `expires_at`). A refusal says
why: `LeaseHeld`, `IntervalNotElapsed`, `RequestServed`, `LeaseLost`.

**The runner** (`jobfence.scheduled`). `ScheduledRunner.run` is one tick:
pre-gate, acquire, record the run, then the job's bounded batches, renewing
the lease between them, then release. A job is a function of a `RunContext`
yielding one summary per batch (its last may say so: `LastBatch`, which spares
the renew before a batch that will not come); `JobDeps` is what its factory is given (its
settings, clock, clients, logger). `RunContext.transaction()` is the fenced
transaction (`FencedTransaction`): a `jobfence.dynamo.Transaction` whose first
entry is the lease check, to which stores add their conditional writes or a
prepared `Write`. The tick's result is a `RunResult` with an `Outcome`. `scheduled_handler`
(`jobfence.handler`) is the Lambda handler of a catalog's scheduled jobs: an
app's `handlers/scheduled.py` builds it at cold start; `worker_handler` is a
queue worker's, over the `WorkerPipeline` the app gives for each queue.

**The catalog** (`jobfence.registry`). `Registry` holds the data every
function and the CDK app read: `JobSpec` (schedule, lease TTL, `Overlap` and
`CatchUp` policies, grants), `TableSpec` and `IndexSpec`, `QueueSpec`. A grant
on a table is an `Access`: "+"-joined `AccessVerb`s ("query+update") or the
bundles "read" and "write".

**A per-item pipeline** (docs/your-first-pipeline.md; the package `jobfence.work`). Its catalog gives
the batches table its sparse index of open batches (`OPEN_INDEX_SPEC`; the items table has none) and the
pipeline its `Timing`. `WorkStore` holds the batch and item rows by role: its `items` (`ItemStore`), `batches` (`BatchStore`)
and roll-up tallies, over a `QuotaStore`, which grants, reserves and refunds per-tenant units with
conditional writes; `Producer.submit` writes a batch
(`BatchRef`) of `ItemInput`s and wakes a worker per item through `SqsWakeups`, the SQS adapter of the
wake-up port (`SubmitResult`); the worker calls the app's step with a `WorkRequest` per item (its
`idempotency_key` the same on every attempt), which raises `PermanentFailure` to fail it for good;
`BatchStore.describe_batch` reads a `BatchReport` (`BatchRow`, `ItemRow`, `BatchStatus`, `ItemStatus`)
and `QuotaStore.balance` a `QuotaBalance`. **Reclaim** (`jobfence.reclaim`): `Reclaimer` sweeps
stale items and batches of each `ReclaimPipeline`, one `ReclaimCounts` per page. A store built inside
`bound_to(session)` sends its requests to that session's region, never the environment's (`worker_handler`
builds its pipeline's stores so, in the `session` it is given).

**Errors**: every error a job, a handler or a catalog may meet derives from
`JobfenceError` and is exported here. A catalog entry that cannot be deployed or
run (an unknown table or queue, a bad schedule, policy or access) is a
`CatalogError`, at synthesis and at cold start; a function environment that is
missing or wrong is a `SettingsError`; a `JOB_NAME` not in the catalog an
`UnknownJob`; an event or message that breaks its contract an `InvalidEvent`.
A lease refusal is a `LeaseRefused` (`LeaseHeld`, `IntervalNotElapsed`,
`RequestServed`, `PredecessorUnrecorded`), a term that is over `LeaseLost` (or
`TermOvertaken`, when its acquire's reply was lost). `StoreError` carries the
classified AWS error (`jobfence.errors.ErrorKind`: whether a write may have been
applied), and `ConditionFailed` the old image of a refused write. A pipeline's
step raises `PermanentFailure` to fail an item for good; reusing a batch id for
another batch is a `BatchConflict`.

**Settings** (`jobfence.config`): `ScheduledSettings` is a scheduled job's
function environment, validated at cold start (`JobDeps.settings`); `Settings`
holds the lookups every function shares (`table`, `queue`, `secret`, ...).

The reference of every name, generated from these docstrings, is docs/api.md
(`python -m ops.apidoc`).

Everything else (`jobfence.binding` but `bound_to`, `jobfence.dynamo`, `jobfence.runs`, `jobfence.triggers`, and
of the work package's modules) is internal and may change.
"""

from jobfence.exports import on_demand, public_names

__version__ = "0.2.0"  # the `jobfence` distribution's (packages/jobfence/pyproject.toml, CHANGELOG.md)

_MODULES = {
    "jobfence.batch": "LastBatch",
    "jobfence.clock": "Clock FrozenClock SystemClock",
    "jobfence.config": "ScheduledSettings Settings",
    "jobfence.binding": "bound_to",
    "jobfence.errors": (
        "ConditionFailed IntervalNotElapsed InvalidEvent JobfenceError LeaseHeld LeaseLost LeaseRefused "
        "PredecessorUnrecorded RequestServed SettingsError StoreError TermOvertaken UnknownJob"
    ),
    "jobfence.handler.scheduled": "scheduled_handler",
    "jobfence.handler.worker": "worker_handler",
    "jobfence.indexes": "OPEN_INDEX_SPEC",
    "jobfence.lease": "Lease LeaseStore",
    "jobfence.quota": "QuotaStore",
    "jobfence.quota_balance": "QuotaBalance",
    "jobfence.reclaim": "ReclaimCounts ReclaimPipeline Reclaimer",
    "jobfence.registry": "Access AccessVerb CatalogError CatchUp IndexSpec JobSpec Overlap QueueSpec Registry TableSpec",
    "jobfence.scheduled": "JobDeps Outcome RunContext RunResult ScheduledRunner",
    "jobfence.tenants": "TenantSessionRefused",
    "jobfence.transaction": "FencedTransaction Write",
    "jobfence.work.claims": "WorkRequest",
    "jobfence.work.inputs": "ItemInput",
    "jobfence.work.keys": "BatchConflict BatchRef BatchRow BatchStatus ItemRow ItemStatus PermanentFailure",
    "jobfence.work.report": "BatchReport",
    "jobfence.work.batches": "BatchStore",
    "jobfence.work.items": "ItemStore",
    "jobfence.work.pipeline": "WorkerPipeline",
    "jobfence.work.producer": "Producer SubmitResult",
    "jobfence.work.sqs": "SqsWakeups",
    "jobfence.work.store": "WorkStore",
    "jobfence.work.timing": "Timing",
}
# Importing `jobfence.clock` runs this file first: it must load nothing (docs/benchmarks.md, cold start).
__getattr__ = on_demand(__name__, _MODULES)
__all__ = public_names(_MODULES)
