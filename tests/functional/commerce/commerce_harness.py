"""Support of the commerce and backoffice job tests: the stores bundle, a runner harness, a lease thief,
the recovery job as the runner runs it, and a payment port with hooks around the provider's calls."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, Mapping

from aws_lambda_powertools import Logger

from jobfence.lease import LeaseStore
from jobfence.runs import RunStore
from jobfence.scheduled import RunContext, RunResult
from jobfence.testing import JobHarness, another_party
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


class Stores:
    """The commerce and backoffice stores on the test's tables, each (and so its table) made when first used."""

    def __init__(self, tables: Mapping[str, str], clock: Any) -> None:
        self._tables, self._clock = tables, clock

    @cached_property
    def orders(self) -> OrderStore:
        return OrderStore(self._tables["orders"], self._clock)

    @cached_property
    def accounts(self) -> AccountStore:
        return AccountStore(self._tables["accounts"], self._clock)

    @cached_property
    def intents(self) -> AccountIntentStore:
        return AccountIntentStore(self._tables["account_intents"], self._clock)

    @cached_property
    def operations(self) -> FinancialOperationStore:
        return FinancialOperationStore(self._tables["financial_operations"], self._clock)

    @cached_property
    def invitations(self) -> AgentInvitationStore:
        return AgentInvitationStore(self._tables["agent_invitations"], self._clock)

    @cached_property
    def activity(self) -> CustomerActivityStore:
        return CustomerActivityStore(self._tables["customer_activity"], self._clock)

    @cached_property
    def diagnostics(self) -> DiagnosticStore:
        return DiagnosticStore(self._tables["diagnostic_captures"], self._clock)

    @cached_property
    def deferred(self) -> DeferredPaymentStore:
        return DeferredPaymentStore(self._tables["payment_intents"], self._clock)

    @cached_property
    def ledger(self) -> OperatorLedgerStore:
        return OperatorLedgerStore(self._tables["operator_access_ledger"], self._clock)


class Harness:
    """Runs a job through the real ScheduledRunner on moto, on the test's frozen clock: the kit's `JobHarness`
    of each job, all on the test's (lazy) tables."""

    def __init__(self, session: Any, dynamodb: Any, tables: Mapping[str, str], clock: Any) -> None:
        self.session = session
        self.dynamodb = dynamodb  # the runner's client, where a test injects its faults
        self.clock = clock
        self.tables = tables
        self.logger = Logger(service="commerce-test")
        self._jobs: dict[str, JobHarness] = {}

    @cached_property
    def leases(self) -> LeaseStore:
        return LeaseStore(self.dynamodb, self.tables["leases"], self.clock)

    @cached_property
    def run_rows(self) -> RunStore:
        return RunStore(self.dynamodb, self.tables["runs"])

    def job(self, job_name: str) -> JobHarness:
        """The kit's harness of catalog job `job_name` on the test's tables."""
        if job_name not in self._jobs:
            self._jobs[job_name] = JobHarness(self.session, CATALOG, job_name, self.clock, self.logger, self.tables,
                                              dynamodb=self.dynamodb)
        return self._jobs[job_name]

    def run(self, job_name: str, job: Any, context: Any = None) -> RunResult:
        """One scheduled tick of `job` as catalog job `job_name`, inside its grant."""
        return self.job(job_name).tick(job, context=context).result

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
    """A payment port whose calls run `before(target)` just before and `after(target)` just after the provider acts.

    The hooks play another party (the buyer, the request path) in the middle of the job's tick: their writes are
    not the job's (`another_party()`), so neither its grant nor its fence checks them.
    """

    def __init__(self, payments: Any, before: Callable[[str], Any] | None = None, after: Callable[[str], Any] | None = None):
        self.payments, self.before, self.after = payments, before, after

    def capture(self, order_id: str, key: str):
        return self._call(order_id, lambda: self.payments.capture(order_id, key))

    def refund(self, capture_id: str, amount_cents: int, currency: str, key: str):
        return self._call(capture_id, lambda: self.payments.refund(capture_id, amount_cents, currency, key))

    def _call(self, target: str, call: Callable[[], Any]):
        if self.before:
            with another_party():
                self.before(target)
        result = call()
        if self.after:
            with another_party():
                self.after(target)
        return result
