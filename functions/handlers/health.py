"""Health endpoint of the club scheduler (HTTP API -> this Lambda): its service name and job count, nothing else.

GET / and GET /health only; the HTTP API in front of it throttles to ten
requests a minute. The job count is the number of club scheduler jobs
registered in the catalog, computed once at cold start.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from jobfence.clock import Clock, SystemClock
from jobfence.tracing import handler_tracer, traced
from jobs.catalog import CATALOG
from jobs.club.catalog import SCHEDULER_JOBS, SUBSYSTEM

SERVICE_NAME = "club-scheduler"
JOB_COUNT = sum(1 for job in SCHEDULER_JOBS if CATALOG.jobs.get(job.name) == job)

logger = Logger(service=SUBSYSTEM)
tracer = handler_tracer(SUBSYSTEM, aws=False)  # it calls neither AWS nor a provider
app = APIGatewayHttpResolver()


@app.get("/")
@app.get("/health")
def health() -> dict[str, Any]:
    return {"service": SERVICE_NAME, "jobs": JOB_COUNT}


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], dict[str, Any]]:
    """The same handler for every environment and clock: the health answer reads neither."""

    @logger.inject_lambda_context(log_event=False)
    @traced(tracer)
    def handler(event: Any, context: Any) -> dict[str, Any]:
        return app.resolve(event, context)

    return handler


handler = build(os.environ, SystemClock())
