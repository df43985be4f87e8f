"""One signing key per club job (issue 29, item 5) and the signing lows of the same issue.

- the worker's table: each job only its event types and, for role changes, its guilds; refused even when the
  signature is valid (acknowledged, counted, logged without the payload);
- a job signing with its own key but claiming another job's name is forged;
- AWSPREVIOUS holding the deploy's placeholder (after the first rotation) verifies nothing and is no error;
- an unknown-kid event just before a rotation does not make the correctly signed event after it look forged.
"""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobs.club.catalog import CLUB_GUILDS, GUILDS_SETTING, SCHEDULER_JOBS, SIGNER_EVENTS, signing_secret
from jobs.club.delivery import KEYRING_BUSY_S, DiscordDelivery
from jobs.club.events import Event, EventRejected, EventType, RejectReason, Signer, Verifier, nonce_for
from jobs.club.signers import KeyringBusy, SignerKeyrings, grants_from_catalog
from jobs.club.signing import REFRESH_MIN_MS, SigningKeys, VerifyKeyring
from jobs.club.stores.nonces import NonceStore
from providers.discord_fake import FakeDiscord
from providers.secrets import MemorySecrets, SecretsManagerValues
from tests.support import create_catalog_tables, drive_powertools_cache, signing_pair

GUILD = CLUB_GUILDS.split(",")[0]
RECONCILE, REMINDERS = "reconcile_membership_roles", "send_equipment_reminders"
MAX_AGE_S = 300


class _Jobs:
    """Every publishing job with its own pair, and the worker's verifier over their verify secrets."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.pairs = {job: signing_pair(bytes([n + 1]) * 32) for n, job in enumerate(SIGNER_EVENTS)}
        self.secrets = MemorySecrets(
            {f"verify/{job}": pair.verify_value for job, pair in self.pairs.items()}
            | {f"sign/{job}": pair.signing_value for job, pair in self.pairs.items()}
        )
        self.verifier = Verifier(
            SignerKeyrings.of(self.secrets, {job: f"verify/{job}" for job in SIGNER_EVENTS}, clock),
            clock,
            grants_from_catalog(),
        )

    def sign(self, job: str, event: Event, *, claiming: str | None = None) -> str:
        """`event` signed with `job`'s own key, naming `claiming` (default: `job`) as the signer."""
        return Signer(SigningKeys(self.secrets, f"sign/{job}", claiming or job), self.clock).sign(event)


def _role(type_: EventType = EventType.ROLE_ADD, guild: str = GUILD) -> Event:
    return Event.build(type_, nonce_for("signers", type_.value, guild), guild_id=guild, user_id="2", role_id="3")


def _direct() -> Event:
    return Event.build(EventType.DIRECT_NOTIFICATION, nonce_for("signers", "dm"), user_id="5", content="secret text")


def _rejected(verifier: Verifier, body: str) -> EventRejected:
    with pytest.raises(EventRejected) as info:
        verifier.verify(body)
    return info.value


def test_each_job_may_send_its_own_types_in_its_own_guild(clock):
    jobs = _Jobs(clock)
    assert jobs.verifier.verify(jobs.sign(RECONCILE, _role())).signer == RECONCILE
    assert jobs.verifier.verify(jobs.sign(RECONCILE, _role(EventType.ROLE_REMOVE))).type is EventType.ROLE_REMOVE
    assert jobs.verifier.verify(jobs.sign(REMINDERS, _direct())).signer == REMINDERS


def test_a_correctly_signed_event_of_a_type_its_signer_may_not_send_is_not_allowed(clock):
    jobs = _Jobs(clock)
    # the reminders job (direct messages only) asks for a role; expire_memberships (removals only) adds one
    for job, event in ((REMINDERS, _role()), ("expire_memberships", _role()), (RECONCILE, _direct()),
                       ("sync_darkroom_stats", Event.build(EventType.MESSAGE_POST, nonce_for("p"), channel_id="7",
                                                           content="x"))):
        rejected = _rejected(jobs.verifier, jobs.sign(job, event))
        assert rejected.reason is RejectReason.NOT_ALLOWED, job


def test_a_role_change_in_a_guild_the_job_is_not_configured_for_is_not_allowed(clock):
    jobs = _Jobs(clock)
    rejected = _rejected(jobs.verifier, jobs.sign(RECONCILE, _role(guild="999999999999999999")))
    assert rejected.reason is RejectReason.NOT_ALLOWED
    assert "999999999999999999" not in str(rejected)  # the detail names no payload value


