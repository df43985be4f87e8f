"""Tenant-scoped sessions: a function reaches one tenant's rows only with that tenant's own credentials.

The tables whose partition keys start with the tenant (`TableSpec.tenant_scoped`: the listing batches,
items and quota) are not granted to the functions' roles. Each such function may instead assume one
role, tagging the session with `tenant`; that role's policy allows the tables only where every
partition key of a request (`dynamodb:LeadingKeys`) is the tag's value or starts with it and `#`
(docs/security.md, "Tenant isolation"). So a store built under tenant A's session cannot read or write
B's rows or quota, whatever key a bug hands it.

`TenantScopes` keeps, per tenant, the credentials and whatever the caller built over them (a store),
until `margin_s` before they expire by the injected clock, then assumes the role again. The expiry is
counted from the clock at the request (`duration_s` on), never later than STS's own (which starts after
the request), so a simulated clock is honoured and no call needs the wall clock. AssumeRole's errors are
classified like every other AWS error (`jobfence.dynamo.classify`): a transient one is retried
(`retry_transient`, AssumeRole changes nothing), then any error is a `StoreError` of its kind.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobfence.binding import bound_with
from jobfence.clock import Clock
from jobfence.credentials import Credentials
from jobfence.dynamo import raise_store_error, retry_transient
from jobfence.errors import JobfenceError

if TYPE_CHECKING:  # loaded by the method that returns it
    from jobfence.session_counts import SessionCounts

T = TypeVar("T")

TENANT_TAG = "tenant"  # the session tag the tenant role's policy reads (aws:PrincipalTag/tenant)
SESSION_DURATION_S = 3600  # AssumeRole's DurationSeconds: the role's default maximum (1 h)
REFRESH_MARGIN_S = 300  # assume again this long before the credentials expire (longer than any call or item)
MAX_TENANTS = 256  # sessions kept per process, least recently used dropped first
# STS accepts a session tag value of these characters (no '*', '?', '#', '$'): a tenant id is a subset of them
# (`jobfence.work.keys.ID_PATTERN`), so no tag can widen the LeadingKeys pattern it is substituted into
TAG_VALUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


class TenantSessionRefused(JobfenceError):
    """A tenant id that may not become a session tag (never sent to STS)."""


@dataclass
class _Entry(Generic[T]):
    credentials: Credentials
    scope: T


def session_name(tenant: str) -> str:
    """The RoleSessionName (CloudTrail's name of the session): the tenant, cut to STS's characters and length."""
    return ("tenant-" + re.sub(r"[^\w+=,.@-]", "_", tenant))[:64]


def credentials_from(response: Any, requested_ms: int, duration_s: int) -> Credentials:
    """The credentials of an AssumeRole response, expiring `duration_s` after `requested_ms`."""
    raw = response["Credentials"]
    return Credentials(
        access_key_id=raw["AccessKeyId"],
        secret_access_key=raw["SecretAccessKey"],
        session_token=raw["SessionToken"],
        expires_ms=requested_ms + duration_s * 1000,
    )


class TenantScopes(Generic[T]):
    """Per tenant: the role's tagged credentials and `build(tenant, credentials)`, while they are fresh."""

    def __init__(
        self,
        sts: Any,
        role_arn: str,
        clock: Clock,
        build: Callable[[str, Credentials], T],
        *,
        duration_s: int = SESSION_DURATION_S,
        margin_s: int = REFRESH_MARGIN_S,
        max_tenants: int = MAX_TENANTS,
    ) -> None:
        if not 900 <= duration_s <= 43_200 or not 0 <= margin_s < duration_s:
            raise ValueError("a session lasts 900..43200 s (STS) and is refreshed within its lifetime")
        self._sts = sts
        self._role_arn = role_arn
        self._clock = clock
        self._build = build
        self._duration_s = duration_s
        self._margin_ms = margin_s * 1000
        self._max = max_tenants
        self._cache: OrderedDict[str, _Entry[T]] = OrderedDict()
        self._assumed = 0
        self._reused = 0

    def __call__(self, tenant: str) -> T:
        """The tenant's scope: cached while its credentials have more than the margin left, else rebuilt."""
        entry = self._cache.get(tenant)
        if entry is not None and self._clock.now_ms() < entry.credentials.expires_ms - self._margin_ms:
            self._cache.move_to_end(tenant)
            self._reused += 1
            return entry.scope
        credentials = self.assume(tenant)
        with bound_with(credentials):  # every model the builder binds signs with the tenant's session
            scope = self._build(tenant, credentials)
        self._cache[tenant] = _Entry(credentials, scope)
        self._cache.move_to_end(tenant)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return scope

    def assume(self, tenant: str) -> Credentials:
        """One AssumeRole tagged `tenant` (transient errors retried); a `StoreError` of the error's kind."""
        if not re.fullmatch(TAG_VALUE_PATTERN, tenant or ""):
            raise TenantSessionRefused("a tenant id that is not a valid session tag")
        requested = self._clock.now_ms()
        try:
            response = retry_transient(
                lambda: self._sts.assume_role(
                    RoleArn=self._role_arn,
                    RoleSessionName=session_name(tenant),
                    DurationSeconds=self._duration_s,
                    Tags=[{"Key": TENANT_TAG, "Value": tenant}],
                )
            )
        except Exception as exc:
            raise_store_error(exc, f"assuming the tenant session of {tenant!r}")
        self._assumed += 1
        return credentials_from(response, requested, self._duration_s)

    def forget(self, tenant: str) -> None:
        """Drop a tenant's session (the next lookup assumes the role again)."""
        self._cache.pop(tenant, None)

    def counts(self) -> SessionCounts:
        """What it has done since it was built (the benchmark's and the tests' meter, loaded when asked)."""
        from jobfence.session_counts import SessionCounts

        return SessionCounts(self._assumed, self._reused, len(self._cache))
