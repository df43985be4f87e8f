"""The listings functions' real requests, judged by the deployed tenant policies (issue 29, item 7).

moto's STS accepts AssumeRole with Tags (it keeps no tags) and its DynamoDB accepts any credentials, so the
worker and the reclaimer run here as deployed (`TENANT_ROLE_ARN` set); every DynamoDB request they sign is
recorded on the wire (its access key, operation, table and partition keys, one entry per item of a
transaction) and decided by the offline evaluator over the synthesized template, as the session that signed
it: the tenant role tagged with the tenant whose session the key belongs to, or the function's own role.

- a worker round with two tenants' items: every request allowed, each tenant's rows only under its session;
- the reclaimer's sweep of two tenants' stale items: the same, its own role reading only the indexes;
- a bug that hands tenant A's store B's key: moto applies it, the deployed policy denies it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pynamodb.connection.base
import pytest
from aws_lambda_powertools import Logger

import jobfence.binding
from jobfence.config import ENV_TENANT_ROLE, ScheduledSettings, queue_env, table_env
from jobfence.handler import worker_handler
from jobfence.scheduled import JobDeps, load_job
from jobfence.tenants import TenantScopes
from jobfence.work import BatchRef, ItemInput, ItemStatus, Producer
from jobs.catalog import CATALOG
from jobs.listings.catalog import BATCHES_TABLE, ITEMS_TABLE, QUOTA_TABLE
from jobs.listings.pipelines import perform_with, worker_pipeline
from jobs.listings.stores import build_store
from ops.iam_policy import Decision, Template
from providers.items_fake import FakeItemProvider
from providers.items import GENERATOR
from tests.infra.cfn import env, of_type, ref_id

LISTING_TABLES = (BATCHES_TABLE, ITEMS_TABLE, QUOTA_TABLE)
TENANTS = ("acme", "globex")
MOTO_ROLE = "arn:aws:iam::123456789012:role/jobfence-tenant"  # moto's STS does not look the role up
# a transaction item, or a request, as the IAM action it is authorized as
ITEM_ACTIONS = {"Update": "UpdateItem", "Put": "PutItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}


class Wire:
    """Every DynamoDB request signed in the test, as (access key, action, physical table, index, leading keys)."""

    def __init__(self, partition_keys: dict[str, str]) -> None:
        self.partition_keys = partition_keys  # physical table -> its partition key attribute
        self.requests: list[tuple[str, str, str, str | None, tuple[str, ...] | None]] = []
        self.on = False

    def session(self, env_vars: Any = None) -> Any:
        session = _new_session(env_vars)
        session.register("before-sign.dynamodb", self._record)
        return session

    def _record(self, request: Any, request_signer: Any, operation_name: str, **_: Any) -> None:
        if not self.on:
            return
        key = request_signer._credentials.get_frozen_credentials().access_key
        body = json.loads(request.data or b"{}")
        for action, table, index, keys in self._calls(operation_name, body):
            if table in self.partition_keys:
                self.requests.append((key, f"dynamodb:{action}", table, index, keys))

    def _calls(self, operation: str, body: dict) -> list[tuple[str, str, str | None, tuple[str, ...] | None]]:
        if operation == "TransactWriteItems":
            out = []
            for entry in body["TransactItems"]:
                ((kind, item),) = entry.items()
                out += self._calls(ITEM_ACTIONS[kind], item)
            return out
        if operation == "BatchGetItem":
            return [(operation, t, None, tuple(self._pk(t, k) for k in r["Keys"])) for t, r in body["RequestItems"].items()]
        table = body["TableName"]
        if operation == "Query":
            if body.get("IndexName"):
                return [(operation, table, body["IndexName"], None)]
            return [(operation, table, None, (self._queried(table, body),))]
        if operation == "Scan":
            return [(operation, table, body.get("IndexName"), None)]
        return [(operation, table, None, (self._pk(table, body.get("Key") or body["Item"]),))]

    def _pk(self, table: str, key: dict) -> str:
        return key[self.partition_keys[table]]["S"]

    def _queried(self, table: str, body: dict) -> str:
        names, values = body.get("ExpressionAttributeNames", {}), body["ExpressionAttributeValues"]
        for name, value in re.findall(r"(#\w+)\s*=\s*(:\w+)", body["KeyConditionExpression"]):
            if names.get(name) == self.partition_keys[table]:
                return values[value]["S"]
        raise AssertionError(f"no partition key in {body['KeyConditionExpression']}")


def _moto_sessions() -> dict[str, str]:
    """moto's session credentials: access key -> session name (moto keeps no tags)."""
    from moto.sts.models import sts_backends

    out = {}
    for by_region in sts_backends.values():
        for backend in by_region.values():
            out.update({r.access_key_id: r.session_name for r in backend.assumed_roles})
    return out


_new_session = jobfence.binding.new_session


