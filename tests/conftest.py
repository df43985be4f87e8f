"""Shared fixtures: the catalog tables, a Lambda context stub, request counting, and a moto
server for wire tests. The test kit's plugin (`jobfence.testing.plugin`) gives `clock`, `aws`
(in-process moto, no socket), `dynamodb`, `lambda_context` and `job_harness`. Plain helpers live in `tests/support.py`."""

from __future__ import annotations

import os
import pathlib

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", os.environ["AWS_DEFAULT_REGION"])
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.pop("AWS_PROFILE", None)
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobfence")
os.environ.setdefault("POWERTOOLS_DEV", "false")

from jobfence_ops import moto_fast
from tests.support import (  # noqa: F401  (load_event re-exported for older imports)
    CatalogTables,
    RequestCounter,
    Rows,
    ServerSession,
    create_catalog_tables,
    load_event,
)

moto_fast.install()  # the emulator's shortcuts in moto's DynamoDB path, in-process moto too (its own test checks them)

pytest_plugins = ["jobfence.testing.plugin"]


@pytest.fixture
def tables(dynamodb) -> CatalogTables:
    """The catalog's tables in moto, created as a test names them: `tables("leases", "runs")` or `tables["leases"]`."""
    return CatalogTables(dynamodb)


@pytest.fixture
def rows(dynamodb, tables) -> Rows:
    """Rows of the catalog tables on the wire (`tests.support.Rows`)."""
    return Rows(dynamodb, tables)


@pytest.fixture
def request_counter() -> RequestCounter:
    return RequestCounter()


@pytest.fixture(scope="session")
def moto_server():
    """A moto server on a free loopback port, for wire behaviour and real concurrency.

    Serialized like DynamoDB itself (see jobfence_ops/emulator.py): a stock threaded moto
    server lets two racing conditional writes both succeed.
    """
    from jobfence_ops.emulator import Emulator

    with Emulator() as emulator:
        yield emulator.endpoint


@pytest.fixture
def server_session(moto_server):
    """A boto3 session whose clients talk to the moto server over HTTP (state reset first)."""
    import requests

    requests.post(f"{moto_server}/moto-api/reset", timeout=10)
    return ServerSession(moto_server)


@pytest.fixture(scope="session")
def dynalite():
    """dynalite (a DynamoDB on LevelDB, from node_modules) on a free loopback port: its endpoint.

    A second DynamoDB implementation for the lease suite: it never returns an
    old image with a refused condition and has no transactions.
    """
    from tests.backends import Dynalite

    with Dynalite() as server:
        yield server.endpoint




# Under pytest-xdist (`make test` runs `-n auto`), directories whose tests share a session-scoped resource
# run on one worker, in file order; every other test goes wherever a worker is free. (xdist's own
# `--dist loadgroup` marks do not reach its scheduler under pytest 9, whose node ids it can no longer suffix.)
_SHARED_DIRS = (
    "tests/sim/",  # one deployed LocalRuntime, its files in order (the simulator's campaigns, which need none, are in tests/simulator)
    "tests/infra/",  # the app synthesized once per session
    "tests/unit/test_packages.py",  # the wheels, built once in the projects' own directories (two builds collide)
)


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs the suite without xdist, which defines the hook
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((d for d in _SHARED_DIRS if nodeid.startswith(d)), nodeid)

    return SharedResourceScheduling(config, log)


# Measured slow: the tests of the fast tier that cost two CPU-seconds or more each (Hypothesis state machines,
# hundreds of items through the work pipeline, seeded club days, single-seed simulator replays), listed by node id
# (a prefix) in tests/measured_slow.txt with how that list was measured, rather than marked in files that other
# work is changing. Every test that starts a moto server (`server`: real concurrency and wire faults over HTTP)
# is slow too.
_MEASURED_SLOW = tuple(
    line.split()[0]
    for line in (pathlib.Path(__file__).parent / "measured_slow.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)


def pytest_collection_modifyitems(config, items):
    """tests/sim first: the longest group, so its worker starts on it while the others take the rest."""
    items.sort(key=lambda item: not item.nodeid.startswith(_SHARED_DIRS[0]))  # stable: every other order kept
    for item in items:
        if item.nodeid.startswith(_MEASURED_SLOW) or item.get_closest_marker("server") is not None:
            item.add_marker(pytest.mark.slow)
