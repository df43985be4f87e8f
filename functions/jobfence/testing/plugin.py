"""The pytest plugin of the test kit: `pytest_plugins = ["jobfence.testing.plugin"]` in a conftest.

Fixtures:
    clock              a `FrozenClock` (advance it; never sleep)
    aws                a boto3 session inside in-process moto (no socket is opened)
    dynamodb           that session's DynamoDB client
    lambda_context     a stub of Lambda's context (a fresh request id), for a handler under test
    jobfence_catalog   the application's `Registry`: the ini option `jobfence_catalog` ("module:NAME",
                       default "jobs.catalog:CATALOG"), or override the fixture in a conftest
    job_harness        `job_harness("my_job")` -> a `JobHarness` of that catalog job on `aws` and `clock`
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from jobfence.clock import FrozenClock
from jobfence.registry import Registry

if TYPE_CHECKING:
    import boto3.session

    from jobfence.testing.harness import JobHarness, LambdaContext

DEFAULT_CATALOG = "jobs.catalog:CATALOG"
DEFAULT_REGION = "us-east-1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "jobfence_catalog", f"the catalog Registry as module:NAME (default {DEFAULT_CATALOG})", default=DEFAULT_CATALOG
    )


def pytest_configure(config: pytest.Config) -> None:
    # moto's fake credentials and a region, before any client exists; a real profile must never be picked up
    os.environ.setdefault("AWS_DEFAULT_REGION", DEFAULT_REGION)
    os.environ.setdefault("AWS_REGION", os.environ["AWS_DEFAULT_REGION"])
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.pop("AWS_PROFILE", None)


def load_catalog(where: str) -> Registry:
    """The `Registry` named "module:NAME"."""
    module, _, name = where.partition(":")
    registry = getattr(importlib.import_module(module), name or "CATALOG", None)
    if not isinstance(registry, Registry):
        raise pytest.UsageError(f"jobfence_catalog {where!r} does not name a jobfence Registry")
    return registry


@pytest.fixture
def clock() -> FrozenClock:
    """A `FrozenClock`: time moves only when the test advances it (`clock.advance(minutes=5)`), never by a sleep."""
    return FrozenClock()


@pytest.fixture
def aws() -> Iterator[boto3.session.Session]:
    """A boto3 session inside in-process moto (no socket is opened), in `AWS_DEFAULT_REGION` (default us-east-1).

    Every AWS resource the test creates lives and dies with it; a real profile is never read.
    """
    from moto import mock_aws

    from jobfence.testing.harness import aws_session

    with mock_aws():
        yield aws_session(os.environ.get("AWS_DEFAULT_REGION", DEFAULT_REGION))


@pytest.fixture
def dynamodb(aws: boto3.session.Session) -> Any:
    """The DynamoDB client of the `aws` session."""
    return aws.client("dynamodb")


@pytest.fixture
def lambda_context() -> LambdaContext:
    """A stub of Lambda's context (`LambdaContext`, a fresh request id) to pass a handler under test."""
    import uuid

    from jobfence.testing.harness import LambdaContext

    return LambdaContext(aws_request_id=uuid.uuid4().hex)


@pytest.fixture
def jobfence_catalog(pytestconfig: pytest.Config) -> Registry:
    """The application's catalog `Registry`: the ini option `jobfence_catalog` ("module:NAME", default
    "jobs.catalog:CATALOG"); a conftest may override the fixture instead."""
    return load_catalog(pytestconfig.getini("jobfence_catalog"))


@pytest.fixture
def job_harness(
    aws: boto3.session.Session, clock: FrozenClock, jobfence_catalog: Registry
) -> Callable[[str], JobHarness]:
    """`job_harness(name)`: the `JobHarness` of the catalog job `name` on `aws` and `clock` (made on first call).

    Its tables (with the leases and runs tables) are created then; every tick runs inside the entry's grant
    and checks the fence (a write to a catalog table outside `ctx.transaction()` fails the test).
    """
    from jobfence.testing.harness import JobHarness

    made: dict[str, JobHarness] = {}

    def harness(name: str) -> JobHarness:
        if name not in made:
            made[name] = JobHarness(aws, jobfence_catalog, name, clock)
        return made[name]

    return harness
