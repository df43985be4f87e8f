"""The scheduled runner on moto for tests: the kit's `JobHarness` per spec, captured logs, counted metrics, run rows.

`Harness(dynamodb, tables, clock)` ticks any `JobSpec` a test makes (`spec(...)`): one `JobHarness`
per spec, all on the same tables, client, clock, lease and run stores and captured logger, each
tick inside its grant (`jobfence.testing.grants`), so a runner test ticks the way a job's test does.
"""

from __future__ import annotations

import io
import json
import logging
import uuid

from aws_lambda_powertools import Logger

from jobfence.lease import LeaseStore
from jobfence.registry import JobSpec
from jobfence.runs import RunStore
from jobfence.testing import JobHarness
from jobs.catalog import CATALOG

HOUR_S = 3600


def spec(name="job_a", **kwargs) -> JobSpec:
    defaults = dict(subsystem="test", entry="unused:unused", schedule="cron(0 * * * ? *)", interval_s=HOUR_S)
    return JobSpec(name=name, **{**defaults, **kwargs})


class Harness:
    """Ticks of test specs on one set of tables, with a captured log stream and counted metrics.

    `invoke_self` is the buffer_one hand-over the runner is given (default: none).
    """

    def __init__(self, dynamodb, tables, clock, invoke_self=None):
        self.dynamodb, self.tables, self.clock = dynamodb, tables, clock
        self.invoke_self = invoke_self
        self.log_stream = io.StringIO()
        # a fresh service name per harness: Powertools reuses the handler of a known logger name
        self.logger = Logger(service=f"test-{uuid.uuid4().hex}", logger_handler=logging.StreamHandler(self.log_stream))
        self.leases = LeaseStore(dynamodb, tables["leases"], clock)
        self.runs = RunStore(dynamodb, tables["runs"])
        self._jobs: list[JobHarness] = []

    def job(self, job_spec: JobSpec) -> JobHarness:
        """The `JobHarness` of `job_spec` (made on first use; an equal spec shares it)."""
        found = next((harness for harness in self._jobs if harness.spec == job_spec), None)
        if found is None:
            found = JobHarness(
                None, CATALOG, job_spec.name, self.clock, self.logger, self.tables, dynamodb=self.dynamodb,
                entry=job_spec, lease_store=self.leases, run_store=self.runs, invoke_self=self.invoke_self,
            )
            self._jobs.append(found)
        return found

    def tick(self, job_spec, job, context=None, *, trigger=None):
        """One tick of `job` under `job_spec` (a scheduled trigger now unless given): its `RunResult`."""
        return self.job(job_spec).run(job, trigger=trigger, context=context)

    def rows(self, job="job_a"):
        return self.runs.recent(job)

    def logs(self):
        return [json.loads(line) for line in self.log_stream.getvalue().splitlines() if line.strip()]

    def metric(self, name):
        """The values of metric `name` the runner emitted, over every spec ticked, in the order the specs came."""
        return [value for harness in self._jobs for value in harness.metrics.values.get(name, [])]


def counting_job(batches, seen):
    def job(ctx):
        for i in range(batches):
            seen.append((i, ctx.lease.expires_at))
            yield {"done": 1}

    return job
