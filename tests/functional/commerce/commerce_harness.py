"""Support of the commerce and backoffice job tests: the stores bundle, a runner harness, a lease thief."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
from tests.grants import within_grant


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
