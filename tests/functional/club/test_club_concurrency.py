"""Two concurrent invocations of each club job, as threads against one (serialized) moto server.

Two races per job:
- through the real runner: exactly one invocation runs, and the events sent are one run's worth;
- with the job lease out of the way (each thread holds its own term on its own lease item), so
  only the per-record conditions stand between the two: every record still changes once, each
  reminder is claimed by one run only, and Discord sees each change once.
"""

from __future__ import annotations

import threading
import uuid

import boto3
import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobfence.lease import LeaseStore
from jobfence.scheduled import RunContext, load_job
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG
from jobs.club.delivery import DiscordDelivery
from jobs.club.email_auth import MailVerdicts
from jobs.club.stores.email_intake import EmailIntakeStore
from jobs.club.stores.nonces import NonceStore
from ops.seeds.club import existing_messages, seed
from providers.discord_fake import FakeDiscord
from tests.functional.club.club_harness import Club, club_verifier, make_club
from tests.unit.test_club_email_receipts import GOOD

pytestmark = pytest.mark.server

# job -> (summary keys whose sum over both racers must equal one run's, and that value on the seed)
CHANGES = {
    "expire_memberships": ("expired", 1),
    "reconcile_membership_roles": ("changed", 2),
    "sweep_darkroom_schedule": ("applied", 2),
    "sweep_studio_schedule": ("moved", 2),
    "sync_darkroom_stats": (None, None),
    "send_equipment_reminders": ("claimed", 2),
    "expire_photographer_requests": ("expired", 1),
    "retry_email_intake": ("delivered", 1),
}
BOARDS = {"sweep_darkroom_schedule", "sync_darkroom_stats"}


@pytest.fixture
def server_club(server_session, clock, monkeypatch) -> Club:
    # pynamodb builds its own botocore clients: point them at the server too
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", server_session.endpoint)
    club = make_club(server_session, server_session.client("dynamodb"), clock)
    # every table the racers use, made before they start (two threads must not both create one lazily)
    club.tables("leases", "runs", *(table for job in CHANGES for table in CATALOG.job(job).tables))
    seed(club.tables, club.clock)
    EmailIntakeStore(club.tables["club_email_intake"], club.clock).put("good", GOOD, MailVerdicts.passed())
    EmailIntakeStore(club.tables["club_email_intake"], club.clock).put("bad", "From: shop@photoclub.example\n\nnot a receipt", MailVerdicts.passed())
    return club


def _race(n: int, target) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = target(i)
        except BaseException as exc:  # surfaced below; a thread must not die silently
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"racer-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


def _deliver_all(club: Club) -> FakeDiscord:
    """Put everything on the queue through the Discord worker's delivery, once each message."""
    discord = FakeDiscord()
    for channel, message_id in existing_messages():
        discord.add_message(channel, message_id)
    nonces = NonceStore(club.tables["club_event_nonces"], club.clock)
    delivery = DiscordDelivery(club_verifier(club.clock), nonces, discord, None, Logger(), Metrics())
    for message in club.drain_queue():
        record = SQSRecord({"messageId": message["MessageId"], "receiptHandle": message["ReceiptHandle"],
                            "body": message["Body"]})
        delivery.deliver(record)
    return discord


def _prepare(club: Club, job: str) -> None:
    if job == "sync_darkroom_stats":
        club.run("sweep_darkroom_schedule")
        club.drain_queue()


@pytest.mark.parametrize("job", sorted(CHANGES))
def test_two_concurrent_invocations_run_once(server_club, job):
    # GIVEN a club with work for the job
    club = server_club
    _prepare(club, job)
    # WHEN two invocations of the same tick race (each with its own clients, as two Lambdas would)
    outcomes = _race(2, lambda i: _fresh_club(club).run(job)["outcome"])
    # THEN exactly one ran; the other skipped without running
    assert sorted(outcomes)[0] == "ran" and outcomes.count("ran") == 1, outcomes
    # and Discord sees exactly one run's changes
    discord = _deliver_all(club)
    assert len(discord.calls) == len(set(discord.calls))


@pytest.mark.parametrize("job", sorted(CHANGES))
def test_record_conditions_alone_keep_two_overlapping_runs_from_doubling_anything(server_club, job):
    # GIVEN a club with work, and two runs of the job that each hold a live term (on separate lease
    # items), as if the job lease had failed us
    club = server_club
    _prepare(club, job)
    spec = CATALOG.job(job)

    def body(i: int) -> list[dict]:
        mine = _fresh_club(club)
        built = load_job(spec)(mine.deps(job))
        leases = LeaseStore(mine.dynamodb, club.tables["leases"], club.clock)
        lease = leases.acquire(f"{job}#racer-{i}", f"racer-{i}", spec.lease_ttl_s * 1000)
        ctx = RunContext(spec, uuid.uuid4().hex, Trigger("scheduled", club.clock.now_ms()), lease, leases, club.clock)
        return list(built(ctx))

    # WHEN both run at the same time
    summaries = _race(2, body)
    # THEN each record change happened once in total across both runs
    key, expected = CHANGES[job]
    if key:
        assert sum(s.get(key, 0) for run in summaries for s in run) == expected, summaries
    if job in BOARDS:
        boards = [s["board"] for run in summaries for s in run if "board" in s]
        assert boards.count("published") == 1, boards
    # and Discord sees every change once, whatever the queue carried
    discord = _deliver_all(club)
    assert len(discord.calls) == len(set(discord.calls)), discord.calls
    if job == "send_equipment_reminders":
        assert sorted(len(v) for v in discord.direct.values()) == [1, 1]


def _fresh_club(club: Club) -> Club:
    """The same backend through new clients (each thread is its own 'Lambda')."""
    session = _Session(club.session.endpoint)
    return Club(session, session.client("dynamodb"), session.client("sqs"), club.tables, club.queue_url, club.clock)


class _Session:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._session = boto3.Session()

    def client(self, name: str, **kwargs):
        return self._session.client(name, endpoint_url=self.endpoint, **kwargs)
