"""`ScheduledJob`: one EventBridge rule -> that job's own function (docs/architecture.md).

- The function runs `handlers.scheduled.handler` (or the app's `handler`) with `JOB_NAME` and the names
  of the tables, queues and secrets its entry declares; timeout and memory
  come from the entry.
- Async invoke retry attempts are 0 (the next tick is the retry); a failed
  async invocation goes to the job's dead-letter queue.
- The rule target retries delivery briefly (a tick older than
  `TARGET_MAX_EVENT_AGE` is worthless: the next tick is coming) and then
  dead-letters to the same queue, so one queue per job holds every tick that
  never ran.
- The invoke permission is `events.amazonaws.com` from the exact rule ARN and
  this account only. The function knows that ARN too (`RULE_ARN`, built from the
  rule's fixed name, so the function does not depend on the rule that targets
  it): it accepts a Scheduled Event only from its own rule and account
  (`jobfence.triggers`).
- A `buffer_one` job (overlap policy) may hand a pending tick over to itself:
  its role may `lambda:InvokeFunction` its own function's ARN and nothing else
  (the ARN built from the function's fixed name, so the role does not depend on
  the function that depends on it).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobfence.config import ENV_RULE_ARN, function_env
from jobfence.registry import JobSpec, Overlap
from jobfence_cdk.access import CatalogResources
from jobfence_cdk.code import FunctionCode
from jobfence_cdk.function import ServiceFunction
from jobfence_cdk.nag import acknowledge
from jobfence_cdk.validation import SCHEDULED_HANDLER

TARGET_MAX_EVENT_AGE = Duration.minutes(15)
TARGET_RETRY_ATTEMPTS = 2
DEAD_LETTER_RETENTION = Duration.days(14)


def dead_letter_queue(scope: Construct, construct_id: str, queue_name: str) -> sqs.Queue:
    """An encrypted, SSL-only queue that only receives what failed elsewhere."""
    queue = sqs.Queue(
        scope,
        construct_id,
        queue_name=queue_name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=DEAD_LETTER_RETENTION,
    )
    for rule in ("AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy"):
        acknowledge(queue, rule, "this queue is itself a dead-letter queue")
    return queue


class ScheduledJob(Construct):
    """One catalog job: its EventBridge rule, its own function (`handler`, by default
    `handlers.scheduled.handler`, with the job's `JOB_NAME`), its grants and its dead-letter queue (see the
    module docstring).

    Attributes: `spec`, `function`, `rule`, `dead_letters`, `log_group`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: JobSpec,
        code: FunctionCode,
        resources: CatalogResources,
        prefix: str,
        enabled: bool,
        handler: str = SCHEDULED_HANDLER,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        name = f"{prefix}-{spec.name}"
        self.dead_letters = dead_letter_queue(self, "DeadLetters", f"{name}-dlq")
        service = ServiceFunction(
            self,
            "Job",
            code=code,
            function_name=name,
            handler=handler,
            timeout_s=spec.timeout_s,
            memory_mb=spec.memory_mb,
            environment=resources.environment(spec),
            description=f"scheduled job {spec.name}: {spec.description}",
            retry_attempts=0,
            on_failure=self.dead_letters,
        )
        self.function: lambda_.Function = service.function
        rule_arn = Stack.of(self).format_arn(service="events", resource="rule", resource_name=name)
        self.function.add_environment(ENV_RULE_ARN, rule_arn)
        self.log_group = service.log_group
        resources.grant(self.function, spec)
        if spec.overlap == Overlap.BUFFER_ONE:
            own_arn = Stack.of(self).format_arn(
                service="lambda", resource="function", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
            )
            self.function.add_to_role_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[own_arn])
            )

        self.prefix = prefix
        self.rule = events.Rule(
            self,
            "Schedule",
            rule_name=name,
            description=f"tick of scheduled job {spec.name}",
            schedule=events.Schedule.expression(spec.schedule),
            enabled=enabled,
        )
        self.rule.add_target(
            targets.LambdaFunction(
                self.function,
                dead_letter_queue=self.dead_letters,
                max_event_age=TARGET_MAX_EVENT_AGE,
                retry_attempts=TARGET_RETRY_ATTEMPTS,
            )
        )
        # The target adds the invoke permission with the rule ARN; pin the account too.
        for child in self.node.find_all():
            if isinstance(child, lambda_.CfnPermission) and child.principal == "events.amazonaws.com":
                child.source_account = Stack.of(self).account

    def may_catch_up(self, other: ScheduledJob) -> None:
        """This job (the auditor) may invoke `other`'s function, asynchronously, with a catch-up event.

        The name is passed as a literal (`FUNCTION_<JOB>`), as every other name is.
        """
        self.function.add_environment(function_env(other.spec.name), f"{self.prefix}-{other.spec.name}")
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[other.function.function_arn])
        )
