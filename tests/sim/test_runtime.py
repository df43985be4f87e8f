"""The embedded runtime: the template deployed into moto, ticks on the simulated clock, isolates."""

from __future__ import annotations

import pytest

from jobfence.schedule import Schedule, ScheduleError, adapt_cron

pytestmark = pytest.mark.server

HOUR = 3_600_000


def test_every_catalog_job_is_deployed_with_its_rule(runtime):
    from jobs.catalog import CATALOG

    # GIVEN the template deployed into the emulator
    top = runtime.topology
    # THEN each catalog job has a function (its own JOB_NAME) and an enabled rule with its schedule
    assert set(top.job_functions()) == set(CATALOG.jobs)
    rules = top.job_rules()
    for name, spec in CATALOG.jobs.items():
        assert rules[name].schedule == spec.schedule
        assert rules[name].state == "ENABLED"


def test_hourly_ticks_fire_on_the_simulated_clock(runtime):
    # WHEN two simulated hours pass
    start = runtime.clock.now_ms()
    timeline = runtime.advance(hours=2)
    # THEN every hourly job ticked at each full hour, through its own isolate, and ran or skipped
    hourly = [t for t in timeline.ticks if t.job in ("clean_dpop_proofs", "clean_conversations")]
    assert len(hourly) == 4
    assert all(t.at_ms % HOUR == 0 and start < t.at_ms <= start + 2 * HOUR for t in hourly)
    assert all(t.invocation.ok and t.invocation.payload["outcome"] in ("ran", "skipped_interval") for t in hourly)


def test_an_isolate_is_warm_after_its_first_invocation_and_a_killed_one_cold_starts(runtime):
    function = runtime.function_of_job("clean_conversations")
    event = {"trigger": "manual", "requested_by": "test"}
    first = runtime.invoke(function, event)
    second = runtime.invoke(function, event)
    # THEN the second invocation reuses the first one's warm process
    assert first.ok and second.ok and not second.cold and second.pid == first.pid
    # WHEN the process is killed
    assert runtime.pool.kill(function) >= 1
    third = runtime.invoke(function, event)
    # THEN the next invocation starts a new process
    assert third.ok and third.cold and third.pid != second.pid


def test_eventbridge_cron_is_adapted_not_reparsed():
    assert adapt_cron("cron(0 * * * ? *)") == ("0 * * * *", None)
    assert adapt_cron("cron(0 9 ? * 2 *)") == ("0 9 * * 1", None)  # EventBridge Monday is 2
    assert adapt_cron("cron(15 10 ? * 6L 2027)") == ("15 10 * * L5", {2027})
    start = 1_767_225_600_000  # Thursday 2026-01-01 00:00Z
    assert Schedule("rate(5 minutes)", start).fires_between(start, start + 15 * 60_000) == [
        start + 5 * 60_000, start + 10 * 60_000, start + 15 * 60_000
    ]
    assert Schedule("cron(0 9 ? * 2 *)", start).next_after(start) == start + 4 * 86_400_000 + 9 * HOUR
    with pytest.raises(ScheduleError, match="exactly one of day-of-month and day-of-week"):
        adapt_cron("cron(0 9 * * * *)")
    with pytest.raises(ScheduleError, match="6 fields"):
        adapt_cron("cron(0 9 * *)")


