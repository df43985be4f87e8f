"""What the item store lends its transactions (`jobfence.work.transactions`): its bound items model,
transactions, quota store and clock. Its own module so the item store can hold one without loading the
transactions, which only a worker (the claim) and the operator (reopening failed items) run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobfence.clock import Clock
from jobfence.dynamo import Transaction
from jobfence.quota import QuotaStore


@dataclass(frozen=True)
class ItemTable:
    """What the item store lends its transactions: its bound items model, transactions, quota store and clock."""

    model: Any  # the items model, bound by the store (its session's credentials)
    transaction: Callable[[str], Transaction]  # a TransactWriteItems with this ClientRequestToken
    quota: QuotaStore
    clock: Clock
