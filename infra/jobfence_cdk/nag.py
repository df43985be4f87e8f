"""Acknowledging cdk-nag findings: every acknowledgement names the rule and says why in one line.

cdk-nag 3 reports through CDK's validation framework; a finding is acknowledged
with `Validations.of(scope).acknowledge(...)` under the id "<Pack>::<RuleId>"
(for example "AwsSolutions::AwsSolutions-L1"), one id per finding.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge `rule` (e.g. "AwsSolutions-L1" or "Serverless-LambdaDLQ") on `scope` and its children."""
    pack = rule.split("-", 1)[0]
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{pack}::{rule}", reason=reason))
