"""Monitoring: an alarm set per job with the runner's exact metric dimensions, DLQ and queue-age
alarms, and the dashboard."""

from __future__ import annotations

import json

from jobfence_cdk.schedule import tick_interval_s
from jobfence.registry import metric_dimensions
from tests.infra.cfn import as_list, of_type, ref_id


def _alarms(resources) -> dict[str, dict]:
    return {a["Properties"]["AlarmName"]: a["Properties"] for a in of_type(resources, "AWS::CloudWatch::Alarm").values()}


def _dimensions(alarm) -> dict:
    return {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}


def test_every_job_has_failed_lease_lost_not_running_and_dead_letter_alarms(each):
    alarms = _alarms(each.resources)
    topic = next(iter(of_type(each.resources, "AWS::SNS::Topic")))
    for name, spec in each.catalog.jobs.items():
        for kind, metric in (("failed", "failed"), ("lease-lost", "lease_lost")):
            alarm = alarms[f"jobfence-{name}-{kind}"]
            # THEN the alarm watches the runner's metric with exactly its dimensions
            assert alarm["Namespace"] == "jobfence" and alarm["MetricName"] == metric  # the default stage's prefix
            assert _dimensions(alarm) == metric_dimensions(spec)
            assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
            assert [ref_id(a) for a in alarm["AlarmActions"]] == [topic]
        silent = alarms[f"jobfence-{name}-not-running"]
        assert silent["MetricName"] == "ran" and _dimensions(silent) == metric_dimensions(spec)
        assert silent["TreatMissingData"] == "breaching"
        assert silent["ComparisonOperator"] == "LessThanThreshold" and silent["Threshold"] == 1
        window = silent["Period"] * silent["EvaluationPeriods"]
        # two intervals (capped at CloudWatch's 7-day evaluation range), every period breaching
        assert window >= min(2 * tick_interval_s(spec), 7 * 86400)
        assert window <= 2 * tick_interval_s(spec) + silent["Period"]
        assert silent["DatapointsToAlarm"] == silent["EvaluationPeriods"]
        assert f"jobfence-{name}-dead-letters" in alarms


def test_every_dead_letter_queue_has_a_depth_alarm(each):
    # GIVEN every queue used as a DLQ anywhere: queue redrive, rule target, async failure destination
    resources = each.resources
    dlqs = set()
    for queue in of_type(resources, "AWS::SQS::Queue").values():
        if "RedrivePolicy" in queue["Properties"]:
            dlqs.add(ref_id(queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]))
    for rule in of_type(resources, "AWS::Events::Rule").values():
        for target in rule["Properties"]["Targets"]:
            dlqs.add(ref_id(target["DeadLetterConfig"]["Arn"]))
    for config in of_type(resources, "AWS::Lambda::EventInvokeConfig").values():
        dlqs.add(ref_id(config["Properties"]["DestinationConfig"]["OnFailure"]["Destination"]))
    assert len(dlqs) == len(each.catalog.jobs) + len(each.catalog.queues)
    # THEN each has an alarm on its visible messages, firing on the first one
    watched = {ref_id(_dimensions(a)["QueueName"]) for a in _alarms(resources).values()
               if a.get("MetricName") == "ApproximateNumberOfMessagesVisible" and a["Threshold"] == 1}
    assert dlqs <= watched


def test_every_work_queue_has_an_oldest_message_alarm(each):
    alarms = _alarms(each.resources)
    for name, spec in each.catalog.queues.items():
        alarm = alarms[f"jobfence-{name}-oldest-message"]
        assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage" and alarm["Namespace"] == "AWS/SQS"
        assert alarm["Threshold"] >= spec.visibility_timeout_s


def test_dashboard_shows_every_job_and_queue(each):
    (dashboard,) = of_type(each.resources, "AWS::CloudWatch::Dashboard").values()
    body = str(dashboard["Properties"]["DashboardBody"])
    for name in [*each.catalog.jobs, *each.catalog.queues]:
        assert f"{name}:" in body
    for outcome in ("ran", "skipped_leased", "skipped_interval", "lease_lost", "failed", "duration"):
        assert f'\\"{outcome}\\"' in body or f'"{outcome}"' in body


