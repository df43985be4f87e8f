"""The Discord worker under faults: concurrent receives, lost replies, throttled nonce writes.

Interleavings are cooperative (a hook runs the second receive at an exact point
of the first); DynamoDB faults are scripted through botocore's event hooks on
pynamodb's client; the fake Discord models Discord's message nonce.
"""

from __future__ import annotations

import json
import uuid

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobfence.errors import StoreError
from jobfence.scheduled import DEFAULT_SAFETY_MARGIN_MS
from jobs.club.catalog import QUEUES
from jobs.club.delivery import DeliveryBusy, DiscordDelivery
from jobs.club.events import Event, EventType, Signer, Verifier, nonce_for
from jobs.club.stores.nonces import CLAIM_TTL_MS, NonceState, NonceStore
from providers.errors import ProviderAmbiguous, ProviderRejected
from providers.discord_fake import FakeDiscord
from tests.aws_faults import Faults, connection_closed, throttled
from tests.support import create_catalog_tables, grants_for_tests, signing_keys

KEY = b"k" * 32  # the seed of the test signing pair


class NoVisibility:
    def delay(self, receipt_handle: str, seconds: int) -> None:
        pass


class HookedDiscord:
    """The fake, with a hook that runs once while the first call is inside Discord."""

    def __init__(self, fake: FakeDiscord, during=None):
        self.fake, self.during = fake, during

    def __getattr__(self, name):
        call = getattr(self.fake, name)

        def hooked(*args, **kwargs):
            if self.during is not None:
                during, self.during = self.during, None
                during()
            return call(*args, **kwargs)

        return hooked


@pytest.fixture
def nonces(dynamodb, clock):
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    return NonceStore(tables["club_event_nonces"], clock)


def delivery(nonces, discord, clock):
    return DiscordDelivery(Verifier(signing_keys(clock, KEY)[1], clock, grants_for_tests()), nonces, discord, NoVisibility(), Logger(service="club"),
                           Metrics(namespace="jobfence", service="club"))


def record(body: str, message_id: str, receipt: str | None = None) -> SQSRecord:
    return SQSRecord({"messageId": message_id, "receiptHandle": receipt or f"rh-{uuid.uuid4()}", "body": body,
                      "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                      "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:club-notifications",
                      "awsRegion": "us-east-1"})


def direct(clock, nonce=None) -> str:
    event = Event.build(EventType.DIRECT_NOTIFICATION, nonce or nonce_for(uuid.uuid4()), user_id="42", content="return the lens")
    return Signer(signing_keys(clock, KEY)[0], clock).sign(event)


def post(clock, nonce=None) -> str:
    event = Event.build(EventType.MESSAGE_POST, nonce or nonce_for(uuid.uuid4()), channel_id="7", content="board")
    return Signer(signing_keys(clock, KEY)[0], clock).sign(event)


def test_one_message_received_by_two_workers_at_once_reaches_discord_once(nonces, clock):
    # GIVEN SQS hands the same message (same id) to two consumers; the second runs while the first is inside Discord
    fake = FakeDiscord()
    body = direct(clock)
    second = delivery(nonces, fake, clock)
    outcome = []

    def concurrent_receive():
        with pytest.raises(DeliveryBusy):
            second.deliver(record(body, "m-1", "rh-receive-2"))
        outcome.append("busy")

    first = delivery(nonces, HookedDiscord(fake, during=concurrent_receive), clock)
    # WHEN the first delivers
    assert first.deliver(record(body, "m-1", "rh-receive-1")) == "delivered"
    # THEN the second receive was refused the claim (not re-entered) and Discord acted once
    assert outcome == ["busy"]
    assert fake.direct == {"42": ["return the lens"]} and fake.effects() == 1
    # AND when SQS brings the second receive back, it is a replay
    assert second.deliver(record(body, "m-1", "rh-receive-3")) == "replayed"


def test_a_throttled_done_mark_after_discord_accepted_never_calls_discord_again(nonces, clock):
    # GIVEN Discord accepts, then every try of the done-mark is throttled
    fake = FakeDiscord()
    body = direct(clock)
    faults = Faults(nonces.clients()[0]).refused_before("UpdateItem", throttled, times=3)
    # WHEN the record is delivered
    result = delivery(nonces, fake, clock).deliver(record(body, "m-1"))
    faults.detach()
    # THEN the record is acknowledged (no failure, so SQS does not bring it back) and Discord acted once
    assert len(faults.fired) == 3
    assert result == "delivered" and fake.effects() == 1


def test_a_done_mark_throttled_once_is_retried_and_recorded(nonces, clock):
    fake = FakeDiscord()
    body = direct(clock)
    faults = Faults(nonces.clients()[0]).refused_before("UpdateItem", throttled)
    assert delivery(nonces, fake, clock).deliver(record(body, "m-1")) == "delivered"
    faults.detach()
    assert nonces.state(json.loads(body)["nonce"]) == NonceState.DONE.value


def test_a_done_mark_whose_reply_was_lost_is_recorded_and_a_replay_stays_a_replay(nonces, clock):
    fake = FakeDiscord()
    body = direct(clock)
    faults = Faults(nonces.clients()[0]).reply_lost("UpdateItem", error=connection_closed)
    worker = delivery(nonces, fake, clock)
    assert worker.deliver(record(body, "m-1")) == "delivered"
    faults.detach()
    assert faults.fired and nonces.state(json.loads(body)["nonce"]) == NonceState.DONE.value
    assert worker.deliver(record(body, "m-2")) == "replayed" and fake.effects() == 1


