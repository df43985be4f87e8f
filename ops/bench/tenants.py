"""Benchmark: what tenant isolation in IAM costs a warm listings worker (issue 29, item 7).

A worker deployed with `TENANT_ROLE_ARN` reaches a tenant's rows only through that tenant's session
(`jobfence.tenants`): the first round that meets a tenant assumes the tenant role (one STS AssumeRole) and
builds the tenant's store over the credentials (its own botocore client); later rounds reuse both until
300 s before the session's hour is up. A round that wakes items of k tenants claims them per tenant (a
transaction never spans two sessions), which costs nothing more: a claim already reads and writes per batch.

Measured against moto in process, the worker handler as its cold start builds it, one round of 10 wake-ups
spread over k tenants, first with tenants the container has not met (cold) and then again (warm), with and
without the tenant role: DynamoDB requests (counted on the wire, before signing), STS requests and the CPU
time of the round. Then the credentials cache alone over 8 simulated hours: AssumeRole calls per tenant a
warm container keeps seeing. moto answers in microseconds, so the latency a real STS call adds to a
tenant's first round is not measured here: it is one AssumeRole round trip per tenant per 55 minutes.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

COMMAND = "python -m ops.bench ops.bench.tenants"
ROUND = 10  # wake-ups per round (the catalog's batch size)
SPREADS = (1, 2, 5, 10)  # tenants per round
HOURS = 8
TENANT_COUNTS = (1, 10, 100)
FIRST_USE_TENANTS = 30
ROLE = "arn:aws:iam::123456789012:role/jobfence-tenant"


@dataclass(frozen=True)
class RoundCost:
    spread: int
    scoped: bool
    cold_dynamodb: int
    warm_dynamodb: int
    cold_sts: int
    warm_sts: int
    cold_cpu_ms: float
    warm_cpu_ms: float


def _assumed() -> int:
    from moto.sts.models import sts_backends

    return sum(len(b.assumed_roles) for by_region in sts_backends.values() for b in by_region.values())


def round_cost(spread: int, scoped: bool) -> RoundCost:
    import boto3
    import pynamodb.connection.base
    from aws_lambda_powertools import Logger
    from moto import mock_aws

    import jobfence.binding
    from jobfence.clock import FrozenClock
    from jobfence.config import ENV_TENANT_ROLE, Settings, queue_env, table_env
    from jobfence.handler import worker_handler
    from jobfence.testing.tables import CatalogTables
    from jobfence.work import BatchRef, ItemInput, Producer
    from jobs.catalog import CATALOG
    from jobs.listings.pipelines import perform_with, worker_pipeline
    from jobs.listings.stores import build_store
    from providers.items import GENERATOR
    from providers.items_fake import FakeItemProvider

    requests = {"n": 0}
    real, real_new = pynamodb.connection.base.get_session, jobfence.binding.new_session

    def counting_session(env_vars: Any = None) -> Any:
        session = real_new(env_vars)
        session.register("before-sign.dynamodb", lambda **_: requests.__setitem__("n", requests["n"] + 1))
        return session

    # every botocore session the worker's DynamoDB clients come from: the function's own (`aws`), the tenants'
    # (`jobfence.binding`) and any model's own (pynamodb's)
    pynamodb.connection.base.get_session = jobfence.binding.new_session = counting_session
    try:
        with mock_aws():
            clock = FrozenClock()
            aws = boto3.Session(region_name="us-east-1", botocore_session=counting_session())
            tables = CatalogTables(aws.client("dynamodb"), CATALOG)
            names = ("listing_batches", "listing_items", "listing_quota")
            url = aws.client("sqs").create_queue(QueueName="gen")["QueueUrl"]
            env = {table_env(n): tables[n] for n in names}
            env.update(
                {
                    queue_env("listing_generation"): url,
                    "WORKER_QUEUE": "listing_generation",
                    "PROVIDER_GENERATOR_URL": "http://127.0.0.1:9",
                }
            )
            if scoped:
                env[ENV_TENANT_ROLE] = ROLE
            store = build_store(Settings.from_environ(env), clock)
            tenants = [f"t{i:02d}" for i in range(spread)]
            per = ROUND // spread
            for tenant in tenants:
                store.quota.grant(tenant, 100)
                Producer(store, {"generation": _Null()}, Logger(service="bench", level="ERROR")).submit(
                    BatchRef(tenant, "b"), "generation", [ItemInput(f"i{j}", {}) for j in range(2 * per)], "bench"
                )
            handler = worker_handler(
                CATALOG, env, clock, worker_pipeline, session=aws, perform=perform_with(FakeItemProvider(GENERATOR))
            )
            costs = []
            for rnd in range(2):
                records = [_record(tenant, rnd * per + j) for j in range(per) for tenant in tenants]
                requests["n"], sts_before, cpu = 0, _assumed(), time.process_time()
                response = handler({"Records": records}, _Context())
                cpu = time.process_time() - cpu
                if response["batchItemFailures"]:
                    raise AssertionError(f"the bench round failed: {response}")
                costs.append((requests["n"], _assumed() - sts_before, cpu * 1000))
                clock.advance(seconds=1)
    finally:
        pynamodb.connection.base.get_session, jobfence.binding.new_session = real, real_new
    (cold_db, cold_sts, cold_cpu), (warm_db, warm_sts, warm_cpu) = costs
    return RoundCost(spread, scoped, cold_db, warm_db, cold_sts, warm_sts, cold_cpu, warm_cpu)


@dataclass(frozen=True)
class FirstUse:
    assume_ms: float  # median CPU ms of one AssumeRole (moto's handling in this process included)
    cold_ms: float  # median CPU ms of a tenant's first quota read: session, store, clients, the read
    warm_ms: float  # median CPU ms of the same read through the cached store
    clients: int  # botocore clients of one tenant's work store (all its models and the gate share one)


def first_use(tenants: int = FIRST_USE_TENANTS) -> FirstUse:
    """CPU of a tenant's first read through a fresh session and store, against the same read once cached."""
    import boto3
    from moto import mock_aws

    from jobfence.clock import FrozenClock
    from jobfence.config import Settings, table_env
    from jobfence.tenants import TenantScopes
    from jobfence.testing.tables import CatalogTables
    from jobs.catalog import CATALOG
    from jobs.listings.stores import build_store

    with mock_aws():
        clock = FrozenClock()
        aws = boto3.Session(region_name="us-east-1")
        tables = CatalogTables(aws.client("dynamodb"), CATALOG)
        names = ("listing_batches", "listing_items", "listing_quota")
        settings = Settings.from_environ({table_env(n): tables[n] for n in names})
        sts = aws.client("sts")
        scopes = TenantScopes(sts, ROLE, clock, lambda t, c: build_store(settings, clock))
        scopes("warm-up")  # the first of all builds pynamodb's and botocore's caches: not a tenant's cost
        assume, cold, warm = [], [], []
        clients = 0
        for i in range(tenants):
            tenant = f"t{i:03d}"
            start = time.process_time()
            scopes.assume(tenant)
            assume.append(time.process_time() - start)
            start = time.process_time()
            store = scopes(tenant)
            clients = len({id(c) for c in store.clients() + store.quota.clients()})  # its models share one
            store.quota.balance(tenant)
            cold.append(time.process_time() - start)
            start = time.process_time()
            scopes(tenant).quota.balance(tenant)
            warm.append(time.process_time() - start)
    med = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return FirstUse(med(assume), med(cold), med(warm), clients)


