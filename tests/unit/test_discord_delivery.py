"""The Discord worker's delivery logic with the offline fake: rejections, replays, 429s, partial batches."""

from __future__ import annotations

import json
import uuid

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch import EventType as BatchEventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobs.club.delivery import DiscordDelivery, claim_token, visibility_for
from jobs.club.events import MAX_AGE_MS, Event, EventType, Signer, Verifier, nonce_for
from jobs.club.stores.nonces import Claim, NonceState, NonceStore
from providers.errors import ProviderRejected, ProviderThrottled
from providers.discord_fake import FakeDiscord
from tests.support import create_catalog_tables, grants_for_tests, signing_keys

KEY = b"k" * 32  # the seed of the worker's signing pair
OTHER_KEY = b"x" * 32


class RecordingVisibility:
    def __init__(self) -> None:
        self.delays: list[tuple[str, int]] = []

    def delay(self, receipt_handle: str, seconds: int) -> None:
        self.delays.append((receipt_handle, seconds))


@pytest.fixture
def worker(dynamodb, clock):
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    nonces = NonceStore(tables["club_event_nonces"], clock)
    discord = FakeDiscord()
    visibility = RecordingVisibility()
    delivery = DiscordDelivery(Verifier(signing_keys(clock, KEY)[1], clock, grants_for_tests()), nonces, discord, visibility, Logger(service="club"),
                               Metrics(namespace="jobfence", service="club"))
    return delivery, nonces, discord, visibility


def _record(body: str, message_id: str | None = None) -> dict:
    message_id = message_id or str(uuid.uuid4())
    return {"messageId": message_id, "receiptHandle": f"rh-{message_id}", "body": body, "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:club-notifications", "awsRegion": "us-east-1"}


def _role_add(clock, key=KEY, nonce=None) -> str:
    event = Event.build(EventType.ROLE_ADD, nonce or nonce_for(uuid.uuid4()), guild_id="1", user_id="2", role_id="3")
    return Signer(signing_keys(clock, key)[0], clock).sign(event)


def _batch(delivery, *records) -> dict:
    processor = BatchProcessor(event_type=BatchEventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(event={"Records": list(records)}, record_handler=delivery.deliver,
                                    processor=processor)


def test_a_valid_event_reaches_discord_once_and_its_nonce_is_done(worker, clock):
    delivery, nonces, discord, _ = worker
    body = _role_add(clock)
    assert delivery.deliver(SQSRecord(_record(body))) == "delivered"
    assert discord.roles[("1", "2")] == {"3"}
    assert nonces.state(json.loads(body)["nonce"]) == NonceState.DONE.value


@pytest.mark.parametrize("case", ["forged", "stale", "malformed"])
def test_forged_stale_and_malformed_events_never_reach_discord(worker, clock, case):
    delivery, nonces, discord, _ = worker
    if case == "forged":
        body = _role_add(clock, key=OTHER_KEY)
    elif case == "stale":
        body = _role_add(clock)
        clock.advance(ms=MAX_AGE_MS + 1)
    else:
        body = "{not json"
    out = _batch(delivery, _record(body, "m-1"))
    # it can never become valid: acknowledged (not retried into the DLQ), recorded, and Discord never called
    assert out == {"batchItemFailures": []}
    assert discord.calls == []
    assert delivery.deliver(SQSRecord(_record(body, "m-1"))) == "rejected"


def test_a_replayed_nonce_is_acknowledged_and_dropped(worker, clock):
    # GIVEN an event delivered once
    delivery, _, discord, _ = worker
    body = _role_add(clock)
    delivery.deliver(SQSRecord(_record(body)))
    # WHEN the same signed body arrives again as another message (a replay), still fresh
    clock.advance(minutes=5)
    out = _batch(delivery, _record(body, "m-2"))
    # THEN it is acknowledged (not retried) and Discord is called only once in total
    assert out == {"batchItemFailures": []}
    assert len(discord.calls) == 1


def test_a_resigned_copy_of_the_same_change_is_a_replay(worker, clock):
    # A job that crashed after sending re-sends its outbox row: same nonce, new signature and time.
    delivery, _, discord, _ = worker
    nonce = nonce_for("job", "member", 1)
    delivery.deliver(SQSRecord(_record(_role_add(clock, nonce=nonce))))
    clock.advance(minutes=30)
    assert delivery.deliver(SQSRecord(_record(_role_add(clock, nonce=nonce)))) == "replayed"
    assert len(discord.calls) == 1


def test_429_delays_the_message_by_retry_after_and_its_retry_is_not_a_replay(worker, clock):
    # GIVEN Discord answers the next call with 429 retry_after=2.4 s
    delivery, nonces, discord, visibility = worker
    discord.rate_limit_next(1, 2.4)
    body = _role_add(clock)
    record = _record(body, "m-1")
    # WHEN the batch is processed
    out = _batch(delivery, record, _record(_role_add(clock), "m-2"))
    # THEN only that message failed, it is hidden for 3 s, the other went through, and the nonce was released
    assert out == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert visibility.delays == [("rh-m-1", 3)]
    assert nonces.state(json.loads(body)["nonce"]) is None
    assert len(discord.calls) == 1
    # WHEN SQS delivers it again after the delay
    clock.advance(seconds=3)
    out = _batch(delivery, record)
    # THEN it is delivered, not dropped as a replay
    assert out == {"batchItemFailures": []}
    assert len(discord.calls) == 2 and discord.roles[("1", "2")] == {"3"}


def test_a_redelivery_after_a_crash_between_claim_and_discord_takes_the_expired_claim_over(worker, clock):
    # GIVEN a worker that claimed a nonce for message m-1 (its first receive) and died before calling Discord
    delivery, nonces, discord, _ = worker
    body = _role_add(clock)
    assert nonces.claim(json.loads(body)["nonce"], claim_token("rh-first-receive"), "m-1") is Claim.CLAIMED
    # WHEN SQS redelivers m-1 after its visibility timeout (a new receive, so a new receipt handle)
    clock.advance(seconds=180)
    result = delivery.deliver(SQSRecord(_record(body, "m-1")))
    # THEN the expired claim is taken over and the event is delivered
    assert result == "delivered" and len(discord.calls) == 1


def test_a_discord_refusal_releases_the_claim_and_fails_the_item(worker, clock):
    delivery, nonces, discord, visibility = worker
    event = Event.build(EventType.MESSAGE_EDIT, nonce_for("e"), channel_id="7", message_id="8", content="x")
    body = Signer(signing_keys(clock, KEY)[0], clock).sign(event)
    with pytest.raises(ProviderRejected):
        delivery.deliver(SQSRecord(_record(body)))
    assert nonces.state(event.nonce) is None and visibility.delays == []


def test_rejections_are_acknowledged_with_a_bounded_log_line(worker, clock, caplog):
    delivery, *_ = worker
    assert delivery.deliver(SQSRecord(_record(json.dumps({"k" * 50_000: 1})))) == "rejected"
    line = next(r for r in caplog.records if getattr(r, "outcome", None) == "rejected")
    assert line.reason == "malformed" and len(line.detail) < 600


def test_visibility_for_rounds_up_and_stays_within_sqs_limits():
    assert visibility_for(0) == 1 and visibility_for(0.2) == 1 and visibility_for(2.01) == 3
    assert visibility_for(10**6) == 43_200


def test_fake_raises_rate_limited_without_changing_state():
    fake = FakeDiscord()
    fake.rate_limit_next(1, 1.0)
    with pytest.raises(ProviderThrottled):
        fake.add_role("1", "2", "3")
    assert fake.roles == {} and fake.calls == []
