"""The club family: seed 002's `send_equipment_reminders` with its outbox, the notification queue, the Discord worker.

Actors (40 simulated minutes):
    ticks     the real job (`ReminderStore`, `LoanStore`, `ChangeLog` with the real `OutboxStore`,
              `Publisher` and `SqsNotificationQueue`) under the real runner every 10 minutes, 1-2 at once
    member    returns some items at seeded instants (their reminders are then cancelled, never sent); its
              writes draw the same AWS and time faults as the ticks' (a crash before or after its write
              included); a store error is asked again, as the member's client would
    workers   three Discord workers: the real `DiscordDelivery` (`Verifier`, `NonceStore`, a `Visibility`
              on the simulated queue), 10 records a receive, under the Lambda timeout (a worker's
              pause is bounded by it; a job's pause outlives its lease)
The notification queue is the simulator's SQS (duplicate and late deliveries, visibility, 10
receives then the dead-letter queue). Discord is `SimDiscord`: direct messages with Discord's
message nonce (`enforce_nonce`, a 2-minute window on the run's clock) and seeded faults: a 429 or
an error before acting, an answer lost after acting, a timeout (acted or not).

Checked (numbers as in docs/guarantees.md):
    31  a change's events exist exactly when it was saved: a reminder's pending -> sent write puts
        its outbox row in the same transaction, a cancel puts none, no outbox row without its change
    32  at most one Discord message per change where Discord can deduplicate (a repeat within its
        nonce window); a repeat past the window is the stated at-least-once, counted, not a violation
    33  Discord is called for one event by one receive at a time: a second acknowledged call for a
        nonce is a violation unless the first receive died before recording it, or recorded its
        record as handled and its claim then expired (a done-mark that could not be written)
    34  liveness: after fault-free ticks and drains, every sent reminder's message is in Discord,
        every due reminder is sent or cancelled, the outbox is empty, the queue is drained and no
        event is in the DLQ without having reached Discord (a late copy rejected as stale may be)
    35  no Discord message for a change that was not saved (a cancelled or pending reminder)
    36  in true time (DynamoDB's order): no reminder's pending -> sent write is applied after its loan's
        return was applied (a return still in flight, built but not applied, may cross it)
    37  a loan's return, once applied, is never moved: a copy re-sent or asked again after a lost
        reply leaves `returned_at` as first applied
    1-4, 12, 13 through `TermWatch`; 10: the item names (in the message text) never reach a log line
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobfence.errors import JobfenceError, StoreError
from jobfence.testing.sim.faults import AWS_CALL_FAULTS, PROVIDER_FAULTS, TIME_FAULTS, FaultKind
from jobfence.testing.sim.kernel import START_MS, Actor, Crash, SkewedClock
from jobfence.testing.sim.queue import SimQueues
from jobfence.testing.sim.scheduled import LambdaContext, clean_tick
from jobfence.testing.sim.terms import TermWatch
from jobfence.testing.sim.world import MARGIN_MS, NullMetrics, World, clean_tick_after
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG
from jobs.club.catalog import NOTIFICATIONS_QUEUE, QUEUES
from jobs.club.changes import ChangeLog
from jobs.club.delivery import DiscordDelivery
from jobs.club.equipment_jobs import send_equipment_reminders
from jobs.club.events import Signer, Verifier, nonce_for
from jobs.club.notifications import Publisher
from jobs.club.signers import SignerKeyrings, grants_from_catalog
from jobs.club.signing import SigningKeys, VerifyKeyring, new_key_pair
from jobs.club.stores.loans import LoanStore
from jobs.club.stores.nonces import CLAIM_TTL_MS, NonceStore
from jobs.club.stores.outbox import OutboxStore
from jobs.club.stores.reminders import Recipient, ReminderStore
from providers.errors import ProviderAmbiguous, ProviderThrottled
from providers.secrets import MemorySecrets
from providers.sqs import SqsNotificationQueue

JOB = "send_equipment_reminders"
KEY_SEED = b"sim-club-event-signing-key-01234"  # 32 bytes: one fixed Ed25519 pair, so runs replay
REMINDERS = 8
POLL_MS = 3_000
TICK_MS = 10 * 60_000
TICKS = 4
WINDOW_MS = TICKS * TICK_MS
WORKERS = 3
DISCORD_WINDOW_MS = 120_000  # as the Discord stub: Discord only says "a few minutes"
SETTLE_ROUNDS = 12


@dataclass
class Call:
    """One Discord call for one event."""

    actor: str
    nonce: str
    at: int
    record: str  # the receive it was made for
    acted: bool  # Discord changed something (or found the nonce within its window)
    answered: bool  # the worker got Discord's answer


class SimDiscord:
    """Discord's direct messages with its message nonce, seeded faults, and the record of every call."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.created: dict[str, list[int]] = {}  # our event nonce -> creation times
        self.dms: dict[str, list[str]] = {}  # user -> contents
        self.calls: list[Call] = []
        self._nonces: dict[tuple[str, str], int] = {}  # (user, Discord nonce) -> created at
        self._by_discord_nonce: dict[str, str] = {}

    def send_direct(self, user_id: str, content: str, nonce: str | None = None) -> str:
        world = self.world
        actor = world.kernel.current()
        name = actor.name if actor is not None else "driver"
        event_nonce = world.data["in_flight"].get(name, ("?", "?"))[1]
        record = world.data["in_flight"].get(name, ("?", "?"))[0]
        # a third of the plan's provider rate: at the plan's rate a message would fail its ten
        # receives (and end in the DLQ, as designed) often enough to hide everything else
        fault = world.provider_fault(actor, f"Discord call for {event_nonce[:8]}", rate=world.plan.provider_rate / 3)
        now = world.kernel.clock.now_ms()
        if fault is FaultKind.PROVIDER_CRASH_BEFORE:
            self.calls.append(Call(name, event_nonce, now, record, False, True))
            if world.rng.random() < 0.5:
                raise ProviderThrottled(world.rng.choice((0.5, 2.0, 7.5)))
            raise ProviderAmbiguous("Discord answered 503")
        if fault is FaultKind.PROVIDER_TIMEOUT and world.rng.random() < 0.5:
            self.calls.append(Call(name, event_nonce, now, record, False, False))
            raise ProviderAmbiguous("timed out before Discord acted")
        seen = self._nonces.get((user_id, nonce or ""))
        if nonce is None or seen is None or now - seen > DISCORD_WINDOW_MS:
            self.dms.setdefault(user_id, []).append(content)
            self.created.setdefault(event_nonce, []).append(now)
            if nonce is not None:
                self._nonces[(user_id, nonce)] = now
        lost = fault in (FaultKind.PROVIDER_CRASH_AFTER, FaultKind.PROVIDER_TIMEOUT)
        self.calls.append(Call(name, event_nonce, now, record, True, not lost))
        if lost:
            raise ProviderAmbiguous("Discord acted; its answer was lost")
        return f"dm-{len(self.calls)}"


