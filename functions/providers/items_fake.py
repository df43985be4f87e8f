"""The offline fake of the item-provider port (`providers.items`), with scripted failures.

A fake is told, per item (idempotency key) or by default, to succeed, fail,
fail N times then succeed, time out, hang, or reject. It models the provider's
idempotency (the same key always answers the same reference and never acts
twice) and records every call so tests can count side effects. It fails with the
providers' one vocabulary (`providers.errors`); messages never carry the payload.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from providers.errors import ProviderAmbiguous, ProviderRejected
from providers.items import ItemEndpoint, ItemRequest


class Behaviour(str, enum.Enum):
    """What a scripted call does."""

    SUCCEED = "succeed"
    FAIL = "fail"  # always a retriable error
    FAIL_TIMES = "fail_times"  # the first N calls fail, then success
    TIME_OUT = "time_out"  # the provider's own timeout fires (a retriable error)
    HANG = "hang"  # blocks until released: the worker's per-item timeout must fire
    REJECT = "reject"  # a permanent refusal


@dataclass(frozen=True)
class Script:
    behaviour: Behaviour = Behaviour.SUCCEED
    times: int = 0  # for FAIL_TIMES


class ScriptedCalls:
    """Thread-safe per-key behaviour and call counting."""

    def __init__(self, default: Script | None = None, hang_limit_s: float = 30.0) -> None:
        self._default = default or Script()
        self._scripts: dict[str, Script] = {}
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._hang_limit_s = hang_limit_s  # a hung call gives up eventually so no test can wedge

    def script(self, key: str, behaviour: Behaviour, times: int = 0) -> None:
        with self._lock:
            self._scripts[key] = Script(behaviour, times)

    def default(self, behaviour: Behaviour, times: int = 0) -> None:
        with self._lock:
            self._default = Script(behaviour, times)

    def release(self) -> None:
        """Let every hung call return (tests call this at teardown)."""
        self._release.set()

    def calls(self, key: str | None = None) -> int:
        with self._lock:
            return sum(self._calls.values()) if key is None else self._calls.get(key, 0)

    def enter(self, key: str, what: str) -> None:
        """Count the call and act out the script; return normally to succeed."""
        with self._lock:
            n = self._calls[key] = self._calls.get(key, 0) + 1
            script = self._scripts.get(key, self._default)
        if script.behaviour is Behaviour.FAIL:
            raise ProviderAmbiguous(f"{what}: service unavailable (503)", provider=what, status=503)
        if script.behaviour is Behaviour.FAIL_TIMES and n <= script.times:
            raise ProviderAmbiguous(f"{what}: service unavailable (503), call {n}", provider=what, status=503)
        if script.behaviour is Behaviour.TIME_OUT:
            raise ProviderAmbiguous(f"{what}: no answer before the call timeout", provider=what)
        if script.behaviour is Behaviour.REJECT:
            raise ProviderRejected(f"{what}: input refused (422)", provider=what, status=422)
        if script.behaviour is Behaviour.HANG:
            self._release.wait(self._hang_limit_s)
            raise ProviderAmbiguous(f"{what}: hung call released", provider=what)


class FakeItemProvider:
    """Offline provider: one reference per idempotency key, with scripted failures."""

    def __init__(self, endpoint: ItemEndpoint) -> None:
        self.endpoint = endpoint
        self.calls = ScriptedCalls()
        self._refs: dict[str, str] = {}
        self._lock = threading.Lock()

    def script(self, idempotency_key: str, behaviour: Behaviour, times: int = 0) -> None:
        self.calls.script(idempotency_key, behaviour, times)

    def call(self, request: ItemRequest, timeout_s: float) -> str:
        self.calls.enter(request.idempotency_key, self.endpoint.name)
        with self._lock:
            if request.idempotency_key not in self._refs:
                self._refs[request.idempotency_key] = f"{self.endpoint.prefix}_{len(self._refs) + 1:06d}"
            return self._refs[request.idempotency_key]

    def created(self) -> int:
        """Distinct items acted on (a retry of the same item does not act twice)."""
        with self._lock:
            return len(self._refs)
