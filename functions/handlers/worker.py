"""The one handler of both listings queue workers (generation and publish).

Which pipeline runs comes from the function's own queue (`WORKER_QUEUE`), validated
against the catalog at cold start; a message only names the item to wake, and
the item row decides the rest. Powertools' BatchProcessor turns the per-message
outcomes into a partial batch response, so only the messages that must be
redelivered (malformed, cross-tenant, store errors) come back.
`build(environ, clock)` composes it; `handler` is that with this process's
environment and the wall clock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from jobfence.clock import Clock, SystemClock
from jobfence.tracing import handler_tracer, traced
from jobfence.config import WorkerSettings, metrics_namespace
from jobfence.sqs_batch import split_records
from jobfence.registry import QueueSpec
from jobfence.work import Worker
from jobs.catalog import CATALOG
from jobs.listings.pipelines import (
    Pipeline,
    build_gate,
    build_store,
    build_wakeups,
    pipeline_of_queue,
    real_perform,
)

@dataclass(frozen=True)
class Parts:
    """What the cold start builds for one queue's worker."""

    spec: QueueSpec
    pipeline: Pipeline
    worker: Worker
    logger: Logger
    metrics: Metrics


def compose(environ: Mapping[str, str], clock: Clock) -> Parts:
    """The worker of the queue `environ` names (`WORKER_QUEUE`), with its store, provider and wake-ups."""
    settings = WorkerSettings.from_environ(environ)
    spec = CATALOG.queues[settings.own_queue]
    pipeline = pipeline_of_queue(spec.name)
    session = boto3.Session()
    logger = Logger(service=spec.subsystem)
    logger.append_keys(worker=spec.subsystem, stage=spec.name)
    metrics = Metrics(namespace=metrics_namespace(environ), service=spec.subsystem)
    metrics.set_default_dimensions(queue=spec.name)
    worker = Worker(
        build_store(settings, clock),
        pipeline.kind,
        pipeline.timing,
        real_perform(pipeline, settings),
        build_wakeups(settings, session.client("sqs"))[pipeline.kind],
        logger,
        gate=build_gate(pipeline, settings, clock),
        defer_delay_s=pipeline.defer_delay_s,
    )
    return Parts(spec, pipeline, worker, logger, metrics)


def handler_of(parts: Parts) -> Callable[[Any, Any], dict]:
    # every message failing is still a partial response (each is redelivered on its own), not an invocation error
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    @parts.metrics.log_metrics
    @parts.logger.inject_lambda_context(log_event=False)
    @traced(handler_tracer(parts.spec.subsystem))
    def handler(event, context):
        # A non-SQS event is an InvalidEvent; a record without id, receipt handle or body cannot be reported back
        # by id, so it is counted and dropped rather than raising a KeyError out of the handler.
        batch = split_records(event)
        if batch.malformed:
            parts.logger.warning("worker_records_dropped",
                                 extra={"count": batch.malformed, "reason": "no messageId, receiptHandle or body"})
            parts.metrics.add_metric(name="malformed_records", unit=MetricUnit.Count, value=batch.malformed)
        if not batch.records:
            return {"batchItemFailures": []}  # Powertools refuses an empty batch; there is nothing to report
        result = parts.worker.process(batch.records, context.get_remaining_time_in_millis())
        for tally, count in result.counts.items():
            parts.metrics.add_metric(name=tally.value, unit=MetricUnit.Count, value=count)
        return process_partial_response(event=batch.event(), record_handler=result.settle, processor=processor,
                                        context=context)

    return handler


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], dict]:
    """The queue worker's handler, composed from `environ` with `clock` (the cold start)."""
    return handler_of(compose(environ, clock))


_parts = compose(os.environ, SystemClock())
spec, pipeline, worker = _parts.spec, _parts.pipeline, _parts.worker
handler = handler_of(_parts)
