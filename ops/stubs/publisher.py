"""Loopback stub of the marketplace publisher API (`POST /v1/listings`, idempotent per item).

The real adapter is `providers.publisher.HttpPublisher`; see `ops.stubs.work_api` for the behaviour.
"""

from ops.stubs.work_api import IdempotentApiStub


class PublisherStub(IdempotentApiStub):
    path = "/v1/listings"
    field = "listing"
    prefix = "pub"
