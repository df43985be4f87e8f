"""`Monitoring`: one dashboard and the alarms of every job and queue, published to one topic.

Job metrics are the runner's EMF metrics: namespace "jobfence", dimensions
exactly `registry.metric_dimensions(spec)` ({service, job}), one metric per
outcome ("ran", "failed", ...) plus "duration". Per job:

- `<prefix>-<job>-failed`: any `failed` outcome;
- `<prefix>-<job>-lease-lost`: any `lease_lost` outcome;
- `<prefix>-<job>-not-running`: no `ran` within two of the job's intervals,
  missing data breaching (a schedule that silently stopped, a disabled rule,
  a job that always skips);
- `<prefix>-<job>-dead-letters`: a tick that never ran (rule target or async
  failure dead-letter queue not empty);
- `<prefix>-<job>-missed`: the missed-run auditor (`jobfence.auditor`, a job
  whose entry `audits` the others) counted a missed tick: an expected tick with
  no run, no holder, no gate and no disabled rule to explain it. Its period is
  the auditor's interval; the auditor's own not-running alarm covers its silence.

Security signals (docs/operations.md, "Security alarms"), each firing on the first count:

- `<prefix>-<job>-refused-event`: the job's function refused an event (`refused_event`: malformed, or a
  Scheduled Event not from its own rule, account and time; `jobfence.handler.scheduled`);
- `<prefix>-<queue>-rejected`: a worker that names a rejection metric (`rejections`, e.g. the Discord
  worker's `discord_rejected`: forged, stale, malformed or oversized events) counted one;
- `<prefix>-<rotation function>-errors`: a step of the signing key's rotation raised (Lambda `Errors`).

Per queue: its DLQ not empty, and the oldest message older than
`oldest_age_threshold_s`. Queue panels show the worker's own item counts
("completed", "failed" with dimensions {service, queue}) next to the SQS and
Lambda metrics every queue has (messages deleted, worker errors, DLQ depth),
so a panel is never empty while a worker emits nothing of its own.

The alarm topic and its key admit CloudWatch only with `aws:SourceAccount` = this account and
`aws:SourceArn` one of this stage's alarm ARNs, listed exactly (`alarm_source_conditions`): a pattern
"<prefix>-*" would also admit another stage whose prefix starts with this one ("jobfence-eu").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobfence.auditor import MISSED_METRIC
from jobfence.handler.scheduled import REFUSED_EVENT_METRIC
from jobfence.registry import JobSpec, QueueSpec, metric_dimensions
from jobfence.scheduled import Outcome
from jobfence_cdk.rotation import ROTATION_FUNCTION
from jobfence_cdk.schedule import tick_interval_s
from jobfence_cdk.scheduled_job import ScheduledJob
from jobfence_cdk.work_queue import WorkQueue

ALARM_PERIOD = Duration.minutes(5)
# The alarm topic's policy lists every alarm's ARN (`alarm_source_conditions`); SNS holds 30 KiB a policy
# (the key's holds 32 KiB): this budget leaves 2 KiB for the rest of it (about 260 alarms: 40 jobs of 6).
ALARM_LIST_BUDGET = 28 * 1024
LONGEST_PARTITION = "aws-us-gov"
LONGEST_REGION = "x" * 20  # no region name is longer today ("ap-southeast-7", "us-gov-west-1": 13-14)
DAY_S = 86400
MAX_EVALUATION_S = 7 * DAY_S  # CloudWatch's longest evaluation range (periods of an hour or more)
MIN_OLDEST_AGE_S = (
    15 * 60
)  # the batch-stale bound (docs/architecture.md, "Durable batches"): older than this, reclaim is due


def job_metric(
    namespace: str, spec: JobSpec, name: str, statistic: str, period: Duration = ALARM_PERIOD
) -> cloudwatch.Metric:
    """A runner metric of `spec` with its exact dimensions, in the stage's namespace (its prefix)."""
    return cloudwatch.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map=metric_dimensions(spec),
        statistic=statistic,
        period=period,
    )


def queue_metric(namespace: str, spec: QueueSpec, name: str) -> cloudwatch.Metric:
    """A worker's item count metric (Sum), dimensions {service, queue}, in the stage's namespace."""
    return cloudwatch.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map={"service": spec.subsystem, "queue": spec.name},
        statistic="Sum",
        period=ALARM_PERIOD,
        label=f"items {name}",
    )


