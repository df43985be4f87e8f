"""The worker with tenant sessions (`TENANT_ROLE_ARN`): a tenant whose session cannot be had does not stop the others.

AssumeRole refused for one tenant (throttled past the retries, or denied): that tenant's wake-ups come back as
batch item failures with the classified error, its rows untouched (still pending); the other tenant's items
complete in the same round; the next round, with STS answering again, completes the first tenant's too.
"""

from __future__ import annotations



from jobfence.errors import ErrorKind
from jobfence.errors import StoreError
from jobfence.handler import worker_handler
from jobfence.tenants import TenantScopes
from jobfence.work import BatchRef, ItemStatus
from jobs.catalog import CATALOG
from tests.tenant_batches import two_tenant_batches, wake_up
from jobs.listings.pipelines import perform_with, worker_pipeline
from providers.items_fake import FakeItemProvider
from providers.items import GENERATOR





def test_a_tenant_whose_session_is_refused_comes_back_alone_and_its_rows_stay_untouched(
    aws, tables, clock, lambda_context, monkeypatch
):
    environ, store = two_tenant_batches(aws, tables, clock)
    real_assume = TenantScopes.assume
    sts_down = {"globex"}

    def assume(self, tenant):
        if tenant in sts_down:
            raise StoreError("assuming the tenant session of 'globex' failed: Throttling", ErrorKind.THROTTLED)
        return real_assume(self, tenant)

    monkeypatch.setattr(TenantScopes, "assume", assume)
    handler = worker_handler(CATALOG, environ, clock, worker_pipeline, session=aws, perform=perform_with(FakeItemProvider(GENERATOR)))
    records = [wake_up(t, i) for i in range(2) for t in ("acme", "globex")]
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
