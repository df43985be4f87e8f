"""The one handler of every scheduled Lambda: the runtime's `scheduled_handler` over this app's catalog.

`jobfence.handler` says how a job is chosen (the function's own `JOB_NAME`, never an event field).
`build(environ, clock)` composes it (the local runtime passes its simulated clock); `handler` is that
with this process's environment and the wall clock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from jobfence.clock import Clock, SystemClock
from jobfence.handler import scheduled_handler, self_invoker
from jobs.catalog import CATALOG

__all__ = ["build", "handler", "self_invoker"]


def build(environ: Mapping[str, str], clock: Clock) -> Callable[[Any, Any], dict[str, Any]]:
    """The handler of the job `environ` names, with its collaborators built once (the cold start)."""
    return scheduled_handler(CATALOG, environ, clock)


handler = build(os.environ, SystemClock())
