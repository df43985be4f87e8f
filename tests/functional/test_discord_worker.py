"""The Discord worker Lambda end to end: manual change -> SQS -> handler -> real adapter -> loopback stub."""

from __future__ import annotations

import importlib
import json
import sys

import botocore.session
import pytest
from aws_lambda_powertools import Metrics

from jobfence.clock import FrozenClock, SystemClock
from jobfence.config import provider_env, queue_env, secret_env, table_env
from jobs.club.events import EventRejected, RejectReason, Signer, Verifier
from jobs.club.notifications import Publisher, send_manual_change
from providers.sqs import SqsNotificationQueue
from jobs.club.catalog import CLUB_GUILDS, REJECTED_METRIC, SIGNER_EVENTS, signing_secret, verify_secret
from jobs.club.signers import grants_from_catalog
from jobs.club.signing import SigningKeys
from ops.stubs.discord import DiscordStub
from providers.secrets import SecretsManagerValues
from tests.support import SAMPLE_SIGNING_SEED, create_catalog_tables, load_event, signing_keys, signing_pair

TOKEN = "stub-bot-token"
JOB = "reconcile_membership_roles"  # the manual changes here are role changes: signed as the job that may make them
SIGNING, VERIFY = f"jobfence/{signing_secret(JOB)}", f"jobfence/{verify_secret(JOB)}"
GUILD = CLUB_GUILDS.split(",")[0]


@pytest.fixture
def worker(aws, dynamodb, monkeypatch):
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="club-notifications", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    secrets = aws.client("secretsmanager")
    pair = signing_pair()
    secrets.create_secret(Name="jobfence/discord_token", SecretString=TOKEN)
    for job in SIGNER_EVENTS:  # every publishing job's pair; JOB's is the one these tests sign with
        own = pair if job == JOB else signing_pair()
        secrets.create_secret(Name=f"jobfence/{signing_secret(job)}", SecretString=own.signing_value)
        secrets.create_secret(Name=f"jobfence/{verify_secret(job)}", SecretString=own.verify_value)
    with DiscordStub(token=TOKEN) as stub:
        monkeypatch.setenv(table_env("club_event_nonces"), tables["club_event_nonces"])
        monkeypatch.setenv(queue_env("club_notifications"), url)
        monkeypatch.setenv(secret_env("discord_token"), "jobfence/discord_token")
        for job in SIGNER_EVENTS:
            monkeypatch.setenv(secret_env(verify_secret(job)), f"jobfence/{verify_secret(job)}")
        monkeypatch.setenv(provider_env("discord"), stub.base_url)
        sys.modules.pop("handlers.discord", None)
        module = importlib.import_module("handlers.discord")
        publisher = _AsAllowedJob(secrets, SqsNotificationQueue(sqs, url))
        yield module, stub, sqs, url, publisher
        sys.modules.pop("handlers.discord", None)


class _AsAllowedJob:
    """Publishes each event signed as the first job whose grant covers its type (with that job's own key)."""

    def __init__(self, secrets, queue) -> None:
        values = SecretsManagerValues(secrets)
        self._publishers = {job: Publisher(Signer(SigningKeys(values, f"jobfence/{signing_secret(job)}", job),
                                                  SystemClock()), queue) for job in SIGNER_EVENTS}

    def publish(self, event) -> None:
        job = next(job for job, types in SIGNER_EVENTS.items() if event.type.value in types)
        self._publishers[job].publish(event)


def _receive(sqs, url) -> dict:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    return {"Records": [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                         "attributes": {}, "messageAttributes": {}, "md5OfBody": m["MD5OfBody"], "eventSource": "aws:sqs",
                         "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:club-notifications",
                         "awsRegion": "us-east-1"} for m in messages]}


