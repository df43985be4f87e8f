"""The main of one function's worker process: a warm Lambda isolate.

Started by `workers.Isolate` with the function's environment and code folder.
It does what the Lambda runtime does: load the handler module once (the cold
start), then take invocations one at a time and answer with the result or the
error. It makes two local substitutions, both outside the function's code:

- time is the simulated clock: the handler module's `build(environ, clock)`
  composes the handler with a `jobfence.clock.FrozenClock` (from the
  function's own code), set to the driver's instant with every invocation, so
  leases and ticks agree with the driver (the module's own `handler`, built
  on the wall clock at import, is never called here);
- a fault plan sent with an invocation can kill this process (SIGKILL, an
  isolate death) or raise a service error right after a matching AWS call,
  to put a crash exactly "mid-item"; each answer names the faults that went
  off, so the driver keeps the others armed.

Its stdout/stderr (the function's logs) go to a file, never to the driver's terminal.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import signal
import sys
import traceback
import uuid
from typing import Any

MAX_ERROR_MESSAGE = 500


class LambdaContext:
    """The parts of the Lambda context object handlers and Powertools use."""

    def __init__(self, meta: dict[str, Any], clock: Any) -> None:
        self.function_name = meta["name"]
        self.function_version = "$LATEST"
        self.invoked_function_arn = meta["arn"]
        self.memory_limit_in_mb = meta["memory_mb"]
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{meta['name']}"
        self.log_stream_name = "local"
        self._deadline = clock.now_ms() + meta["timeout_s"] * 1000
        self._clock = clock

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline - self._clock.now_ms())


def _describe(exc: BaseException) -> dict[str, Any]:
    return {
        "errorType": type(exc).__name__,
        "errorMessage": str(exc)[:MAX_ERROR_MESSAGE],
        "stackTrace": traceback.format_exception(exc)[-6:],
    }


class FaultPlan:
    """Faults armed for one invocation: after the n-th matching AWS call, kill or raise.

    `fired` lists the plan's faults (by their index in the plan) that went off; the driver arms the
    others again for the function's next invocation (a kill fired ends the process, never reported).
    """

    def __init__(self, faults: list[dict[str, Any]]) -> None:
        self.faults = [(index, dict(f)) for index, f in enumerate(faults)]
        self.fired: list[int] = []

    def after_call(self, operation: str, params: dict[str, Any]) -> None:
        text = json.dumps(params, default=str)
        for entry in self.faults:
            index, fault = entry
            if fault.get("operation") not in (None, operation):
                continue
            if fault.get("contains") and fault["contains"] not in text:
                continue
            fault["after"] = int(fault.get("after", 1)) - 1
            if fault["after"] > 0:
                continue
            self.faults.remove(entry)
            self.fired.append(index)
            if fault.get("action") == "kill":
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            from botocore.exceptions import ClientError

            raise ClientError(
                {
                    "Error": {
                        "Code": fault.get("code", "InternalServerError"),
                        "Message": "injected by the local runtime",
                    }
                },
                operation,
            )


def _install_hooks(plan_holder: list[FaultPlan | None], calls: dict[str, int]) -> None:
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def make_api_call(self, operation_name, api_params):
        if operation_name in ("SendMessage", "SendMessageBatch"):
            api_params = _delay_on_simulated_clock(operation_name, api_params)
        result = original(self, operation_name, api_params)
        # accepted calls only (a refused conditional write raised above): the driver's evidence
        # that a skipped tick wrote nothing
        key = f"{self.meta.service_model.service_name}:{operation_name}"
        calls[key] = calls.get(key, 0) + 1
        plan = plan_holder[0]
        if plan is not None and plan.faults:
            plan.after_call(operation_name, api_params)
        return result

    BaseClient._make_api_call = make_api_call


DELAY_ATTRIBUTE = "jobfence.local.visible_at"  # read (and hidden from handlers) by the SQS poller
_clock: list[Any] = [None]  # this isolate's FrozenClock, once the function's code is loaded


def _delay_on_simulated_clock(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    # The emulator would delay a message in real seconds; the poller delays it on the simulated clock instead.
    def rewrite(entry: dict[str, Any]) -> dict[str, Any]:
        delay = int(entry.get("DelaySeconds") or 0)
        if delay <= 0 or _clock[0] is None:
            return entry
        entry = {**entry, "DelaySeconds": 0}
        attributes = dict(entry.get("MessageAttributes") or {})
        attributes[DELAY_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(_clock[0].now_ms() + delay * 1000)}
        entry["MessageAttributes"] = attributes
        return entry

    if operation == "SendMessage":
        return rewrite(params)
    return {**params, "Entries": [rewrite(e) for e in params.get("Entries", [])]}


def _refuse_preloaded_code(code_dir: str) -> None:
    """The function's code is loaded here, at its cold start: none of it may come from the parent process."""
    packages = {p.stem for p in pathlib.Path(code_dir).iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    loaded = sorted(name for name in sys.modules if name.partition(".")[0] in packages)
    if loaded:
        raise ImportError(f"the function's modules were loaded before its cold start: {', '.join(loaded[:5])}")


def main(conn: Any, meta: dict[str, Any]) -> None:
    """Cold start, then serve invocations until told to stop or killed."""
    log = open(meta["log_path"], "a", buffering=1)  # noqa: SIM115 - open for the process's life (stdout, stderr)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    os.environ.clear()
    os.environ.update(meta["environment"])
    # the function sees its own code folder first, never the checkout's functions/
    sys.path[:] = [meta["code_dir"], meta["layer_dir"]] + [
        p for p in sys.path if os.path.realpath(p) != os.path.realpath(meta["checkout_functions"])
    ]
    plan: list[FaultPlan | None] = [None]
    calls: dict[str, int] = {}
    try:
        _refuse_preloaded_code(meta["code_dir"])
        # the function's own clock class, from its own code folder (now first on the path)
        clocks = importlib.import_module("jobfence.clock")
        clock = clocks.FrozenClock(meta["now_ms"])
        _clock[0] = clock
        # simulated time for every clock the function builds: a handler module that builds its handler at
        # import with the wall clock (an app's `scheduled_handler(CATALOG, os.environ, SystemClock())`) reads it too
        clocks.SystemClock.now_ms = lambda _self: clock.now_ms()
        _install_hooks(plan, calls)
        module_name, _, attr = meta["handler"].rpartition(".")
        module = importlib.import_module(module_name)
        # `build(environ, clock)` when the module offers it (this repository's handlers), else the handler itself
        build = getattr(module, "build", None)
        handler = build(os.environ, clock) if callable(build) else getattr(module, attr)
    except Exception as exc:  # an init error: Lambda reports it to the invoker and drops the isolate
        conn.send(("init_error", _describe(exc)))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        _, event, faults, now_ms = message
        clock.set(max(now_ms, clock.now_ms()))  # the driver's instant; a clock never goes backwards
        current = plan[0] = FaultPlan(faults) if faults else None
        calls.clear()
        try:
            result = handler(event, LambdaContext(meta, clock))
            answer: tuple[str, Any] = ("ok", json.loads(json.dumps(result, default=str)))
        except Exception as exc:
            answer = ("error", _describe(exc))
        finally:
            plan[0] = None
        conn.send((*answer, dict(calls), current.fired if current else []))
