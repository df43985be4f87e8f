"""Builds the app from context: the stack, the kill switch, the cdk-nag packs.

Shared by an app's `app.py` and its tests so they synthesize the same thing.
"""

from __future__ import annotations

import pathlib
from typing import Any

from aws_cdk import App, Validations

from jobfence.config import DEFAULT_PREFIX
from jobfence.registry import Registry
from jobfence_cdk.stack import JobfenceStack

STACK_NAME = DEFAULT_PREFIX  # the stack of the default stage; another stage's stack is named by its prefix
SCHEDULES_CONTEXT = "schedules"


def stack_name(prefix: str) -> str:
    """The CloudFormation stack of a stage: its prefix, so two stages live side by side in one account."""
    return prefix


def schedules_enabled(app: App) -> bool:
    """Read the kill switch; anything but enabled/disabled is refused."""
    value = str(app.node.try_get_context(SCHEDULES_CONTEXT) or "enabled").lower()
    if value not in ("enabled", "disabled"):
        raise ValueError(f"context {SCHEDULES_CONTEXT}={value!r}: expected enabled or disabled")
    return value == "enabled"


def build_app(app: App, catalog: Registry, *, functions_dir: pathlib.Path, **overrides: Any) -> JobfenceStack:
    """Add the stack of `catalog` (and, unless `-c nag=false`, the cdk-nag packs) to `app`.

    `functions_dir` is the app's code asset (`handlers/`, its job packages, `requirements.txt`);
    `overrides` are further `JobfenceStack` arguments (`signing_keys`, `health`, `runtime`, `architecture`,
    `handler`, `tables`, or `Stack`'s such as `env`). The stack is named by
    the `prefix` context (default "jobfence"); `-c schedules=disabled` deploys every rule disabled.
    """
    prefix = str(app.node.try_get_context("prefix") or DEFAULT_PREFIX)
    stack = JobfenceStack(
        app,
        stack_name(prefix),
        catalog=catalog,
        functions_dir=functions_dir,
        prefix=prefix,
        schedules_enabled=schedules_enabled(app),
        description="jobfence: durable scheduled jobs and background batches",
        **overrides,
    )
    if str(app.node.try_get_context("nag")).lower() != "false":
        from cdk_nag import AwsSolutionsChecks, ServerlessChecks

        Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return stack