def test_manual_changes_reach_discord_through_the_worker(worker, lambda_context):
    module, stub, sqs, url, publisher = worker
    channel_message = stub.add_message("120000000000000001", "old")
    # GIVEN an operator's manual changes, sent with the same contract as the jobs
    send_manual_change(publisher, "role_add", guild_id=GUILD, user_id="2", role_id="3")
    send_manual_change(publisher, "message_edit", channel_id="120000000000000001", message_id=channel_message,
                       content="new text")
    send_manual_change(publisher, "direct_notification", user_id="5", content="hello")
    # WHEN the worker gets the batch
    out = module.handler(_receive(sqs, url), lambda_context)
    # THEN every change was made on Discord with the bot token
    assert out == {"batchItemFailures": []}
    assert stub.roles[(GUILD, "2")] == {"3"}
    assert stub.messages["120000000000000001"][channel_message] == "new text"
    assert stub.direct_messages("5") == ["hello"]


def test_the_worker_makes_its_one_dynamodb_client_at_cold_start_and_none_on_its_first_tick(worker, lambda_context,
                                                                                           monkeypatch):
    module, stub, sqs, url, publisher = worker
    made = []  # the services of every client botocore creates from now on (boto3's and pynamodb's alike)
    create = botocore.session.Session.create_client
    monkeypatch.setattr(botocore.session.Session, "create_client",
                        lambda self, service, *a, **k: made.append(service) or create(self, service, *a, **k))
    # GIVEN a cold start (the handler module imported afresh)
    sys.modules.pop("handlers.discord", None)
    module = importlib.import_module("handlers.discord")
    at_init = made.count("dynamodb")
    # WHEN its first tick claims a nonce
    send_manual_change(publisher, "role_add", guild_id=GUILD, user_id="2", role_id="3")
    assert module.handler(_receive(sqs, url), lambda_context) == {"batchItemFailures": []}
    # THEN the nonce store's client was made at init (the function's one), and the tick made none
    assert (at_init, made.count("dynamodb")) == (1, 1)


def test_a_rate_limited_message_fails_alone_and_goes_through_on_redelivery(worker, lambda_context):
    module, stub, sqs, url, publisher = worker
    send_manual_change(publisher, "role_add", guild_id=GUILD, user_id="2", role_id="3")
    batch = _receive(sqs, url)
    stub.rate_limit(1, retry_after=1.2)
    out = module.handler(batch, lambda_context)
    assert out == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
    assert stub.roles == {}
    # the same message again (SQS redelivers it after the 2 s visibility we set): delivered, not a replay
    out = module.handler(batch, lambda_context)
    assert out == {"batchItemFailures": []} and stub.roles[(GUILD, "2")] == {"3"}


def test_a_direct_message_whose_discord_reply_was_lost_is_sent_once(worker, lambda_context):
    # GIVEN Discord creates the DM and the connection drops before its answer
    module, stub, sqs, url, publisher = worker
    send_manual_change(publisher, "direct_notification", user_id="5", content="hello")
    batch = _receive(sqs, url)
    stub.lose_replies(1, route="/messages")
    out = module.handler(batch, lambda_context)
    assert out == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
    # WHEN SQS delivers the message again
    out = module.handler(batch, lambda_context)
    # THEN the re-sent post carried the same Discord nonce: one message, not two
    assert out == {"batchItemFailures": []}
    assert stub.direct_messages("5") == ["hello"] and len(stub.created) == 1


def test_forged_and_malformed_samples_are_acknowledged_as_rejected_and_never_reach_discord(worker, lambda_context,
                                                                                             caplog, monkeypatch):
    module, stub, *_ = worker
    counted: list[str] = []
    add_metric = Metrics.add_metric  # the handler's Metrics is built inside build(): count through the class
    monkeypatch.setattr(Metrics, "add_metric", lambda self, **kw: (counted.append(kw["name"]), add_metric(self, **kw))[1])
    for name in ("malformed_discord_forged", "malformed_discord_body", "discord_batch"):
        event = load_event(name)
        out = module.handler(event, lambda_context)
        # discord_batch is signed with the sample key, not this worker's: forged here too. None of them can ever
        # become valid, so they are acknowledged (not retried ten times into the DLQ) and recorded as rejected.
        assert out == {"batchItemFailures": []}, name
    assert stub.requests == []
    rejected = [r for r in caplog.records if getattr(r, "outcome", None) == "rejected"]
    assert len(rejected) == 5 and {r.reason for r in rejected} == {"forged", "malformed"}
    assert counted.count(REJECTED_METRIC) == 5  # the metric the stack alarms on (app.py, "rejections")


