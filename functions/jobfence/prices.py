"""The published prices every dollar figure of jobfence is computed from: one dated table.

us-east-1 on-demand list prices in USD, free tiers ignored, as listed on the AWS
pricing pages on `PRICES_AS_OF`. The run and batch rows' estimates
(`jobfence.capacity`), the cost command and the benchmarks (`ops.bench.cost`,
`ops.bench.auditor`) all read them here; a price change is one edit and a new date.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2026-12-01"


@dataclass(frozen=True)
class Prices:
    """us-east-1 on-demand list prices, USD (free tiers ignored)."""

    write_request_unit: float = 0.625 / 1e6  # DynamoDB on-demand, per WRU (since the November 2024 cut)
    read_request_unit: float = 0.125 / 1e6  # DynamoDB on-demand, per RRU
    sqs_request: float = 0.40 / 1e6  # SQS standard queue, per request (per 64 KB chunk)
    lambda_request: float = 0.20 / 1e6
    lambda_gb_s_arm64: float = 0.0000133334
    lambda_gb_s_x86_64: float = 0.0000166667
    sfn_standard_transition: float = 0.025 / 1000
    sfn_express_request: float = 1.00 / 1e6
    sfn_express_gb_s: float = 0.00001667  # billed in 100 ms and 64 MB increments
    cloudwatch_metric_month: float = 0.30  # a custom metric
    cloudwatch_alarm_month: float = 0.10  # a standard-resolution alarm


PRICES = Prices()