@pytest.fixture
def wire(monkeypatch, aws, tables):
    """Records every DynamoDB client's requests: the function's own (made from `aws`), a tenant's (`bound_with`
    makes its session with `jobfence.binding.new_session`) and any model's own (pynamodb's session)."""
    physical = {tables[t]: CATALOG.tables[t].partition_key[0] for t in LISTING_TABLES}
    recorder = Wire(physical)
    monkeypatch.setattr(pynamodb.connection.base, "get_session", recorder.session)
    monkeypatch.setattr(jobfence.binding, "new_session", recorder.session)
    aws._session.register("before-sign.dynamodb", recorder._record)
    yield recorder
    aws._session.unregister("before-sign.dynamodb", recorder._record)


@pytest.fixture
def listing_env(aws, tables):
    sqs = aws.client("sqs")
    urls = {n: sqs.create_queue(QueueName=f"{n}-t")["QueueUrl"] for n in ("listing_generation", "listing_publish")}
    base = {table_env(n): tables[n] for n in LISTING_TABLES}
    return base, urls


def _judge(synthesized, tables, wire: Wire, function_name: str) -> dict[str, int]:
    """Each recorded request decided as the session that signed it; the requests per tenant (or 'own')."""
    policy = Template(synthesized.template.to_json())
    (fn,) = [f for f in of_type(synthesized.resources, "AWS::Lambda::Function").values()
             if f["Properties"]["FunctionName"] == function_name]
    own, tenant_role = ref_id(fn["Properties"]["Role"]), ref_id(env(fn)[ENV_TENANT_ROLE])
    arns = {}
    for logical, table in of_type(synthesized.resources, "AWS::DynamoDB::Table").items():
        name = table["Properties"]["TableName"].removeprefix("jobfence-")
        if name in LISTING_TABLES:
            arns[tables[name]] = policy.arn(logical)
    sessions = _moto_sessions()
    per: dict[str, int] = {}
    for key, action, table, index, keys in wire.requests:
        tenant = sessions[key].removeprefix("tenant-") if key in sessions else None
        caller = policy.session(tenant_role, tenant=tenant) if tenant else policy.role(own)
        resource = f"{arns[table]}/index/{index}" if index else arns[table]
        context = {"dynamodb:LeadingKeys": keys} if keys else None
        assert policy.decide(caller, action, resource, context) is Decision.ALLOW, (tenant, action, table, keys)
        if tenant:
            assert all(k == tenant or k.startswith(tenant + "#") for k in keys or ()), (tenant, keys)
        per[tenant or "own"] = per.get(tenant or "own", 0) + 1
    return per


def _submit(store, tenant: str, batch: str, n: int) -> None:
    store.quota.grant(tenant, 100)
    Producer(store, {"generation": _Null()}, Logger(service="t")).submit(
        BatchRef(tenant, batch), "generation", [ItemInput(f"i{i}", {}) for i in range(n)], "tester"
    )


def test_a_worker_round_of_two_tenants_sends_each_tenants_rows_under_its_own_session_only(
    synthesized, aws, tables, clock, wire, listing_env, lambda_context
):
    base, urls = listing_env
    environ = {**base, queue_env("listing_generation"): urls["listing_generation"], "WORKER_QUEUE": "listing_generation",
               "PROVIDER_GENERATOR_URL": "http://127.0.0.1:9", ENV_TENANT_ROLE: MOTO_ROLE}
    handler = worker_handler(CATALOG, environ, clock, worker_pipeline, session=aws, perform=perform_with(FakeItemProvider(GENERATOR)))
    store = build_store(_settings(base), clock)
    for tenant in TENANTS:
        _submit(store, tenant, "b1", 3)
    records = [_record(f"{t}-{i}", {"tenant": t, "batch": "b1", "item": f"i{i}", "shard": 0})
               for i in range(3) for t in TENANTS]
    # WHEN one round handles both tenants' wake-ups, interleaved
    wire.on = True
    assert handler({"Records": records}, lambda_context) == {"batchItemFailures": []}
    wire.on = False
    for tenant in TENANTS:
        assert {i.status for i in store.batches.describe_batch(BatchRef(tenant, "b1")).items} == {ItemStatus.COMPLETED}
    # THEN every request was allowed by the deployed policy as the session that sent it, the function's own role
    # sent none, and each tenant's went under its own session
    per = _judge(synthesized, tables, wire, "jobfence-listing_generation-worker")
    assert set(per) == set(TENANTS) and min(per.values()) >= 4  # gate, claim, outcomes, roll-up, release