def test_the_emulator_keeps_a_clients_connection_open_across_requests():
    from jobfence_ops.emulator import Emulator

    # GIVEN a fresh emulator and one client of each protocol (JSON, REST with HEAD, query)
    with Emulator() as emulator:
        session = emulator.session()
        before = emulator.handler.accepted
        dynamodb, s3, sqs = session.client("dynamodb"), session.client("s3"), session.client("sqs")
        dynamodb.create_table(TableName="t", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        s3.create_bucket(Bucket="wire-test")
        queue = sqs.create_queue(QueueName="q")["QueueUrl"]
        # WHEN each makes many requests, a HEAD (no body, a stated length) and a missing key (an error body) among them
        for i in range(20):
            dynamodb.put_item(TableName="t", Item={"k": {"S": str(i)}})
            assert dynamodb.get_item(TableName="t", Key={"k": {"S": str(i)}})["Item"]["k"]["S"] == str(i)
        s3.put_object(Bucket="wire-test", Key="k", Body=b"x" * 2_000_000)  # large: botocore asks `Expect: 100-continue`
        assert s3.head_object(Bucket="wire-test", Key="k")["ContentLength"] == 2_000_000
        with pytest.raises(s3.exceptions.ClientError):
            s3.head_object(Bucket="wire-test", Key="missing")
        assert s3.get_object(Bucket="wire-test", Key="k")["Body"].read() == b"x" * 2_000_000
        sqs.send_message(QueueUrl=queue, MessageBody="m")
        assert sqs.receive_message(QueueUrl=queue)["Messages"][0]["Body"] == "m"
        # THEN every answer was whole and each client kept one connection: no connect (and no server thread) per request
        assert emulator.handler.accepted - before <= 3


def test_a_fresh_runtime_expected_no_tick_from_before_its_rules_existed(runtime):
    from jobfence.auditor import AuditWindow, audit_jobs
    from jobfence.lease_toggles import RuleToggles
    from jobfence.runs import RunStore
    from jobs.catalog import AUDITOR, CATALOG
    from jobfence_ops.commands.jobs import job_ledger
    from jobfence_ops.targets import EmbeddedTarget

    # GIVEN the runtime's deploy, which created every rule at its start
    target, start = EmbeddedTarget(runtime), runtime.start_ms
    client = runtime.session.client("dynamodb")
    toggles = RuleToggles(client, runtime.topology.leases_table)
    assert {job: toggles.history(job).created_at for job in runtime.topology.job_rules()} == {
        job: start for job in runtime.topology.job_rules()}
    # WHEN the day before it is read: the operator's ledger (`status`'s "missed 24h") and the auditor's judgement
    for job in sorted(runtime.topology.job_rules()):
        assert job_ledger(target, job, start - 24 * HOUR, start).entries == (), job
    specs = [CATALOG.job(name) for name in AUDITOR.audits]
    audits = audit_jobs(specs, RunStore(client, runtime.topology.runs_table), toggles,
                        AuditWindow(start - 24 * HOUR, start + 5 * 60_000), start + 10 * 60_000)
    # THEN no tick from before the rules existed is expected, so none is missed nor caught up
    assert [(a.job, a.missed, a.catch_up) for a in audits if a.missed or a.catch_up] == []
    assert all(a.ticks <= 2 for a in audits)  # only the ticks of the first minutes after the start


def test_lambda_invoke_runs_in_the_isolates_without_docker(runtime, capfd):
    import json

    lam = runtime.session.client("lambda")
    function = runtime.function_of_job("clean_conversations")
    event = {"trigger": "manual", "requested_by": "invoke-test"}
    # WHEN a function is invoked through Lambda's API, synchronously and asynchronously (a catch-up's way)
    answer = lam.invoke(FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode())
    queued = lam.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(event).encode())
    timeline = runtime.advance(ms=1)
    # THEN the first ran in an isolate and answered its payload; the second ran when the driver next pumped
    assert answer["StatusCode"] == 200 and "FunctionError" not in answer
    assert json.loads(answer["Payload"].read())["job"] == "clean_conversations"
    assert queued["StatusCode"] == 202
    assert [(i.function, i.status) for i in timeline.invoked] == [(function, "ok")]
    # AND an unknown function is Lambda's ResourceNotFoundException; moto's Docker was never asked
    with pytest.raises(lam.exceptions.ResourceNotFoundException):
        lam.invoke(FunctionName="no-such-function", Payload=b"{}")
    out, err = capfd.readouterr()
    assert "docker" not in (out + err).lower() and "JSONDecodeError" not in out + err
