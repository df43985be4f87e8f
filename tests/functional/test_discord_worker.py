"""The Discord worker Lambda end to end: manual change -> SQS -> handler -> real adapter -> loopback stub."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from jobfence.clock import FrozenClock, SystemClock
from jobfence.config import provider_env, queue_env, secret_env, table_env
from jobs.club.events import EventRejected, RejectReason, Signer, Verifier
from jobs.club.notifications import Publisher, SqsNotificationQueue, send_manual_change
from ops.stubs.discord import DiscordStub
from tests.support import create_catalog_tables, load_event

TOKEN = "stub-bot-token"
KEY = "w" * 48
SAMPLE_KEY = b"local-club-event-signing-key-0123456789abcdef"  # the key events/discord_batch.json is signed with


@pytest.fixture
def worker(aws, dynamodb, monkeypatch):
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="club-notifications", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    secrets = aws.client("secretsmanager")
    secrets.create_secret(Name="jobfence/discord_token", SecretString=TOKEN)
    secrets.create_secret(Name="jobfence/club_event_signing_key", SecretString=KEY)
    with DiscordStub(token=TOKEN) as stub:
        monkeypatch.setenv(table_env("club_event_nonces"), tables["club_event_nonces"])
        monkeypatch.setenv(queue_env("club_notifications"), url)
        monkeypatch.setenv(secret_env("discord_token"), "jobfence/discord_token")
        monkeypatch.setenv(secret_env("club_event_signing_key"), "jobfence/club_event_signing_key")
        monkeypatch.setenv(provider_env("discord"), stub.base_url)
        sys.modules.pop("handlers.discord", None)
        module = importlib.import_module("handlers.discord")
        publisher = Publisher(Signer(KEY.encode(), SystemClock()), SqsNotificationQueue(sqs, url))
        yield module, stub, sqs, url, publisher
        sys.modules.pop("handlers.discord", None)


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
    send_manual_change(publisher, "role_add", guild_id="1", user_id="2", role_id="3")
    send_manual_change(publisher, "message_edit", channel_id="120000000000000001", message_id=channel_message,
                       content="new text")
    send_manual_change(publisher, "direct_notification", user_id="5", content="hello")
    # WHEN the worker gets the batch
    out = module.handler(_receive(sqs, url), lambda_context)
    # THEN every change was made on Discord with the bot token
    assert out == {"batchItemFailures": []}
    assert stub.roles[("1", "2")] == {"3"}
    assert stub.messages["120000000000000001"][channel_message] == "new text"
    assert stub.direct_messages("5") == ["hello"]


def test_a_rate_limited_message_fails_alone_and_goes_through_on_redelivery(worker, lambda_context):
    module, stub, sqs, url, publisher = worker
    send_manual_change(publisher, "role_add", guild_id="1", user_id="2", role_id="3")
    batch = _receive(sqs, url)
    stub.rate_limit(1, retry_after=1.2)
    out = module.handler(batch, lambda_context)
    assert out == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
    assert stub.roles == {}
    # the same message again (SQS redelivers it after the 2 s visibility we set): delivered, not a replay
    out = module.handler(batch, lambda_context)
    assert out == {"batchItemFailures": []} and stub.roles[("1", "2")] == {"3"}


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


def test_forged_and_malformed_samples_fail_and_never_reach_discord(worker, lambda_context):
    module, stub, *_ = worker
    for name in ("malformed_discord_forged", "malformed_discord_body", "discord_batch"):
        event = load_event(name)
        out = module.handler(event, lambda_context)
        # discord_batch is signed with the sample key, not this worker's: forged here too
        assert len(out["batchItemFailures"]) == len(event["Records"]), name
    assert stub.requests == []


def test_an_event_that_is_not_an_sqs_batch_gets_a_clear_error(worker, lambda_context):
    module, *_ = worker
    with pytest.raises(Exception, match="SQS batch"):
        module.handler(load_event("malformed_discord_not_sqs"), lambda_context)


def test_the_sample_batch_verifies_with_the_sample_key_at_its_issue_time():
    clock = FrozenClock(1_767_225_600_000)
    events = [Verifier(SAMPLE_KEY, clock).verify(r["body"]) for r in load_event("discord_batch")["Records"]]
    assert [e.type.value for e in events] == ["role_add", "message_edit", "direct_notification"]
    forged = load_event("malformed_discord_forged")["Records"][0]["body"]
    with pytest.raises(EventRejected) as info:
        Verifier(SAMPLE_KEY, clock).verify(forged)
    assert info.value.reason is RejectReason.FORGED
    assert json.loads(forged)["type"] == "role_add"
