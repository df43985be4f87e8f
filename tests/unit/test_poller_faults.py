"""The embedded runtime's SQS poller keeps an armed fault armed until an invocation reaches it.

`QueuePoller.faults[function]` arms a fault plan (a kill right after a matching AWS call) for the
function's next delivery. A delivery whose invocation never makes the matching call (its items were
deferred by the tenant gate, it found nothing to claim) must not spend the kill: the day's
`test_a_worker_killed_mid_item_is_recovered` saw no worker die when, of the three batches delivered
at once, the one that took the plan was the one the gate deferred.

Here the isolates are fakes (no process, no emulator) and the order of the concurrent invocations is
forced with events, so each test is deterministic and takes milliseconds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from jobfence.clock import FrozenClock
from jobfence_ops.runtime.sqs import QueuePoller
from jobfence_ops.runtime.topology import FunctionInfo, MappingInfo, QueueInfo, Topology
from jobfence_ops.runtime.workers import Invocation

FUNCTION = "generation-worker"
QUEUE_ARN = "arn:aws:sqs:us-east-1:000000000000:generation"
FUNCTION_ARN = f"arn:aws:lambda:us-east-1:000000000000:function:{FUNCTION}"
KILL = {"operation": "TransactWriteItems", "contains": "items", "action": "kill"}
WAIT_S = 10  # a safety net for a broken poller that never runs the two invocations at once; never reached


@dataclass
class FakeSqs:
    """A queue of bodies: receive hides, delete removes, visibility 0 shows again."""

    bodies: list[str]
    visible: dict[str, str] = field(default_factory=dict)  # receipt handle -> body
    hidden: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.visible = {f"rh-{i}": body for i, body in enumerate(self.bodies)}

    def receive_message(self, MaxNumberOfMessages: int, **_: Any) -> dict[str, Any]:
        handles = sorted(self.visible)[:MaxNumberOfMessages]
        out = []
        for handle in handles:
            body = self.visible.pop(handle)
            self.hidden[handle] = body
            out.append({"MessageId": f"id-{handle}", "ReceiptHandle": handle, "Body": body})
        return {"Messages": out}

    def delete_message_batch(self, Entries: list[dict[str, str]], **_: Any) -> None:
        for entry in Entries:
            self.hidden.pop(entry["ReceiptHandle"], None)

    def change_message_visibility(self, ReceiptHandle: str, **_: Any) -> None:
        self.visible[ReceiptHandle] = self.hidden.pop(ReceiptHandle)


class FakeLambda:
    def get_paginator(self, _name: str) -> Any:
        class Pages:
            def paginate(self) -> list[dict[str, Any]]:
                return [{"EventSourceMappings": []}]

        return Pages()


class FakeSession:
    region_name = "us-east-1"

    def __init__(self, sqs: FakeSqs) -> None:
        self._clients = {"sqs": sqs, "lambda": FakeLambda()}

    def client(self, service: str) -> Any:
        return self._clients[service]


class GatedWorkers:
    """Fake isolates of the generation worker behind a tenant gate of `cap` items.

    An invocation admits its items (while fewer than `cap` are held), claims them with one
    TransactWriteItems on the items table (where an armed kill fires: the isolate dies) and releases
    its holds when it ends. An invocation whose items were all deferred makes no claim, so a kill
    armed for it never fires. `faulted_admits_last` forces the schedule the day met: of two
    invocations in flight at once, the one carrying the plan admits after the other took the cap.
    """

    def __init__(self, cap: int, faulted_admits_last: bool = False) -> None:
        self.cap = cap
        self.held = 0
        self.lock = threading.Lock()
        self.faulted_admits_last = faulted_admits_last
        self.other_admitted = threading.Event()
        self.faulted_done = threading.Event()
        self.claimed: list[str] = []
        self.deferred: list[str] = []
        self.plans: list[list[dict[str, Any]] | None] = []

    def invoke(self, function: str, event: Any, faults: list[dict[str, Any]] | None = None) -> Invocation:
        bodies = [r["body"] for r in event["Records"]]
        self.plans.append(faults)
        forced = self.faulted_admits_last and (faults or not self.other_admitted.is_set())
        if forced and faults:
            assert self.other_admitted.wait(WAIT_S), "the two invocations were not in flight at once"
        with self.lock:
            admitted = bodies[: max(0, self.cap - self.held)]
            self.held += len(admitted)
        try:
            if forced and not faults:
                self.other_admitted.set()
                assert self.faulted_done.wait(WAIT_S), "the invocation carrying the plan never ran"
            self.deferred += bodies[len(admitted) :]
            if not admitted:
                return Invocation(function, "ok", payload={"batchItemFailures": []})
            self.claimed += admitted  # the claim: TransactWriteItems on the items table
            if any(f.get("action") == "kill" for f in faults or []):
                return Invocation(function, "died", error_type="Runtime.ExitError")
            return Invocation(function, "ok", payload={"batchItemFailures": []})
        finally:
            with self.lock:
                self.held -= len(admitted)
            if faults:
                self.faulted_done.set()


def poller(bodies: list[str], workers: GatedWorkers, max_concurrency: int | None) -> QueuePoller:
    topology = Topology(
        "stack",
        functions={FUNCTION: FunctionInfo(FUNCTION, FUNCTION_ARN, "h.handler", {}, 60, 128, "Worker")},
        queues={"generation": QueueInfo("generation", "https://queue/generation", QUEUE_ARN, 360)},
        mappings=[MappingInfo("uuid-1", QUEUE_ARN, FUNCTION_ARN, 1, max_concurrency, True, True)],
    )
    out = QueuePoller(FakeSession(FakeSqs(bodies)), topology, workers, FrozenClock(1_000_000))  # type: ignore[arg-type]
    out.faults[FUNCTION] = [dict(KILL)]
    return out


def test_a_delivery_that_claims_nothing_leaves_the_kill_armed_for_the_next_one():
    # GIVEN a kill armed for the worker, whose first message's item the gate defers (its tenant is full)
    workers = GatedWorkers(cap=1)
    workers.held = 1  # another round holds the tenant's only slot while the first message is delivered
    p = poller(["item-1", "item-2"], workers, max_concurrency=None)
    deliveries: list[str] = []

    def delivered(delivery: Any) -> None:
        deliveries.append(delivery.invocation.status)
        workers.held = 0  # that round ends: the next delivery is admitted

    p.on_delivery = delivered
    # WHEN the queue is pumped (one message per delivery, one delivery at a time)
    p.pump()
    # THEN the first delivery claimed nothing and did not spend the kill; the second claimed and died
    assert workers.deferred == ["item-1"] and workers.claimed == ["item-2"]
    assert deliveries == ["ok", "died"]
    assert workers.plans == [[KILL], [KILL]]
    # AND the kill is spent: nothing stays armed
    assert p.faults == {}


def test_the_batch_the_gate_defers_does_not_spend_the_kill_of_concurrent_deliveries():
    # GIVEN the day's batch phase in small: three wake-ups, two batches in flight at once, a tenant cap of one,
    # and the schedule that lost the kill: the invocation carrying the plan admits after the other one
    workers = GatedWorkers(cap=1, faulted_admits_last=True)
    p = poller(["item-1", "item-2", "item-3"], workers, max_concurrency=2)
    deliveries: list[str] = []
    p.on_delivery = lambda delivery: deliveries.append(delivery.invocation.status)
    # WHEN the queue is pumped
    p.pump()
    # THEN one batch was deferred without claiming and kept the kill armed; the next delivery claimed and died
    assert len(workers.deferred) == 1 and len(workers.claimed) == 2
    assert sorted(deliveries[:2]) == ["ok", "ok"] and deliveries[2:] == ["died"]
    assert sum(1 for plan in workers.plans if plan) == 2  # the deferred round's plan, then the dying one's
    assert p.faults == {}


def test_a_kill_that_fired_is_not_armed_again():
    # GIVEN a kill armed for the worker and two wake-ups its tenant can take
    workers = GatedWorkers(cap=10)
    p = poller(["item-1", "item-2"], workers, max_concurrency=None)
    deliveries: list[str] = []
    p.on_delivery = lambda delivery: deliveries.append(delivery.invocation.status)
    # WHEN the queue is pumped
    p.pump()
    # THEN the first delivery died and only it: the second ran without a plan
    assert deliveries == ["died", "ok"]
    assert workers.plans == [[KILL], None]
    assert p.faults == {}


def test_the_isolate_names_the_faults_that_went_off_and_the_driver_keeps_the_others():
    import pytest
    from botocore.exceptions import ClientError

    from jobfence_ops.runtime.worker import FaultPlan

    # GIVEN a plan of two raises: one on the items table's second TransactWriteItems, one on a Query
    plan = [
        {"operation": "TransactWriteItems", "contains": "items", "after": 2, "action": "raise"},
        {"operation": "Query", "action": "raise"},
    ]
    fault_plan = FaultPlan(plan)
    # WHEN the isolate makes one matching claim, a call on another table, then the second claim
    fault_plan.after_call("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": "items"}}]})
    fault_plan.after_call("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": "quota"}}]})
    with pytest.raises(ClientError):
        fault_plan.after_call("TransactWriteItems", {"TransactItems": [{"Update": {"TableName": "items"}}]})
    # THEN only the first fault went off, and the driver's plan is untouched
    assert fault_plan.fired == [0] and plan[0]["after"] == 2
    # AND an invocation that answered keeps the fault it never reached; one that died or timed out keeps none
    answered = Invocation(FUNCTION, "error", faults_fired=tuple(fault_plan.fired))
    assert answered.faults_left(plan) == [plan[1]]
    assert Invocation(FUNCTION, "init_error").faults_left(plan) == plan
    assert Invocation(FUNCTION, "died").faults_left(plan) == []
    assert Invocation(FUNCTION, "timeout").faults_left(plan) == []
