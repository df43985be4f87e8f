"""The invoices app's tests use jobfence's test kit: `clock`, `aws`, `dynamodb`, `job_harness` (pyproject.toml
names the catalog). `lambda_context` is what Powertools and the runner read of Lambda's context."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

pytest_plugins = ["jobfence.testing.plugin"]


@dataclass
class LambdaContext:
    """Enough of the Lambda context for Powertools and the runner."""

    function_name: str = "invoices-mark_overdue_invoices"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:invoices-mark_overdue_invoices"
    aws_request_id: str = "req-0"

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


@pytest.fixture
def lambda_context() -> LambdaContext:
    return LambdaContext()
