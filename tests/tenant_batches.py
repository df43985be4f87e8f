"""Two tenants' listing batches and the worker's environment with tenant sessions: the set-up of the worker tests
that meet both tenants in one round (tests/functional/test_work_tenant_sessions.py, test_one_dynamodb_client.py)."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.config import ENV_TENANT_ROLE, Settings, queue_env, table_env
from jobfence.work import BatchRef, ItemInput, Producer
from jobs.listings.stores import build_store

LISTING_TABLES = ("listing_batches", "listing_items", "listing_quota")
TENANTS = ("acme", "globex")


class _Null:
    def send(self, keys, delay_s=0):
        return []


def two_tenant_batches(aws: Any, tables: dict[str, str], clock: Any) -> tuple[dict[str, str], Any]:
    """Each tenant granted 10 units and given batch b1 of two items; (the worker's environment, the test's store)."""
    url = aws.client("sqs").create_queue(QueueName="gen")["QueueUrl"]
    base = {table_env(n): tables[n] for n in LISTING_TABLES}
    environ = {**base, queue_env("listing_generation"): url, "WORKER_QUEUE": "listing_generation",
               "PROVIDER_GENERATOR_URL": "http://127.0.0.1:9",
               ENV_TENANT_ROLE: "arn:aws:iam::123456789012:role/jobfence-tenant"}
    store = build_store(Settings.from_environ(base), clock)
    for tenant in TENANTS:
        store.quota.grant(tenant, 10)
        Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
            BatchRef(tenant, "b1"), "generation", [ItemInput(f"i{i}", {}) for i in range(2)], "tester")
    return environ, store


def wake_up(tenant: str, item: int) -> dict:
    """The SQS record of item i`item` of `tenant`'s batch b1."""
    body = json.dumps({"tenant": tenant, "batch": "b1", "item": f"i{item}", "shard": 0})
    return {"messageId": f"{tenant}-{item}", "receiptHandle": "r", "body": body, "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"}
