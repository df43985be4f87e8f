"""Real concurrency: threads racing for one lease on one moto server over HTTP."""

from __future__ import annotations

import threading
import uuid

import boto3
import pytest
from aws_lambda_powertools import Logger, Metrics

from tests.support import create_catalog_tables
from jobfence.clock import FrozenClock
from jobfence.errors import LeaseHeld
from jobfence.lease import LeaseStore
from jobfence.registry import JobSpec
from jobfence.runs import RunStore
from jobfence.scheduled import Outcome, ScheduledRunner
from jobfence.triggers import Trigger

pytestmark = pytest.mark.server

SPEC = JobSpec(name="raced", subsystem="test", entry="unused:unused", schedule="rate(1 hour)", interval_s=3600)


@pytest.mark.parametrize("racers", [2, 8])
def test_exactly_one_of_n_concurrent_ticks_runs_and_the_rest_skip_as_leased(server_session, racers):
    setup = server_session.client("dynamodb")
    tables = create_catalog_tables(setup, names={"leases", "runs"})
    clock = FrozenClock()
    start = threading.Barrier(racers)
    losers_done = threading.Semaphore(0)
    results: list[Outcome] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def job(ctx):
        # the winner holds its lease until every loser has finished its tick
        for _ in range(racers - 1):
            assert losers_done.acquire(timeout=30)
        yield {"done": 1}

    def racer():
        try:
            client = boto3.Session().client("dynamodb", endpoint_url=server_session.endpoint)
            runner = ScheduledRunner(
                LeaseStore(client, tables["leases"], clock), RunStore(client, tables["runs"]), clock, Logger(), Metrics()
            )
            start.wait(timeout=30)
            outcome = runner.run(SPEC, job, Trigger("scheduled", clock.now_ms())).outcome
            with lock:
                results.append(outcome)
            if outcome is not Outcome.RAN:
                losers_done.release()
        except BaseException as exc:  # surfaced below; a thread must not die silently
            errors.append(exc)
            losers_done.release()

    threads = [threading.Thread(target=racer, name=f"racer-{i}") for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(r.value for r in results) == ["ran"] + ["skipped_leased"] * (racers - 1)
    rows = setup.scan(TableName=tables["runs"])["Items"]
    assert [r["outcome"]["S"] for r in rows] == ["ran"]
    lease = setup.get_item(TableName=tables["leases"], Key={"job": {"S": "raced"}})["Item"]
    assert lease["fence"] == {"N": "1"} and "holder" not in lease


def test_a_raw_acquire_race_has_one_winner_per_term(server_session):
    setup = server_session.client("dynamodb")
    tables = create_catalog_tables(setup, names={"leases"})
    clock = FrozenClock()
    winners: list[str] = []
    start = threading.Barrier(8)

    def racer(i):
        client = boto3.Session().client("dynamodb", endpoint_url=server_session.endpoint)
        store = LeaseStore(client, tables["leases"], clock)
        start.wait(timeout=30)
        try:
            store.acquire("raced", f"holder-{i}-{uuid.uuid4().hex[:4]}", 60_000)
            winners.append(str(i))
        except LeaseHeld:
            pass

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(winners) == 1