def test_a_failing_nonce_read_is_a_store_error_not_a_raw_pynamodb_error(nonces, clock):
    # GIVEN a claimed nonce whose state read keeps failing
    nonces.claim("n-1", "another-receive")
    faults = Faults(nonces.clients()[0]).refused_before("GetItem", throttled, times=10)
    # WHEN it is read THEN the error is classified (sim seed club 165: pynamodb's GetError escaped)
    with pytest.raises(StoreError, match="reading an event nonce failed"):
        nonces.state("n-1")
    faults.detach()
    assert faults.fired


def test_a_refused_claim_is_read_from_the_old_image_without_a_second_read(nonces, clock):
    # GIVEN a receive whose claim is refused (another receive holds it), and every read of the nonce failing
    body = direct(clock)
    held = delivery(nonces, FakeDiscord(), clock)
    nonce = json.loads(body)["nonce"]
    nonces.claim(nonce, "another-receive")
    faults = Faults(nonces.clients()[0]).refused_before("GetItem", throttled, times=10)
    # WHEN it is delivered THEN the refusal's own image says busy: no read was needed
    with pytest.raises(DeliveryBusy):
        held.deliver(record(body, "m-1"))
    faults.detach()
    assert not faults.fired


def test_a_claim_whose_reply_was_lost_is_still_this_receives(nonces, clock):
    # the put was applied, its reply lost: the retry (same token) passes its own condition
    fake = FakeDiscord()
    faults = Faults(nonces.clients()[0]).reply_lost("PutItem", error=connection_closed)
    assert delivery(nonces, fake, clock).deliver(record(direct(clock), "m-1")) == "delivered"
    faults.detach()
    assert faults.fired and fake.effects() == 1


def test_a_worker_that_dies_after_discord_posted_is_deduplicated_by_discords_nonce(nonces, clock):
    # GIVEN a worker that made the post and died before the done-mark (its claim stays until it expires)
    fake = FakeDiscord()
    body = post(clock)

    class Died(BaseException):
        pass

    dying = delivery(nonces, fake, clock)
    original = nonces.complete
    nonces.complete = lambda *a: (_ for _ in ()).throw(Died())
    with pytest.raises(Died):
        dying.deliver(record(body, "m-1"))
    nonces.complete = original
    # WHEN SQS redelivers the message after its visibility timeout (within Discord's nonce window)
    clock.advance(seconds=QUEUES[0].visibility_timeout_s)
    assert delivery(nonces, fake, clock).deliver(record(body, "m-1")) == "delivered"
    # THEN Discord was asked twice but created one message: the second post carried the same Discord nonce
    assert len(fake.messages["7"]) == 1
    assert [c[0] for c in fake.calls] == ["post_message", "post_message_deduplicated"]


def test_a_lost_discord_reply_on_a_post_is_retried_and_deduplicated(nonces, clock):
    fake = FakeDiscord()
    fake.lose_reply_next(1)
    body = post(clock)
    worker = delivery(nonces, fake, clock)
    with pytest.raises(ProviderAmbiguous):
        worker.deliver(record(body, "m-1"))
    assert nonces.state(json.loads(body)["nonce"]) is None  # released: the retry is not a replay
    assert worker.deliver(record(body, "m-1")) == "delivered"
    assert len(fake.messages["7"]) == 1


def test_past_discords_nonce_window_a_resend_is_a_second_message_at_least_once(nonces, clock):
    # The honest limit: a worker dies after Discord posted and the redelivery comes after Discord forgot the nonce.
    fake = FakeDiscord()
    body = post(clock)
    fake.lose_reply_next(1)
    worker = delivery(nonces, fake, clock)
    with pytest.raises(ProviderAmbiguous):
        worker.deliver(record(body, "m-1"))
    fake.forget_nonces()
    assert worker.deliver(record(body, "m-1")) == "delivered"
    assert len(fake.messages["7"]) == 2


def test_a_release_that_fails_never_masks_discords_error_and_the_claim_expires(nonces, clock):
    # GIVEN Discord refuses the edit and the claim's release is throttled on every try
    fake = FakeDiscord()
    event = Event.build(EventType.MESSAGE_EDIT, nonce_for("edit"), channel_id="7", message_id="8", content="x")
    body = Signer(signing_keys(clock, KEY)[0], clock).sign(event)
    faults = Faults(nonces.clients()[0]).refused_before("DeleteItem", throttled, times=3)
    worker = delivery(nonces, fake, clock)
    # THEN the worker reports Discord's refusal, not the store's error
    with pytest.raises(ProviderRejected):
        worker.deliver(record(body, "m-1"))
    faults.detach()
    # AND the stuck claim makes a retry wait (busy) until it expires, then the retry goes through
    fake.add_message("7", "8", "old")
    with pytest.raises(DeliveryBusy):
        worker.deliver(record(body, "m-1"))
    clock.advance(ms=CLAIM_TTL_MS + 1)
    assert worker.deliver(record(body, "m-1")) == "delivered" and fake.messages["7"]["8"] == "x"


def test_the_claim_outlives_the_worker_and_the_clock_margin_and_expires_before_the_visibility_timeout():
    (queue,) = QUEUES
    assert queue.worker_timeout_s * 1000 + DEFAULT_SAFETY_MARGIN_MS < CLAIM_TTL_MS < queue.visibility_timeout_s * 1000