def alarm_arn(alarm_name: str) -> str:
    """The ARN of this account's alarm `alarm_name` in the stack's region."""
    return f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:{alarm_name}"


def alarm_source_conditions(alarm_names: Iterable[str]) -> dict:
    """Conditions admitting CloudWatch only on behalf of exactly these alarms of this account (no pattern:
    "<prefix>-*" also matches the alarms of a stage named "<prefix>-eu").

    Raises `ValueError` when the list would not fit the topic policy (`alarm_list_bytes`)."""
    names = sorted(alarm_names)
    if (size := alarm_list_bytes(names)) > ALARM_LIST_BUDGET:
        raise ValueError(
            f"{len(names)} alarms: their ARNs take up to {size} bytes of the alarm topic's policy, over the "
            f"{ALARM_LIST_BUDGET} it can hold (SNS allows 30 KiB a policy): split the catalog into stages"
        )
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnEquals": {"aws:SourceArn": [alarm_arn(name) for name in names]},
    }


def alarm_list_bytes(alarm_names: Iterable[str]) -> int:
    """An upper bound of the bytes the alarms' ARNs take in a policy, deployed in the longest partition and
    region names (each: quotes, comma, "arn:" ... ":alarm:" and the name)."""
    return sum(
        len(f'"arn:{LONGEST_PARTITION}:cloudwatch:{LONGEST_REGION}:123456789012:alarm:{n}",') for n in alarm_names
    )