def test_alarm_topic_is_encrypted_and_ssl_only(each):
    (topic,) = of_type(each.resources, "AWS::SNS::Topic").values()
    assert ref_id(topic["Properties"]["KmsMasterKeyId"]) in of_type(each.resources, "AWS::KMS::Key")
    (key,) = of_type(each.resources, "AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    denies = [s for p in of_type(each.resources, "AWS::SNS::TopicPolicy").values()
              for s in p["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
    assert as_list(denies[0]["Action"])


def test_every_audited_job_has_a_missed_alarm_on_the_auditors_metric_and_a_dashboard_line(synthesized):
    alarms = _alarms(synthesized.resources)
    (auditor,) = [job for job in synthesized.catalog.jobs.values() if job.audits]
    for name in auditor.audits:
        spec = synthesized.catalog.job(name)
        alarm = alarms[f"jobfence-{name}-missed"]
        # THEN it watches the auditor's `missed` with exactly the audited job's dimensions, over the auditor's interval
        assert (alarm["MetricName"], alarm["Namespace"], alarm["Statistic"]) == ("missed", "jobfence", "Sum")
        assert _dimensions(alarm) == metric_dimensions(spec)
        assert alarm["Period"] == tick_interval_s(auditor) and alarm["Threshold"] == 1
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
    # the auditor is not its own auditor: its silence is its not-running alarm
    assert f"jobfence-{auditor.name}-missed" not in alarms and f"jobfence-{auditor.name}-not-running" in alarms
    (dashboard,) = of_type(synthesized.resources, "AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]  # references (queue names) become "ref"
    body = json.loads("".join(part if isinstance(part, str) else "ref" for part in parts))
    lines = {(w["properties"]["title"], tuple(x for x in m if isinstance(x, str))) for w in body["widgets"] for m in w["properties"].get("metrics", [])}
    for name in auditor.audits:
        spec = synthesized.catalog.job(name)
        assert (f"{name}: outcomes", ("jobfence", "missed", "job", name, "service", spec.subsystem)) in lines


def test_security_signals_have_alarms_on_the_topic(synthesized):
    """Issue 29, low: no alarm on rotation errors, on `discord_rejected`, nor on a refused scheduled event."""
    from jobfence.handler.scheduled import REFUSED_EVENT_METRIC
    from jobs.club.catalog import NOTIFICATIONS_QUEUE, REJECTED_METRIC, SUBSYSTEM  # what handlers.discord's Metrics uses

    resources = synthesized.resources
    alarms = _alarms(resources)
    topic = next(iter(of_type(resources, "AWS::SNS::Topic")))

    def fires_on_the_first(alarm: dict) -> None:
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["Statistic"] == "Sum" and alarm["TreatMissingData"] == "notBreaching"
        assert [ref_id(a) for a in alarm["AlarmActions"]] == [topic]

    # THEN every job's refused events (the runner's dimensions: {service, job})
    for name, spec in synthesized.catalog.jobs.items():
        alarm = alarms[f"jobfence-{name}-refused-event"]
        assert (alarm["Namespace"], alarm["MetricName"]) == ("jobfence", REFUSED_EVENT_METRIC)
        assert _dimensions(alarm) == metric_dimensions(spec)
        fires_on_the_first(alarm)
    # AND the Discord worker's rejections, with the dimensions the worker's Metrics sets (service, job)
    rejected = alarms[f"jobfence-{NOTIFICATIONS_QUEUE}-rejected"]
    assert (rejected["Namespace"], rejected["MetricName"]) == ("jobfence", REJECTED_METRIC)
    assert _dimensions(rejected) == {"service": SUBSYSTEM, "job": NOTIFICATIONS_QUEUE}
    fires_on_the_first(rejected)
    # AND the rotation function's errors (Lambda's own metric: a failed step raises)
    errors = alarms["jobfence-rotate_signing_key-errors"]
    assert (errors["Namespace"], errors["MetricName"]) == ("AWS/Lambda", "Errors")
    functions = {k: f["Properties"]["FunctionName"] for k, f in of_type(resources, "AWS::Lambda::Function").items()}
    assert functions[ref_id(_dimensions(errors)["FunctionName"])] == "jobfence-rotate_signing_key"
    fires_on_the_first(errors)


def _resolved(policy, value):
    """A policy document with every reference resolved (as deployed in `policy.account`)."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith(("Ref", "Fn::")):
            return policy.resolve(value)
        return {k: _resolved(policy, v) for k, v in value.items()}
    return [_resolved(policy, v) for v in value] if isinstance(value, list) else value


def test_the_exact_alarm_list_fits_the_topic_and_key_policies_and_a_catalog_too_large_is_refused(each):
    import pytest

    from jobfence_cdk.monitoring import ALARM_LIST_BUDGET, alarm_list_bytes, alarm_source_conditions
    from ops.iam_policy import Account, Template

    names = list(_alarms(each.resources))
    assert alarm_list_bytes(names) <= ALARM_LIST_BUDGET
    # THEN deployed in the longest partition, the topic policy is under SNS's 30 KiB and the key's under KMS's 32 KiB
    policy = Template(each.template.to_json(), Account(region="us-gov-west-1", partition="aws-us-gov"))
    (topic_policy,) = of_type(each.resources, "AWS::SNS::TopicPolicy").values()
    (key,) = of_type(each.resources, "AWS::KMS::Key").values()
    topic_bytes = len(json.dumps(_resolved(policy, topic_policy["Properties"]["PolicyDocument"])))
    key_bytes = len(json.dumps(_resolved(policy, key["Properties"]["KeyPolicy"])))
    assert topic_bytes < 30 * 1024 and key_bytes < 32 * 1024, (topic_bytes, key_bytes)
    assert topic_bytes - alarm_list_bytes(names) < 30 * 1024 - ALARM_LIST_BUDGET  # the rest fits the margin
    # AND a catalog whose alarms would not fit is refused at synthesis, naming the way out
    with pytest.raises(ValueError, match="split the catalog into stages"):
        alarm_source_conditions([f"jobfence-job_number_{i:03}-not-running" for i in range(300)])