def test_a_job_claiming_another_jobs_name_with_its_own_key_is_forged(clock):
    jobs = _Jobs(clock)
    # GIVEN the reminders job's key (compromised) signing a role change as if it were the reconcile job
    body = jobs.sign(REMINDERS, _role(), claiming=RECONCILE)
    assert json.loads(body)["signer"] == RECONCILE
    # THEN its kid is not in the reconcile job's keyring: forged, though the signature is valid for its own key
    assert _rejected(jobs.verifier, body).reason is RejectReason.FORGED


def test_rewriting_the_signer_of_a_signed_event_is_forged(clock):
    jobs = _Jobs(clock)
    body = json.loads(jobs.sign(REMINDERS, _role()))  # refused as not allowed as it stands
    body["signer"] = RECONCILE  # the signer is signed: changing it breaks the signature (and the kid lookup)
    assert _rejected(jobs.verifier, json.dumps(body)).reason is RejectReason.FORGED


def test_an_unknown_signer_is_forged_and_echoed_bounded(clock):
    jobs = _Jobs(clock)
    body = json.loads(jobs.sign(RECONCILE, _role()))
    body["signer"] = "x" * 10_000
    rejected = _rejected(jobs.verifier, json.dumps(body))
    assert rejected.reason is RejectReason.FORGED and "unknown signer" in str(rejected) and len(str(rejected)) < 300


def test_a_not_allowed_event_is_acknowledged_counted_and_logged_without_its_payload(dynamodb, clock):
    jobs = _Jobs(clock)
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    discord, metrics = FakeDiscord(), Metrics(namespace="jobfence", service="club")
    metrics.clear_metrics()  # Powertools shares one metric set per process: start from none
    # a logger of its own stream (Powertools keeps the handler of a service name it has seen in this process)
    stream = io.StringIO()
    logger = Logger(service=f"club-{uuid.uuid4().hex}", logger_handler=logging.StreamHandler(stream))
    delivery = DiscordDelivery(jobs.verifier, NonceStore(tables["club_event_nonces"], clock), discord,
                               _NoVisibility(), logger, metrics)
    body = jobs.sign(RECONCILE, _direct())
    assert delivery.deliver(SQSRecord(_record(body))) == "rejected"  # acknowledged: never retried
    assert discord.calls == []
    logged = stream.getvalue()
    assert '"reason":"not_allowed"' in logged and "secret text" not in logged and '"5"' not in logged
    assert metrics.metric_set["discord_rejected"]["Value"] == [1.0]


def test_the_worker_table_is_the_catalogs_publishing_jobs_and_each_reads_only_its_own_key():
    grants = grants_from_catalog()
    publishing = {job.name for job in SCHEDULER_JOBS if job.queues}
    assert set(grants) == publishing == set(SIGNER_EVENTS)
    for job in SCHEDULER_JOBS:
        if job.name in publishing:
            assert job.secrets == (signing_secret(job.name),), job.name
        roles = {"role_add", "role_remove"} & grants.get(job.name, grants[REMINDERS]).types
        # a job that changes roles is configured for its guilds; the others may touch none
        assert bool(roles) == bool(job.config.get(GUILDS_SETTING)), job.name
    assert grants[RECONCILE].guilds == frozenset(CLUB_GUILDS.split(","))
    assert all(not g.guilds for job, g in grants.items() if not ({"role_add", "role_remove"} & g.types))


# -- the signing lows -------------------------------------------------------------------------------


class _NoVisibility:
    def __init__(self) -> None:
        self.delays: list[tuple[str, int]] = []

    def delay(self, receipt_handle: str, seconds: int) -> None:
        self.delays.append((receipt_handle, seconds))


def _record(body: str) -> dict:
    message_id = str(uuid.uuid4())
    return {"messageId": message_id, "receiptHandle": f"rh-{message_id}", "body": body, "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:club-notifications", "awsRegion": "us-east-1"}


@pytest.fixture
def sm(aws, clock, monkeypatch):
    drive_powertools_cache(monkeypatch, clock)
    return aws.client("secretsmanager")


def _worker(sm, clock, job: str = RECONCILE) -> Verifier:
    keyring = VerifyKeyring(SecretsManagerValues(sm, MAX_AGE_S), f"verify/{job}", clock)
    return Verifier(SignerKeyrings({job: keyring}), clock, grants_from_catalog())


