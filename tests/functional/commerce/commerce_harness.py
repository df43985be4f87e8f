"""Fixtures of the commerce and backoffice job tests (imported by each test module, not a conftest,
so the top-level `conftest` module name stays the shared one): stores on moto tables, a runner, fakes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
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
from jobs.commerce.diagnostics import DiagnosticStore
from jobs.commerce.financial_operations import FinancialOperationStore
from jobs.commerce.orders import OrderStore
from providers.accounts import FakeAccountNotifier, FakeAccountProvider
from providers.payments_fake import FakePayments


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
        self.leases = LeaseStore(dynamodb, tables["leases"], clock)
        self.run_rows = RunStore(dynamodb, tables["runs"])
        self.logger = Logger(service="commerce-test")
        self.runner = ScheduledRunner(
            self.leases, self.run_rows, clock, self.logger, Metrics(namespace="jobfence", service="commerce")
        )

    def run(self, job_name: str, job: Any, context: Any = None):
        spec = CATALOG.job(job_name)
        return self.runner.run(spec, job, Trigger("scheduled", self.clock.now_ms()), context)

    def context(self, job_name: str, holder: str = "test") -> RunContext:
        """A live term and run context outside the runner (for driving overlapping runs by hand)."""
        spec = CATALOG.job(job_name)
        lease = self.leases.acquire(spec.name, holder, spec.lease_ttl_s * 1000)
        return RunContext(spec, f"run-{holder}", Trigger("manual", self.clock.now_ms(), holder), lease, self.leases, self.clock)


@pytest.fixture
def stores(tables, clock) -> Stores:
    return Stores(
        orders=OrderStore(tables["orders"], clock),
        accounts=AccountStore(tables["accounts"], clock),
        intents=AccountIntentStore(tables["account_intents"], clock),
        operations=FinancialOperationStore(tables["financial_operations"], clock),
        invitations=AgentInvitationStore(tables["agent_invitations"], clock),
        activity=CustomerActivityStore(tables["customer_activity"], clock),
        diagnostics=DiagnosticStore(tables["diagnostic_captures"], clock),
        deferred=DeferredPaymentStore(tables["payment_intents"], clock),
        ledger=OperatorLedgerStore(tables["operator_access_ledger"], clock),
    )


@pytest.fixture
def harness(dynamodb, tables, clock) -> Harness:
    return Harness(dynamodb, tables, clock)


@pytest.fixture
def payments() -> FakePayments:
    return FakePayments()


@pytest.fixture
def account_provider() -> FakeAccountProvider:
    return FakeAccountProvider()


@pytest.fixture
def notifier() -> FakeAccountNotifier:
    return FakeAccountNotifier()
