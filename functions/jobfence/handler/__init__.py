"""The Lambda handlers of a catalog, each built once at cold start by an app's two-line handler module.

    scheduled  scheduled_handler(catalog, environ, clock): a scheduled job's function (`handlers.scheduled.handler`)
    worker     worker_handler(catalog, environ, clock, pipelines, session=...): a queue worker's (`handlers.worker.handler`)

Names load on first use: a scheduled function never loads the worker's SQS batch processing, nor a
worker the scheduled runner (docs/benchmarks.md, cold start).
"""

from jobfence.exports import on_demand, public_names

_MODULES = {
    "jobfence.handler.scheduled": "scheduled_handler self_invoker",
    "jobfence.handler.worker": "worker_handler",
}
__getattr__ = on_demand(__name__, _MODULES)
__all__ = public_names(_MODULES)
