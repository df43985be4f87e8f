"""The one handler of both listings queue workers (generation and publish).

Which pipeline runs comes from the function's own queue (`WORKER_QUEUE`), validated
against the catalog at cold start; a message only names the item to wake, and
the item row decides the rest. Powertools' BatchProcessor turns the per-message
outcomes into a partial batch response, so only the messages that must be
redelivered (malformed, cross-tenant, store errors) come back.
"""

from __future__ import annotations

import os

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from jobfence.clock import SystemClock
from jobfence.config import METRICS_NAMESPACE, WorkerSettings
from jobfence.work import Worker
from jobs.catalog import CATALOG
from jobs.listings.pipelines import build_store, build_wakeups, pipeline_of_queue, real_perform

settings = WorkerSettings.from_environ(os.environ)
spec = CATALOG.queues[settings.own_queue]
pipeline = pipeline_of_queue(spec.name)
clock = SystemClock()
session = boto3.Session()
logger = Logger(service=spec.subsystem)
logger.append_keys(worker=spec.subsystem, stage=spec.name)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=spec.subsystem)
metrics.set_default_dimensions(queue=spec.name)
worker = Worker(
    build_store(settings, clock),
    pipeline.kind,
    pipeline.timing,
    real_perform(pipeline, settings),
    build_wakeups(settings, session.client("sqs"))[pipeline.kind],
    logger,
)
# every message failing is still a partial response (each is redelivered on its own), not an invocation error
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)
def handler(event, context):
    records = event.get("Records") if isinstance(event, dict) else None
    result = worker.process(records or [], context.get_remaining_time_in_millis())
    for tally, count in result.counts.items():
        metrics.add_metric(name=tally.value, unit=MetricUnit.Count, value=count)
    return process_partial_response(event=event, record_handler=result.settle, processor=processor, context=context)
