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

Per queue: its DLQ not empty, and the oldest message older than
`oldest_age_threshold_s`. Queue panels show the worker's own item counts
("completed", "failed" with dimensions {service, queue}) next to the SQS and
Lambda metrics every queue has (messages deleted, worker errors, DLQ depth),
so a panel is never empty while a worker emits nothing of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from aws_cdk import Aws, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobfence.auditor import MISSED_METRIC
from jobfence.registry import JobSpec, QueueSpec, metric_dimensions
from jobfence.scheduled import Outcome
from jobfence_cdk.schedule import tick_interval_s
from jobfence_cdk.scheduled_job import ScheduledJob
from jobfence_cdk.work_queue import WorkQueue

ALARM_PERIOD = Duration.minutes(5)
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


def alarm_arn_pattern(prefix: str) -> str:
    """The ARNs of this stage's alarms (every alarm is named "<prefix>-...")."""
    return f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:{prefix}-*"


def alarm_source_conditions(prefix: str) -> dict:
    """Conditions admitting CloudWatch only on behalf of this account's alarms of this stage."""
    return {
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
        "ArnLike": {"aws:SourceArn": alarm_arn_pattern(prefix)},
    }


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
    """The alarms of every job and queue (failed, lease lost, not running, dead letters, missed; a queue's
    DLQ and oldest message) on one topic, and one dashboard (see the module docstring).

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
        # CloudWatch publishes to an encrypted topic only if the topic admits it AND it may use the key;
        # both admit it only for this account's alarms of this stage (confused-deputy conditions).
        from_our_alarms = alarm_source_conditions(prefix)
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
        self.topic = sns.Topic(self, "Alarms", topic_name=f"{prefix}-alarms", master_key=key, enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch_principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=from_our_alarms,
            )
        )
        self._action = actions.SnsAction(self.topic)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=prefix)

        jobs, queues = list(jobs), list(queues)
        audited = {name: job.spec for job in jobs for name in job.spec.audits}  # job -> its auditor
        for job in jobs:
            self._job(job, audited.get(job.spec.name))
        for queue in queues:
            self._queue(queue)
        dead_letters = [(j.spec.name, j.dead_letters) for j in jobs] + [(q.spec.name, q.dead_letters) for q in queues]
        if dead_letters:
            self.dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="dead-letter queue depth",
                    width=24,
                    left=[_depth(dlq, label=name) for name, dlq in dead_letters],
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
