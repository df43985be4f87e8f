"""The safety-net family: seed 001's `capture_abandoned_deferred` with the payment port, against live buyers.

Actors (40 simulated minutes):
    ticks    the real job (`capture_abandoned_deferred` on the real `DeferredPaymentStore`, 2 intents a
             batch so a run pages) under the real `ScheduledRunner`, every 5 minutes, 1-2 at once
    buyers   one per intent: accept upsells at seeded instants (the intent first, conditional on
             `deferred`, then the PayPal order), some end with their own capture (`capture_for_buyer`).
             Their writes draw the AWS faults too (late, lost, throttled: a store error is asked again
             with the same upsell id, as a client would), crashes included: a buyer that dies between
             its intent write and its PayPal patch leaves the intent above the order, and the net then
             captures the order's amount (PayPal's), recorded as the intent's `captured_cents`
The payment port is `SimPayments`: `FakePayments` (PayPal's order state machine and idempotency
keys) with provider faults drawn from the seed: a call that fails before PayPal acts, one that acts
and loses its reply, one that times out (acted or not). One order may be declined.

Checked on every applied write and every provider call (numbers as in docs/guarantees.md):
    21  an intent touched within the cutoff is never captured: no upsell applied within 20 minutes
        (true time) before an applied deferred -> capturing write, nor before a capture that moves
        money; one whose write was applied later than the request-age budget after it was built is
        the fault model's limit (reported, not a violation)
    22  a claimed amount never changes: no write changes `amount_cents` of an intent not `deferred`
    23  money moves at most once per order, and under the safety net's key only while its intent is
        `capturing`, for no more than the amount the claim froze (less only when a buyer died
        between its intent write and its PayPal patch)
Checked at the end (after fault-free ticks):
    24  run-row counts agree with the provider: a tick that ran counts every capture its own calls
        made as `captured` or `unknown` (never `failed`), and never counts more `captured` than its
        calls were answered with a capture, nor more `reconciled` than already-captured answers
    25  no intent is left `capturing`; an intent is captured by the safety net exactly when its
        order was captured under `safetynet:<id>`, by the buyer exactly when under `buyer:<id>`
    1-4, 12, 13 through `TermWatch` (the runner's own invariants, shared with the lease family)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobfence.clock import REQUEST_AGE_BUDGET_MS
from jobfence.errors import StoreError
from jobfence.testing.sim.faults import AWS_CALL_FAULTS, PROVIDER_FAULTS, TIME_FAULTS, FaultKind
from jobfence.testing.sim.kernel import START_MS, Actor, SkewedClock
from jobfence.testing.sim.scheduled import LambdaContext, clean_tick
from jobfence.testing.sim.terms import TermWatch
from jobfence.testing.sim.world import World, clean_tick_after
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG
from jobs.commerce import safety_net
from jobs.commerce.checkout import capture_for_buyer
from jobs.commerce.deferred_payments import DeferredPaymentStore
from jobs.commerce.safety_net import CUTOFF_MS, capture_abandoned_deferred
from providers.errors import ProviderAmbiguous, ProviderError
from providers.payments import AlreadyCaptured, CaptureResult, RefundResult
from providers.payments_fake import FakePayments

JOB = "capture_abandoned_deferred"
INTENTS = 4
SIM_BATCH = 2
TICK_MS = 5 * 60_000
TICKS = 8
WINDOW_MS = TICKS * TICK_MS
SETTLE_TICKS = 3


@dataclass
class Act:
    """One capture call that reached the fake PayPal."""

    actor: str
    order_id: str
    key: str
    moved: bool  # this call moved the money
    answer: str  # "capture", "already_captured", "refused", "lost"


class SimPayments:
    """The payment port over `FakePayments`, with seeded provider faults and the record of every call."""

    def __init__(self, world: World, fake: FakePayments) -> None:
        self.world = world
        self.fake = fake
        self.acts: list[Act] = []

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        """The port's refund, fault-free (the safety net never refunds; the port asks for it)."""
        return self.fake.refund(capture_id, amount_cents, currency, idempotency_key)

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        world = self.world
        actor = world.kernel.current()
        fault = world.provider_fault(actor, f"PayPal capture of {order_id}")
        name = actor.name if actor is not None else "driver"
        if fault is FaultKind.PROVIDER_CRASH_BEFORE or (
            fault is FaultKind.PROVIDER_TIMEOUT and world.rng.random() < 0.5
        ):
            raise ProviderAmbiguous("connection reset before PayPal acted")
        before = self.fake.orders[order_id].status
        self._check_claimed(order_id, idempotency_key)
        try:
            result = self.fake.capture(order_id, idempotency_key)
        except AlreadyCaptured:
            self.acts.append(Act(name, order_id, idempotency_key, False, "already_captured"))
            raise
        except Exception:
            self.acts.append(Act(name, order_id, idempotency_key, False, "refused"))
            raise
        moved = before != "COMPLETED" and self.fake.orders[order_id].status == "COMPLETED"
        lost = fault in (FaultKind.PROVIDER_CRASH_AFTER, FaultKind.PROVIDER_TIMEOUT)
        self.acts.append(Act(name, order_id, idempotency_key, moved, "lost" if lost else "capture"))
        if lost:
            raise ProviderAmbiguous("PayPal acted; its reply was lost")
        return result

    def _check_claimed(self, order_id: str, key: str) -> None:
        """23: money may move under the safety net's key only on a claimed intent, on its amount."""
        order = self.fake.orders[order_id]
        if order.status != "APPROVED" or order.declined or not key.startswith("safetynet:"):
            return
        intent_id = key.split(":", 1)[1]
        now = self.world.kernel.clock.now_ms()
        touched_within_cutoff(self.world, intent_id, now, f"PayPal captures {order_id} under {key}")
        row = next((r for r in self.world.scan("payment_intents") if r["intent_id"] == intent_id), {})
        if row.get("status") != "capturing":
            self.world.violate(
                23,
                f"PayPal captures order {order_id} under {key} while its intent is {row.get('status')!r}, not claimed",
            )
        elif int(row.get("amount_cents", -1)) < order.amount_cents:
            self.world.violate(
                23, f"PayPal captures {order.amount_cents} on {order_id}; the claim froze {row.get('amount_cents')}"
            )


