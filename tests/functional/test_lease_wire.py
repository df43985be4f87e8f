"""Lost replies on a real socket: the runner against moto's server behind a proxy that drops them.

The proxy forwards the request (moto applies it) and closes the connection
without the reply. With botocore's own retries on, botocore re-sends the same
request; with them off, the error reaches the store, which re-sends it. Either
way the second copy is refused and the refusal must be read right: the
ambiguous acquire is our term, the lost release was ours, the lost run-row
put is our row.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config

from jobfence.clock import FrozenClock
from jobfence.scheduled import Outcome
from tests.dropping_proxy import DroppingProxy, acquire_of, release_of, run_row_put
from tests.runner_support import Harness, counting_job, spec
from tests.support import create_catalog_tables

pytestmark = pytest.mark.server

RETRIES = {
    "botocore_resends": Config(retries={"mode": "standard", "total_max_attempts": 3}),
    "surfaced_to_the_store": Config(retries={"mode": "standard", "total_max_attempts": 1}),
}


@pytest.fixture(scope="module")
def proxy(moto_server):
    proxy = DroppingProxy(moto_server).start()
    yield proxy
    proxy.stop()


@pytest.fixture(params=sorted(RETRIES))
def wire(request, server_session, proxy):
    """A runner whose client talks to moto through the proxy; tables created directly."""
    tables = create_catalog_tables(server_session.client("dynamodb"), names={"leases", "runs"})
    client = boto3.Session().client("dynamodb", endpoint_url=proxy.endpoint, config=RETRIES[request.param])
    proxy.dropped.clear()
    return Harness(client, tables, FrozenClock())


def failing(ctx):
    yield {"done": 1}
    raise RuntimeError("the job's own error")


def test_an_acquire_whose_reply_is_lost_runs_the_job(wire, proxy):
    # GIVEN the acquire's reply is lost after moto applied it
    proxy.lose_reply(acquire_of)
    # WHEN the tick runs THEN the re-sent acquire's refusal shows our own term: the job runs and is recorded
    result = wire.tick(spec(), counting_job(2, []))
    assert proxy.dropped == ["UpdateItem"]
    assert result.outcome is Outcome.RAN
    row, = wire.rows()
    assert (row["outcome"], row["fence"]) == ("ran", 1)
    assert wire.leases.peek("job_a").holder is None


def test_a_release_whose_reply_is_lost_still_frees_the_lease_and_the_job_error_is_raised(wire, proxy):
    proxy.lose_reply(release_of)
    with pytest.raises(RuntimeError, match="the job's own error"):
        wire.tick(spec(), failing)
    assert proxy.dropped == ["UpdateItem"]
    row, = wire.rows()
    assert row["outcome"] == "failed"
    assert wire.leases.peek("job_a").holder is None
    # the next job is not blocked by a lease nobody holds
    assert wire.tick(spec("job_b"), counting_job(1, [])).outcome is Outcome.RAN


def test_a_run_row_put_whose_reply_is_lost_keeps_one_row(wire, proxy):
    proxy.lose_reply(run_row_put)
    assert wire.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert proxy.dropped == ["PutItem"]
    assert [r["outcome"] for r in wire.rows()] == ["ran"]
