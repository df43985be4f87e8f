"""Support of the commerce and backoffice job tests: the stores bundle, a runner harness, a lease thief,
the recovery job as the runner runs it, and a payment port with hooks around the provider's calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from aws_lambda_powertools import Logger, Metrics

from jobfence.lease import LeaseStore
from jobfence.runs import RunStore
from jobfence.scheduled import RunContext, ScheduledRunner
from jobfence.triggers import Trigger
from jobs.backoffice.operator_ledger import OperatorLedgerStore
from jobs.catalog import CATALOG
from jobs.commerce.account_intents import AccountIntentStore
from jobs.commerce.accounts import AccountStore
from jobs.commerce.agent_invitations import AgentInvitationStore
from jobs.commerce.customer_activity import CustomerActivityStore
from jobs.commerce.deferred_payments import DeferredPaymentStore
from jobs.commerce.diagnostic_retention import retention_batches
from jobs.commerce.diagnostics import DiagnosticStore
from jobs.commerce.financial_recovery import FinancialRecovery, recover_financial_operations
from jobs.commerce.financial_operations import FinancialOperationStore
from jobs.commerce.orders import OrderStore
from jobfence.testing.grants import within_grant


@dataclass
class Stores:
    orders: OrderStore
    accounts: AccountStore
    intents: AccountIntentStore
    operations: FinancialOperationStore
    invitations: AgentInvitationStore
    activity: CustomerActivityStore
    diagnostics: DiagnosticStore
    deferred: DeferredPaymentStore
    ledger: OperatorLedgerStore


class Harness:
    """Runs a job through the real ScheduledRunner on moto, on the test's frozen clock."""

    def __init__(self, dynamodb: Any, tables: dict[str, str], clock: Any) -> None:
        self.clock = clock
        self.dynamodb = dynamodb
        self.tables = tables
        self.leases = LeaseStore(dynamodb, tables["leases"], clock)
        self.run_rows = RunStore(dynamodb, tables["runs"])
        self.logger = Logger(service="commerce-test")
        self.runner = ScheduledRunner(
            self.leases, self.run_rows, clock, self.logger, Metrics(namespace="jobfence", service="commerce")
        )

    def run(self, job_name: str, job: Any, context: Any = None):
        spec = CATALOG.job(job_name)
        with within_grant(self.tables, spec.tables, job_name):  # the job calls only what its entry is granted
            return self.runner.run(spec, job, Trigger("scheduled", self.clock.now_ms()), context)

    def context(self, job_name: str, holder: str = "test") -> RunContext:
        """A live term and run context outside the runner (for driving overlapping runs by hand)."""
        spec = CATALOG.job(job_name)
        lease = self.leases.acquire(spec.name, holder, spec.lease_ttl_s * 1000)
        return RunContext(spec, f"run-{holder}", Trigger("manual", self.clock.now_ms(), holder), lease, self.leases, self.clock)


def request_cancellations(stores: Stores, n: int) -> None:
    """`n` placed orders `o0`… with a cancellation requested (past the grace once the clock moves 20 minutes)."""
    for i in range(n):
        stores.orders.create(f"o{i}", "acc", 100, "EUR", status="placed")
        stores.orders.request_cancellation(f"o{i}")


class StealingContext:
    """A Lambda context whose remaining-time probe (between batches, before renewal) lets another holder take over."""

    def __init__(self, harness, job_name):
        self.harness, self.job_name, self.stolen = harness, job_name, False
        self.aws_request_id = "req-stolen"

    def get_remaining_time_in_millis(self):
        if not self.stolen:
            self.stolen = True
            spec = CATALOG.job(self.job_name)
            self.harness.clock.advance(ms=spec.lease_ttl_s * 1000 + 1)
            self.harness.leases.acquire(self.job_name, "intruder", spec.lease_ttl_s * 1000)
        return 300_000


def recovery_job(stores: Stores, harness: Harness, payments: Any, operations: Any = None):
    """`recover_financial_operations` on the test's stores (`operations` may wrap the store with hooks)."""
    recovery = FinancialRecovery(
        stores.intents, stores.accounts, operations or stores.operations, stores.orders, payments, harness.logger
    )
    return lambda ctx: recover_financial_operations(
        recovery.batches(ctx), retention_batches(stores.diagnostics, stores.activity, ctx, harness.logger), harness.logger
    )


class Crash(BaseException):
    """The function dies here (not an exception the job could catch)."""


class HookedPayments:
    """A payment port whose calls run `before(target)` just before and `after(target)` just after the provider acts."""

    def __init__(self, payments: Any, before: Callable[[str], Any] | None = None, after: Callable[[str], Any] | None = None):
        self.payments, self.before, self.after = payments, before, after

    def capture(self, order_id: str, key: str):
        return self._call(order_id, lambda: self.payments.capture(order_id, key))

    def refund(self, capture_id: str, amount_cents: int, currency: str, key: str):
        return self._call(capture_id, lambda: self.payments.refund(capture_id, amount_cents, currency, key))

    def _call(self, target: str, call: Callable[[], Any]):
        if self.before:
            self.before(target)
        result = call()
        if self.after:
            self.after(target)
        return result
