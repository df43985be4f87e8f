"""The scheduled Lambda handler of a catalog: what an app's `handlers/scheduled.py` builds at cold start.

Which job runs comes from the function's own `JOB_NAME`, validated against the
catalog at cold start (an unknown name fails closed); no event field can pick
another job. The event is only the reason to run: a Scheduled Event or a
manual trigger, a catch-up, or a buffer_one hand-over (`jobfence.triggers`). A
`buffer_one` job's function may async-invoke itself, and only itself (its own
name, from the Lambda environment; jobfence-cdk grants exactly that ARN).

An app's handler module is two lines (the CDK constructs name it `handlers.scheduled.handler`):

    from jobfence import SystemClock, scheduled_handler
    from jobs.catalog import CATALOG

    handler = scheduled_handler(CATALOG, os.environ, SystemClock())
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from jobfence.binding import bound_to, dynamodb_client, new_session
from jobfence.clock import Clock
from jobfence.config import ScheduledSettings, metrics_namespace
from jobfence.errors import InvalidEvent
from jobfence.lease import LeaseStore
from jobfence.registry import Overlap, Registry
from jobfence.runs import RunStore
from jobfence.scheduled import JobDeps, ScheduledRunner, load_job
from jobfence.tracing import handler_tracer, traced
from jobfence.triggers import parse_trigger

REFUSED_EVENT_METRIC = "refused_event"  # an event that is no trigger of this function (malformed, forged, stale)


def scheduled_handler(
    catalog: Registry, environ: Mapping[str, str], clock: Clock
) -> Callable[[Any, Any], dict[str, Any]]:
    """The Lambda handler of the job of `catalog` that `environ` names, its collaborators built once.

    Call it at import time of the handler module (the cold start): it validates the environment
    (`ScheduledSettings`), looks the job up (an unknown `JOB_NAME` raises), builds the job from its
    entry (inside `jobfence.bound_to(session, dynamodb)`: every store the job binds sends through the
    function's one DynamoDB client, the lease and run stores' too) and a `ScheduledRunner`. The handler
    returns `RunResult.as_dict()`.

    An event that is not a trigger of this function (`jobfence.triggers.parse_trigger`, given the
    function's own `RULE_ARN`) is refused before anything is read or written: it is counted
    (`REFUSED_EVENT_METRIC`), logged with its bounded reason, and re-raised as `InvalidEvent`, so an
    asynchronous delivery keeps it in the job's on-failure destination (its dead-letter queue).
    """
    settings = ScheduledSettings.from_environ(environ)
    spec = catalog.job(settings.job_name)
    session = boto3.Session(botocore_session=new_session())  # pynamodb's sessions share its data loader
    dynamodb = dynamodb_client(session)  # the function's one DynamoDB client: its stores' models send through it
    logger = Logger(service=spec.subsystem)
    tracer = handler_tracer(spec.subsystem, http=bool(spec.providers))
    logger.append_keys(worker=spec.subsystem, stage=spec.name)
    namespace = metrics_namespace(environ)
    metrics = Metrics(namespace=namespace, service=spec.subsystem)
    metrics.set_default_dimensions(job=spec.name)
    with bound_to(session, dynamodb):
        job = load_job(spec)(JobDeps(settings, spec, clock, session, dynamodb, logger, namespace))
    runner = ScheduledRunner(
        LeaseStore(dynamodb, settings.leases_table, clock),
        RunStore(dynamodb, settings.runs_table),
        clock,
        logger,
        metrics,
        invoke_self=self_invoker(session, environ) if spec.overlap == Overlap.BUFFER_ONE else None,
    )

    @metrics.log_metrics
    @logger.inject_lambda_context(log_event=False)
    @traced(tracer)
    def handler(event: Any, context: Any) -> dict[str, Any]:
        try:
            trigger = parse_trigger(event, clock, settings.rule_arn)
        except InvalidEvent as exc:
            metrics.add_metric(name=REFUSED_EVENT_METRIC, unit=MetricUnit.Count, value=1)
            logger.warning("event refused", extra={"outcome": REFUSED_EVENT_METRIC, "reason": str(exc)})
            raise
        return runner.run(spec, job, trigger, context).as_dict()

    return handler


def self_invoker(session: Any, environ: Mapping[str, str]) -> Callable[[Mapping[str, Any]], None] | None:
    """An async invoke (Lambda's Event type) of this very function, or None outside Lambda."""
    name = environ.get("AWS_LAMBDA_FUNCTION_NAME")
    if not name:
        return None
    client = session.client("lambda")

    def invoke(event: Mapping[str, Any]) -> None:
        client.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps(dict(event)).encode())

    return invoke
