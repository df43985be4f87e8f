"""The errors every provider adapter raises, real or fake.

A real adapter and its offline fake raise the same classes, so job code and
tests handle one vocabulary. Messages carry status codes and the provider's
name only: a provider's body may echo the request, which may carry a payload.
"""

from __future__ import annotations

from jobfence.errors import JobfenceError


class ProviderError(JobfenceError):
    """A provider call failed in a way worth retrying (5xx, throttling, network). Messages carry status codes only."""


class ProviderTimeout(ProviderError):
    """The provider did not answer within the call's timeout."""


class ProviderRejected(JobfenceError):
    """The provider refused the request for good (4xx on the input): retrying cannot help."""
