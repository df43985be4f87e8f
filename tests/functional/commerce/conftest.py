"""Fixtures of the commerce and backoffice job tests: stores on moto tables, a runner harness, fakes."""

from __future__ import annotations

import pytest
from commerce_harness import Harness, Stores

from providers.accounts_fake import FakeAccountNotifier, FakeAccountProvider
from providers.payments_fake import FakePayments


@pytest.fixture
def stores(tables, clock) -> Stores:
    """The stores, each table made when its store is first used."""
    return Stores(tables, clock)


@pytest.fixture
def harness(aws, dynamodb, tables, clock) -> Harness:
    return Harness(aws, dynamodb, tables, clock)


@pytest.fixture
def payments() -> FakePayments:
    return FakePayments()


@pytest.fixture
def account_provider() -> FakeAccountProvider:
    return FakeAccountProvider()


@pytest.fixture
def notifier() -> FakeAccountNotifier:
    return FakeAccountNotifier()
