"""The one handler of both listings queue workers (generation and publish): the runtime's `worker_handler`
over this app's catalog and its listings pipelines.

`jobfence.handler.worker` says how a pipeline is chosen (the function's own queue, never a message).
`build(environ, clock)` composes it (the local runtime passes its simulated clock); `handler` is that
with this process's environment and the wall clock. Its AWS calls go through one session, the function's own
(`boto3.Session()`: Lambda's region and role).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import boto3

from jobfence.clock import Clock, SystemClock
from jobfence.handler import worker_handler
from jobs.catalog import CATALOG
from jobs.listings.pipelines import worker_pipeline

__all__ = ["build", "handler"]


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], Mapping[str, Any]]:
    """The queue worker's handler, composed from `environ` with `clock` (the cold start)."""
    return worker_handler(CATALOG, environ, clock, worker_pipeline, session=boto3.Session())


handler = build(os.environ, SystemClock())
