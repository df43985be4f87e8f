"""Loopback stub of the listing generator API (`providers.items.GENERATOR`: `POST /v1/generations`).

The real adapter is `providers.items.HttpItemProvider`; see `ops.stubs.work_api` for the behaviour.
"""

from ops.stubs.work_api import IdempotentApiStub
from providers.items import GENERATOR


class GeneratorStub(IdempotentApiStub):
    endpoint = GENERATOR
