"""Loopback stub of the listing generator API (`POST /v1/generations`, idempotent per item).

The real adapter is `providers.generator.HttpGenerator`; see `ops.stubs.work_api` for the behaviour.
"""

from ops.stubs.work_api import IdempotentApiStub


class GeneratorStub(IdempotentApiStub):
    path = "/v1/generations"
    field = "input"
    prefix = "gen"
