"""The Secrets port: a secret's value fetched on use, cached by Powertools for at most `max_age_s`.

A function builds one `SecretsManagerValues` at cold start and asks it for a
value each time it needs one (never at import), so a value an operator stores
reaches a warm function within `max_age_s`:

    t0      get(name)            -> fetched (GetSecretValue), cached until t0 + max_age
    t0+1m   operator stores v2   -> warm function still holds v1 (the cache)
    t0+5m   get(name)            -> cache expired: fetched again -> v2
    any     get(name, fresh=True) -> fetched now (after a 401, or an unknown key id)

Powertools' `SecretsProvider` does the caching; its cache key is the secret
name only (not the version stage), so the adapter keeps one long-lived
provider per stage: `AWSCURRENT` and `AWSPREVIOUS` are cached apart.
`MemorySecrets` is the offline fake with the same staging behaviour.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

from jobfence.dynamo import classify, error_code
from jobfence.errors import StoreError

CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"
DEFAULT_MAX_AGE_S = 300
NOT_FOUND = "ResourceNotFoundException"  # also what Secrets Manager answers for a stage no version carries


class SecretMissing(StoreError):
    """The secret (or the asked version stage of it) does not exist."""


class Secrets(Protocol):
    """Secret values by name and version stage."""

    def get(self, name: str, stage: str = CURRENT, *, fresh: bool = False) -> str:
        """The value of `name` at `stage`; `fresh` skips the cache. Raises `SecretMissing`."""
        ...


class SecretsManagerValues:
    """Secrets Manager through Powertools' `SecretsProvider`, one per version stage, cached `max_age_s`."""

    def __init__(self, client: Any, max_age_s: int = DEFAULT_MAX_AGE_S) -> None:
        if max_age_s < 0:
            raise ValueError("max_age_s must not be negative")
        self.max_age_s = max_age_s
        self._providers = {stage: SecretsProvider(boto3_client=client) for stage in (CURRENT, PREVIOUS)}

    def get(self, name: str, stage: str = CURRENT, *, fresh: bool = False) -> str:
        try:
            provider = self._providers[stage]
        except KeyError:
            raise ValueError(f"unknown version stage {stage[:32]!r}") from None
        try:
            value = provider.get(name, max_age=self.max_age_s, force_fetch=fresh, VersionStage=stage)
        except GetParameterError as exc:
            # Powertools wraps the botocore error; its code is the only thing worth keeping (never the value).
            code = error_code(exc.__context__) if exc.__context__ is not None else "Unknown"
            if code == NOT_FOUND:
                raise SecretMissing(f"secret {name[:128]!r} has no {stage} version") from None
            kind = classify(exc.__context__) if exc.__context__ is not None else None
            raise StoreError(f"reading secret {name[:128]!r} ({stage}) failed: {code}", kind) from None
        return value.decode() if isinstance(value, bytes) else str(value)


class MemorySecrets:
    """Offline fake: `put` moves AWSCURRENT to AWSPREVIOUS as Secrets Manager's PutSecretValue does.

    It has no cache: every `get` sees the latest value (cache behaviour is the real adapter's, tested there).
    """

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self._stages: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.reads = 0
        for name, value in (values or {}).items():
            self.put(name, value)

    def put(self, name: str, value: str) -> None:
        with self._lock:
            stages = self._stages.setdefault(name, {})
            if CURRENT in stages:
                stages[PREVIOUS] = stages[CURRENT]
            stages[CURRENT] = value

    def get(self, name: str, stage: str = CURRENT, *, fresh: bool = False) -> str:
        with self._lock:
            self.reads += 1
            try:
                return self._stages[name][stage]
            except KeyError:
                raise SecretMissing(f"secret {name[:128]!r} has no {stage} version") from None
