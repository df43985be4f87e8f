"""A scheduled runner on moto for tests: captured logs, a fresh metric set, the run rows."""

from __future__ import annotations

import io
import json
import logging
import uuid

from aws_lambda_powertools import Logger, Metrics

from jobfence.lease import LeaseStore
from jobfence.registry import JobSpec
from jobfence.runs import RunStore
from jobfence.scheduled import ScheduledRunner
from jobfence.triggers import Trigger

HOUR_S = 3600


def spec(name="job_a", **kwargs) -> JobSpec:
    defaults = dict(subsystem="test", entry="unused:unused", schedule="cron(0 * * * ? *)", interval_s=HOUR_S)
    return JobSpec(name=name, **{**defaults, **kwargs})


class Harness:
    """A runner on moto with a captured log stream and a fresh metric set."""

    def __init__(self, dynamodb, tables, clock):
        self.dynamodb, self.tables, self.clock = dynamodb, tables, clock
        self.log_stream = io.StringIO()
        # a fresh service name per harness: Powertools reuses the handler of a known logger name
        self.logger = Logger(service=f"test-{uuid.uuid4().hex}", logger_handler=logging.StreamHandler(self.log_stream))
        self.metrics = Metrics(namespace="jobfence", service="test")
        self.metrics.clear_metrics()
        self.leases = LeaseStore(dynamodb, tables["leases"], clock)
        self.runs = RunStore(dynamodb, tables["runs"])
        self.runner = ScheduledRunner(self.leases, self.runs, clock, self.logger, self.metrics)

    def tick(self, job_spec, job, context=None):
        return self.runner.run(job_spec, job, Trigger("scheduled", self.clock.now_ms()), context)

    def rows(self, job="job_a"):
        return self.runs.recent(job)

    def logs(self):
        return [json.loads(line) for line in self.log_stream.getvalue().splitlines() if line.strip()]

    def metric(self, name):
        return self.metrics.metric_set.get(name, {}).get("Value", [])


def counting_job(batches, seen):
    def job(ctx):
        for i in range(batches):
            seen.append((i, ctx.lease.expires_at))
            yield {"done": 1}

    return job
