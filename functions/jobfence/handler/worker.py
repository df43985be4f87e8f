"""The queue-worker Lambda handler of a catalog: what an app's `handlers/worker.py` builds at cold start.

Which pipeline runs comes from the function's own queue (`WORKER_QUEUE`, or the one queue it was
granted), validated against the catalog at cold start; a message only names the item to wake, and the
item row decides the rest. Powertools' BatchProcessor turns the per-message outcomes into a partial
batch response, so only the messages that must be redelivered (malformed, cross-tenant, store errors)
come back. An app's handler module is two lines over its catalog and its pipelines:

    from jobfence import SystemClock, worker_handler
    from jobs.catalog import CATALOG
    from jobs.listings.pipelines import worker_pipeline

    handler = worker_handler(CATALOG, os.environ, SystemClock(), worker_pipeline, session=boto3.Session())

The function's AWS clients (its SQS wake-ups, STS for tenant sessions) and its stores' tables come from the
`session` the caller gives (in Lambda, `boto3.Session()`: the function's own region and role; in a test, one
on moto): nothing here reads the region from the environment itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from jobfence.binding import bound_to, dynamodb_client
from jobfence.clock import Clock
from jobfence.config import WorkerSettings, metrics_namespace
from jobfence.registry import CatalogError, Registry
from jobfence.sqs_batch import split_records
from jobfence.tenants import TenantScopes
from jobfence.tracing import handler_tracer, traced
from jobfence.work.claims import Perform
from jobfence.work.pipeline import WorkerPipeline
from jobfence.work.worker import TenantScope, Worker


def worker_handler(
    catalog: Registry,
    environ: Mapping[str, str],
    clock: Clock,
    pipelines: Callable[[str], WorkerPipeline] | Mapping[str, WorkerPipeline],
    *,
    session: Any,
    perform: Perform | None = None,
) -> Callable[[Any, Any], Mapping[str, Any]]:
    """The Lambda handler of the worker of `catalog`'s queue that `environ` names, its `Worker` built once.

    Call it at import time of the handler module (the cold start): it validates the environment
    (`WorkerSettings`), looks the queue up in `catalog` (an unknown queue raises `CatalogError`, two granted
    queues and no `WORKER_QUEUE` raise `SettingsError`), then `pipelines` (a mapping or a function from the
    catalog queue name to its `WorkerPipeline`; a mapping without the queue raises `CatalogError`) and builds the
    pipeline's store, step, wake-ups on the function's own queue and gate. `session` (a boto3 session) is where
    every AWS call goes: the wake-ups' SQS client and STS's are its clients, and the stores are built inside
    `jobfence.bound_to(session, dynamodb)`, in its region and sending through the function's one DynamoDB client (a session without one raises `SettingsError`). `perform` replaces the pipeline's step (a test's fake provider; the
    real one is then not built). With `TENANT_ROLE_ARN` set, every tenant's store and gate are built
    over that tenant's own session (`jobfence.tenants.TenantScopes`), cached per tenant while its credentials
    last; the function's own role then touches no tenant row. The handler returns the partial batch response (`batchItemFailures`).
    """
    settings = WorkerSettings.from_environ(environ)
    spec = catalog.queue(settings.own_queue)
    if isinstance(pipelines, Mapping) and spec.name not in pipelines:
        given = ", ".join(sorted(pipelines)) or "none"
        raise CatalogError(f"no WorkerPipeline is given for the queue {spec.name!r} (given: {given})")
    pipeline = pipelines[spec.name] if isinstance(pipelines, Mapping) else pipelines(spec.name)
    # the function's one DynamoDB client (its own stores' models send through it); a session without a region
    # raises SettingsError before any client exists
    dynamodb = dynamodb_client(session)
    with bound_to(session, dynamodb):
        store = pipeline.store(settings, clock)
        gate = pipeline.gate(settings, clock) if pipeline.gate is not None else None
    sqs = session.client("sqs")
    logger = Logger(service=spec.subsystem)
    tracer = handler_tracer(spec.subsystem, http=bool(spec.providers))
    logger.append_keys(worker=spec.subsystem, stage=spec.name)
    metrics = Metrics(namespace=metrics_namespace(environ), service=spec.subsystem)
    metrics.set_default_dimensions(queue=spec.name)
    scopes = None
    if settings.tenant_role_arn:  # each tenant's rows only under its own session (`jobfence.tenants`)
        sts = session.client("sts")

        def scope(tenant: str, credentials: Any) -> TenantScope:
            with bound_to(session):  # in the session's region, signed with the tenant's credentials
                tenant_gate = pipeline.gate(settings, clock) if pipeline.gate is not None else None
                return TenantScope(pipeline.store(settings, clock), tenant_gate)

        scopes = TenantScopes(sts, settings.tenant_role_arn, clock, scope)
    worker = Worker(
        store,
        pipeline.kind,
        pipeline.timing,
        perform if perform is not None else pipeline.perform(settings),
        pipeline.wakeups(sqs, settings.queue(spec.name)),
        logger,
        gate=gate,
        defer_delay_s=pipeline.defer_delay_s,
        scopes=scopes,
    )
    # every message failing is still a partial response (each is redelivered on its own), not an invocation error
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    @metrics.log_metrics
    @logger.inject_lambda_context(log_event=False)
    @traced(tracer)
    def handler(event: Any, context: Any) -> Mapping[str, Any]:
        # A non-SQS event is an InvalidEvent; a record without id, receipt handle or body cannot be reported back
        # by id, so it is counted and dropped rather than raising a KeyError out of the handler.
        batch = split_records(event)
        if batch.malformed:
            logger.warning(
                "worker_records_dropped",
                extra={"count": batch.malformed, "reason": "no messageId, receiptHandle or body"},
            )
            metrics.add_metric(name="malformed_records", unit=MetricUnit.Count, value=batch.malformed)
        if not batch.records:
            return {"batchItemFailures": []}  # Powertools refuses an empty batch; there is nothing to report
        result = worker.process(batch.records, context.get_remaining_time_in_millis())
        for tally, count in result.counts.items():
            metrics.add_metric(name=tally.value, unit=MetricUnit.Count, value=count)
        return process_partial_response(
            event=batch.event(), record_handler=result.settle, processor=processor, context=context
        )

    return handler
