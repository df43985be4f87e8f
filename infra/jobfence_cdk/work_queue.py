"""`WorkQueue`: an SQS work queue, its dead-letter queue and the worker that consumes it.

Built in two steps because workers may send to other queues: the stack first
creates every queue (so each worker's environment can carry the URLs), then
attaches each worker with `attach_worker`.

- The queue redrives to its DLQ after `max_receive_count` (>= 5) receives; its
  visibility timeout is at least 6 x the worker's timeout (a message is never
  handed to a second worker while the first may still be running it, and the
  event source can retry within one visibility window).
- Both queues refuse plain HTTP and are encrypted with SQS-managed keys.
- The event source reports batch item failures (only failed items return to
  the queue) and caps the worker's concurrency.
- The worker also gets its own queue's name (`WORKER_QUEUE`) and URL
  (`QUEUE_<NAME>`), so it knows which catalog queue it serves and can change a
  message's visibility (e.g. to honour a provider's retry-after).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobfence.config import ENV_WORKER_QUEUE, queue_env
from jobfence.registry import CatalogError, QueueSpec
from jobfence_cdk.access import CatalogResources
from jobfence_cdk.code import FunctionCode
from jobfence_cdk.function import ServiceFunction
from jobfence_cdk.nag import acknowledge
from jobfence_cdk.scheduled_job import dead_letter_queue

MESSAGE_RETENTION = Duration.days(4)
MIN_MAX_RECEIVE_COUNT = 5
SQS_MAX_VISIBILITY_S = 12 * 3600


def check_queue(spec: QueueSpec) -> None:
    """What SQS and the event source accept, on top of the registry's checks."""
    where = f"queue entry {spec.name!r}"
    if spec.visibility_timeout_s < 6 * spec.worker_timeout_s:
        raise CatalogError(
            f"{where}: visibility timeout {spec.visibility_timeout_s}s is under 6 x the worker timeout "
            f"{spec.worker_timeout_s}s"
        )
    if spec.visibility_timeout_s > SQS_MAX_VISIBILITY_S:
        raise CatalogError(f"{where}: visibility timeout {spec.visibility_timeout_s}s is over SQS's 12 hours")
    if spec.max_receive_count < MIN_MAX_RECEIVE_COUNT:
        raise CatalogError(f"{where}: maxReceiveCount {spec.max_receive_count} is under {MIN_MAX_RECEIVE_COUNT}")
    if not 1 <= spec.worker_timeout_s <= 900:
        raise CatalogError(f"{where}: worker timeout {spec.worker_timeout_s}s is outside Lambda's 1..900s")
    if not 2 <= spec.max_concurrency <= 1000:
        raise CatalogError(f"{where}: maximum concurrency {spec.max_concurrency} is outside the event source's 2..1000")
    if not 1 <= spec.batch_size <= 10:
        raise CatalogError(f"{where}: batch size {spec.batch_size} is outside 1..10 (larger needs a batching window)")


class WorkQueue(Construct):
    """One catalog queue: an encrypted SQS queue with its dead-letter queue; `attach_worker` adds the
    function that consumes it (see the module docstring).

    Attributes: `spec`, `queue`, `dead_letters`, and after `attach_worker`: `function`, `log_group`.
    """

    def __init__(self, scope: Construct, construct_id: str, *, spec: QueueSpec, prefix: str) -> None:
        super().__init__(scope, construct_id)
        check_queue(spec)
        self.spec = spec
        self.prefix = prefix
        self.dead_letters = dead_letter_queue(self, "DeadLetters", f"{prefix}-{spec.name}-dlq")
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=f"{prefix}-{spec.name}",
            visibility_timeout=Duration.seconds(spec.visibility_timeout_s),
            retention_period=MESSAGE_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letters, max_receive_count=spec.max_receive_count),
        )
        self.function: lambda_.Function | None = None
        self.log_group = None

    def attach_worker(self, *, code: FunctionCode, resources: CatalogResources) -> lambda_.Function:
        """Create the worker function and its event source mapping."""
        spec = self.spec
        environment = resources.environment(spec)
        environment[queue_env(spec.name)] = self.queue.queue_url
        environment[ENV_WORKER_QUEUE] = spec.name  # the worker's own queue selects its pipeline
        service = ServiceFunction(
            self,
            "Worker",
            code=code,
            function_name=f"{self.prefix}-{spec.name}-worker",
            handler=spec.handler,
            timeout_s=spec.worker_timeout_s,
            memory_mb=spec.memory_mb,
            environment=environment,
            description=f"worker of queue {spec.name}: {spec.description}",
        )
        self.function = service.function
        self.log_group = service.log_group
        resources.grant(self.function, spec)
        self.function.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=spec.batch_size,
                report_batch_item_failures=True,
                max_concurrency=spec.max_concurrency,
            )
        )
        acknowledge(
            self.function,
            "Serverless-LambdaEventSourceMappingDestination",
            "an SQS source redrives failed items to the queue's own DLQ; ESM destinations are for streams",
        )
        return self.function