class QueueVisibility:
    """`ChangeMessageVisibility` on the simulated queue (the receipt handle names the message)."""

    def __init__(self, world: World, url: str) -> None:
        self.world, self.url = world, url

    def delay(self, receipt_handle: str, seconds: int) -> None:
        message_id = receipt_handle.split("#", 1)[0]
        for message in self.world.data["queues"].queues[self.url].messages:
            if message.message_id == message_id:
                message.visible_at = self.world.kernel.clock.now_ms() + seconds * 1000


class ClubFamily:
    name = "club"
    tables = ("leases", "runs", "club_equipment_reminders", "club_equipment_loans", "club_outbox", "club_event_nonces")
    registry = CATALOG
    kinds = (
        *AWS_CALL_FAULTS,
        *TIME_FAULTS,
        FaultKind.PAUSE_TTL,
        FaultKind.CLOCK_SKEW,
        FaultKind.DUPLICATE_DELIVERY,
        FaultKind.LATE_DELIVERY,
        *PROVIDER_FAULTS,
    )  # forged bodies fail the signature: tests/unit cover them
    call_rates = (0.05, 0.1, 0.15)

    def pause_ms(self, world: World, kind: FaultKind) -> int:
        actor = world.kernel.current()
        if actor is not None and actor.name.startswith("worker"):
            return world.rng.randrange(1, QUEUES[0].worker_timeout_s * 1000)  # Lambda ends a worker at its timeout
        return CATALOG.job(JOB).lease_ttl_ms + world.rng.randrange(1, TICK_MS)

    # -- setup ----------------------------------------------------------------------------

    def setup(self, world: World) -> None:
        marker = f"LENS{world.kernel.seed}MARK"
        world.data.update(marker=marker, in_flight={}, records={}, spec=CATALOG.job(JOB), returned={})
        queues = SimQueues(
            world, visibility_ms=QUEUES[0].visibility_timeout_s * 1000, max_receives=QUEUES[0].max_receive_count
        )
        world.wire.queue = queues
        world.data["queues"] = queues
        world.data["url"] = queues.url(NOTIFICATIONS_QUEUE)
        world.data["discord"] = SimDiscord(world)
        pair = new_key_pair(KEY_SEED)
        world.data["secrets"] = MemorySecrets({"signing": pair.signing_value, "verify": pair.verify_value})
        clock = SkewedClock(world.kernel.clock)
        loans = LoanStore(world.tables["club_equipment_loans"], clock)
        reminders = ReminderStore(world.tables["club_equipment_reminders"], clock)
        returned = []
        for i in range(REMINDERS):
            loan = f"L{i}"
            loans.put(loan, f"m{i}", f"{marker} camera {i}", START_MS + WINDOW_MS)
            due = START_MS + world.rng.randrange(-TICK_MS, WINDOW_MS)
            recipient = Recipient.STAFF if i % 3 == 2 else Recipient.MEMBER
            reminders.put(f"r{i}", loan, due, recipient, str(1_000 + i))
            if world.rng.random() < 0.3:
                returned.append((loan, START_MS + world.rng.randrange(WINDOW_MS)))
        world.data["users"] = {f"r{i}": str(1_000 + i) for i in range(REMINDERS)}
        world.data["watch"] = watch = TermWatch(world)
        world.wire.on_write.append(lambda w: self._on_write(world, w))
        for loan, at in returned:
            world.spawn(f"member-{loan}", self._member(world, loan), at=at)
        for tick in range(TICKS):
            for n in range(world.rng.randint(1, 2)):
                watch.tick(
                    world.spawn(
                        f"tick{tick}.{n}", self._tick(world), at=START_MS + tick * TICK_MS + world.rng.randrange(3_000)
                    )
                )
        for n in range(WORKERS):
            world.spawn(
                f"worker{n}", self._worker(world, START_MS + WINDOW_MS), at=START_MS + world.rng.randrange(5_000)
            )

    def _member(self, world: World, loan: str):
        def run(actor: Actor) -> Any:
            store = LoanStore(world.tables["club_equipment_loans"], actor.clock)
            for _ in range(6):  # the member's client asks again after a store error (the write is idempotent)
                try:
                    store.mark_returned(loan)
                    return loan
                except StoreError:
                    continue
            return None

        return run

    def _changes(self, world: World, clock: Any) -> ChangeLog:
        queue = SqsNotificationQueue(world.wire.sqs, world.data["url"])
        return ChangeLog(
            OutboxStore(world.tables["club_outbox"], clock),
            Publisher(Signer(SigningKeys(world.data["secrets"], "signing", JOB), clock), queue),
        )

    def _job(self, world: World, clock: Any, actor: Actor | None):
        reminders = ReminderStore(world.tables["club_equipment_reminders"], clock)
        loans = LoanStore(world.tables["club_equipment_loans"], clock)
        changes = self._changes(world, clock)
        watch: TermWatch = world.data["watch"]
        return lambda ctx: watch.guard(actor, send_equipment_reminders(reminders, loans, changes, ctx, world.logger))

    def _tick(self, world: World):
        def run(actor: Actor) -> Any:
            spec = world.data["spec"]
            return world.runner(actor.clock).run(
                spec,
                self._job(world, actor.clock, actor),
                Trigger("scheduled", actor.clock.now_ms()),
                LambdaContext(actor.name, actor.clock, spec.timeout_s * 1000),
            )

        return run

    def _delivery(self, world: World, clock: Any) -> DiscordDelivery:
        return DiscordDelivery(
            # the worker's real table of grants; the job's own keyring (the others hold no key here)
            Verifier(
                SignerKeyrings({JOB: VerifyKeyring(world.data["secrets"], "verify", clock)}),
                clock,
                grants_from_catalog(),
            ),
            NonceStore(world.tables["club_event_nonces"], clock),
            world.data["discord"],
            QueueVisibility(world, world.data["url"]),
            world.logger,
            NullMetrics(),  # type: ignore[arg-type]  # add_metric is all it calls (as jobfence.testing.sim.world's runner)
        )

    def _deliver(self, world: World, delivery: DiscordDelivery, name: str, records: list[dict[str, Any]]) -> list[str]:
        """Deliver a receive's records one by one (the batch processor); return the acknowledged ids."""
        acked = []
        for raw in records:
            record = SQSRecord(raw)
            handle = raw["receiptHandle"]
            try:
                nonce = json.loads(raw["body"])["nonce"]
            except (ValueError, KeyError, TypeError):
                nonce = "?"
            world.data["in_flight"][name] = (handle, nonce)
            world.data["records"][(name, handle)] = "open"
            try:
                delivery.deliver(record)
            except JobfenceError:
                world.data["records"][(name, handle)] = "failed"
                continue
            except Crash:
                world.data["records"][(name, handle)] = "crashed"
                raise
            except Exception as exc:
                world.data["records"][(name, handle)] = "failed"
                world.violate(13, f"{name} let {type(exc).__name__} out of a delivery: {str(exc)[:100]}")
                continue
            world.data["records"][(name, handle)] = "handled"
            acked.append(raw["messageId"])
        return acked

    def _ack(self, world: World, ids: list[str]) -> None:
        queue = world.data["queues"].queues[world.data["url"]]
        queue.messages = [m for m in queue.messages if m.message_id not in ids]

    def _worker(self, world: World, end: int):
        def run(actor: Actor) -> Any:
            queues: SimQueues = world.data["queues"]
            url = world.data["url"]
            delivery = self._delivery(world, actor.clock)
            rounds = 0
            while world.kernel.clock.now_ms() < end:
                # Lambda's poller long-polls: a message is picked up within moments of becoming visible,
                # so two workers often hold copies of one message at once when SQS duplicates it
                world.kernel.park(actor, world.rng.randrange(200, POLL_MS))
                records = [
                    dict(r, receiptHandle=f"{r['messageId']}#{r['attributes']['ApproximateReceiveCount']}")
                    for r in queues.receive(url, 10, actor)
                ]
                if records:
                    self._ack(world, self._deliver(world, delivery, actor.name, records))
                    rounds += 1
            return rounds

        return run

    # -- checks on every applied write ------------------------------------------------------

    def _on_write(self, world: World, write: Any) -> None:
        sent: set[Any] = set()
        cancelled: set[Any] = set()
        outbox: set[Any] = set()
        returned: dict[str, int] = world.data["returned"]  # loan -> true time its return was applied
        for change in write.changes:
            before, after = change.before or {}, change.after or {}
            if change.table == "club_equipment_loans" and after.get("returned_at") is not None:
                if before.get("returned_at") is None:
                    returned[after["loan_id"]] = write.at
                elif before["returned_at"] != after["returned_at"]:
                    world.violate(37, f"{write.actor} moved the return of {after['loan_id']} (applied before)")
            if change.table == "club_equipment_reminders" and before.get("state") == "pending":
                (
                    sent if after.get("state") == "sent" else cancelled if after.get("state") == "cancelled" else set()
                ).add(before["reminder_id"])
            if change.table == "club_outbox" and change.after is not None and change.before is None:
                outbox.add(after["nonce"])
        for change in write.changes:
            before = change.before or {}
            if change.table == "club_equipment_reminders" and before.get("reminder_id") in sent:
                loan = before.get("loan_id")
                if loan in returned:
                    world.violate(
                        36,
                        f"{write.actor} sent reminder {before['reminder_id']} {(write.at - returned[loan]) // 1000} s "
                        f"after the return of {loan} was applied",
                    )
        expected = {nonce_for(JOB, r) for r in sent}
        if expected != outbox:
            world.violate(
                31,
                f"{write.actor}: reminders sent {sorted(sent)} / cancelled {sorted(cancelled)} wrote "
                f"{len(outbox)} outbox row(s), expected {len(expected)}",
            )

    # -- liveness -------------------------------------------------------------------------

    def settle(self, world: World) -> None:
        """Drain what is on the queue now (a poller is always there), then a clean tick, then drain again."""
        kernel = world.kernel
        spec = world.data["spec"]
        clock = SkewedClock(kernel.clock)
        self._drain(world, clock)
        kernel.clock.set(clean_tick_after(spec, max(kernel.clock.now_ms(), START_MS + WINDOW_MS)))
        if clean_tick(world, world.runner(clock), spec, self._job(world, clock, None), clock) is None:
            return  # it raised: nothing to drain after
        self._drain(world, clock)

    def _drain(self, world: World, clock: Any) -> None:
        """Fault-free receives until the queue is empty: each round waits out hidden messages and claims."""
        delivery = self._delivery(world, clock)
        queues: SimQueues = world.data["queues"]
        url = world.data["url"]
        for _ in range(SETTLE_ROUNDS):
            if not queues.queues[url].messages:
                return
            later = queues.next_visible_at(url) or world.kernel.clock.now_ms()
            world.kernel.clock.set(max(world.kernel.clock.now_ms(), later))
            records = [
                dict(r, receiptHandle=f"{r['messageId']}#{r['attributes']['ApproximateReceiveCount']}")
                for r in queues.receive(url, 10, None)
            ]
            self._ack(world, self._deliver(world, delivery, "driver", records))

    # -- end checks -----------------------------------------------------------------------

    def check(self, world: World) -> None:
        discord: SimDiscord = world.data["discord"]
        queues: SimQueues = world.data["queues"]
        url = world.data["url"]
        reminders = {r["reminder_id"]: r for r in world.scan("club_equipment_reminders")}
        sent = {nonce_for(JOB, rid): rid for rid, r in reminders.items() if r["state"] == "sent"}
        for nonce, times in discord.created.items():
            if nonce not in sent:
                world.violate(35, f"a Discord message for {nonce[:8]}, which no saved change stands for")
            for earlier, later in pairwise(times):
                if later - earlier <= DISCORD_WINDOW_MS:
                    world.violate(32, f"two Discord messages for {nonce[:8]} within Discord's nonce window")
                else:
                    world.data["at_least_once"] = world.data.get("at_least_once", 0) + 1
        self._check_exclusive(world, discord)
        end = world.kernel.clock.now_ms()
        for nonce, rid in sent.items():
            if nonce not in discord.created:
                world.violate(34, f"reminder {rid} was sent but its message never reached Discord")
        for rid, row in reminders.items():
            if row["state"] == "pending" and int(row["due_at"]) <= end - MARGIN_MS:
                world.violate(34, f"reminder {rid} is due and still pending after the clean tick")
        if world.scan("club_outbox"):
            world.violate(34, f"{len(world.scan('club_outbox'))} outbox row(s) left after the clean tick")
        # a copy that comes back after the freshness window is rejected as stale and ends in the DLQ (by
        # design: never Discord); only an event that never reached Discord is lost
        lost = [m.message_id for m in queues.queues[url].dead if json.loads(m.body).get("nonce") not in discord.created]
        if lost or queues.queues[url].messages:
            world.violate(
                34,
                f"undelivered message(s) {lost} in the DLQ, "
                f"{len(queues.queues[url].messages)} still queued after the drains",
            )
        if world.data["marker"] in world.logs():
            world.violate(10, "a message's text reached a log line")
        world.data["watch"].check()
        for actor in world.kernel.actors:
            if actor.name.startswith(("worker", "member")) and actor.error is not None:
                world.violate(13, f"{actor.name} raised {type(actor.error).__name__}: {str(actor.error)[:100]}")

    def _check_exclusive(self, world: World, discord: SimDiscord) -> None:
        """33: a second acknowledged call is excused only by a dead first receive or an expired claim."""
        crashed = {a.name for a in world.kernel.actors if a.crashed}
        last: dict[str, Call] = {}
        for call in discord.calls:
            if not (call.acted and call.answered):
                continue
            first = last.get(call.nonce)
            last[call.nonce] = call
            if first is None:
                continue
            fate = world.data["records"].get((first.actor, first.record))
            if first.actor in crashed and fate in ("open", "crashed"):
                continue
            if fate == "handled" and call.at - first.at > CLAIM_TTL_MS - MARGIN_MS:
                continue
            world.violate(
                33,
                f"{call.actor} called Discord for {call.nonce[:8]} {(call.at - first.at) // 1000} s "
                f"after {first.actor} did (that receive {fate})",
            )
