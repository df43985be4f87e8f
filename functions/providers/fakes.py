"""The offline fakes of every provider port, in one place beside the ports they fake.

Each fake keeps the provider's own state and idempotency (a repeated key answers
the first result and never acts twice), records every call so tests can count
side effects, and fails on command with the one error vocabulary of the real
adapters (`providers.errors`), so job code and tests handle one set of classes:

- `FakeItemProvider` (the item port, `providers.items`): per-key scripts (`Behaviour`) to succeed, fail,
  fail N times, time out, hang or reject;
- `FakePayments` (the payment port, `providers.payments`): PayPal's order state machine

      CREATED ──buyer approves──► APPROVED ──capture(key)──► COMPLETED ──refund(key)──► (captures refunded)
                                   └─ patch_amount (an accepted upsell; only while APPROVED)

  another key on a COMPLETED order raises `AlreadyCaptured`; `decline(order)` makes its captures raise
  `InstrumentDeclined`; `time_out_next(n)` (or `time_out_order`) makes the next n calls raise
  `ProviderAmbiguous` before anything happens; `lose_response_next(n)` makes the next n calls *succeed*
  and then raise `ProviderAmbiguous` (the answer was lost), which is what idempotency keys exist for;
- `FakeDiscord` (the Discord port, `providers.discord`): member roles, channel messages, DMs, nonces;
- `FakeAccountProvider`, `FakeAccountNotifier` (the account ports, `providers.accounts`).

Error messages never carry a request payload.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field

from providers.errors import ProviderAmbiguous, ProviderRejected, ProviderThrottled
from providers.items import ItemEndpoint, ItemRequest
from providers.payments import (
    AlreadyCaptured,
    CaptureResult,
    CaptureStatus,
    InstrumentDeclined,
    OrderNotCapturable,
    RefundResult,
)

# -- the item port ------------------------------------------------------------------------------------------------


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


# -- the payment port ---------------------------------------------------------------------------------------------


@dataclass
class FakeOrder:
    order_id: str
    amount_cents: int
    currency: str
    status: str = "APPROVED"
    capture_id: str | None = None
    captured_with: str | None = None
    declined: bool = False


class FakePayments:
    """In-memory provider state; thread-safe so racing threads can share it."""

    def __init__(self) -> None:
        self.orders: dict[str, FakeOrder] = {}
        self.refunded: dict[str, int] = {}  # capture id -> cents refunded
        self.calls: list[tuple[str, str, str]] = []  # (operation, target, idempotency key)
        self._results: dict[str, object] = {}
        self._timeouts = 0
        self._order_timeouts: dict[str, int] = {}
        self._lost = 0
        self._seq = 0
        self._lock = threading.Lock()

    # -- test controls ----------------------------------------------------------------------

    def approve(self, order_id: str, amount_cents: int, currency: str = "EUR") -> None:
        """An order the buyer has approved (what checkout leaves behind)."""
        with self._lock:
            self.orders[order_id] = FakeOrder(order_id, amount_cents, currency)

    def capture_elsewhere(self, order_id: str, idempotency_key: str) -> CaptureResult:
        """A capture by another party (the buyer's own path), not counted as ours."""
        return self._capture(order_id, idempotency_key)

    def patch_amount(self, order_id: str, add_cents: int) -> bool:
        """The buyer's accepted upsell patches the order (PayPal refuses a patch once captured)."""
        with self._lock:
            order = self.orders[order_id]
            if order.status != "APPROVED":
                return False
            order.amount_cents += add_cents
            return True

    def decline(self, order_id: str) -> None:
        with self._lock:
            self.orders[order_id].declined = True

    def time_out_next(self, n: int = 1) -> None:
        with self._lock:
            self._timeouts += n

    def time_out_order(self, order_id: str, n: int = 1) -> None:
        """The next n calls on this order time out (the provider never saw them)."""
        with self._lock:
            self._order_timeouts[order_id] = self._order_timeouts.get(order_id, 0) + n

    def lose_response_next(self, n: int = 1) -> None:
        with self._lock:
            self._lost += n

    def captures_of(self, order_id: str) -> int:
        """How many captures moved money on this order (0 or 1 if the model holds)."""
        order = self.orders.get(order_id)
        return int(bool(order and order.status == "COMPLETED"))

    # -- the port ---------------------------------------------------------------------------

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        with self._lock:
            self.calls.append(("capture", order_id, idempotency_key))
        return self._capture(order_id, idempotency_key)

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        with self._lock:
            self.calls.append(("refund", capture_id, idempotency_key))
            self._maybe_time_out()
            if idempotency_key in self._results:
                return self._results[idempotency_key]  # type: ignore[return-value]  # the key's first result, replayed
            order = next((o for o in self.orders.values() if o.capture_id == capture_id), None)
            if order is None:
                raise OrderNotCapturable(f"capture {capture_id} not found")
            already = self.refunded.get(capture_id, 0)
            if already + amount_cents > order.amount_cents:
                raise OrderNotCapturable(f"capture {capture_id} cannot refund {amount_cents} more")
            self.refunded[capture_id] = already + amount_cents
            self._seq += 1
            result = RefundResult(capture_id, f"R-{self._seq}", CaptureStatus.COMPLETED, amount_cents, currency)
            self._results[idempotency_key] = result
            self._maybe_lose()
            return result

    # -- the state machine ------------------------------------------------------------------

    def _capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        with self._lock:
            self._maybe_time_out()
            if self._order_timeouts.get(order_id):
                self._order_timeouts[order_id] -= 1
                raise ProviderAmbiguous(f"payment provider timed out on {order_id}")
            if idempotency_key in self._results:
                return self._results[idempotency_key]  # type: ignore[return-value]  # the key's first result, replayed
            order = self.orders.get(order_id)
            if order is None:
                raise OrderNotCapturable(f"order {order_id} not found")
            if order.status == "COMPLETED":
                raise AlreadyCaptured(f"order {order_id} is already captured")
            if order.status != "APPROVED":
                raise OrderNotCapturable(f"order {order_id} is {order.status}, not APPROVED")
            if order.declined:
                raise InstrumentDeclined(f"order {order_id}: instrument declined")
            self._seq += 1
            order.status = "COMPLETED"
            order.capture_id = f"C-{self._seq}"
            order.captured_with = idempotency_key
            result = CaptureResult(
                order_id, order.capture_id, CaptureStatus.COMPLETED, order.amount_cents, order.currency
            )
            self._results[idempotency_key] = result
            self._maybe_lose()
            return result

    def _maybe_time_out(self) -> None:
        if self._timeouts:
            self._timeouts -= 1
            raise ProviderAmbiguous("payment provider timed out")

    def _maybe_lose(self) -> None:
        if self._lost:
            self._lost -= 1
            raise ProviderAmbiguous("payment provider response lost")


# -- the Discord port ---------------------------------------------------------------------------------------------


@dataclass
class FakeDiscord:
    """Offline fake with Discord's state: member roles, channel messages, DMs.

    Role PUT/DELETE are idempotent as in Discord; a post with a nonce already
    posted in that channel returns the first message (Discord's `enforce_nonce`;
    `forget_nonces()` models its window running out); `rate_limit_next(n, s)` makes
    the next n calls raise `ProviderThrottled(s)` without changing anything;
    `lose_reply_next(n)` makes the next n calls act and then raise
    `ProviderAmbiguous` (the answer was lost).
    """

    roles: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    messages: dict[str, dict[str, str]] = field(default_factory=dict)  # channel -> message id -> content
    direct: dict[str, list[str]] = field(default_factory=dict)  # user -> contents
    calls: list[tuple[str, ...]] = field(default_factory=list)
    nonces: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, nonce) -> message id
    _limited: list[float] = field(default_factory=list)
    _lost: int = 0
    _next_id: int = 900_000_000_000_000_000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_message(self, channel_id: str, message_id: str, content: str = "") -> None:
        """An existing message (so it can be edited)."""
        self.messages.setdefault(channel_id, {})[message_id] = content

    def rate_limit_next(self, n: int, retry_after_s: float) -> None:
        self._limited.extend([retry_after_s] * n)

    def lose_reply_next(self, n: int = 1) -> None:
        self._lost += n

    def forget_nonces(self) -> None:
        """Discord's nonce window ran out: a repeat now creates a new message."""
        with self._lock:
            self.nonces.clear()

    def effects(self) -> int:
        """Calls that changed something visible to people (posts and DMs that created a message)."""
        return sum(1 for c in self.calls if c[0] in ("post_message", "send_direct"))

    def _enter(self, *call: str) -> None:
        if self._limited:
            raise ProviderThrottled(self._limited.pop(0), provider="discord")
        self.calls.append(call)

    def _leave(self) -> None:
        if self._lost:
            self._lost -= 1
            raise ProviderAmbiguous("discord: its answer was lost", provider="discord")

    def add_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        with self._lock:
            self._enter("add_role", guild_id, user_id, role_id)
            self.roles.setdefault((guild_id, user_id), set()).add(role_id)
            self._leave()

    def remove_role(self, guild_id: str, user_id: str, role_id: str) -> None:
        with self._lock:
            self._enter("remove_role", guild_id, user_id, role_id)
            self.roles.setdefault((guild_id, user_id), set()).discard(role_id)
            self._leave()

    def post_message(self, channel_id: str, content: str, nonce: str | None = None) -> str:
        with self._lock:
            if nonce is not None and (channel_id, nonce) in self.nonces:
                self._enter("post_message_deduplicated", channel_id, content)
                message_id = self.nonces[(channel_id, nonce)]
            else:
                self._enter("post_message", channel_id, content)
                self._next_id += 1
                message_id = str(self._next_id)
                self.messages.setdefault(channel_id, {})[message_id] = content
                if nonce is not None:
                    self.nonces[(channel_id, nonce)] = message_id
            self._leave()
            return message_id

    def edit_message(self, channel_id: str, message_id: str, content: str) -> None:
        with self._lock:
            self._enter("edit_message", channel_id, message_id, content)
            if message_id not in self.messages.get(channel_id, {}):
                raise ProviderRejected(
                    "discord: HTTP 404 10008", provider="discord", status=404, code=10008
                )  # Unknown Message
            self.messages[channel_id][message_id] = content
            self._leave()

    def send_direct(self, user_id: str, content: str, nonce: str | None = None) -> str:
        with self._lock:
            channel = f"dm-{user_id}"
            if nonce is not None and (channel, nonce) in self.nonces:
                self._enter("send_direct_deduplicated", user_id, content)
                message_id = self.nonces[(channel, nonce)]
            else:
                self._enter("send_direct", user_id, content)
                self.direct.setdefault(user_id, []).append(content)
                self._next_id += 1
                message_id = str(self._next_id)
                if nonce is not None:
                    self.nonces[(channel, nonce)] = message_id
            self._leave()
            return message_id