def touched_within_cutoff(world: World, intent: str, now: int, what: str) -> None:
    """21, in true time: an upsell applied within the cutoff before `now` (a limit if it came late)."""
    recent = [(at, age) for at, age in world.data["patches"].get(intent, []) if at > now - CUTOFF_MS]
    if not recent:
        return
    within = [(at, age) for at, age in recent if age <= REQUEST_AGE_BUDGET_MS]
    at, age = max(within or recent)
    text = f"{what} {(now - at) // 1000} s after the buyer's upsell was applied (cutoff {CUTOFF_MS // 1000} s)"
    if within:
        world.violate(21, text)
    else:  # only upsells applied later than the budget after they were built: outside what is promised
        world.limit(21, f"{text}; the upsell was applied {age // 1000} s after it was built")


def upsell(store: DeferredPaymentStore, intent: str, upsell_id: str, tries: int = 6) -> bool:
    """The buyer's client: one upsell, asked again with the same id after a store error (its point)."""
    for attempt in range(tries):
        try:
            return store.patch_upsell(intent, 250, upsell_id)
        except StoreError:
            if attempt == tries - 1:
                return False  # the buyer is told it failed; an applied copy is still read as ours next time
    return False


class SafetyNetFamily:
    name = "safety_net"
    tables = ("leases", "runs", "payment_intents")
    registry = CATALOG
    kinds = (*AWS_CALL_FAULTS, *TIME_FAULTS, FaultKind.PAUSE_TTL, FaultKind.CLOCK_SKEW, *PROVIDER_FAULTS)
    call_rates = (0.03, 0.06, 0.1)

    def pause_ms(self, world: World, kind: FaultKind) -> int:
        """Past the lease TTL, so a later tick takes over while the paused holder still acts."""
        return CATALOG.job(JOB).lease_ttl_ms + world.rng.randrange(1, 2 * TICK_MS)

    # -- setup ----------------------------------------------------------------------------

    def setup(self, world: World) -> None:
        saved = safety_net.SAFETY_NET_BATCH
        safety_net.SAFETY_NET_BATCH = SIM_BATCH
        world.cleanups.append(lambda: setattr(safety_net, "SAFETY_NET_BATCH", saved))
        marker = f"S{world.kernel.seed}"
        fake = FakePayments()
        payments = SimPayments(world, fake)
        world.data["payments"] = payments
        world.data["patches"] = {}  # intent -> (true time, age) of every upsell applied
        world.data["spec"] = CATALOG.job(JOB)
        declined = world.rng.randrange(INTENTS) if world.rng.random() < 0.3 else None
        for i in range(INTENTS):
            intent, order = f"i{i}", f"O-{marker}-{i}"
            amount = 1_000 + 100 * i
            fake.approve(order, amount)
            if i == declined:
                fake.decline(order)
            created = SkewedClock(world.kernel.clock, -world.rng.randrange(0, 2 * CUTOFF_MS))  # checkout, earlier
            DeferredPaymentStore(world.tables["payment_intents"], created).create(intent, order, amount)
        world.data["orders"] = {f"i{i}": f"O-{marker}-{i}" for i in range(INTENTS)}
        watch = TermWatch(world)
        world.data["watch"] = watch
        world.wire.on_write.append(lambda w: self._on_write(world, w))
        for i in range(INTENTS):
            if world.rng.random() < 0.7:
                world.spawn(f"buyer{i}", self._buyer(world, f"i{i}"), at=START_MS)
        for tick in range(TICKS):
            at = START_MS + tick * TICK_MS
            for n in range(world.rng.randint(1, 2)):
                watch.tick(world.spawn(f"tick{tick}.{n}", self._tick(world), at=at + world.rng.randrange(3_000)))

    def _buyer(self, world: World, intent: str):
        def run(actor: Actor) -> Any:
            payments: SimPayments = world.data["payments"]
            store = DeferredPaymentStore(world.tables["payment_intents"], actor.clock)
            order = world.data["orders"][intent]
            times = sorted(START_MS + world.rng.randrange(WINDOW_MS) for _ in range(world.rng.randint(1, 3)))
            accepted = 0
            for n, at in enumerate(times):
                world.kernel.park(actor, max(0, at - world.kernel.clock.now_ms()))
                if upsell(store, intent, f"{actor.name}.{n}"):  # the intent first: refused once it is claimed
                    payments.fake.patch_amount(order, 250)
                    accepted += 1
            if world.rng.random() < 0.4:
                world.kernel.park(actor, world.rng.randrange(CUTOFF_MS + TICK_MS))
                try:
                    return capture_for_buyer(store, payments, intent)
                except (ProviderError, StoreError) as exc:  # declined, or the store failed: the buyer is told
                    return type(exc).__name__
            return accepted

        return run

    def _job(self, world: World, clock: Any, actor: Actor | None):
        store = DeferredPaymentStore(world.tables["payment_intents"], clock)
        payments = world.data["payments"]
        watch: TermWatch = world.data["watch"]
        return lambda ctx: watch.guard(actor, capture_abandoned_deferred(store, payments, ctx, world.logger))

    def _tick(self, world: World):
        def run(actor: Actor) -> Any:
            spec = world.data["spec"]
            context = LambdaContext(actor.name, actor.clock, spec.timeout_s * 1000)
            return world.runner(actor.clock).run(
                spec, self._job(world, actor.clock, actor), Trigger("scheduled", actor.clock.now_ms()), context
            )

        return run

    # -- checks on every applied write ------------------------------------------------------

    def _on_write(self, world: World, write: Any) -> None:
        for change in write.changes:
            if change.table != "payment_intents" or change.before is None or change.after is None:
                continue
            before, after = change.before, change.after
            intent = before.get("intent_id")
            if before.get("status") == "deferred" and int(after.get("amount_cents", 0)) > int(
                before.get("amount_cents", 0)
            ):
                world.data["patches"].setdefault(intent, []).append((write.at, write.age_ms))  # an upsell applied
            if before.get("status") == "deferred" and after.get("status") == "capturing":
                touched_within_cutoff(world, intent, write.at, f"{write.actor} claimed {intent}")
            if before.get("status") != "deferred" and before.get("amount_cents") != after.get("amount_cents"):
                world.violate(22, f"{write.actor} changed the amount of {intent} while it was {before.get('status')}")

    # -- liveness -------------------------------------------------------------------------

    def settle(self, world: World) -> None:
        spec = world.data["spec"]
        kernel = world.kernel
        clock = SkewedClock(kernel.clock)
        kernel.clock.set(clean_tick_after(spec, max(kernel.clock.now_ms(), START_MS + WINDOW_MS)))
        for _ in range(SETTLE_TICKS):
            kernel.clock.advance(ms=TICK_MS)
            result = clean_tick(
                world, world.runner(clock), spec, self._job(world, clock, None), clock, "a clean safety-net tick"
            )
            if result is None or result.outcome.value != "ran":
                return

    # -- end checks -----------------------------------------------------------------------

    def check(self, world: World) -> None:
        payments: SimPayments = world.data["payments"]
        fake = payments.fake
        moved: dict[str, int] = {}
        for act in payments.acts:
            moved[act.order_id] = moved.get(act.order_id, 0) + act.moved
        for moved_order, times in moved.items():
            if times > 1:
                world.violate(23, f"money moved {times} times on {moved_order}")
        self._check_counts(world, payments)
        rows = {r["intent_id"]: r for r in world.scan("payment_intents")}
        for intent, order_id in world.data["orders"].items():
            row, order = rows[intent], fake.orders[order_id]
            if row["status"] == "capturing":
                world.violate(25, f"{intent} is still capturing after {SETTLE_TICKS} clean ticks")
            by = row.get("captured_by") if row["status"] == "captured" else None
            key = order.captured_with if order.status == "COMPLETED" else None
            expected = {None: None, f"safetynet:{intent}": "safetynet", f"buyer:{intent}": "buyer"}.get(key, "?")
            if by != expected:
                world.violate(25, f"{intent} is {row['status']} by {by}; PayPal captured it under {key}")
            if by == "safetynet" and row.get("captured_cents") not in (None, order.amount_cents):
                world.violate(
                    25, f"{intent} records {row['captured_cents']} captured; PayPal captured {order.amount_cents}"
                )
        world.data["watch"].check()
        ticks = set(map(id, world.data["watch"].ticks))
        for actor in world.kernel.actors:
            if id(actor) not in ticks and actor.error is not None and not actor.crashed:  # a buyer's crash: a fault
                world.violate(0, f"buyer {actor.name} raised {type(actor.error).__name__}: {actor.error}")

    def _check_counts(self, world: World, payments: SimPayments) -> None:
        """24: a tick that ran counts each capture of its own calls as captured or unknown."""
        for actor in world.data["watch"].ticks:
            result = actor.result
            if actor.crashed or result is None or result.outcome.value != "ran":
                continue
            summary = result.summary or {}
            acts = [a for a in payments.acts if a.actor == actor.name]
            moved = sum(a.moved for a in acts)
            answered = sum(a.answer == "capture" for a in acts)
            already = sum(a.answer == "already_captured" for a in acts)
            captured, unknown = int(summary.get("captured", 0)), int(summary.get("unknown", 0))
            if captured + unknown < moved:
                world.violate(
                    24,
                    f"{actor.name}'s calls moved money {moved} times; its run row counts "
                    f"captured {captured}, unknown {unknown}, failed {summary.get('failed', 0)}",
                )
            if captured > answered:
                world.violate(24, f"{actor.name} counts {captured} captured; PayPal answered {answered} captures")
            if int(summary.get("reconciled", 0)) > already:
                world.violate(
                    24,
                    f"{actor.name} counts {summary.get('reconciled')} reconciled; PayPal answered "
                    f"{already} already-captured",
                )
