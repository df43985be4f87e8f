"""Powertools Tracer for every handler: the invocation, its AWS calls and its HTTP calls as X-Ray subsegments.

Each handler builds one `Tracer` at cold start (`handler_tracer`) and wraps its
entry point with `traced`. Only what the function calls is patched: `botocore` (every boto3 and pynamodb
call) when it calls AWS, and `httplib` (the stdlib HTTP client under urllib3, the providers' one client:
Discord, PayPal, item providers) only when it has a provider; patching botocore imports it, which the health
function, calling neither, never needs (docs/benchmarks.md, "Cold start"). Nothing of a payload is recorded: the handler's response and
errors are not captured into metadata (`capture_response=False`,
`capture_error=False`) and no annotation is added; an HTTP subsegment carries
the method, URL and status code only.

An exception's *message* may quote whatever it was handed, and the X-Ray SDK
would copy it into the subsegment when it crosses the subsegment's edge. So
`traced` catches it inside, marks the subsegment as a fault with the
exception's class name only, and re-raises the original outside.

Outside Lambda (tests, the embedded runtime, which sets
POWERTOOLS_TRACE_DISABLED) Powertools disables tracing itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Tracer

AWS_MODULES = ("botocore",)
HTTP_MODULES = ("httplib",)


def handler_tracer(service: str, *, aws: bool = True, http: bool = False) -> Tracer:
    """The function's tracer, patching its AWS calls (`aws`, `AWS_MODULES`) and its providers' HTTP calls
    (`http`, `HTTP_MODULES`): only what it makes."""
    modules = (AWS_MODULES if aws else ()) + (HTTP_MODULES if http else ())
    return Tracer(service=service, patch_modules=modules, auto_patch=bool(modules))


class _Raised:
    """A handler's error carried past the subsegment's edge (a plain carrier: no generated methods to compile at
    init, docs/benchmarks.md "Cold start")."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def traced(tracer: Tracer) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a Lambda handler in a subsegment that records neither its response nor its error's text."""

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def inside(event: Any, context: Any) -> Any:
            try:
                return handler(event, context)
            except Exception as exc:  # re-raised unchanged by `outside`, past the subsegment's edge
                if not tracer.disabled:
                    recorder: Any = tracer.provider  # X-Ray's recorder (Powertools' default), typed as BaseProvider
                    subsegment = recorder.current_subsegment()
                    if subsegment is not None:
                        subsegment.add_fault_flag()
                        subsegment.put_metadata("error_type", type(exc).__name__, tracer.service)
                return _Raised(exc)

        recorded = tracer.capture_lambda_handler(capture_response=False, capture_error=False)(inside)

        @functools.wraps(handler)
        def outside(event: Any, context: Any) -> Any:
            result = recorded(event, context)
            if isinstance(result, _Raised):
                raise result.error
            return result

        return outside

    return decorate
