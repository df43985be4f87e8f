"""Builds the app from context: the stack, the kill switch, the cdk-nag packs.

Shared by `app.py` and the tests so they synthesize the same thing.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import App, Validations

from infra.stack import JobfenceStack

STACK_NAME = "jobfence"
SCHEDULES_CONTEXT = "schedules"


def schedules_enabled(app: App) -> bool:
    """Read the kill switch; anything but enabled/disabled is refused."""
    value = str(app.node.try_get_context(SCHEDULES_CONTEXT) or "enabled").lower()
    if value not in ("enabled", "disabled"):
        raise ValueError(f"context {SCHEDULES_CONTEXT}={value!r}: expected enabled or disabled")
    return value == "enabled"


def build_app(app: App, catalog: Any, **overrides: Any) -> JobfenceStack:
    """Add the stack (and, unless `-c nag=false`, the cdk-nag packs) to `app`.

    `overrides` are extra stack arguments for tests (e.g. `health=True`).
    """
    stack = JobfenceStack(
        app,
        STACK_NAME,
        catalog=catalog,
        prefix=str(app.node.try_get_context("prefix") or "jobfence"),
        schedules_enabled=schedules_enabled(app),
        description="jobfence: durable scheduled jobs and background batches",
        **overrides,
    )
    if str(app.node.try_get_context("nag")).lower() != "false":
        from cdk_nag import AwsSolutionsChecks, ServerlessChecks

        Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return stack
