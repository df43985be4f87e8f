"""Fixtures of the commerce and backoffice job tests: stores on moto tables, a runner harness, fakes."""

from __future__ import annotations

import pytest

from commerce_harness import Harness, Stores
from jobs.backoffice.operator_ledger import OperatorLedgerStore
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