def assume_calls(tenants: int, hours: int = HOURS) -> tuple[int, int]:
    """AssumeRole calls of a warm container meeting `tenants` tenants every minute for `hours`: (calls, minutes)."""
    import boto3
    from moto import mock_aws

    from jobfence.clock import FrozenClock
    from jobfence.tenants import TenantScopes

    with mock_aws():
        clock = FrozenClock()
        scopes = TenantScopes(boto3.client("sts", region_name="us-east-1"), ROLE, clock, lambda t, c: t)
        minutes = hours * 60
        for _ in range(minutes):
            for i in range(tenants):
                scopes(f"t{i:03d}")
            clock.advance(minutes=1)
        return scopes.counts().assumed, minutes


def run() -> str:
    from jobfence.tenants import REFRESH_MARGIN_S, SESSION_DURATION_S

    rows = [round_cost(k, scoped) for k in SPREADS for scoped in (False, True)]
    lifetime_min = (SESSION_DURATION_S - REFRESH_MARGIN_S) / 60
    lines = [
        "## Tenant isolation in IAM: per-tenant sessions",
        "",
        f"Command: `{COMMAND}`",
        "",
        __doc__.split("\n\n", 1)[1].strip(),
        "",
        f"One round of {ROUND} wake-ups of the generation worker (DynamoDB requests and STS AssumeRole calls on "
        "the wire; CPU ms of the round in this process, moto included, so only the difference means anything):",
        "",
        "| tenants in the round | tenant sessions | DynamoDB cold | DynamoDB warm | AssumeRole cold | AssumeRole warm "
        "| CPU ms cold | CPU ms warm |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.spread} | {'yes' if r.scoped else 'no'} | {r.cold_dynamodb} | {r.warm_dynamodb} | {r.cold_sts} "
            f"| {r.warm_sts} | {r.cold_cpu_ms:.0f} | {r.warm_cpu_ms:.0f} |"
        )
    same = all(
        u.cold_dynamodb == s.cold_dynamodb and u.warm_dynamodb == s.warm_dynamodb
        for u, s in zip(rows[::2], rows[1::2], strict=True)
    )
    cost = first_use()
    lines += [
        "",
        "DynamoDB requests are "
        + (
            "the same with and without sessions: the claim already reads and writes "
            "per batch, and a batch is one tenant's"
            if same
            else "NOT the same with and without sessions (see the table)"
        )
        + f"; the cost is one AssumeRole per tenant the container has not met, and the CPU of its "
        "first round. Measured alone, over "
        f"{FIRST_USE_TENANTS} tenants (median CPU ms in this process): a tenant's session, its work store with "
        f"{cost.clients} botocore client (made with the tenant's credentials at the store's first bind, which its "
        f"models, its transaction connection and the worker's gate share: `jobfence.binding`) and a first quota read cost {cost.cold_ms:.1f} ms, of which the AssumeRole call (moto's "
        f"handling included) {cost.assume_ms:.1f} ms; the same read through the cached store {cost.warm_ms:.1f} ms. The round's CPU columns above are one run each on a "
        "shared machine: they show the same order (more for the cold rounds with more tenants), not a figure. "
        "In AWS a tenant's first round also waits one STS round trip, not measured here (no account).",
        "",
        f"AssumeRole calls of one warm container over {HOURS} simulated hours, every tenant active every minute "
        f"(sessions of {SESSION_DURATION_S // 60} min, renewed {REFRESH_MARGIN_S // 60} min before they expire, "
        f"so one call per tenant per {lifetime_min:.0f} min):",
        "",
        "| tenants | AssumeRole calls | per tenant per hour |",
        "|---:|---:|---:|",
    ]
    for tenants in TENANT_COUNTS:
        calls, minutes = assume_calls(tenants)
        lines.append(f"| {tenants} | {calls:,} | {calls / tenants / (minutes / 60):.2f} |")
    lines += [
        "",
        "So a fleet of W warm containers each meeting T tenants makes about W x T x 60/"
        f"{lifetime_min:.0f} AssumeRole calls an hour (3 workers per queue x 2 queues x 100 tenants: about "
        f"{round(6 * 100 * 60 / lifetime_min):,} an hour, and the reclaimer's container as many as the tenants "
        "with stale rows). STS charges nothing for AssumeRole; what it costs is the first round's extra "
        "round trip per tenant, the per-tenant clients' memory (at most 256 tenants cached per container, least "
        "recently used dropped), and STS's request quota, which the account shares with every other caller.",
    ]
    return "\n".join(lines)


def _record(tenant: str, item: int) -> dict[str, Any]:
    body = json.dumps({"tenant": tenant, "batch": "b", "item": f"i{item}", "shard": 0})
    return {
        "messageId": f"{tenant}-{item}",
        "receiptHandle": "r",
        "body": body,
        "attributes": {},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:jobfence-listing_generation",
        "awsRegion": "us-east-1",
    }


class _Null:
    def send(self, keys: Any, delay_s: int = 0) -> list[Any]:
        return []


class _Context:
    function_name = "jobfence-listing_generation-worker"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:jobfence-listing_generation-worker"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000