@pytest.mark.parametrize("event", [{"Records": [{}]}, {"Records": [None, 3, "x"]}, {"Records": [{"body": 1}]}])
def test_malformed_records_are_bounded_failures_not_escaping_errors(worker, lambda_context, event):
    module, stub, *_ = worker
    out = module.handler(event, lambda_context)
    assert isinstance(out, dict) and stub.requests == []


def test_a_100k_deep_body_is_rejected_not_a_recursion_error(worker, lambda_context):
    module, stub, sqs, url, _ = worker
    sqs.send_message(QueueUrl=url, MessageBody="[" * 100_000 + "]" * 100_000)
    out = module.handler(_receive(sqs, url), lambda_context)
    assert out == {"batchItemFailures": []} and stub.requests == []


def test_a_warm_worker_follows_a_signing_key_rotation_and_a_token_rotation(worker, lambda_context, aws):
    module, stub, sqs, url, publisher = worker
    from ops.rotation import Rotation  # noqa: F401  (the operator path is tested in tests/sim)

    secrets = aws.client("secretsmanager")
    send_manual_change(publisher, "role_add", guild_id=GUILD, user_id="2", role_id="3")
    assert module.handler(_receive(sqs, url), lambda_context) == {"batchItemFailures": []}
    # GIVEN a rotated signing key (public half first) and a rotated bot token, the worker still warm
    new = signing_pair()
    secrets.put_secret_value(SecretId=VERIFY, SecretString=new.verify_value)
    secrets.put_secret_value(SecretId=SIGNING, SecretString=new.signing_value)
    secrets.put_secret_value(SecretId="jobfence/discord_token", SecretString="rotated-token")
    stub.token = "rotated-token"
    fresh_publisher = Publisher(Signer(SigningKeys(SecretsManagerValues(secrets), SIGNING, JOB), SystemClock()),
                                SqsNotificationQueue(sqs, url))
    # WHEN events signed with the old (a warm job's cache) and the new key arrive
    send_manual_change(publisher, "role_add", guild_id=GUILD, user_id="2", role_id="4")
    send_manual_change(fresh_publisher, "role_add", guild_id=GUILD, user_id="2", role_id="5")
    # THEN both are delivered with the new token: nothing rejected, nothing lost
    assert module.handler(_receive(sqs, url), lambda_context) == {"batchItemFailures": []}
    assert stub.roles[(GUILD, "2")] == {"3", "4", "5"}


def test_an_event_that_is_not_an_sqs_batch_gets_a_clear_error(worker, lambda_context):
    module, *_ = worker
    with pytest.raises(Exception, match="SQS batch"):
        module.handler(load_event("malformed_discord_not_sqs"), lambda_context)


def test_the_sample_batch_verifies_with_the_sample_key_at_its_issue_time():
    clock = FrozenClock(1_767_225_600_000)
    verifier = Verifier(signing_keys(clock, SAMPLE_SIGNING_SEED)[1], clock, grants_from_catalog())
    events = [verifier.verify(r["body"]) for r in load_event("discord_batch")["Records"]]
    assert [e.type.value for e in events] == ["role_add", "message_edit", "direct_notification"]
    forged = load_event("malformed_discord_forged")["Records"][0]["body"]
    with pytest.raises(EventRejected) as info:
        verifier.verify(forged)
    assert info.value.reason is RejectReason.FORGED
    assert json.loads(forged)["type"] == "role_add"