def test_after_the_first_rotation_the_placeholder_in_awsprevious_verifies_nothing_and_raises_nothing(sm, clock):
    """The low: AWSPREVIOUS is CloudFormation's generated placeholder; an unknown kid made it raise SettingsError,
    which escaped the delivery, so the message was retried ten times instead of acknowledged."""
    from jobs.club.rotation import SigningRotation

    # GIVEN the pair as deployed (random placeholders) and its first rotation (the one right after the deploy)
    sm.create_secret(Name=f"sign/{RECONCILE}", SecretString='{"generated": "x9Q!placeholder"}')
    sm.create_secret(Name=f"verify/{RECONCILE}", SecretString='{"generated": "k2#placeholder"}')
    SigningRotation(sm, f"sign/{RECONCILE}", f"verify/{RECONCILE}", clock).rotate(str(uuid.uuid4()))
    # WHEN, inside the grace window, an event names a kid the keyring does not hold
    body = Signer(SigningKeys(MemorySecrets({"s": signing_pair().signing_value}), "s", RECONCILE), clock).sign(_role())
    # THEN it is forged (acknowledged by the delivery), not a SettingsError
    assert _rejected(_worker(sm, clock), body).reason is RejectReason.FORGED
    # AND the correctly signed event verifies
    good = Signer(SigningKeys(SecretsManagerValues(sm, MAX_AGE_S), f"sign/{RECONCILE}", RECONCILE), clock)
    assert _worker(sm, clock).verify(good.sign(_role())).signer == RECONCILE


def test_an_unknown_kid_just_before_a_rotation_does_not_get_the_good_event_after_it_dropped(sm, dynamodb, clock):
    """The low: the unknown kid used the refresh allowance, and the correctly signed event with the new key a
    moment later was rejected as forged and acknowledged (lost)."""
    old, new = signing_pair(), signing_pair()
    sm.create_secret(Name=f"sign/{RECONCILE}", SecretString=old.signing_value)
    sm.create_secret(Name=f"verify/{RECONCILE}", SecretString=old.verify_value)
    tables = create_catalog_tables(dynamodb, names={"club_event_nonces"})
    discord, visibility = FakeDiscord(), _NoVisibility()
    delivery = DiscordDelivery(_worker(sm, clock), NonceStore(tables["club_event_nonces"], clock), discord,
                               visibility, Logger(service="club"), Metrics(namespace="jobfence", service="club"))
    signer = Signer(SigningKeys(MemorySecrets({"s": old.signing_value}), "s", RECONCILE), clock)
    assert delivery.deliver(SQSRecord(_record(signer.sign(_role(guild=GUILD))))) == "delivered"  # warm keyring
    # GIVEN an event with an unknown kid (it uses the refresh allowance) ...
    stranger = Signer(SigningKeys(MemorySecrets({"s": signing_pair().signing_value}), "s", RECONCILE), clock)
    assert delivery.deliver(SQSRecord(_record(stranger.sign(_role(EventType.ROLE_REMOVE))))) == "rejected"
    # ... then a rotation a second later (public half first) and an event signed with the new key
    clock.advance(seconds=1)
    sm.put_secret_value(SecretId=f"verify/{RECONCILE}", SecretString=new.verify_value)
    clock.advance(seconds=1)
    good = Signer(SigningKeys(MemorySecrets({"s": new.signing_value}), "s", RECONCILE), clock)
    record = _record(good.sign(Event.build(EventType.ROLE_ADD, nonce_for("after"), guild_id=GUILD, user_id="9",
                                           role_id="8")))
    # WHEN it arrives inside the refresh interval THEN it is not judged: a retryable failure, back soon
    with pytest.raises(KeyringBusy):
        delivery.deliver(SQSRecord(record))
    assert visibility.delays == [(record["receiptHandle"], KEYRING_BUSY_S)]
    assert ("9",) not in {(u,) for (_, u) in discord.roles}
    # AND delivered when SQS brings it back after the interval
    clock.advance(ms=REFRESH_MIN_MS)
    assert delivery.deliver(SQSRecord(record)) == "delivered"
    assert discord.roles[(GUILD, "9")] == {"8"}


def test_a_kid_the_last_fresh_read_lacked_is_forged_at_once_not_retried(clock):
    pair = signing_pair()
    secrets = MemorySecrets({"verify": pair.verify_value})
    verifier = Verifier(SignerKeyrings({RECONCILE: VerifyKeyring(secrets, "verify", clock)}), clock,
                        grants_from_catalog())
    body = Signer(SigningKeys(MemorySecrets({"s": signing_pair().signing_value}), "s", RECONCILE), clock).sign(_role())
    for _ in range(3):  # the same forged message redelivered inside the interval: forged each time, never busy
        assert _rejected(verifier, body).reason is RejectReason.FORGED
    other = Signer(SigningKeys(MemorySecrets({"s": signing_pair().signing_value}), "s", RECONCILE), clock)
    with pytest.raises(KeyringBusy):  # a second unknown kid inside the interval: not judged yet
        verifier.verify(other.sign(_role()))
