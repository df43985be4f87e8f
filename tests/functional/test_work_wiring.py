"""Wiring: the worker handler over the sample events, SQS wake-ups, and reclaim as a scheduled job."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from aws_lambda_powertools import Logger, Metrics

from jobfence.clock import FrozenClock
from jobfence.config import ScheduledSettings, queue_env, table_env
from jobfence.lease import LeaseStore
from jobfence.runs import RunStore
from jobfence.scheduled import JobDeps, Outcome, ScheduledRunner
from jobfence.triggers import Trigger
from jobfence.work import BatchRef, ItemInput, ItemStatus, Producer, parse_wakeup
from providers.sqs_wakeups import SqsWakeups
from jobs.catalog import CATALOG
from jobs.listings.pipelines import build_store, perform_with
from providers.items import GENERATOR
from providers.items_fake import FakeItemProvider
from tests.support import load_event

LISTING_TABLES = ("listing_batches", "listing_items", "listing_quota")


@pytest.fixture
def queues(aws):
    sqs = aws.client("sqs")
    return sqs, {
        name: sqs.create_queue(QueueName=f"{name}-test")["QueueUrl"] for name in ("listing_generation", "listing_publish")
    }


@pytest.fixture
def worker_env(monkeypatch, tables, queues):
    _, urls = queues
    for name in LISTING_TABLES:
        monkeypatch.setenv(table_env(name), tables[name])
    monkeypatch.setenv(queue_env("listing_generation"), urls["listing_generation"])
    monkeypatch.setenv("WORKER_QUEUE", "listing_generation")
    monkeypatch.setenv("PROVIDER_GENERATOR_URL", "http://127.0.0.1:9")  # replaced by the fake below
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "listings")
    return urls


def load_worker_module(monkeypatch, fake):
    sys.modules.pop("handlers.worker", None)
    module = importlib.import_module("handlers.worker")
    monkeypatch.setattr(module.worker, "_perform", perform_with(fake))  # offline: no socket
    return module


def test_the_handler_turns_the_sample_batch_into_a_partial_response(monkeypatch, worker_env, tables, lambda_context):
    # GIVEN the generation worker function and the batch named in the sample event
    fake = FakeItemProvider(GENERATOR)
    module = load_worker_module(monkeypatch, fake)
    module.worker._store.quota.grant("acme", 10)
    Producer(module.worker._store, {"generation": _Null()}, Logger(service="t")).submit(
        BatchRef("acme", "gen-2026-01-01"), "generation",
        [ItemInput("sku-0001", {"t": 1}), ItemInput("sku-0002", {"t": 2})], "tester",
    )
    # WHEN the sample SQS batch is handled
    response = module.handler(load_event("sqs_generation_batch"), lambda_context)
    # THEN no message comes back and both items completed
    assert response == {"batchItemFailures": []}
    report = module.worker._store.describe_batch(BatchRef("acme", "gen-2026-01-01"))
    assert [i.status for i in report.items] == [ItemStatus.COMPLETED] * 2
    # AND the malformed sample comes back whole, naming both messages
    bad = load_event("malformed_sqs_generation_batch")
    response = module.handler(bad, lambda_context)
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(
        r["messageId"] for r in bad["Records"]
    )


@pytest.mark.parametrize("event", [{"Records": [{}]}, {"Records": [None, 3]}, {"Records": [{"messageId": "m", "body": 1}]},
                                   {"Records": []}])
def test_records_without_an_id_or_body_are_dropped_and_counted_never_a_key_error(monkeypatch, worker_env,
                                                                                lambda_context, event):
    # GIVEN a hand-made event whose records Lambda would never send WHEN handled
    module = load_worker_module(monkeypatch, FakeItemProvider(GENERATOR))
    counted: list[str] = []
    add_metric = Metrics.add_metric  # the handler's Metrics is built inside build(): count through the class
    monkeypatch.setattr(Metrics, "add_metric", lambda self, **kw: (counted.append(kw["name"]), add_metric(self, **kw))[1])
    # THEN an empty partial response (nothing can be named back), and the dropped records are counted
    assert module.handler(event, lambda_context) == {"batchItemFailures": []}
    assert counted.count("malformed_records") == (1 if event["Records"] else 0)


def test_a_non_sqs_event_is_a_clear_error(monkeypatch, worker_env, lambda_context):
    from jobfence.errors import InvalidEvent

    module = load_worker_module(monkeypatch, FakeItemProvider(GENERATOR))
    with pytest.raises(InvalidEvent, match="SQS batch"):
        module.handler({"detail": "x"}, lambda_context)


def test_the_publish_samples_parse_as_expected():
    good = [parse_wakeup(r["body"]) for r in load_event("sqs_publish_batch")["Records"]]
    assert {k.batch_id for k in good} == {"pub-2026-01-01"}
    from jobfence.errors import InvalidEvent

    for r in load_event("malformed_sqs_publish_batch")["Records"]:
        with pytest.raises(InvalidEvent):
            parse_wakeup(r["body"])


def test_a_worker_function_without_its_queue_fails_closed(monkeypatch, worker_env, queues):
    # GIVEN a worker whose configured queue is not in the catalog WHEN it cold-starts THEN it refuses
    monkeypatch.setenv("WORKER_QUEUE", "no_such_queue")
    sys.modules.pop("handlers.worker", None)
    with pytest.raises(KeyError):
        importlib.import_module("handlers.worker")
    # AND without WORKER_QUEUE, two granted queues are ambiguous: it refuses rather than guess
    from jobfence.config import WorkerSettings
    from jobfence.errors import SettingsError

    monkeypatch.delenv("WORKER_QUEUE")
    monkeypatch.setenv(queue_env("listing_publish"), queues[1]["listing_publish"])
    sys.modules.pop("handlers.worker", None)
    with pytest.raises(SettingsError):
        importlib.import_module("handlers.worker")


def test_a_worker_granted_only_its_own_queue_runs_that_queues_pipeline(monkeypatch, worker_env):
    monkeypatch.delenv("WORKER_QUEUE")
    fake = FakeItemProvider(GENERATOR)
    module = load_worker_module(monkeypatch, fake)
    assert (module.spec.name, module.pipeline.kind) == ("listing_generation", "generation")


def test_sqs_wakeups_carry_only_the_keys(queues, tables, clock):
    sqs, urls = queues
    wakeups = SqsWakeups(sqs, urls["listing_generation"])
    from jobfence.work import ItemKey

    keys = [ItemKey("acme", "b1", f"i{i}") for i in range(23)]
    assert wakeups.send(keys) == []
    bodies = []
    while True:
        got = sqs.receive_message(QueueUrl=urls["listing_generation"], MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        bodies += [json.loads(m["Body"]) for m in got]
    assert len(bodies) == 23
    assert all(set(b) == {"tenant", "batch", "item"} for b in bodies)


class _Null:
    def send(self, keys, delay_s=0):
        return []


def test_reclaim_runs_as_a_registered_job_under_its_lease_and_renews_between_pages(aws, dynamodb, tables, queues, clock):
    # GIVEN 60 items whose wake-ups were lost, and the reclaim job built from the catalog with small pages
    sqs, urls = queues
    spec = CATALOG.job("reclaim_listings")
    env = {table_env(n): tables[n] for n in LISTING_TABLES}
    env.update({queue_env(n): u for n, u in urls.items()})
    env.update({"JOB_NAME": spec.name, "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"]})
    settings = ScheduledSettings.from_environ(env)
    logger = Logger(service="listings")
    store = build_store(settings, clock)
    Producer(store, {"generation": _Null()}, logger).submit(
        BatchRef("acme", "b1"), "generation", [ItemInput(f"i{i:03d}", {}) for i in range(60)], "tester"
    )
    job = spec.load()(JobDeps(settings, spec, clock, aws, dynamodb, logger))
    leases = LeaseStore(dynamodb, tables["leases"], clock)
    renewals = {"n": 0}
    real_renew = leases.renew

    def counting_renew(lease):
        renewals["n"] += 1
        return real_renew(lease)

    leases.renew = counting_renew
    runner = ScheduledRunner(leases, RunStore(dynamodb, tables["runs"]), clock, logger, Metrics(namespace="jobfence"))
    clock.advance(minutes=16)
    # WHEN one tick runs it
    result = runner.run(spec, job, Trigger("scheduled", clock.now_ms()))
    # THEN it ran under its lease, paged (the default page is 100, so two pages here: 60 pending, then the batch),
    # renewed before every page after the first, and re-sent all 60 wake-ups
    assert result.outcome is Outcome.RAN
    assert result.summary["stale_pending"] == 60 and result.summary["requeued"] == 60
    assert result.summary["batches"] >= 2 and renewals["n"] >= result.summary["batches"] - 1
    attrs = sqs.get_queue_attributes(QueueUrl=urls["listing_generation"], AttributeNames=["ApproximateNumberOfMessages"])
    assert int(attrs["Attributes"]["ApproximateNumberOfMessages"]) == 60
    row = RunStore(dynamodb, tables["runs"]).recent(spec.name, 1)[0]
    assert (row["outcome"], row["summary"]["requeued"]) == ("ran", 60)
    # AND a second tick within the interval is skipped without writing
    again = runner.run(spec, job, Trigger("scheduled", clock.now_ms()))
    assert again.outcome is Outcome.SKIPPED_INTERVAL
