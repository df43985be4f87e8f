"""Warm worker processes: each function invocation runs in an isolate of its own.

An `Isolate` is one process running `worker.main` for one function. It is
started on first use (the cold start) and reused while it is idle and alive;
concurrent invocations of one function get separate isolates, like Lambda.
Killing an isolate is a real process death: the invocation in flight returns
`died`, nothing in the function gets to clean up, and the next invocation
cold-starts a new process.

Isolates are forked from a fork server that has imported the libraries a
function's layer provides (`LAYER_PRELOAD`: boto3, botocore, pydantic,
pynamodb, Powertools) and nothing else: no function code (the worker refuses
to start if any module of its code folder is already loaded), no client, no
session, no thread. Each isolate is still a process of its own that loads its
function's code from its code folder at its cold start, so no module state
passes from one function or isolate to another; what it skips is the ~1 CPU-s
an interpreter paid to import the same libraries each time. The fork server
reads the driver's environment once, at its start: the two import-time reads of
the preloaded libraries (`AWS_EXECUTION_ENV`, `AWS_LAMBDA_INITIALIZATION_TYPE`)
are set neither there nor in a function's environment, so they agree.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import pathlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobfence.clock import FrozenClock
from jobfence_ops.runtime.topology import FunctionInfo

CHECKOUT_FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"
COLD_START_TIMEOUT_S = 60
# The layer's libraries, imported once by the fork server (never the function's own packages).
LAYER_PRELOAD = (
    "boto3",
    "botocore.client",
    "botocore.session",
    "pydantic",
    "pynamodb.models",
    "pynamodb.attributes",
    "pynamodb.transactions",
    "aws_lambda_powertools",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.parser",
    "aws_lambda_powertools.utilities.parameters",
    "aws_lambda_powertools.event_handler",
)
# What a Lambda isolate inherits besides its configured environment.
_PASSTHROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT", "VIRTUAL_ENV")


@dataclass
class Invocation:
    """What one invocation came to, as the Lambda Invoke API would report it."""

    function: str
    status: str  # ok | error (the handler raised) | died (the isolate was killed) | timeout | init_error
    payload: Any = None
    error_type: str | None = None
    error_message: str | None = None
    cold: bool = False
    wall_ms: int = 0
    pid: int | None = None
    started_sim_ms: int = 0
    calls: dict[str, int] = field(default_factory=dict)  # accepted AWS calls, "service:Operation" -> n
    faults_fired: tuple[int, ...] = ()  # the fault plan's entries (by index) that went off, as the isolate answered

    def faults_left(self, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The faults of the plan sent with this invocation that it never reached (none once the isolate is gone).

        An isolate that answered names the faults that went off; one that died or timed out answered nothing,
        and its death spent the plan (a kill that fired is such a death); an init error ran no handler.
        """
        if self.status in ("died", "timeout"):
            return []
        return [f for index, f in enumerate(faults) if index not in self.faults_fired]

    def writes(self, service: str = "dynamodb") -> int:
        """Accepted write calls to a service during this invocation."""
        prefixes = ("Put", "Update", "Delete", "BatchWrite", "TransactWrite", "Send", "Create")
        return sum(
            n
            for key, n in self.calls.items()
            if key.startswith(service + ":") and key.split(":", 1)[1].startswith(prefixes)
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "status": self.status,
            "payload": self.payload,
            "error": f"{self.error_type}: {self.error_message}" if self.error_type else None,
            "cold": self.cold,
        }


