"""The worker with tenant sessions (`TENANT_ROLE_ARN`): a tenant whose session cannot be had does not stop the others.

AssumeRole refused for one tenant (throttled past the retries, or denied): that tenant's wake-ups come back as
batch item failures with the classified error, its rows untouched (still pending); the other tenant's items
complete in the same round; the next round, with STS answering again, completes the first tenant's too.
"""

from __future__ import annotations

import json

from aws_lambda_powertools import Logger

from jobfence.config import ENV_TENANT_ROLE, Settings, queue_env, table_env
from jobfence.errors import ErrorKind
from jobfence.errors import StoreError
from jobfence.handler import worker_handler
from jobfence.tenants import TenantScopes
from jobfence.work import BatchRef, ItemInput, ItemStatus, Producer
from jobs.catalog import CATALOG
from jobs.listings.pipelines import build_store, perform_with, worker_pipeline
from providers.items_fake import FakeItemProvider
from providers.items import GENERATOR

LISTING_TABLES = ("listing_batches", "listing_items", "listing_quota")


class _Null:
    def send(self, keys, delay_s=0):
        return []


def _record(tenant: str, item: int) -> dict:
    body = json.dumps({"tenant": tenant, "batch": "b1", "item": f"i{item}", "shard": 0})
    return {"messageId": f"{tenant}-{item}", "receiptHandle": "r", "body": body, "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"}


def test_a_tenant_whose_session_is_refused_comes_back_alone_and_its_rows_stay_untouched(
    aws, tables, clock, lambda_context, monkeypatch
):
    url = aws.client("sqs").create_queue(QueueName="gen")["QueueUrl"]
    base = {table_env(n): tables[n] for n in LISTING_TABLES}
    environ = {**base, queue_env("listing_generation"): url, "WORKER_QUEUE": "listing_generation",
               "PROVIDER_GENERATOR_URL": "http://127.0.0.1:9",
               ENV_TENANT_ROLE: "arn:aws:iam::123456789012:role/jobfence-tenant"}
    store = build_store(Settings.from_environ(base), clock)
    for tenant in ("acme", "globex"):
        store.quota.grant(tenant, 10)
        Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
            BatchRef(tenant, "b1"), "generation", [ItemInput(f"i{i}", {}) for i in range(2)], "tester")
    real_assume = TenantScopes.assume
    sts_down = {"globex"}

    def assume(self, tenant):
        if tenant in sts_down:
            raise StoreError("assuming the tenant session of 'globex' failed: Throttling", ErrorKind.THROTTLED)
        return real_assume(self, tenant)

    monkeypatch.setattr(TenantScopes, "assume", assume)
    handler = worker_handler(CATALOG, environ, clock, worker_pipeline, session=aws, perform=perform_with(FakeItemProvider(GENERATOR)))
    records = [_record(t, i) for i in range(2) for t in ("acme", "globex")]
    # WHEN one round meets both tenants while STS refuses globex's session
    response = handler({"Records": records}, lambda_context)
    # THEN only globex's wake-ups come back, its rows untouched, and acme's items completed
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == ["globex-0", "globex-1"]
    assert {i.status for i in store.batches.describe_batch(BatchRef("acme", "b1")).items} == {ItemStatus.COMPLETED}
    globex = store.batches.describe_batch(BatchRef("globex", "b1")).items
    assert {(i.status, i.attempts) for i in globex} == {(ItemStatus.PENDING, 0)}
    # AND once STS answers, the redelivered wake-ups complete globex's items
    sts_down.clear()
    clock.advance(seconds=30)
    redelivered = [r for r in records if r["messageId"].startswith("globex")]
    assert handler({"Records": redelivered}, lambda_context) == {"batchItemFailures": []}
    assert {i.status for i in store.batches.describe_batch(BatchRef("globex", "b1")).items} == {ItemStatus.COMPLETED}
