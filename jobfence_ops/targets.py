"""Where the operator commands act: the local runtime, or a deployed stack in a real account.

A target carries a boto3 session, the deployed topology (read back from
CloudFormation and the services), a clock and a way to invoke a function.
Every read goes to the tables and services themselves; only invoking differs:

- `EmbeddedTarget`: a `LocalRuntime` in this process (tests, the demo).
- `LocalTarget`: the local runtime that `jobfence local up` keeps running in
  the background, reached through its control API (`jobfence_ops.local.control`).
- `AwsTarget`: a real account; the wall clock and Lambda's Invoke API.

pynamodb builds its own clients from the process environment, so the process
is pointed at the target once, where it starts (`jobfence_ops.cli`, `jobfence_ops.local.daemon`):
`jobfence_ops.emulator.point_process_at` for the emulator, `point_process_at_account`
here for a profile and region.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Protocol

import boto3

from jobfence.clock import Clock, FrozenClock, SystemClock
from jobfence_ops.app import App, default_app
from jobfence_ops.emulator import EmulatorSession, point_process_at_endpoint
from jobfence_ops.local.control import LocalControl, LocalError
from jobfence_ops.runtime.runtime import LocalRuntime
from jobfence_ops.runtime.topology import Topology, discover
from jobfence_ops.runtime.workers import Invocation

DEFAULT_STACK = "jobfence"


class OperatorError(RuntimeError):
    """A command that cannot do what was asked; the message says why (exit status 2)."""


class Target(Protocol):
    name: str
    session: Any
    topology: Topology
    read_only: bool
    app: App  # the catalog the commands read job specs from (`jobfence_ops.app`)

    @property
    def clock(self) -> Clock: ...  # read-only: each target's own (an embedded runtime's is a FrozenClock)

    def invoke(self, function: str, event: Any) -> Invocation:
        """Invoke a function synchronously (Lambda's RequestResponse)."""
        ...

    def refresh(self) -> None:
        """Catch up with time that moved elsewhere (a long-lived console calls it per request)."""
        ...


class EmbeddedTarget:
    """A local runtime started in this process."""

    read_only = False

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime
        self.app = runtime.app
        self.name = f"embedded ({runtime.emulator.endpoint})"
        self.session = runtime.session
        self.topology = runtime.topology
        self.clock = runtime.clock

    def invoke(self, function: str, event: Any) -> Invocation:
        return self.runtime.invoke(function, event)

    def refresh(self) -> None:
        """Nothing to do: the runtime's own clock is read directly."""


class LocalTarget:
    """The background local runtime (`jobfence local up`): reads go to its emulator, invokes to its control API."""

    read_only = False

    def __init__(self, control: LocalControl, app: App | None = None) -> None:
        state = control.state()
        self.app = app or default_app()
        self.control = control
        self.session = EmulatorSession(state.endpoint, state.region)
        point_process_at_endpoint(state.endpoint, state.region)  # pynamodb's clients read the environment
        self.topology = control.topology()
        # simulated time stands still between `local advance` calls: a frozen clock at the runtime's now
        self.clock = FrozenClock(state.now_ms)
        self.name = f"local ({state.endpoint})"

    def invoke(self, function: str, event: Any) -> Invocation:
        return self.control.invoke(function, event)

    def refresh(self) -> None:
        """Move the frozen clock to the runtime's simulated now (`local advance` moved it); after the runtime
        was restarted (`local down`, `local up`: a new control token, emulator and clock), follow the new one.
        LocalError when none is up (the message says how to start it)."""
        try:
            state = self.control.state()
        except LocalError:
            self.control = LocalControl(self.control.directory)  # LocalError "not up" while it is down
            state = self.control.state()
            self.session = EmulatorSession(state.endpoint, state.region)
            self.topology = self.control.topology()
            self.clock = FrozenClock(state.now_ms)
            self.name = f"local ({state.endpoint})"
            point_process_at_endpoint(state.endpoint, state.region)  # pynamodb's clients read the environment
        self.clock.set(state.now_ms)


class AwsTarget:
    """A deployed stack in a real account (credentials from the profile or the environment)."""

    def __init__(
        self,
        profile: str | None,
        region: str | None,
        stack: str = DEFAULT_STACK,
        read_only: bool = False,
        app: App | None = None,
    ) -> None:
        self.app = app or default_app()
        self.session = boto3.Session(profile_name=profile, region_name=region)
        self.name = f"aws ({profile or 'default credentials'}, {self.session.region_name})"
        self.clock = SystemClock()
        self.read_only = read_only
        self.topology = discover(self.session, stack)
        self._lambda = self.session.client("lambda")

    def invoke(self, function: str, event: Any) -> Invocation:
        started = time.monotonic()
        out = self._lambda.invoke(
            FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode()
        )
        wall_ms = int((time.monotonic() - started) * 1000)
        payload = json.loads(out["Payload"].read() or b"null")
        if out.get("FunctionError"):
            body = payload if isinstance(payload, dict) else {}
            return Invocation(
                function,
                "error",
                error_type=body.get("errorType", out["FunctionError"]),
                error_message=body.get("errorMessage"),
                wall_ms=wall_ms,
            )
        return Invocation(function, "ok", payload=payload, wall_ms=wall_ms)

    def refresh(self) -> None:
        """Nothing to do: the wall clock moves by itself."""


def point_process_at_account(profile: str | None, region: str | None) -> None:
    """Make this process's pynamodb stores use the same profile and region as the target's boto3 session."""
    if profile:
        os.environ["AWS_PROFILE"] = profile
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region
