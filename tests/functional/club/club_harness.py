"""Club test harness: the club tables, the notification queue and signing key in moto; each job run by the
kit's `JobHarness` on them.

Test modules import the `club` fixture from here (not a nested conftest: see tests/support.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pytest
from aws_lambda_powertools import Logger

from jobfence.scheduled import JobDeps
from jobfence.testing import JobHarness
from jobs.catalog import CATALOG
from jobs.club.catalog import SIGNER_EVENTS, signing_secret
from jobs.club.events import Verifier
from jobs.club.signers import grants_from_catalog
from tests.support import CatalogTables, signing_keys, signing_pair

SIGNING_SEED = b"k" * 32
SIGNING_PAIR = signing_pair(SIGNING_SEED)


def club_verifier(clock) -> Verifier:
    """The Discord worker's verifier (the catalog's grants) for the harness's signing key (every job's, here)."""
    return Verifier(signing_keys(clock, SIGNING_SEED)[1], clock, grants_from_catalog())


@dataclass
class Club:
    """Everything a club test needs, on one moto backend (in-process or a server).

    Its tables are shared by every job it runs (a lazy `CatalogTables`: each is created
    when a job or a test first uses it), as is its one notification queue.
    """

    session: Any
    dynamodb: Any
    sqs: Any
    tables: Mapping[str, str]
    queue_url: str
    clock: Any

    def harness(self, job: str) -> JobHarness:
        """The kit's harness of `job` on the club's tables and queue (its factory's environment as infra gives it)."""
        queues = {name: self.queue_url for name in CATALOG.queues}
        return JobHarness(self.session, CATALOG, job, self.clock, Logger(service="club"), self.tables, queues, self.dynamodb)

    def deps(self, job: str) -> JobDeps:
        return self.harness(job).deps()

    def run(self, job: str, built: Any = None) -> dict:
        """One scheduled tick of `job` (through the real runner: gate, lease, batches, release), inside its grant."""
        return self.harness(job).tick(built).result.as_dict()

    def drain_queue(self) -> list[dict]:
        """Receive and delete every message on the notification queue; return them as SQS records."""
        records = []
        while True:
            out = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = out.get("Messages", [])
            if not messages:
                return records
            for m in messages:
                records.append(m)
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    def events(self) -> list:
        """The verified events now on the queue (drained)."""
        verifier = club_verifier(self.clock)
        return [verifier.verify(m["Body"]) for m in self.drain_queue()]


def make_club(session, dynamodb, clock) -> Club:
    """A club on `session`'s backend: the queue and signing key made, each table when first used."""
    sqs = session.client("sqs")
    url = sqs.create_queue(QueueName="club-notifications")["QueueUrl"]
    for job in SIGNER_EVENTS:
        session.client("secretsmanager").create_secret(Name=f"jobfence/{signing_secret(job)}",
                                                       SecretString=SIGNING_PAIR.signing_value)
    return Club(session, dynamodb, sqs, CatalogTables(dynamodb), url, clock)


@pytest.fixture
def club(aws, dynamodb, clock) -> Club:
    return make_club(aws, dynamodb, clock)
