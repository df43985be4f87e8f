"""Wiring: the worker handler over the sample events, SQS wake-ups, and reclaim as a scheduled job."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from aws_lambda_powertools import Logger, Metrics

from jobfence.config import ScheduledSettings, WorkerSettings, queue_env, table_env
from jobfence.binding import bound_to
from jobfence.handler import worker_handler
from jobfence.lease import LeaseStore
from jobfence.runs import RunStore
from jobfence.scheduled import JobDeps, Outcome, ScheduledRunner, load_job
from jobfence.testing.harness import aws_session
from jobfence.triggers import Trigger
from jobfence.work import BatchRef, ItemInput, ItemStatus, Producer, parse_wakeup
from jobfence.work.sqs import SqsWakeups
from jobs.catalog import CATALOG
from jobs.listings.pipelines import perform_with, worker_pipeline
from jobs.listings.stores import build_store
from providers.items_fake import FakeItemProvider
from providers.items import GENERATOR
from tests.support import load_event

LISTING_TABLES = ("listing_batches", "listing_items", "listing_quota")


@pytest.fixture
def queues(aws):
    sqs = aws.client("sqs")
    return sqs, {
        name: sqs.create_queue(QueueName=f"{name}-test")["QueueUrl"] for name in ("listing_generation", "listing_publish")
    }


@pytest.fixture
def worker_env(tables, queues):
    """The environment jobfence-cdk gives the generation worker's function."""
    _, urls = queues
    env = {table_env(name): tables[name] for name in LISTING_TABLES}
    env.update({queue_env("listing_generation"): urls["listing_generation"], "WORKER_QUEUE": "listing_generation",
                "PROVIDER_GENERATOR_URL": "http://127.0.0.1:9",  # never called: the tests pass the fake's step
                "POWERTOOLS_SERVICE_NAME": "listings"})
    return env


def worker(environ, clock, fake):
    """The worker function's handler as its cold start builds it, with the fake provider's step (offline)."""
    return worker_handler(CATALOG, environ, clock, worker_pipeline, session=aws_session(), perform=perform_with(fake))


def test_the_handler_turns_the_sample_batch_into_a_partial_response(worker_env, clock, lambda_context):
    # GIVEN the generation worker function and the batch named in the sample event
    handler = worker(worker_env, clock, FakeItemProvider(GENERATOR))
    store = build_store(WorkerSettings.from_environ(worker_env), clock)
    store.quota.grant("acme", 10)
    Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
        BatchRef("acme", "gen-2026-01-01"), "generation",
        [ItemInput("sku-0001", {"t": 1}), ItemInput("sku-0002", {"t": 2})], "tester",
    )
    # WHEN the sample SQS batch is handled
    response = handler(load_event("sqs_generation_batch"), lambda_context)
    # THEN no message comes back and both items completed
    assert response == {"batchItemFailures": []}
    report = store.batches.describe_batch(BatchRef("acme", "gen-2026-01-01"))
    assert [i.status for i in report.items] == [ItemStatus.COMPLETED] * 2
    # AND the malformed sample comes back whole, naming both messages
    bad = load_event("malformed_sqs_generation_batch")
    response = handler(bad, lambda_context)
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(
        r["messageId"] for r in bad["Records"]
    )


def test_without_a_region_in_the_environment_the_worker_calls_aws_only_through_the_session_it_is_given(
    worker_env, queues, clock, lambda_context, monkeypatch
):
    # GIVEN a process whose environment names no region (outside Lambda: a laptop, a CI job) and a session that does
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    session = aws_session("us-east-1")
    step, attempts = perform_with(FakeItemProvider(GENERATOR)), Counter()

    def flaky(request, timeout_s):  # sku-0002's first attempt times out: its retry's wake-up goes out through SQS
        attempts[request.key.item_id] += 1
        if request.key.item_id == "sku-0002" and attempts["sku-0002"] == 1:
            raise TimeoutError("the provider did not answer")
        return step(request, timeout_s)

    # WHEN the worker function cold-starts on that session and handles the sample batch
    handler = worker_handler(CATALOG, worker_env, clock, worker_pipeline, session=session, perform=flaky)
    with bound_to(session):
        store = build_store(WorkerSettings.from_environ(worker_env), clock)
    store.quota.grant("acme", 10)
    ref = BatchRef("acme", "gen-2026-01-01")
    Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
        ref, "generation", [ItemInput("sku-0001", {}), ItemInput("sku-0002", {})], "tester"
    )
    assert handler(load_event("sqs_generation_batch"), lambda_context) == {"batchItemFailures": []}
    # THEN its store claimed and settled the rows in the session's region, and the retry's wake-up is on its queue
    assert {i.item_id: i.status for i in store.batches.describe_batch(ref).items} == {
        "sku-0001": ItemStatus.COMPLETED, "sku-0002": ItemStatus.PENDING}
    sqs, urls = queues
    counts = sqs.get_queue_attributes(QueueUrl=urls["listing_generation"], AttributeNames=["All"])["Attributes"]
    assert int(counts["ApproximateNumberOfMessages"]) + int(counts["ApproximateNumberOfMessagesDelayed"]) == 1