def test_the_reclaimers_sweep_reads_the_indexes_as_itself_and_each_tenants_rows_under_its_session(
    synthesized, aws, dynamodb, tables, clock, wire, listing_env
):
    base, urls = listing_env
    spec = CATALOG.job("reclaim_listings")
    environ = {**base, **{queue_env(n): u for n, u in urls.items()}, "JOB_NAME": spec.name,
               "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"], ENV_TENANT_ROLE: MOTO_ROLE}
    settings = ScheduledSettings.from_environ(environ)
    store = build_store(settings, clock)
    for tenant in TENANTS:
        _submit(store, tenant, "b1", 4)  # wake-ups lost (`_Null`): every item stays pending
    job = load_job(spec)(JobDeps(settings, spec, clock, aws, dynamodb, Logger(service="listings")))
    clock.advance(minutes=17)
    wire.on = True
    summary: dict[str, int] = {}
    for page in job(None):
        for name, n in page.items():
            summary[name] = summary.get(name, 0) + n
    wire.on = False
    assert summary["stale_pending"] == 8 and summary["requeued"] == 8 and summary.get("errors", 0) == 0
    per = _judge(synthesized, tables, wire, "jobfence-reclaim_listings")
    assert set(per) == {"own", *TENANTS}  # the indexes as itself, the rows under each tenant's session


def test_the_reclaimer_fails_items_stale_at_the_cap_rolls_up_and_finalizes_each_tenants_batch_under_its_session(
    synthesized, aws, dynamodb, tables, clock, wire, listing_env
):
    from jobs.listings.catalog import PIPELINES

    base, urls = listing_env
    spec = CATALOG.job("reclaim_listings")
    environ = {**base, **{queue_env(n): u for n, u in urls.items()}, "JOB_NAME": spec.name,
               "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"], ENV_TENANT_ROLE: MOTO_ROLE}
    settings = ScheduledSettings.from_environ(environ)
    store = build_store(settings, clock)
    cap = PIPELINES["generation"].timing.attempts_cap
    for tenant in TENANTS:
        _submit(store, tenant, "b1", 2)
        keys = [r.key for r in store.batches.describe_batch(BatchRef(tenant, "b1")).items]
        for attempt in range(1, cap + 1):  # every attempt claimed; the last one's worker died
            claims = store.items.claim(keys, "generation", cap)
            assert {c.attempts for c in claims.values()} == {attempt}
            if attempt < cap:
                for claim in claims.values():
                    assert store.items.release(claim, "provider error")
    job = load_job(spec)(JobDeps(settings, spec, clock, aws, dynamodb, Logger(service="listings")))
    clock.advance(minutes=20)
    wire.on = True
    summary: dict[str, int] = {}
    for page in job(None):
        for name, n in page.items():
            summary[name] = summary.get(name, 0) + n
    wire.on = False
    # THEN each stale running item at the cap is failed, its batch rolled up and finalized, under its tenant's session
    assert summary["stale_running"] == 4 and summary["failed"] == 4 and summary.get("errors", 0) == 0, summary
    for tenant in TENANTS:
        assert {i.status for i in store.batches.describe_batch(BatchRef(tenant, "b1")).items} == {ItemStatus.FAILED}
        assert store.batches.batch(BatchRef(tenant, "b1")).status.final
    per = _judge(synthesized, tables, wire, "jobfence-reclaim_listings")
    assert set(per) == {"own", *TENANTS}


def test_a_bug_that_hands_tenant_as_store_bs_key_is_applied_by_moto_and_denied_by_the_deployed_policy(
    synthesized, aws, tables, clock, wire, listing_env
):
    base, _ = listing_env
    scopes = TenantScopes(aws.client("sts"), MOTO_ROLE, clock, lambda t, c: build_store(_settings(base), clock))
    build_store(_settings(base), clock).quota.grant("globex", 5)
    acme = scopes("acme")
    wire.on = True
    assert acme.quota.balance("globex").available == 5  # moto: read with acme's credentials
    wire.on = False
    policy = Template(synthesized.template.to_json())
    (fn,) = [f for f in of_type(synthesized.resources, "AWS::Lambda::Function").values()
             if f["Properties"]["FunctionName"] == "jobfence-listing_generation-worker"]
    session = policy.session(ref_id(env(fn)[ENV_TENANT_ROLE]), tenant="acme")
    (quota_logical,) = [k for k, t in of_type(synthesized.resources, "AWS::DynamoDB::Table").items()
                        if t["Properties"]["TableName"] == "jobfence-listing_quota"]
    ((_, action, _, _, keys),) = wire.requests
    assert keys == ("globex",)
    context = {"dynamodb:LeadingKeys": keys}
    assert policy.decide(session, action, policy.arn(quota_logical), context) is not Decision.ALLOW


def _settings(base: dict[str, str]) -> Any:
    from jobfence.config import Settings

    return Settings.from_environ(base)


def _record(message_id: str, body: dict) -> dict:
    return {"messageId": message_id, "receiptHandle": f"r-{message_id}", "body": json.dumps(body), "attributes": {},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:jobfence-listing_generation", "awsRegion": "us-east-1"}


class _Null:
    def send(self, keys, delay_s=0):
        return []
