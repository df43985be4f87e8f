"""Club test harness: the club tables, the notification queue and signing key in moto, and a job runner.

Test modules import the `club` fixture from here (not a nested conftest: see tests/support.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Logger, Metrics

from jobfence.config import ScheduledSettings, config_env, queue_env, secret_env, table_env
from jobfence.lease import LeaseStore
from jobfence.runs import RunStore
from jobfence.scheduled import JobDeps, ScheduledRunner
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG
from jobs.club.events import Verifier
from jobs.club.catalog import SIGNING_KEY_SECRET
from jobfence.testing.grants import within_grant
from tests.support import create_catalog_tables, signing_keys, signing_pair

SIGNING_SEED = b"k" * 32
SIGNING_PAIR = signing_pair(SIGNING_SEED)


def club_verifier(clock) -> Verifier:
    """The Discord worker's verifier for the harness's signing key."""
    return Verifier(signing_keys(clock, SIGNING_SEED)[1], clock)


def club_environ(tables: dict[str, str], queue_url: str, job: str) -> dict[str, str]:
    """The environment infra gives a club job function (its own tables, queue and signing key)."""
    spec = CATALOG.job(job)
    env = {"JOB_NAME": job, "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"]}
    env.update({table_env(name): tables[name] for name in spec.tables})
    env.update({queue_env(name): queue_url for name in spec.queues})
    env.update({secret_env(name): f"jobfence/{name}" for name in spec.secrets})
    env.update({config_env(name): value for name, value in spec.config.items()})
    return env


@dataclass
class Club:
    """Everything a club test needs, on one moto backend (in-process or a server)."""

    session: Any
    dynamodb: Any
    sqs: Any
    tables: dict[str, str]
    queue_url: str
    clock: Any

    def deps(self, job: str) -> JobDeps:
        settings = ScheduledSettings.from_environ(club_environ(self.tables, self.queue_url, job))
        return JobDeps(settings, CATALOG.job(job), self.clock, self.session, self.dynamodb, Logger(service="club"))

    def runner(self) -> ScheduledRunner:
        return ScheduledRunner(
            LeaseStore(self.dynamodb, self.tables["leases"], self.clock),
            RunStore(self.dynamodb, self.tables["runs"]),
            self.clock,
            Logger(service="club"),
            Metrics(namespace="jobfence", service="club"),
        )

    def run(self, job: str, built: Any = None) -> dict:
        """One scheduled tick of `job` (through the real runner: gate, lease, batches, release)."""
        spec = CATALOG.job(job)
        with within_grant(self.tables, spec.tables, job):  # the job calls only what its entry is granted
            built = built or spec.load()(self.deps(job))
            trigger = Trigger(kind="scheduled", scheduled_at=self.clock.now_ms())
            return self.runner().run(spec, built, trigger).as_dict()

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


def make_club(session, dynamodb, clock, create_tables) -> Club:
    sqs = session.client("sqs")
    url = sqs.create_queue(QueueName="club-notifications")["QueueUrl"]
    session.client("secretsmanager").create_secret(Name=f"jobfence/{SIGNING_KEY_SECRET}", SecretString=SIGNING_PAIR.signing_value)
    return Club(session, dynamodb, sqs, create_tables(dynamodb), url, clock)


@pytest.fixture
def club(aws, dynamodb, clock) -> Club:
    return make_club(aws, dynamodb, clock, create_catalog_tables)
