"""Shared fixtures: the catalog tables, a Lambda context stub, request counting, and a moto
server for wire tests. The test kit's plugin (`jobfence.testing.plugin`) gives `clock`, `aws`
(in-process moto, no socket), `dynamodb`, `lambda_context` and `job_harness`. Plain helpers live in `tests/support.py`."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", os.environ["AWS_DEFAULT_REGION"])
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.pop("AWS_PROFILE", None)
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobfence")
os.environ.setdefault("POWERTOOLS_DEV", "false")

from tests.support import (  # noqa: E402,F401  (load_event re-exported for older imports)
    CatalogTables,
    RequestCounter,
    Rows,
    ServerSession,
    create_catalog_tables,
    load_event,
)

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

    Serialized like DynamoDB itself (see ops/emulator.py): a stock threaded moto
    server lets two racing conditional writes both succeed.
    """
    from ops.emulator import Emulator

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
)


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs the suite without xdist, which defines the hook
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((d for d in _SHARED_DIRS if nodeid.startswith(d)), nodeid)

    return SharedResourceScheduling(config, log)


# Measured slow (`--durations` of `make test-fast`: ten seconds and more each on a loaded two-core machine;
# Hypothesis state machines, hundreds of items through the work pipeline, thousands of rows), listed here
# rather than marked in files that other work is changing.
_MEASURED_SLOW = (
    "tests/functional/test_work_stateful.py::TestDurableBatches",
    "tests/unit/test_lease_stateful.py::TestLeaseMachine",
    "tests/functional/test_work.py::test_random_failures_over_hundreds_of_items_keep_the_books",
    "tests/functional/test_work.py::test_the_enqueue_checkpoint_is_written_per_hundred_wake_ups",
    "tests/functional/test_work.py::test_an_item_that_always_fails_stops_at_exactly_five_attempts",
    "tests/functional/test_work_rollup.py::test_a_fleet_spreads_its_roll_ups_over_the_shards_and_finalizes_once",
    "tests/functional/test_work_fairness.py::test_with_the_cap_a_quiet_tenant_does_not_wait_for_a_noisy_backlog",
    "tests/unit/test_retention_jobs.py::test_dpop_cleanup_deletes_expired_rows_in_batches_of_1000",
    "tests/unit/test_retention_jobs.py::test_dpop_cleanup_cost_does_not_grow_with_live_rows",
    "tests/unit/test_takeover.py::test_a_dead_holder_costs_a_five_minute_job_six_ticks",
)


def pytest_collection_modifyitems(config, items):
    """tests/sim first: the longest group, so its worker starts on it while the others take the rest."""
    items.sort(key=lambda item: not item.nodeid.startswith(_SHARED_DIRS[0]))  # stable: every other order kept
    for item in items:
        if item.nodeid.startswith(_MEASURED_SLOW):
            item.add_marker(pytest.mark.slow)
