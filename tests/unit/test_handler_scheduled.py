"""The scheduled handler end to end: cold start from the environment, event contract, fail closed."""

from __future__ import annotations

import importlib
import io
import sys

import pytest
from aws_lambda_powertools import Logger

from tests.support import load_event
from jobfence.clock import SystemClock
from jobfence.config import table_env
from jobfence.testing import rule_arn_of
from jobfence.triggers import scheduled_event
from jobfence.errors import InvalidEvent, SettingsError, UnknownJob
from jobs.catalog import CATALOG


def environment(tables, job="clean_conversations"):
    env = {"JOB_NAME": job, "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"], "RULE_ARN": rule_arn_of(job)}
    env.update({table_env(name): physical for name, physical in tables.items()})
    return env


def cold_start(monkeypatch, env):
    """Import the handler module afresh with `env` as the function's environment."""
    for name in list(env) + ["JOB_NAME", "LEASES_TABLE", "RUNS_TABLE", "RULE_ARN"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("handlers.scheduled", None)
    return importlib.import_module("handlers.scheduled")


def table_items(dynamodb, name):
    return dynamodb.scan(TableName=name)["Items"]


def test_a_scheduled_tick_runs_the_functions_own_job(monkeypatch, dynamodb, tables, lambda_context):
    handler = cold_start(monkeypatch, environment(tables))
    at = SystemClock().now_ms() // 1000 * 1000  # the handler runs on the wall clock: a tick of now
    result = handler.handler(scheduled_event(rule_arn_of("clean_conversations"), at), lambda_context)
    assert set(result) == {"job", "outcome", "run_id", "duration_ms", "summary"}
    assert (result["job"], result["outcome"]) == ("clean_conversations", "ran")
    row, = table_items(dynamodb, tables["runs"])
    assert row["trigger"] == {"S": "scheduled"}
    assert row["scheduled_at"] == {"N": str(at)}  # the tick's own time


def test_a_manual_trigger_has_the_same_contract_and_cannot_pick_a_job(monkeypatch, dynamodb, tables, lambda_context):
    handler = cold_start(monkeypatch, environment(tables))
    event = {**load_event("manual_trigger")}
    result = handler.handler(event, lambda_context)
    assert result["outcome"] == "ran" and result["job"] == "clean_conversations"
    row = table_items(dynamodb, tables["runs"])[0]
    assert row["trigger"] == {"S": "manual"}
    # who asked, exactly as the sample event says, and the caller identity the operator's tool resolved
    assert (row["requested_by"], row["caller"]) == ({"S": "Jane Doe"}, {"S": event["caller"]})
    # a manual trigger naming another job is refused outright
    with pytest.raises(InvalidEvent, match="job"):
        handler.handler(load_event("malformed_manual_trigger"), lambda_context)


@pytest.mark.parametrize(
    "event, message",
    [
        ("malformed_scheduled_tick", "detail-type='Scheduled Event'"),
        ({"hello": "world"}, "neither an EventBridge Scheduled Event"),
        ([1, 2], "must be a JSON object"),
        ({"trigger": "manual"}, "requested_by: Field required"),
        ({"trigger": "cron", "requested_by": "x"}, "trigger"),
        ({"detail-type": "Scheduled Event", "source": "aws.events"}, "invalid EventBridge event"),
    ],
)
def test_bad_events_get_a_clear_error_and_nothing_is_written(monkeypatch, dynamodb, tables, lambda_context, event, message):
    handler = cold_start(monkeypatch, environment(tables))
    if isinstance(event, str):
        event = load_event(event)
    with pytest.raises(InvalidEvent) as refused:
        handler.handler(event, lambda_context)
    assert message in str(refused.value)
    assert table_items(dynamodb, tables["leases"]) == []
    assert table_items(dynamodb, tables["runs"]) == []


def test_an_unknown_job_name_fails_closed_at_cold_start(monkeypatch, tables):
    with pytest.raises(UnknownJob, match="'drop_all_tables' is not a registered job"):
        cold_start(monkeypatch, environment(tables, job="drop_all_tables"))


def test_missing_settings_name_the_missing_variables(monkeypatch, tables):
    env = environment(tables)
    del env["LEASES_TABLE"]
    del env[table_env("conversations")]
    with pytest.raises(SettingsError, match="LEASES_TABLE: Field required"):
        cold_start(monkeypatch, env)
    env["LEASES_TABLE"] = tables["leases"]
    with pytest.raises(SettingsError, match="TABLE_CONVERSATIONS is not set"):
        cold_start(monkeypatch, env)


def test_logs_of_a_run_carry_no_payload(monkeypatch, dynamodb, tables, lambda_context):
    handler = cold_start(monkeypatch, environment(tables))
    stream = io.StringIO()
    # Powertools loggers of one service share their handler: the function's own log stream
    Logger(service=CATALOG.job("clean_conversations").subsystem).registered_handler.setStream(stream)
    tick = scheduled_event(rule_arn_of("clean_conversations"), SystemClock().now_ms())
    event = {**tick, "detail": {"card_number": "4111111111111111"}}
    handler.handler(event, lambda_context)
    handler.handler({"trigger": "manual", "requested_by": "ops"}, lambda_context)
    out = stream.getvalue()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert any('"outcome":"ran"' in line for line in lines)
    assert "4111111111111111" not in out and "card_number" not in out


def test_the_hand_over_is_an_async_invoke_of_the_function_itself(monkeypatch, dynamodb, tables, aws):
    # GIVEN the function's own name in its Lambda environment
    from botocore.stub import Stubber

    handler = cold_start(monkeypatch, environment(tables))
    clients = []
    real_client = aws.client

    class Session:
        def client(self, name):
            clients.append(real_client(name))
            return clients[-1]

    invoke = handler.self_invoker(Session(), {"AWS_LAMBDA_FUNCTION_NAME": "jobfence-probe"})
    stub = Stubber(clients[0])
    stub.add_response("invoke", {"StatusCode": 202}, {
        "FunctionName": "jobfence-probe", "InvocationType": "Event",
        "Payload": b'{"trigger": "buffered", "tick": 1767229200000}'})
    # WHEN it hands a pending tick over THEN it sends exactly that event to itself, asynchronously
    with stub:
        invoke({"trigger": "buffered", "tick": 1767229200000})
    stub.assert_no_pending_responses()
    # AND outside Lambda (no function name) there is no hand-over at all
    assert handler.self_invoker(Session(), {}) is None


def test_the_sample_catch_up_event_runs_once_for_its_tick(monkeypatch, dynamodb, tables, lambda_context, clock):
    # GIVEN the sample catch-up event (its tick 2026-01-01T00:00Z, no run since), handled by the real handler
    handler = cold_start(monkeypatch, environment(tables))
    event = load_event("catch_up_trigger")
    first = handler.handler(event, lambda_context)
    # WHEN it is delivered again THEN the second copy runs nothing
    again = handler.handler(event, lambda_context)
    assert (first["outcome"], again["outcome"]) == ("ran", "skipped_served")
    row, = table_items(dynamodb, tables["runs"])
    assert (row["trigger"], row["scheduled_at"], row["requested_by"]) == (
        {"S": "catch_up"}, {"N": "1767225600000"}, {"S": "Jane Doe"})
