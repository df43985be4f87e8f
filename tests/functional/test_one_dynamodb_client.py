"""One DynamoDB client per function, and one per tenant session: pynamodb makes none of its own (issue 33 item 3).

pynamodb gives every bound model a botocore session and client of its own, made on the model's first call:
a function's first tick paid one client (about 25 ms of CPU) per model it touched. A handler's stores are now
bound inside `bound_to(session, dynamodb)`, so every model sends through the function's own client; a tenant's
stores (`bound_with`) share one client that signs with that tenant's credentials, never another tenant's. Each
test counts the DynamoDB clients botocore creates across a cold start and the first tick.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest

from jobfence.binding import bind, bound_to, bound_with, dynamodb_client
from jobfence.credentials import Credentials
from jobfence.config import config_env, table_env
from jobfence.handler import scheduled_handler, worker_handler
from jobfence.testing import rule_arn_of
from jobfence.triggers import scheduled_event
from jobfence.work import BatchRef, ItemStatus
from jobs.catalog import CATALOG
from tests.tenant_batches import two_tenant_batches, wake_up
from jobs.commerce.dpop_proofs import DpopProofStore
from jobs.listings.pipelines import perform_with, worker_pipeline
from providers.items import GENERATOR
from providers.items_fake import FakeItemProvider



@pytest.fixture
def created(monkeypatch) -> list[Any]:
    """Every DynamoDB client botocore creates from now on (boto3's and pynamodb's alike)."""
    made: list[Any] = []
    create = botocore.session.Session.create_client

    def counting(self, service_name, *args, **kwargs):
        client = create(self, service_name, *args, **kwargs)
        if service_name == "dynamodb":
            made.append(client)
        return client

    monkeypatch.setattr(botocore.session.Session, "create_client", counting)
    return made




@pytest.mark.parametrize("job", ["recover_pending_cancellations", "retry_email_intake"])
def test_a_scheduled_cold_start_and_first_tick_make_one_dynamodb_client(aws, tables, clock, lambda_context, created, job):
    # GIVEN a job whose stores bind two tables, besides the lease and run stores
    spec = CATALOG.job(job)
    assert len(spec.tables) >= 2
    env = {"JOB_NAME": job, "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"], "RULE_ARN": rule_arn_of(job)}
    env |= {table_env(name): tables[name] for name in spec.tables} | {config_env(k): v for k, v in spec.config.items()}
    # WHEN its function cold-starts and runs its first tick
    handler = scheduled_handler(CATALOG, env, clock)
    result = handler(scheduled_event(rule_arn_of(job), clock.now_ms() // 1000 * 1000), lambda_context)
    assert result["outcome"] == "ran"
    # THEN botocore made one DynamoDB client in all: the function's own, which every store sent through
    assert len(created) == 1


def test_a_worker_sends_through_its_own_client_and_each_tenant_through_one_of_its_own(
    aws, tables, clock, lambda_context, created
):
    # GIVEN two tenants' items and a worker with tenant sessions
    environ, store = two_tenant_batches(aws, tables, clock)
    created.clear()  # the producer's store above is the test's, not the function's
    # WHEN the worker cold-starts and its first round meets both tenants
    handler = worker_handler(CATALOG, environ, clock, worker_pipeline, session=aws,
                             perform=perform_with(FakeItemProvider(GENERATOR)))
    at_init = len(created)
    response = handler({"Records": [wake_up(t, i) for i in range(2) for t in ("acme", "globex")]}, lambda_context)
    functions = list(created)
    # THEN every item completed, through three DynamoDB clients: the function's (made at init) and one per tenant
    assert response == {"batchItemFailures": []}
    rows = [i for t in ("acme", "globex") for i in store.batches.describe_batch(BatchRef(t, "b1")).items]
    assert {i.status for i in rows} == {ItemStatus.COMPLETED}
    assert at_init == 1
    assert len(functions) == 3
    # AND each tenant's client signs with its own session's credentials, none with the function's
    keys = [c._request_signer._credentials.access_key for c in functions]
    assert len(set(keys)) == 3


def test_models_bound_in_one_tenant_session_share_its_client_and_never_another_tenants(aws, tables, clock):
    function_client = dynamodb_client(aws)
    a = Credentials("AKIAACME", "secret-a", "token-a", expires_ms=2**53)
    b = Credentials("AKIAGLOBEX", "secret-b", "token-b", expires_ms=2**53)
    table = tables["dpop_proofs"]
    with bound_to(aws, function_client):
        own = [DpopProofStore(table, clock), DpopProofStore(table, clock)]
        with bound_with(a):
            acme = [DpopProofStore(table, clock), DpopProofStore(table, clock)]
        with bound_with(b):
            globex = [DpopProofStore(table, clock)]
    # the function's stores send through its client; each tenant's through one client of its own
    assert {id(c) for s in own for c in s.clients()} == {id(function_client)}
    acme_clients = {id(c) for s in acme for c in s.clients()}
    globex_clients = {id(c) for s in globex for c in s.clients()}
    assert len(acme_clients) == len(globex_clients) == 1
    assert acme_clients != globex_clients and not (acme_clients | globex_clients) & {id(function_client)}
    assert acme[0].clients()[0]._request_signer._credentials.access_key == "AKIAACME"
    assert globex[0].clients()[0]._request_signer._credentials.access_key == "AKIAGLOBEX"
    # a model bound outside both gets pynamodb's own client, as before
    outside = bind(DpopProofStore._model_class, table)
    assert outside._get_connection().connection.client is not function_client


def test_a_client_of_another_region_is_refused(aws):
    from jobfence.errors import SettingsError

    other = aws.client("dynamodb", region_name="eu-west-1")
    with pytest.raises(SettingsError, match="eu-west-1"):
        with bound_to(aws, other):
            pass
