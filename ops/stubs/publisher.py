"""Loopback stub of the marketplace publisher API (`providers.items.PUBLISHER`: `POST /v1/listings`).

The real adapter is `providers.items.HttpItemProvider`; see `ops.stubs.work_api` for the behaviour.
"""

from ops.stubs.work_api import IdempotentApiStub
from providers.items import PUBLISHER


class PublisherStub(IdempotentApiStub):
    endpoint = PUBLISHER