class Isolate:
    """One process of one function."""

    def __init__(self, meta: dict[str, Any], ctx: Any) -> None:
        self.meta = meta
        self.function = meta["name"]
        self._conn, child = ctx.Pipe()
        from jobfence_ops.runtime import worker

        self.process = ctx.Process(target=worker.main, args=(child, meta), name=f"isolate:{self.function}", daemon=True)
        self.process.start()
        child.close()
        self.cold = True
        self.busy = False
        self.ready_error: dict[str, Any] | None = None

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _await_ready(self) -> None:
        if not self._conn.poll(COLD_START_TIMEOUT_S):
            raise TimeoutError(f"{self.function}: no cold start within {COLD_START_TIMEOUT_S}s")
        kind, detail = self._conn.recv()
        if kind == "init_error":
            self.ready_error = detail

    def invoke(self, event: Any, now_ms: int, faults: list[dict[str, Any]] | None = None) -> Invocation:
        """Send one event (at simulated instant `now_ms`) and wait for the answer (or for the process to die)."""
        started = time.monotonic()
        cold = self.cold
        result = Invocation(self.function, "ok", cold=cold, pid=self.pid)
        try:
            if self.cold:
                self._await_ready()
                self.cold = False
            if self.ready_error:
                result.status, result.error_type, result.error_message = (
                    "init_error",
                    self.ready_error["errorType"],
                    self.ready_error["errorMessage"],
                )
                return result
            self._conn.send(("invoke", event, faults or [], now_ms))
            # Simulated time stands still during an invocation; a real-time cap of the
            # function's timeout still ends a hung isolate, as Lambda would.
            if not self._conn.poll(self.meta["timeout_s"]):
                self.kill()
                result.status, result.error_type = "timeout", "Sandbox.Timedout"
                result.error_message = f"Task timed out after {self.meta['timeout_s']} seconds"
                return result
            kind, detail, result.calls, fired = self._conn.recv()
            result.faults_fired = tuple(fired)
        except (EOFError, ConnectionError, OSError):
            result.status, result.error_type, result.error_message = (
                "died",
                "Runtime.ExitError",
                "the isolate's process died mid-invocation",
            )
            return result
        finally:
            result.wall_ms = int((time.monotonic() - started) * 1000)
        if kind == "ok":
            result.payload = detail
        else:
            result.status, result.error_type, result.error_message = (
                "error",
                detail["errorType"],
                detail["errorMessage"],
            )
        return result

    def kill(self) -> None:
        """SIGKILL: an isolate death. The function gets no chance to clean up."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError, BrokenPipeError):
            self._conn.send(("stop",))
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.kill()
        self._conn.close()


class WorkerPool:
    """Isolates per function: warm ones are reused, concurrent invocations get more."""

    def __init__(
        self,
        functions: Mapping[str, FunctionInfo],
        code_dirs: Mapping[str, pathlib.Path],
        clock: FrozenClock,
        base_environment: Mapping[str, str],
        extra_environment: Mapping[str, Mapping[str, str]],
        log_dir: pathlib.Path,
    ) -> None:
        self._functions = functions
        self._code_dirs = code_dirs
        self._clock = clock
        self._base = dict(base_environment)
        self._extra = extra_environment
        self.log_dir = log_dir
        self._ctx = _fork_server_context()
        self._lock = threading.Lock()
        self._isolates: dict[str, list[Isolate]] = {}
        self.cold_starts: dict[str, int] = {}
        with _server_lock:
            _server_users.add(id(self))

    def environment(self, function: str) -> dict[str, str]:
        """The isolate's environment: the template's variables plus what Lambda and the emulator add."""
        info = self._functions[function]
        env = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
        env.update(self._base)
        env.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": info.name,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(info.memory_mb),
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{info.name}",
                "LAMBDA_TASK_ROOT": str(self._code_dirs[function]),
                "_HANDLER": info.handler,
                "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here: Powertools Tracer stays off
            }
        )
        env.update(info.environment)
        env.update(self._extra.get(function, {}))
        return env

    def _meta(self, function: str) -> dict[str, Any]:
        info = self._functions[function]
        return {
            "name": info.name,
            "arn": info.arn,
            "handler": info.handler,
            "memory_mb": info.memory_mb,
            "timeout_s": info.timeout_s,
            "environment": self.environment(function),
            "code_dir": str(self._code_dirs[function]),
            "layer_dir": str(self._layer(self._code_dirs[function])),
            "checkout_functions": str(CHECKOUT_FUNCTIONS),
            "log_path": str(self.log_dir / f"{function}.log"),
            "now_ms": self._clock.now_ms(),  # the cold start's instant
        }

    def _layer(self, code_dir: pathlib.Path) -> pathlib.Path:
        """What the function's layer gives it here: the jobfence runtime this tooling runs, unless its code
        folder has its own (this repository's functions/ does; an app's asset has only its code, and
        `cdk deploy` builds the layer from its requirements.txt). One folder with that one package."""
        layer = self.log_dir.parent / "layer"
        if not (code_dir / "jobfence").is_dir() and not (layer / "jobfence").exists():
            layer.mkdir(parents=True, exist_ok=True)
            spec = importlib.util.find_spec("jobfence")
            assert spec is not None and spec.origin is not None  # this tooling imports it
            (layer / "jobfence").symlink_to(pathlib.Path(spec.origin).resolve().parent, target_is_directory=True)
        return layer

    def _take(self, function: str) -> Isolate:
        if function not in self._functions:
            raise KeyError(f"no function {function!r} is deployed")
        with self._lock:
            pool = self._isolates.setdefault(function, [])
            pool[:] = [i for i in pool if i.alive or i.busy]
            for isolate in pool:
                if not isolate.busy and isolate.alive:
                    isolate.busy = True
                    return isolate
            isolate = Isolate(self._meta(function), self._ctx)
            isolate.busy = True
            pool.append(isolate)
            self.cold_starts[function] = self.cold_starts.get(function, 0) + 1
            return isolate

    def invoke(self, function: str, event: Any, faults: list[dict[str, Any]] | None = None) -> Invocation:
        """Run one event in an isolate of `function` (warm if one is idle)."""
        isolate = self._take(function)
        started = self._clock.now_ms()
        try:
            result = isolate.invoke(event, started, faults)
        finally:
            with self._lock:
                isolate.busy = False
                if not isolate.alive or isolate.ready_error:
                    isolate.kill()
                    self._isolates[function].remove(isolate)
        result.started_sim_ms = started
        return result

    def isolates(self, function: str) -> list[Isolate]:
        with self._lock:
            return list(self._isolates.get(function, []))

    def kill(self, function: str, busy_only: bool = False) -> int:
        """Kill the isolates of a function (those mid-invocation only, if asked). Returns how many."""
        killed = 0
        for isolate in self.isolates(function):
            if isolate.busy or not busy_only:
                isolate.kill()
                killed += 1
        return killed

    def stop(self) -> None:
        with self._lock:
            isolates = [i for pool in self._isolates.values() for i in pool]
            self._isolates.clear()
        for isolate in isolates:
            isolate.stop()
        _release_fork_server(self)


_server_lock = threading.Lock()
_server_users: set[int] = set()  # the pools (by id) started since the fork server last stopped


def _fork_server_context() -> Any:
    """The forkserver context, its server preloading the layer's libraries (one server per driver process)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(LAYER_PRELOAD))
    return ctx


def _release_fork_server(pool: WorkerPool) -> None:
    """Stop the fork server once no pool uses it, and wait for it.

    Its isolates are its children: it reaps them, and waiting for it here
    counts their CPU with this process's children (RUSAGE_CHILDREN), as the
    demo's bench measures it. The next pool starts a new server.
    """
    from multiprocessing import forkserver

    with _server_lock:
        _server_users.discard(id(pool))
        if not _server_users:
            forkserver._forkserver._stop()  # type: ignore[attr-defined]  # the stdlib's own stop (no public one)