def test_a_session_without_a_region_is_a_settings_error_before_any_call(worker_env, clock, monkeypatch):
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    from jobfence.errors import SettingsError

    with pytest.raises(SettingsError, match="the session has no region"):
        worker_handler(CATALOG, worker_env, clock, worker_pipeline, session=aws_session(),
                       perform=perform_with(FakeItemProvider(GENERATOR)))


@pytest.mark.parametrize("event", [{"Records": [{}]}, {"Records": [None, 3]}, {"Records": [{"messageId": "m", "body": 1}]},
                                   {"Records": []}])
def test_records_without_an_id_or_body_are_dropped_and_counted_never_a_key_error(monkeypatch, worker_env, clock,
                                                                                lambda_context, event):
    # GIVEN a hand-made event whose records Lambda would never send WHEN handled
    handler = worker(worker_env, clock, FakeItemProvider(GENERATOR))
    counted: list[str] = []
    add_metric = Metrics.add_metric  # the handler's Metrics is built inside the factory: count through the class
    monkeypatch.setattr(Metrics, "add_metric", lambda self, **kw: (counted.append(kw["name"]), add_metric(self, **kw))[1])
    # THEN an empty partial response (nothing can be named back), and the dropped records are counted
    assert handler(event, lambda_context) == {"batchItemFailures": []}
    assert counted.count("malformed_records") == (1 if event["Records"] else 0)


def test_a_non_sqs_event_is_a_clear_error(worker_env, clock, lambda_context):
    from jobfence.errors import InvalidEvent

    handler = worker(worker_env, clock, FakeItemProvider(GENERATOR))
    with pytest.raises(InvalidEvent, match="SQS batch"):
        handler({"detail": "x"}, lambda_context)


def test_the_publish_samples_parse_as_expected():
    good = [parse_wakeup(r["body"]) for r in load_event("sqs_publish_batch")["Records"]]
    assert {k.batch_id for k in good} == {"pub-2026-01-01"}
    from jobfence.errors import InvalidEvent

    for r in load_event("malformed_sqs_publish_batch")["Records"]:
        with pytest.raises(InvalidEvent):
            parse_wakeup(r["body"])


def test_a_worker_function_without_its_queue_fails_closed(worker_env, queues, clock):
    # GIVEN a worker whose configured queue is not in the catalog WHEN it cold-starts THEN it refuses
    # with a catalog error naming the queue and the catalog's queues (not a bare KeyError)
    from jobfence import CatalogError

    fake = FakeItemProvider(GENERATOR)
    with pytest.raises(CatalogError, match=r"'no_such_queue' is not a queue of the catalog.*listing_generation"):
        worker({**worker_env, "WORKER_QUEUE": "no_such_queue"}, clock, fake)
    # AND a pipelines mapping without the function's queue is a catalog error naming it too
    with pytest.raises(CatalogError, match=r"no WorkerPipeline is given for the queue 'listing_generation'"):
        worker_handler(CATALOG, worker_env, clock, {}, session=aws_session(), perform=perform_with(fake))
    # AND without WORKER_QUEUE, two granted queues are ambiguous: it refuses rather than guess
    from jobfence.errors import SettingsError

    env = {k: v for k, v in worker_env.items() if k != "WORKER_QUEUE"}
    env[queue_env("listing_publish")] = queues[1]["listing_publish"]
    with pytest.raises(SettingsError):
        worker(env, clock, fake)


def test_a_worker_granted_only_its_own_queue_runs_that_queues_pipeline(worker_env, clock, lambda_context):
    # GIVEN a generation worker function without WORKER_QUEUE (its own queue is the one it was granted)
    env = {k: v for k, v in worker_env.items() if k != "WORKER_QUEUE"}
    kinds: list[str] = []
    step = perform_with(FakeItemProvider(GENERATOR))

    def recording(request, timeout_s):
        kinds.append(request.kind)
        return step(request, timeout_s)

    queues_asked: list[str] = []

    def pipelines(queue):
        queues_asked.append(queue)
        return worker_pipeline(queue)

    handler = worker_handler(CATALOG, env, clock, pipelines, session=aws_session(), perform=recording)
    assert queues_asked == ["listing_generation"]
    store = build_store(WorkerSettings.from_environ(env), clock)
    store.quota.grant("acme", 10)
    Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
        BatchRef("acme", "gen-2026-01-01"), "generation", [ItemInput("sku-0001", {}), ItemInput("sku-0002", {})], "t")
    # WHEN the sample generation batch is handled THEN the generation pipeline ran both items
    assert handler(load_event("sqs_generation_batch"), lambda_context) == {"batchItemFailures": []}
    assert kinds == ["generation", "generation"]


