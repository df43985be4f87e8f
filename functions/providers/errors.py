"""The one error vocabulary of every provider port, real adapter or fake.

A caller decides from the class alone, never from text:

    ProviderError              a provider call did not succeed (base; `provider`, `status`, `code`)
      ├─ ProviderUnavailable   not done, worth retrying later (connection refused, 409/425)
      │    ├─ ProviderThrottled  429: retry after `retry_after_s`
      │    └─ ProviderAmbiguous  the outcome is unknown (timeout, 5xx, a lost answer):
      │                          retry only with the same idempotency key
      ├─ ProviderRejected      the provider refused this request for good (a 4xx on its input);
      │                        a port may refine it (`providers.payments.AlreadyCaptured`, ...)
      └─ ProviderAuthFailed    our credentials were refused (401/403 after one refresh): configuration,
                               nothing was done; retried once someone fixes the secret

The real adapters map HTTP statuses to these classes in one place
(`providers.http.status_error`) and the fakes (`providers.*_fake`) raise the same
classes. Messages carry the provider's name, statuses and codes only: a
provider's body may echo the request, which may carry a payload.
"""

from __future__ import annotations

from typing import Any

from jobfence.errors import JobfenceError


class ProviderError(JobfenceError):
    """A provider call did not succeed. `provider`: its name; `status`: the HTTP status, if it answered."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None, code: Any = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.code = code


class ProviderUnavailable(ProviderError):
    """Not done (the provider could not be reached, or asked us to come back): retry later."""


class ProviderThrottled(ProviderUnavailable):
    """429: nothing was done; try again after `retry_after_s` seconds."""

    def __init__(self, retry_after_s: float, *, provider: str = "", scope: str = "route") -> None:
        super().__init__(
            f"{provider or 'provider'}: rate limited ({scope}) for {retry_after_s:.3f}s", provider=provider, status=429
        )
        self.retry_after_s = retry_after_s


class ProviderAmbiguous(ProviderUnavailable):
    """The provider may have acted (a timeout, a 5xx, a lost answer): retry with the same idempotency key."""


class ProviderRejected(ProviderError):
    """The provider refused the request for good (a 4xx on its input): retrying cannot help."""


class ProviderAuthFailed(ProviderError):
    """The provider refused our credentials: nothing was done; a configuration problem, not the request's."""