def not_running_window(spec: JobSpec) -> tuple[int, int]:
    """(period seconds, evaluation periods) covering two of the job's intervals."""
    interval = tick_interval_s(spec)
    period = min(max(60, math.ceil(interval / 60) * 60), DAY_S)
    periods = max(1, min(math.ceil(2 * interval / period), MAX_EVALUATION_S // period))
    return period, periods


def oldest_age_threshold_s(spec: QueueSpec) -> int:
    """Oldest-message age that means the queue is not being drained."""
    return max(2 * spec.visibility_timeout_s, MIN_OLDEST_AGE_S)


class Monitoring(Construct):
    """The alarms of every job and queue (failed, lease lost, not running, dead letters, missed, refused
    event; a queue's DLQ, oldest message and rejections) and of the rotation function's errors on one topic,
    and one dashboard (see the module docstring).

    `rejections` maps a queue to the metric its worker counts a rejected message with (dimensions
    {service, job: the queue}); `rotation` is the signing key's rotation function, if any.
    Attributes: `topic` (alarm notifications), `dashboard`, `alarms` (name -> Alarm).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        jobs: Iterable[ScheduledJob],
        queues: Iterable[WorkQueue],
        rejections: Mapping[str, str] | None = None,
        rotation: lambda_.IFunction | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        key = kms.Key(
            self,
            "TopicKey",
            description=f"{prefix}: encrypts alarm notifications",
            enable_key_rotation=True,
        )
        self.topic = sns.Topic(self, "Alarms", topic_name=f"{prefix}-alarms", master_key=key, enforce_ssl=True)
        self._action = actions.SnsAction(self.topic)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=prefix)

        jobs, queues = list(jobs), list(queues)
        audited = {name: job.spec for job in jobs for name in job.spec.audits}  # job -> its auditor
        for job in jobs:
            self._job(job, audited.get(job.spec.name))
        for queue in queues:
            self._queue(queue)
        for queue_name, metric_name in sorted((rejections or {}).items()):
            self._rejections(next(q.spec for q in queues if q.spec.name == queue_name), metric_name)
        if rotation is not None:
            self._alarm(
                f"{ROTATION_FUNCTION}-errors",
                alarm_description="the signing key's rotation: a step failed (see the function's log group)",
                metric=rotation.metric_errors(period=ALARM_PERIOD, statistic="Sum"),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        dead_letters = [(j.spec.name, j.dead_letters) for j in jobs] + [(q.spec.name, q.dead_letters) for q in queues]
        if dead_letters:
            self.dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="dead-letter queue depth",
                    width=24,
                    left=[_depth(dlq, label=name) for name, dlq in dead_letters],
                )
            )
        # CloudWatch publishes to an encrypted topic only if the topic admits it AND it may use the key;
        # both admit it only for this account's alarms of this stage, by exact ARN (confused deputy).
        # Added last: the list is every alarm above.
        from_our_alarms = alarm_source_conditions(self.alarms)
        cloudwatch_principal = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsUseTheKey",
                principals=[cloudwatch_principal],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy "*" means this key
                conditions=from_our_alarms,
            )
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch_principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=from_our_alarms,
            )
        )

    def _alarm(self, name: str, **props) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(self, name, alarm_name=f"{self.prefix}-{name}", **props)
        alarm.add_alarm_action(self._action)
        self.alarms[alarm_name := f"{self.prefix}-{name}"] = alarm
        return self.alarms[alarm_name]

    def _job(self, job: ScheduledJob, auditor: JobSpec | None) -> None:
        spec = job.spec
        for outcome, label in ((Outcome.FAILED, "failed"), (Outcome.LEASE_LOST, "lease-lost")):
            self._alarm(
                f"{spec.name}-{label}",
                alarm_description=f"job {spec.name}: a run ended {outcome.value}",
                metric=job_metric(self.prefix, spec, outcome.value, "Sum"),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self._alarm(
            f"{spec.name}-refused-event",
            alarm_description=f"job {spec.name}: its function refused an event (malformed, or a tick not of its rule)",
            metric=job_metric(self.prefix, spec, REFUSED_EVENT_METRIC, "Sum"),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        period, periods = not_running_window(spec)
        self._alarm(
            f"{spec.name}-not-running",
            alarm_description=f"job {spec.name}: no ran outcome within two intervals ({2 * tick_interval_s(spec)}s)",
            metric=job_metric(self.prefix, spec, Outcome.RAN.value, "Sum", Duration.seconds(period)),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        self._dead_letter_alarm(f"{spec.name}-dead-letters", f"job {spec.name}: a tick never ran", job.dead_letters)
        outcomes = [job_metric(self.prefix, spec, o.value, "Sum").with_(label=o.value) for o in Outcome]
        if auditor is not None:
            missed = job_metric(self.prefix, spec, MISSED_METRIC, "Sum", Duration.seconds(tick_interval_s(auditor)))
            self._alarm(
                f"{spec.name}-missed",
                alarm_description=f"job {spec.name}: an expected tick was missed (counted by {auditor.name})",
                metric=missed,
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            outcomes.append(missed.with_(label=MISSED_METRIC, period=ALARM_PERIOD))
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title=f"{spec.name}: outcomes",
                width=12,
                left=outcomes,
            ),
            cloudwatch.GraphWidget(
                title=f"{spec.name}: duration (ms)",
                width=12,
                left=[job_metric(self.prefix, spec, "duration", s).with_(label=s) for s in ("Average", "Maximum")],
            ),
        )

    def _queue(self, queue: WorkQueue) -> None:
        spec = queue.spec
        self._dead_letter_alarm(
            f"{spec.name}-dead-letters", f"queue {spec.name}: items were dead-lettered", queue.dead_letters
        )
        oldest = queue.queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=ALARM_PERIOD)
        threshold = oldest_age_threshold_s(spec)
        self._alarm(
            f"{spec.name}-oldest-message",
            alarm_description=f"queue {spec.name}: oldest message older than {threshold}s",
            metric=oldest,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        failed = [queue_metric(self.prefix, spec, "failed"), _depth(queue.dead_letters, label="dead-lettered")]
        if queue.function is not None:
            failed.append(queue.function.metric_errors(period=ALARM_PERIOD, label="worker errors"))
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title=f"{spec.name}: items completed",
                width=8,
                left=[
                    queue_metric(self.prefix, spec, "completed"),
                    queue.queue.metric_number_of_messages_deleted(period=ALARM_PERIOD, label="messages deleted"),
                ],
            ),
            cloudwatch.GraphWidget(title=f"{spec.name}: items failed", width=8, left=failed),
            cloudwatch.GraphWidget(title=f"{spec.name}: oldest message (s)", width=8, left=[oldest]),
        )

    def _rejections(self, spec: QueueSpec, metric_name: str) -> None:
        self._alarm(
            f"{spec.name}-rejected",
            alarm_description=f"queue {spec.name}: its worker rejected a message ({metric_name})",
            metric=cloudwatch.Metric(
                namespace=self.prefix,
                metric_name=metric_name,
                dimensions_map={"service": spec.subsystem, "job": spec.name},
                statistic="Sum",
                period=ALARM_PERIOD,
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def _dead_letter_alarm(self, name: str, description: str, dlq: sqs.IQueue) -> None:
        self._alarm(
            name,
            alarm_description=description,
            metric=_depth(dlq),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )


def _depth(queue: sqs.IQueue, label: str | None = None) -> cloudwatch.Metric:
    return queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ALARM_PERIOD, label=label)
