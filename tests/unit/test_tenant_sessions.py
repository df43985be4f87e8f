"""`jobfence.tenants.TenantScopes`: one AssumeRole per tenant per credential lifetime, by the injected clock.

- per tenant: the first lookup assumes the role tagged with the tenant, later ones reuse it;
- refreshed `REFRESH_MARGIN_S` before the session expires (counted from the clock at the request), never later;
- a store built for a tenant signs with that tenant's credentials (its models' and its transaction connection's);
- AssumeRole's errors are classified like every AWS error: throttling retried, a refusal a `StoreError` (rejected);
- a tenant id that cannot be a session tag is refused without a call;
- against moto's STS: AssumeRole with Tags is accepted, and the scoped store works on moto's DynamoDB (moto does
  not enforce the tenant role's policy: `tests/infra/test_infra_tenants.py` evaluates it).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from jobfence.clock import FrozenClock
from jobfence.credentials import Credentials
from jobfence.errors import ErrorKind, StoreError
from jobfence.quota import QuotaStore
from jobfence.tenants import REFRESH_MARGIN_S, SESSION_DURATION_S, TenantScopes, TenantSessionRefused
from jobfence.work.store import WorkStore

ROLE = "arn:aws:iam::123456789012:role/tenant-role"


class FakeSts:
    """Records AssumeRole calls; answers fresh credentials (or the queued errors first)."""

    def __init__(self, *errors: str) -> None:
        self.calls: list[dict[str, Any]] = []
        self._errors = list(errors)

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self._errors:
            code = self._errors.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": "x"}}, "AssumeRole")
        n = len(self.calls)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{n:04d}",
                "SecretAccessKey": f"secret-{n}",
                "SessionToken": f"token-{n}",
                "Expiration": datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC),  # STS's own: never trusted later
            }
        }

    def tenants(self) -> list[str]:
        return [tag["Value"] for call in self.calls for tag in call["Tags"] if tag["Key"] == "tenant"]


def _scopes(sts: Any, clock: FrozenClock) -> TenantScopes[tuple[str, Credentials]]:
    return TenantScopes(sts, ROLE, clock, lambda tenant, creds: (tenant, creds))


def test_one_assume_role_per_tenant_while_its_credentials_last(clock):
    sts = FakeSts()
    scopes = _scopes(sts, clock)
    a1, b1, a2 = scopes("acme"), scopes("globex"), scopes("acme")
    assert a1 is a2 and a1[0] == "acme" and b1[0] == "globex"
    assert a1[1].access_key_id != b1[1].access_key_id
    assert sts.tenants() == ["acme", "globex"]
    call = sts.calls[0]
    assert call["RoleArn"] == ROLE and call["DurationSeconds"] == SESSION_DURATION_S
    assert call["Tags"] == [{"Key": "tenant", "Value": "acme"}] and call["RoleSessionName"] == "tenant-acme"
    assert scopes.counts().assumed == 2 and scopes.counts().reused == 1 and scopes.counts().tenants == 2


def test_refreshed_the_margin_before_expiry_by_the_injected_clock_not_later(clock):
    sts = FakeSts()
    scopes = _scopes(sts, clock)
    first = scopes("acme")
    assert first[1].expires_ms == clock.now_ms() + SESSION_DURATION_S * 1000  # from our clock, not STS's 2099
    clock.advance(seconds=SESSION_DURATION_S - REFRESH_MARGIN_S - 1)
    assert scopes("acme") is first and len(sts.calls) == 1
    clock.advance(seconds=1)  # exactly the margin before expiry: assume again
    second = scopes("acme")
    assert second is not first and second[1].access_key_id != first[1].access_key_id
    assert len(sts.calls) == 2
    # the new session lasts a whole lifetime from its own request
    clock.advance(seconds=SESSION_DURATION_S - REFRESH_MARGIN_S - 1)
    assert scopes("acme") is second and len(sts.calls) == 2


def test_the_least_recently_used_tenant_is_dropped_past_the_bound(clock):
    sts = FakeSts()
    scopes = TenantScopes(sts, ROLE, clock, lambda t, c: t, max_tenants=2)
    scopes("a")
    scopes("b")
    scopes("a")
    scopes("c")  # drops b, the least recently used
    scopes("a")
    assert sts.tenants() == ["a", "b", "c"]
    scopes("b")
    assert sts.tenants() == ["a", "b", "c", "b"]


@pytest.mark.parametrize("tenant", ["", "a*", "a#b", "a?", "${aws:username}", "a b", "x" * 65])
def test_a_tenant_that_cannot_be_a_session_tag_is_refused_without_a_call(clock, tenant):
    sts = FakeSts()
    with pytest.raises(TenantSessionRefused):
        _scopes(sts, clock)(tenant)
    assert sts.calls == []


def test_assume_role_errors_are_classified_like_every_aws_error(clock):
    sts = FakeSts("Throttling", "ServiceUnavailable")
    scopes = _scopes(sts, clock)
    assert scopes("acme")[0] == "acme" and len(sts.calls) == 3  # two transient errors retried
    refused = FakeSts("AccessDenied")
    with pytest.raises(StoreError) as caught:
        _scopes(refused, clock)("acme")
    assert caught.value.kind is ErrorKind.REJECTED and "AccessDenied" in str(caught.value)
    assert len(refused.calls) == 1  # a refusal is not retried, and nothing was cached
    throttled = FakeSts("Throttling", "Throttling", "Throttling")
    with pytest.raises(StoreError) as caught:
        _scopes(throttled, clock)("acme")
    assert caught.value.kind is ErrorKind.THROTTLED


def signed_as(client: Any) -> tuple[str | None, str | None]:
    """The access key and session token a botocore client signs its requests with."""
    credentials = client._request_signer._credentials
    return (credentials.access_key, credentials.token) if credentials is not None else (None, None)


def test_a_store_built_for_a_tenant_signs_with_its_credentials_and_no_other(clock):
    sts = FakeSts()
    scopes = TenantScopes(
        sts, ROLE, clock, lambda t, c: WorkStore("batches", "items", QuotaStore("quota", clock), clock)
    )
    acme, globex = scopes("acme"), scopes("globex")
    for store, n in ((acme, 1), (globex, 2)):
        # every client of every role (the items, batches and roll-ups models: their transactions share them) and the quota's
        clients = store.clients() + store.quota.clients()
        assert len(clients) == 4
        assert {signed_as(c) for c in clients} == {(f"ASIA{n:04d}", f"token-{n}")}
    # outside a scope, a store signs with the process's own credentials
    outside = WorkStore("batches", "items", QuotaStore("quota", clock), clock)
    assert not {signed_as(c)[0] for c in outside.clients()} & {"ASIA0001", "ASIA0002"}
    assert "secret-1" not in repr(scopes._cache["acme"].credentials)


def test_moto_sts_accepts_assume_role_with_tags_and_the_scoped_store_works(aws, clock, tables):
    scopes = TenantScopes(
        aws.client("sts"),
        ROLE,
        clock,
        lambda t, c: QuotaStore(tables["listing_quota"], clock),
    )
    quota = scopes("acme")
    assert quota._model.Meta.aws_access_key_id.startswith("ASIA")  # moto's session credentials
    assert quota.grant("acme", 5).available == 5
    # moto enforces no LeadingKeys: the same session writes another tenant's quota (the evaluator denies it)
    assert quota.grant("globex", 1).available == 1