def test_sqs_wakeups_carry_only_the_keys_and_the_shard(queues, tables, clock):
    sqs, urls = queues
    wakeups = SqsWakeups(sqs, urls["listing_generation"])
    from jobfence.work import ItemKey

    keys = [ItemKey("acme", "b1", f"i{i}", i % 4) for i in range(23)]
    assert wakeups.send(keys) == []
    bodies = []
    while True:
        got = sqs.receive_message(QueueUrl=urls["listing_generation"], MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        bodies += [json.loads(m["Body"]) for m in got]
    assert len(bodies) == 23
    assert all(set(b) == {"tenant", "batch", "item", "shard"} for b in bodies)
    assert sorted((b["item"], b["shard"]) for b in bodies) == sorted((k.item_id, k.shard) for k in keys)


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
    job = load_job(spec)(JobDeps(settings, spec, clock, aws, dynamodb, logger))
    leases = LeaseStore(dynamodb, tables["leases"], clock)
    renewals = {"n": 0}
    real_renew = leases.renew

    def counting_renew(lease):
        renewals["n"] += 1
        return real_renew(lease)

    leases.renew = counting_renew
    runner = ScheduledRunner(leases, RunStore(dynamodb, tables["runs"]), clock, logger, Metrics(namespace="jobfence"))
    clock.advance(minutes=17)
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


def test_the_reclaimer_passes_the_kits_fence_only_through_its_entrys_unfenced_declaration(aws, tables, queues, clock):
    # GIVEN 3 items whose wake-ups were lost, and the reclaim job under the kit's harness
    from jobfence.testing import JobHarness

    _, urls = queues
    spec = CATALOG.job("reclaim_listings")
    harness = JobHarness(aws, CATALOG, spec.name, clock, tables=tables, queues=urls)
    store = build_store(harness.deps().settings, clock)
    Producer(store, {"generation": _Null()}, Logger(service="listings")).submit(
        BatchRef("acme", "b1"), "generation", [ItemInput(f"i{i}", {}) for i in range(3)], "tester"
    )
    clock.advance(minutes=17)
    # WHEN it ticks with its catalog entry THEN it re-drives them: its writes (each conditioned on the row as the
    # index showed it, docs/architecture.md) are declared `unfenced`, so the fence lets them through
    assert set(spec.unfenced) == set(spec.tables)
    harness.tick().assert_ran(stale_pending=3)
    # AND the same entry without the declaration fails its tick, naming the reclaimer's first unfenced write
    from dataclasses import replace

    undeclared = JobHarness(aws, CATALOG, spec.name, clock, tables=tables, queues=urls, entry=replace(spec, unfenced={}))
    clock.advance(minutes=17)
    Producer(store, {"generation": _Null()}, Logger(service="listings")).submit(
        BatchRef("acme", "b2"), "generation", [ItemInput(f"j{i}", {}) for i in range(3)], "tester"
    )
    clock.advance(minutes=17)
    with pytest.raises(AssertionError, match=r"reclaim_listings wrote to its catalog tables outside ctx.transaction\(\)"):
        undeclared.tick()


def test_a_forged_record_leaves_a_bounded_log_line_and_comes_back_by_its_own_id(worker_env, clock, lambda_context):
    import io

    # GIVEN the generation worker, its log stream captured
    handler = worker(worker_env, clock, FakeItemProvider(GENERATOR))
    stream = io.StringIO()
    Logger(service=CATALOG.queues["listing_generation"].subsystem).registered_handler.setStream(stream)
    # WHEN a record with a 1 MB message id and a 1 MB field name arrives
    message_id = "m" * 1_000_000
    body = '{"tenant":"acme","batch":"b1","item":"i1","' + "k" * 1_000_000 + '":1}'
    event = {"Records": [{"messageId": message_id, "receiptHandle": "r", "body": body, "attributes": {},
                          "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                          "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"}]}
    response = handler(event, lambda_context)
    # THEN it comes back under its own id (SQS needs it whole) and no log line carries more than a few hundred
    # characters of it
    assert response == {"batchItemFailures": [{"itemIdentifier": message_id}]}
    lines = stream.getvalue().splitlines()
    assert any('"outcome":"malformed"' in line for line in lines)
    assert max(len(line) for line in lines) < 2_000