# -- the account ports --------------------------------------------------------------------------------------------


class FakeAccountProvider:
    """In-memory account provider: idempotent by key, counts calls, can fail the next n calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.deleted: set[str] = set()
        self.emails: dict[str, str] = {}
        self._done: set[str] = set()
        self._fail = 0
        self._lock = threading.Lock()

    def fail_next(self, n: int = 1) -> None:
        with self._lock:
            self._fail += n

    def change_email(self, account_id: str, new_email: str, idempotency_key: str) -> None:
        self._call("change_email", account_id, idempotency_key)
        self.emails[account_id] = new_email

    def delete_account(self, account_id: str, idempotency_key: str) -> None:
        self._call("delete_account", account_id, idempotency_key)
        self.deleted.add(account_id)

    def _call(self, what: str, account_id: str, key: str) -> None:
        with self._lock:
            self.calls.append((what, account_id, key))
            if self._fail:
                self._fail -= 1
                raise ProviderAmbiguous(f"accounts: failed for {account_id}", provider="accounts")
            self._done.add(key)


class FakeAccountNotifier:
    """In-memory notifier: delivers a key once, counts calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.delivered: dict[str, tuple[str, str]] = {}

    def notify(self, account_id: str, notice: str, idempotency_key: str) -> None:
        self.calls.append((account_id, notice, idempotency_key))
        self.delivered.setdefault(idempotency_key, (account_id, notice))
